#if canImport(Glibc)
import Glibc
#endif

#if FUZZING
@_silgen_name("LLVMFuzzerRunDriver")
private func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt) -> CInt

/// The entry point libFuzzer drives; set once before the driver starts, read only afterwards.
nonisolated(unsafe) private var fuzzEntry: ([UInt8]) -> Void = { _ in }

/// libFuzzer's own `main` (pulled in with -sanitize=fuzzer) also names this symbol.
@_cdecl("LLVMFuzzerTestOneInput")
public func LLVMFuzzerTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    fuzzEntry(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
    return 0
}
#endif

/// The `main` of every fuzz executable (Fuzz/*). Built with `-DFUZZING -sanitize=fuzzer` (`make fuzz`)
/// it hands control to libFuzzer; in a plain build it replays the files and folders on its
/// command line, so a crash input can be rerun without the fuzzer.
public enum FuzzDriver {
    public static func run(_ entry: @escaping ([UInt8]) -> Void) -> Never {
        #if FUZZING
        fuzzEntry = entry
        var argc = CommandLine.argc
        var argv = CommandLine.unsafeArgv
        exit(LLVMFuzzerRunDriver(&argc, &argv, LLVMFuzzerTestOneInput))
        #else
        var replayed = 0
        for path in CommandLine.arguments.dropFirst() {
            for file in ReplayFile.expand(path) {
                entry(ReplayFile.read(file))
                replayed += 1
            }
        }
        print("replayed \(replayed) inputs")
        exit(0)
        #endif
    }
}
