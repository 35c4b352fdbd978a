import RTCFuzzHarness

/// libFuzzer target for the Ogg reader: `make fuzz` (see Fuzz/README.md).
@main
struct FuzzOgg {
    static func main() { FuzzDriver.run(FuzzHarness.ogg) }
}
