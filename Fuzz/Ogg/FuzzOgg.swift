import RTCFuzzHarness

/// libFuzzer entry point for the Ogg reader (build with `make fuzz`, see Fuzz/README.md).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOgg(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    FuzzHarness.ogg(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}

#if !FUZZING
/// Without libFuzzer (a plain build), replays the files named on the command line.
@main
struct ReplayOgg {
    static func main() {
        for path in CommandLine.arguments.dropFirst() {
            FuzzHarness.ogg(ReplayFile.read(path))
        }
    }
}
#endif
