import Foundation

/// The committed fuzz seed corpus of one reader (Fuzz/Corpus/NAME).
func corpus(_ name: String) throws -> [(name: String, bytes: [UInt8])] {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fuzz/Corpus/\(name)")
    let files = try FileManager.default.contentsOfDirectory(atPath: root.path).sorted()
    return try files.map { ($0, [UInt8](try Data(contentsOf: root.appendingPathComponent($0)))) }
}
