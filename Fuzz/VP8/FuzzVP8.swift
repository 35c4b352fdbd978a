import RTCFuzzHarness

/// libFuzzer target for the VP8 parser: `make fuzz` (see docs/testing.md).
@main
struct FuzzVP8 {
    static func main() { FuzzDriver.run(FuzzHarness.vp8) }
}
