// The relay-only screen sharer (`rtc-capture --link PATH`): captures, scales and hands I420 frames
// to the host over the shared frame ring; the host's engine publishes them as `<host>_sub`. It
// links ScreenCapture alone (no codec, no network, no Foundation, no Swift concurrency), which keeps
// it inside the relay budget of 20 MB (docs/screen-share.md, "Memory").
import ScreenCapture

#if canImport(Glibc)
import Glibc
#endif

func fail(_ text: String, status: Int32 = 2) -> Never {
    var bytes = Array(("rtc-capture: " + text + "\n").utf8)
    _ = write(2, &bytes, bytes.count)
    exit(status)
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
        guard let value = Int(arguments.removeFirst()) else { fail("--link-version takes a number") }
        version = value
    default: fail("usage: rtc-capture --link PATH")
    }
}
guard let linkPath else { fail("usage: rtc-capture --link PATH") }
let reason = RelaySharer.run(linkPath: linkPath, version: version)
print("share finished: \(reason)")
switch reason {
case .error(let message): fail(message, status: 1)
case .versionMismatch: exit(3)
default: exit(0)
}
