import RTCFuzzHarness

/// libFuzzer target: ICE datagrams fed into the transport's state machine (`make fuzz`, docs/testing.md).
@main
struct FuzzICE {
    static func main() { FuzzDriver.run(FuzzHarness.ice) }
}
