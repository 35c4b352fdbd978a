// The screen sharer as its own small executable: what a host launches (`rtc-sharer --link PATH`),
// the counterpart of an iOS broadcast upload extension. It links only ScreenShareUser (no server, no
// argument parser, no Foundation beyond FoundationEssentials), to stay inside the memory budget.
import ScreenShareUser

#if canImport(Glibc)
import Glibc
#endif

ScreenShareSharer.prepareProcess()
guard let options = SharerCommandLine.parse(Array(CommandLine.arguments.dropFirst())) else {
    SharerCommandLine.complain("usage: rtc-sharer --link PATH")
    exit(2)
}
let reason = await ScreenShareSharer.run(linkPath: options.linkPath, version: options.version)
print("share finished: \(reason)")
if case .error(let message) = reason { SharerCommandLine.complain("rtc-sharer: \(message)") }
exit(SharerCommandLine.exitStatus(for: reason))
