import RTCFuzzHarness

/// libFuzzer target for the Y4M reader: `make fuzz` (see Fuzz/README.md).
@main
struct FuzzY4M {
    static func main() { FuzzDriver.run(FuzzHarness.y4m) }
}
