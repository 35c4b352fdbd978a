import RTCFuzzHarness

/// libFuzzer target for the RTP parser: `make fuzz` (see docs/testing.md).
@main
struct FuzzRTP {
    static func main() { FuzzDriver.run(FuzzHarness.rtp) }
}
