import RTCFuzzHarness

/// libFuzzer target: DCEP messages, and the same bytes as SCTP into usrsctp (`make fuzz`, docs/testing.md).
@main
struct FuzzDCEP {
    static func main() { FuzzDriver.run(FuzzHarness.dcep) }
}
