import Foundation
import TestKit
import Testing

/// ffprobe's view of the first stream of a file, as key=value pairs.
func probe(_ path: String) throws -> [String: String] {
    let result = try runTool(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "0", "-show_entries",
                              "stream=codec_name,width,height,nb_read_frames,sample_rate,channels,duration",
                              "-of", "default=noprint_wrappers=1", path])
    guard result.status == 0 else {
        Issue.record("ffprobe failed on \(path) (is Debian's ffmpeg installed? `make test` installs it)")
        return [:]
    }
    var fields: [String: String] = [:]
    for line in result.out.split(separator: "\n") {
        let parts = line.split(separator: "=", maxSplits: 1)
        if parts.count == 2 { fields[String(parts[0])] = String(parts[1]) }
    }
    return fields
}

/// The committed fuzz seed corpus of one reader (Fuzz/Corpus/NAME).
func corpus(_ name: String) throws -> [(name: String, bytes: [UInt8])] {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fuzz/Corpus/\(name)")
    let files = try FileManager.default.contentsOfDirectory(atPath: root.path).sorted()
    return try files.map { ($0, [UInt8](try Data(contentsOf: root.appendingPathComponent($0)))) }
}
