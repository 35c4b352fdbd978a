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

/// The `main` of the fuzz executable (`Fuzz/Main`, `rtc-fuzz NAME ...`): the first argument names
/// the target. Built with `-DFUZZING -sanitize=fuzzer` (`make fuzz`) it hands control to libFuzzer
/// with the rest of the command line; in a plain build it replays the files and folders that
/// follow the name, so a crash input can be rerun without the fuzzer.
public enum FuzzDriver {
    public static func run(targets: [String: ([UInt8]) -> Void]) -> Never {
        let arguments = CommandLine.arguments
        guard arguments.count >= 2, let entry = targets[arguments[1]] else {
            let names = targets.keys.sorted().joined(separator: ", ")
            let given = arguments.count >= 2 ? "unknown target '\(arguments[1])'" : "no target named"
            let message = "rtc-fuzz: \(given); usage: rtc-fuzz NAME [libFuzzer flags, corpus folders or files]; NAME is one of \(names)\n"
            _ = message.withCString { write(2, $0, strlen($0)) }
            exit(2)
        }
        #if FUZZING
        fuzzEntry = entry
        // libFuzzer gets the command line without the target's name.
        let count = Int(CommandLine.argc)
        let argv = UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>.allocate(capacity: count)
        argv[0] = CommandLine.unsafeArgv[0]
        for index in 2..<count { argv[index - 1] = CommandLine.unsafeArgv[index] }
        argv[count - 1] = nil
        var argc = CInt(count - 1)
        var pointer = argv
        exit(LLVMFuzzerRunDriver(&argc, &pointer, LLVMFuzzerTestOneInput))
        #else
        var replayed = 0
        for path in arguments.dropFirst(2) {
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
