// The relay-only screen sharer (`rtc-capture --link PATH`): captures, scales and hands I420 frames
// to the host over the shared frame ring; the host's engine publishes them as `<host>_sub`. It
// links ScreenCapture alone (no codec, no network, no Foundation, no Swift concurrency), which keeps
// it inside the relay budget of 20 MB (docs/screen-share.md, "Memory").
import ScreenCapture

#if canImport(Glibc)
import Glibc
#endif

ProcessMemory.tuneForSmallProcess()
guard let options = SharerCommandLine.parse(Array(CommandLine.arguments.dropFirst())) else {
    SharerCommandLine.complain("usage: rtc-capture --link PATH")
    exit(2)
}
let reason = RelaySharer.run(linkPath: options.linkPath, version: options.version)
print("share finished: \(reason)")
if case .error(let message) = reason { SharerCommandLine.complain("rtc-capture: \(message)") }
exit(SharerCommandLine.exitStatus(for: reason))
