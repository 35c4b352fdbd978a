import RTCMedia
#if canImport(Glibc)
import Glibc
#endif

/// Reads a whole (small) corpus file for replay.
public enum ReplayFile {
    /// A file, or the files directly inside a folder, sorted.
    public static func expand(_ path: String) -> [String] {
        guard let directory = opendir(path) else { return [path] }
        defer { closedir(directory) }
        var files: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if name != "." && name != ".." { files.append(path + "/" + name) }
        }
        return files.sorted()
    }

    public static func read(_ path: String) -> [UInt8] {
        guard let input = try? FileInput(path: path) else { return [] }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let got = (try? chunk.withUnsafeMutableBytes { try input.read(into: $0) }) ?? 0
            if got == 0 { break }
            bytes += chunk[..<got]
        }
        return bytes
    }
}
