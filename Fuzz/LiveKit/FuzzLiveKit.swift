import RTCFuzzHarness

/// libFuzzer target for LiveKit's signal messages, data packets, tokens and connect URLs (`make fuzz`, docs/testing.md).
@main
struct FuzzLiveKit {
    static func main() { FuzzDriver.run(FuzzHarness.liveKit) }
}
