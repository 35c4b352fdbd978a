import RTCFuzzHarness

/// libFuzzer target for the WAV reader: `make fuzz` (see Fuzz/README.md).
@main
struct FuzzWAV {
    static func main() { FuzzDriver.run(FuzzHarness.wav) }
}
