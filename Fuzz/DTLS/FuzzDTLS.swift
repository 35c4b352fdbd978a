import RTCFuzzHarness

/// libFuzzer target: DTLS datagrams fed into the transport's state machine (`make fuzz`, docs/testing.md).
@main
struct FuzzDTLS {
    static func main() { FuzzDriver.run(FuzzHarness.dtls) }
}
