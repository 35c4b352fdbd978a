import RTCFuzzHarness

/// libFuzzer target for signaling messages and tokens (`make fuzz`, docs/testing.md).
@main
struct FuzzSignaling {
    static func main() { FuzzDriver.run(FuzzHarness.signaling) }
}
