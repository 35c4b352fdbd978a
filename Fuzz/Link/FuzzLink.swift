import RTCFuzzHarness

/// libFuzzer target for the screen-share host link's messages (`make fuzz`, docs/testing.md).
@main
struct FuzzLink {
    static func main() { FuzzDriver.run(FuzzHarness.link) }
}
