import Foundation
import TestKit
import Testing

/// ffprobe's view of the first stream of a file, as key=value pairs (`MediaProbe`).
func probe(_ path: String) throws -> [String: String] {
    let probe = try MediaProbe(path, select: "0")
    guard probe.status == 0 else {
        Issue.record("ffprobe failed on \(path) (is Debian's ffmpeg installed? `make test` installs it)")
        return [:]
    }
    return probe.first?.fields ?? [:]
}
