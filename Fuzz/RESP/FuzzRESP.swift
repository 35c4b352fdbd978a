import RTCFuzzHarness

/// libFuzzer target for the RESP (Redis reply) parser: `make fuzz` (see docs/testing.md).
@main
struct FuzzRESP {
    static func main() { FuzzDriver.run(FuzzHarness.resp) }
}
