/// A cursor over bytes already in memory, for parsing fixed headers. Every read is bounds-checked
/// and throws `.truncated` (never traps); nothing is consumed by a read that fails.
struct ByteReader {
    private let bytes: [UInt8]
    private(set) var offset: Int
    let what: String

    init(_ bytes: [UInt8], what: String) {
        self.bytes = bytes
        self.offset = 0
        self.what = what
    }

    var remaining: Int { bytes.count - offset }

    private mutating func take(_ count: Int) throws(MediaFileError) -> ArraySlice<UInt8> {
        guard count >= 0, count <= remaining else {
            throw MediaFileError(.truncated, "\(what) is too short (needs \(offset + count) bytes, has \(bytes.count))")
        }
        defer { offset += count }
        return bytes[offset..<(offset + count)]
    }

    mutating func u8() throws(MediaFileError) -> UInt8 { try take(1).first! }

    mutating func u16le() throws(MediaFileError) -> UInt16 { UInt16(truncatingIfNeeded: try littleEndian(2)) }
    mutating func u32le() throws(MediaFileError) -> UInt32 { UInt32(truncatingIfNeeded: try littleEndian(4)) }
    mutating func u64le() throws(MediaFileError) -> UInt64 { try littleEndian(8) }

    mutating func bytes(_ count: Int) throws(MediaFileError) -> [UInt8] { Array(try take(count)) }

    mutating func skip(_ count: Int) throws(MediaFileError) { _ = try take(count) }

    private mutating func littleEndian(_ count: Int) throws(MediaFileError) -> UInt64 {
        var value: UInt64 = 0
        for (index, byte) in try take(count).enumerated() { value |= UInt64(byte) << (8 * index) }
        return value
    }
}

/// Little-endian serialization helpers for writers.
extension Array where Element == UInt8 {
    mutating func appendLE<T: FixedWidthInteger>(_ value: T) {
        var little = value.littleEndian
        Swift.withUnsafeBytes(of: &little) { append(contentsOf: $0) }
    }

    mutating func appendASCII(_ text: StaticString) {
        text.withUTF8Buffer { append(contentsOf: $0) }
    }
}
