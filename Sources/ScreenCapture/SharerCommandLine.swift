#if canImport(Glibc)
import Glibc
#endif

/// What both sharer executables (`rtc-sharer`, `rtc-capture`) share: `--link PATH
/// [--link-version N]` in, an exit status per finish reason out, errors on stderr.
public struct SharerCommandLine: Sendable {
    public var linkPath: String
    public var version: Int

    /// Parses the arguments after the program name; nil on anything else.
    public static func parse(_ arguments: [String]) -> SharerCommandLine? {
        var rest = arguments[...]
        var linkPath: String?
        var version = screenShareLinkVersion
        while let flag = rest.popFirst() {
            switch flag {
            case "--link" where !rest.isEmpty: linkPath = rest.popFirst()
            case "--link-version" where !rest.isEmpty:
                guard let value = rest.popFirst().flatMap({ Int($0) }) else { return nil }
                version = value
            default: return nil
            }
        }
        guard let linkPath else { return nil }
        return SharerCommandLine(linkPath: linkPath, version: version)
    }

    /// 1 for an error, 3 for a version mismatch, 0 otherwise.
    public static func exitStatus(for reason: ScreenShareFinishReason) -> Int32 {
        switch reason {
        case .error: 1
        case .versionMismatch: 3
        default: 0
        }
    }

    /// One line on stderr (through the descriptor: the C `stderr` global is not concurrency-safe).
    public static func complain(_ text: String) {
        var bytes = Array((text + "\n").utf8)
        _ = write(2, &bytes, bytes.count)
    }
}
