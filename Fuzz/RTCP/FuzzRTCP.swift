import RTCFuzzHarness

/// libFuzzer target for the RTCP parser: `make fuzz` (see docs/testing.md).
@main
struct FuzzRTCP {
    static func main() { FuzzDriver.run(FuzzHarness.rtcp) }
}
