import RTCFuzzHarness

/// libFuzzer target: SRTP/SRTCP datagrams unprotected by the transport's SRTP (`make fuzz`, docs/testing.md).
@main
struct FuzzSRTP {
    static func main() { FuzzDriver.run(FuzzHarness.srtp) }
}
