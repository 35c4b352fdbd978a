import RTCFuzzHarness

/// libFuzzer target for the STUN parser: `make fuzz` (see docs/testing.md).
@main
struct FuzzSTUN {
    static func main() { FuzzDriver.run(FuzzHarness.stun) }
}
