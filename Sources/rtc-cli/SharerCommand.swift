import ScreenShareUser
import ServerCommandLine

#if canImport(Glibc)
import Glibc
#endif

extension ProcessRunner {
    /// How to start a sharer for a host's link: the small executable next to this one when it was
    /// built (`rtc-sharer`; for relay mode `rtc-capture`, which only captures), else `rtc-cli share`.
    static func sharerCommand(link: String, mode: ScreenShareMode = .standalone) -> (executable: String, arguments: [String]) {
        for name in mode == .relay ? ["rtc-capture", "rtc-sharer"] : ["rtc-sharer"] {
            if let path = sibling(name) { return (path, ["--link", link]) }
        }
        return (selfPath, ["share", "--link", link])
    }
}
