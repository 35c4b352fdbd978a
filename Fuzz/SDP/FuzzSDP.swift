import RTCFuzzHarness

/// libFuzzer target for the SDP parser: `make fuzz` (see docs/testing.md).
@main
struct FuzzSDP {
    static func main() { FuzzDriver.run(FuzzHarness.sdp) }
}
