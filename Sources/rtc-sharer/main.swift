// The screen sharer as its own small executable: what a host launches (`rtc-sharer --link PATH`),
// the counterpart of an iOS broadcast upload extension. It links only ScreenShareUser (no server, no
// argument parser, no Foundation beyond FoundationEssentials), to stay inside the memory budget.
import ScreenShareUser

#if canImport(Glibc)
import Glibc
#endif

/// One line on stderr (through the descriptor: the C `stderr` global is not concurrency-safe).
func complain(_ text: String, _ ignored: Int32 = 0) {
    var bytes = Array(text.utf8)
    _ = write(2, &bytes, bytes.count)
}

ProcessMemory.tuneForSmallProcess()
var arguments = Array(CommandLine.arguments.dropFirst())
var linkPath: String?
var version = screenShareLinkVersion
while !arguments.isEmpty {
    let flag = arguments.removeFirst()
    switch flag {
    case "--link" where !arguments.isEmpty: linkPath = arguments.removeFirst()
    case "--link-version" where !arguments.isEmpty:
        guard let value = Int(arguments.removeFirst()) else {
            complain("rtc-sharer: --link-version takes a number\n")
            exit(2)
        }
        version = value
    default:
        complain("usage: rtc-sharer --link PATH\n")
        exit(2)
    }
}
guard let linkPath else {
    complain("usage: rtc-sharer --link PATH\n")
    exit(2)
}
let reason = await ScreenShareSharer.run(linkPath: linkPath, version: version)
print("share finished: \(reason)")
switch reason {
case .error(let message):
    complain("rtc-sharer: \(message)\n")
    exit(1)
case .versionMismatch: exit(3)
default: exit(0)
}
