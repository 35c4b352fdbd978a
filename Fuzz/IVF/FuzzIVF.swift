import RTCFuzzHarness

/// libFuzzer entry point for the IVF reader (build with `make fuzz`, see Fuzz/README.md).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzIVF(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    FuzzHarness.ivf(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}

#if !FUZZING
/// Without libFuzzer (a plain build), replays the files named on the command line.
@main
struct ReplayIVF {
    static func main() {
        for path in CommandLine.arguments.dropFirst() {
            FuzzHarness.ivf(ReplayFile.read(path))
        }
    }
}
#endif
