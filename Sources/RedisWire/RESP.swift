/// RESP2, the Redis serialization protocol (https://redis.io/docs/latest/develop/reference/protocol-spec/):
/// commands go out as arrays of bulk strings, replies come back as one of five kinds. Value types
/// and a parser that never traps: a reply is read from a byte buffer that may hold less than one
/// reply (nil: wait for more), exactly one, or several.
public enum RESPValue: Sendable, Hashable {
    case simpleString(String)
    case error(String)
    case integer(Int64)
    /// nil: the null bulk string (`$-1`).
    case bulkString([UInt8]?)
    /// nil: the null array (`*-1`).
    case array([RESPValue]?)

    /// The value as text: simple and bulk strings.
    public var string: String? {
        switch self {
        case .simpleString(let text): text
        case .bulkString(let bytes?): String(decoding: bytes, as: UTF8.self)
        default: nil
        }
    }

    public var isNull: Bool {
        switch self {
        case .bulkString(nil), .array(nil): true
        default: false
        }
    }
}

/// Why bytes are not a RESP reply.
public struct RESPError: Error, Sendable, Hashable, CustomStringConvertible {
    public let reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { "RESP: \(reason)" }
}

public enum RESP {
    /// Largest bulk string and array accepted (Redis's own default for bulk strings is 512 MB;
    /// nothing this server reads comes near 1 MiB).
    public static let maxBulkLength = 1 << 20
    public static let maxArrayCount = 1 << 16
    public static let maxDepth = 8
    public static let maxLineLength = 64 * 1024

    /// A command as RESP: an array of bulk strings.
    public static func command(_ arguments: [String]) -> [UInt8] {
        var out = Array("*\(arguments.count)\r\n".utf8)
        for argument in arguments {
            let bytes = Array(argument.utf8)
            out += Array("$\(bytes.count)\r\n".utf8)
            out += bytes
            out += [13, 10]
        }
        return out
    }

    /// Reads one reply from `bytes` at `index`. Returns the value and the index after it, or nil
    /// when the bytes end inside the reply; throws on bytes that are not RESP.
    public static func parse(_ bytes: [UInt8], from index: Int = 0) throws(RESPError) -> (RESPValue, Int)? {
        try parse(bytes, from: index, depth: 0)
    }

    private static func parse(_ bytes: [UInt8], from index: Int, depth: Int) throws(RESPError) -> (RESPValue, Int)? {
        guard depth <= maxDepth else { throw RESPError("nested deeper than \(maxDepth)") }
        guard index < bytes.count else { return nil }
        guard let (line, next) = try readLine(bytes, from: index + 1) else { return nil }
        switch bytes[index] {
        case UInt8(ascii: "+"): return (.simpleString(String(decoding: line, as: UTF8.self)), next)
        case UInt8(ascii: "-"): return (.error(String(decoding: line, as: UTF8.self)), next)
        case UInt8(ascii: ":"): return (.integer(try integer(line)), next)
        case UInt8(ascii: "$"):
            let length = try integer(line)
            if length == -1 { return (.bulkString(nil), next) }
            guard (0...Int64(maxBulkLength)).contains(length) else { throw RESPError("bulk string of \(length) bytes") }
            let end = next + Int(length)
            guard end + 2 <= bytes.count else { return nil }
            guard bytes[end] == 13, bytes[end + 1] == 10 else { throw RESPError("bulk string not followed by CRLF") }
            return (.bulkString(Array(bytes[next..<end])), end + 2)
        case UInt8(ascii: "*"):
            let count = try integer(line)
            if count == -1 { return (.array(nil), next) }
            guard (0...Int64(maxArrayCount)).contains(count) else { throw RESPError("array of \(count) elements") }
            var elements: [RESPValue] = []
            var position = next
            for _ in 0..<count {
                guard let (element, after) = try parse(bytes, from: position, depth: depth + 1) else { return nil }
                elements.append(element)
                position = after
            }
            return (.array(elements), position)
        default:
            throw RESPError("unknown type byte \(bytes[index])")
        }
    }

    /// The bytes up to CRLF from `index`, and the index after the CRLF; nil if no CRLF yet.
    private static func readLine(_ bytes: [UInt8], from index: Int) throws(RESPError) -> (ArraySlice<UInt8>, Int)? {
        var position = index
        while position + 1 < bytes.count {
            if bytes[position] == 13 {
                guard bytes[position + 1] == 10 else { throw RESPError("CR without LF") }
                return (bytes[index..<position], position + 2)
            }
            guard position - index < maxLineLength else { throw RESPError("line longer than \(maxLineLength) bytes") }
            position += 1
        }
        guard bytes.count - index <= maxLineLength else { throw RESPError("line longer than \(maxLineLength) bytes") }
        return nil
    }

    private static func integer(_ line: ArraySlice<UInt8>) throws(RESPError) -> Int64 {
        guard line.count <= 20, let value = Int64(String(decoding: line, as: UTF8.self)) else {
            throw RESPError("not an integer: \(String(decoding: line.prefix(24), as: UTF8.self))")
        }
        return value
    }
}
