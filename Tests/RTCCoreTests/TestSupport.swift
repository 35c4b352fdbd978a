import Foundation
import Testing
@testable import RTCCore

/// Runs a program from PATH and returns its exit status and standard output.
func runTool(_ arguments: [String]) throws -> (status: Int32, output: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = arguments
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = FileHandle.nullDevice
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
}

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
    for line in result.output.split(separator: "\n") {
        let parts = line.split(separator: "=", maxSplits: 1)
        if parts.count == 2 { fields[String(parts[0])] = String(parts[1]) }
    }
    return fields
}

/// A fresh temporary directory for one test.
func temporaryDirectory() throws -> String {
    let path = NSTemporaryDirectory() + "rtc-tests-" + UUID().uuidString
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// The committed fuzz seed corpus of one reader (Fuzz/Corpus/NAME).
func corpus(_ name: String) throws -> [(name: String, bytes: [UInt8])] {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fuzz/Corpus/\(name)")
    let files = try FileManager.default.contentsOfDirectory(atPath: root.path).sorted()
    return try files.map { ($0, [UInt8](try Data(contentsOf: root.appendingPathComponent($0)))) }
}
