import RTCCore

/// Reads a whole (small) corpus file for replay.
public enum ReplayFile {
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
