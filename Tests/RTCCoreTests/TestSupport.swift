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
