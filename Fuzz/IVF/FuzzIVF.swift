import RTCFuzzHarness

/// libFuzzer target for the IVF reader: `make fuzz` (see Fuzz/README.md).
@main
struct FuzzIVF {
    static func main() { FuzzDriver.run(FuzzHarness.ivf) }
}
