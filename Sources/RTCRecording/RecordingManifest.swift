import RTCMedia

#if canImport(Glibc)
import Glibc
#endif

/// `manifest.json` of a recording folder: every file the recorder started, written by hand (RTCRecording
/// does not link Foundation) and replaced atomically (a temporary file renamed over it).
enum RecordingManifest {
    static let name = "manifest.json"
    static let temporaryName = ".manifest.json.tmp"

    /// A remote track whose frames could not be decrypted (end-to-end encrypted, and this
    /// recorder's engine had no key or the wrong one): nothing of it is written, and the manifest
    /// says so.
    struct Undecryptable: Hashable {
        var uid: String
        var trackSid: String
        var reason: String
    }

    /// The manifest's text: `{"version": 1, "files": [...]}`, one file object a line, and
    /// `"undecryptable": [...]` when an encrypted track could not be opened.
    static func json(_ files: [ChannelRecorder.File], undecryptable: [Undecryptable] = []) -> String {
        var out = "{\n  \"version\": 1,\n  \"files\": ["
        for (index, file) in files.enumerated() {
            out += index == 0 ? "\n    " : ",\n    "
            out += object(file)
        }
        out += files.isEmpty ? "]" : "\n  ]"
        if !undecryptable.isEmpty {
            out += ",\n  \"undecryptable\": [" + undecryptable.map {
                "\n    {\"uid\": \(string($0.uid)), \"trackSid\": \(string($0.trackSid)), \"reason\": \(string($0.reason))}"
            }.joined(separator: ",") + "\n  ]"
        }
        return out + "\n}\n"
    }

    static func object(_ file: ChannelRecorder.File) -> String {
        let kind = file.format == .webm && file.kind == .video && file.hasAudio ? "video+audio" : file.kind.rawValue
        var fields: [(String, String)] = [
            ("path", string(file.name)), ("format", string(file.format.rawValue)), ("uid", string(file.uid)),
            ("source", string(file.source)), ("kind", string(kind)), ("codec", string(file.codec)),
            ("trackSid", string(file.trackSid)), ("segment", "\(file.segment)"),
        ]
        if file.kind == .video { fields.append(("frames", "\(file.units)")) }
        if file.holdsAudio { fields.append(("durationMs", "\(file.durationMs)")) }
        if let synchronization = file.synchronization {
            fields.append(("synchronization", string(synchronization.rawValue)))
            fields.append(("discountedSenderReports", "\(file.discountedSenderReports)"))
        }
        fields.append(("firstArrivalMs", file.firstArrivalMs.map { "\($0)" } ?? "null"))
        fields.append(("lastArrivalMs", file.lastArrivalMs.map { "\($0)" } ?? "null"))
        fields.append(("ended", file.ended.map { string($0.rawValue) } ?? "null"))
        if let error = file.error { fields.append(("error", string(error))) }
        return "{" + fields.map { "\(string($0.0)): \($0.1)" }.joined(separator: ", ") + "}"
    }

    /// A JSON string literal: quotes, backslashes and control characters escaped (RFC 8259 §7).
    static func string(_ value: String) -> String {
        var out = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    /// Writes `text` to `directory/manifest.json` through a temporary file and `rename`, so a
    /// reader (or a crash) sees the old manifest or the new one, never half of one. Throws a
    /// message on failure (the old manifest is then left as it was).
    static func write(_ text: String, directory: String) throws(MediaFileError) {
        let temporary = "\(directory)/\(temporaryName)", target = "\(directory)/\(name)"
        do throws(MediaFileError) {
            let output = try DirectFileOutput(path: temporary, exclusive: false)
            try output.write(Array(text.utf8))
            try output.close()
        } catch {
            unlink(temporary)
            throw error
        }
        if rename(temporary, target) != 0 {
            let reason = String(cString: strerror(errno))
            unlink(temporary)
            throw MediaFileError(.io, "cannot replace \(target): \(reason)")
        }
    }

    /// A manifest left by an earlier recording in the same folder is moved aside to the first
    /// free `manifest.N.json` (N from 2), never overwritten. Returns its new name.
    static func moveAside(directory: String) -> String? {
        let target = "\(directory)/\(name)"
        guard access(target, F_OK) == 0 else { return nil }
        for number in 2..<10_000 {
            let aside = "\(directory)/manifest.\(number).json"
            // link + unlink: fails instead of replacing when `aside` exists.
            if link(target, aside) == 0 {
                unlink(target)
                return aside
            }
            if errno != EEXIST { return nil }
        }
        return nil
    }
}

/// Wall-clock milliseconds since 1970 (the manifest's arrival times).
func wallClockMs() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
}

/// Monotonic milliseconds (header refresh cadence).
func monotonicMs() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
}
