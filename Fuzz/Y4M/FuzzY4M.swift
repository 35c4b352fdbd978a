import RTCFuzzHarness

/// libFuzzer entry point for the Y4M reader (build with `make fuzz`, see Fuzz/README.md).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzY4M(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    FuzzHarness.y4m(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}

#if !FUZZING
/// Without libFuzzer (a plain build), replays the files named on the command line.
@main
struct ReplayY4M {
    static func main() {
        for path in CommandLine.arguments.dropFirst() {
            FuzzHarness.y4m(ReplayFile.read(path))
        }
    }
}
#endif
