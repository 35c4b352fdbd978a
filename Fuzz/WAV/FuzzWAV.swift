import RTCFuzzHarness

/// libFuzzer entry point for the WAV reader (build with `make fuzz`, see Fuzz/README.md).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzWAV(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    FuzzHarness.wav(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}

#if !FUZZING
/// Without libFuzzer (a plain build), replays the files named on the command line.
@main
struct ReplayWAV {
    static func main() {
        for path in CommandLine.arguments.dropFirst() {
            FuzzHarness.wav(ReplayFile.read(path))
        }
    }
}
#endif
