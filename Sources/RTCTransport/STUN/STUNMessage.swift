internal import COpenSSL

/// A STUN message ([RFC 8489 §5](https://www.rfc-editor.org/rfc/rfc8489#section-5)), as ICE uses it.
///
/// ```
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// |0 0|     STUN Message Type     |         Message Length        |
/// |                         Magic Cookie                          |
/// |                     Transaction ID (96 bits)                  |
/// ```
/// Attributes follow as type (16), length (16), value, padded to 32 bits. The message type
/// interleaves the method (M0–M11) with the class bits C0 and C1.
public struct STUNMessage: Sendable, Hashable {
    /// The class of a message (RFC 8489 §5).
    public enum Class: UInt16, Sendable, Hashable {
        case request = 0
        case indication = 1
        case successResponse = 2
        case errorResponse = 3
    }

    public static let magicCookie: UInt32 = 0x2112_A442
    public static let bindingMethod: UInt16 = 0x001
    static let headerSize = 20

    public var method: UInt16
    public var messageClass: Class
    /// 12 bytes.
    public var transactionID: [UInt8]
    public var attributes: [STUNAttribute]

    public init(method: UInt16 = STUNMessage.bindingMethod, messageClass: Class, transactionID: [UInt8],
                attributes: [STUNAttribute] = []) {
        self.method = method & 0xFFF
        self.messageClass = messageClass
        self.transactionID = Array((transactionID + [UInt8](repeating: 0, count: 12)).prefix(12))
        self.attributes = attributes
    }

    /// A new transaction ID from OpenSSL's random generator.
    public static func randomTransactionID() -> [UInt8] {
        var id = [UInt8](repeating: 0, count: 12)
        _ = RAND_bytes(&id, 12)
        return id
    }

    /// The 14-bit message type with the class bits interleaved.
    public var messageType: UInt16 {
        let c = messageClass.rawValue
        return (method & 0x000F) | (c & 0x1) << 4 | (method & 0x0070) << 1 | (c & 0x2) << 7 | (method & 0x0F80) << 2
    }

    /// True when the first bytes look like STUN: top two bits zero and the magic cookie (RFC 8489 §6).
    public static func looksLikeSTUN(_ bytes: [UInt8]) -> Bool {
        bytes.count >= headerSize && bytes[0] & 0xC0 == 0
            && bytes[4] == 0x21 && bytes[5] == 0x12 && bytes[6] == 0xA4 && bytes[7] == 0x42
    }

    /// Parses a whole datagram. Checks structure only; verify integrity and fingerprint with
    /// ``verifyIntegrity(_:key:)`` and ``verifyFingerprint(_:)``.
    public init(parsing bytes: [UInt8]) throws(ParseError) {
        guard bytes.count >= Self.headerSize else { throw ParseError(.truncated, "STUN header") }
        guard bytes[0] & 0xC0 == 0 else { throw ParseError(.invalid, "STUN first bits not zero") }
        let type = UInt16(bytes[0]) << 8 | UInt16(bytes[1])
        let length = Int(bytes[2]) << 8 | Int(bytes[3])
        guard Self.looksLikeSTUN(bytes) else { throw ParseError(.invalid, "STUN magic cookie") }
        guard length % 4 == 0 else { throw ParseError(.invalid, "STUN length \(length) not a multiple of 4") }
        guard bytes.count == Self.headerSize + length else {
            throw ParseError(bytes.count < Self.headerSize + length ? .truncated : .invalid,
                             "STUN length \(length) for \(bytes.count - Self.headerSize) bytes of attributes")
        }
        let method = (type & 0x000F) | (type & 0x00E0) >> 1 | (type & 0x3E00) >> 2
        let classBits = (type & 0x0010) >> 4 | (type & 0x0100) >> 7
        var attributes: [STUNAttribute] = []
        var offset = Self.headerSize
        while offset < bytes.count {
            guard offset + 4 <= bytes.count else { throw ParseError(.truncated, "STUN attribute header") }
            let attributeType = UInt16(bytes[offset]) << 8 | UInt16(bytes[offset + 1])
            let valueLength = Int(bytes[offset + 2]) << 8 | Int(bytes[offset + 3])
            let padded = (valueLength + 3) / 4 * 4
            guard offset + 4 + padded <= bytes.count else {
                throw ParseError(.truncated, stunTypeName(attributeType) + " attribute of \(valueLength) bytes")
            }
            let value = Array(bytes[(offset + 4)..<(offset + 4 + valueLength)])
            let padding = Array(bytes[(offset + 4 + valueLength)..<(offset + 4 + padded)])
            attributes.append(STUNAttribute(type: attributeType, value: value, padding: padding))
            offset += 4 + padded
        }
        self.init(method: method, messageClass: Class(rawValue: classBits)!, transactionID: Array(bytes[8..<20]),
                  attributes: attributes)
    }

    /// The message as is, with any integrity and fingerprint attributes it holds left untouched.
    public var serialized: [UInt8] { Self.encode(type: messageType, transactionID: transactionID, attributes: attributes) }

    /// The message with MESSAGE-INTEGRITY (keyed HMAC-SHA1, when `integrityKey` is given) and
    /// FINGERPRINT added at the end, replacing any it held (RFC 8489 §14.5, §14.7).
    public func serialized(integrityKey: [UInt8]?, fingerprint: Bool) -> [UInt8] {
        var body = attributes.filter { $0.type != STUNAttribute.messageIntegrity && $0.type != STUNAttribute.fingerprint }
        if let integrityKey {
            // The length field covers the integrity attribute when it is computed.
            var draft = Self.encode(type: messageType, transactionID: transactionID, attributes: body)
            Self.setLength(&draft, draft.count - Self.headerSize + 24)
            body.append(STUNAttribute(type: STUNAttribute.messageIntegrity, value: Self.hmacSHA1(key: integrityKey, data: draft)))
        }
        var bytes = Self.encode(type: messageType, transactionID: transactionID, attributes: body)
        if fingerprint {
            Self.setLength(&bytes, bytes.count - Self.headerSize + 8)
            let crc = CRC32.checksum(bytes) ^ 0x5354_554E
            bytes += [0x80, 0x28, 0x00, 0x04, UInt8(crc >> 24), UInt8(crc >> 16 & 0xFF), UInt8(crc >> 8 & 0xFF), UInt8(crc & 0xFF)]
        }
        return bytes
    }

    static func encode(type: UInt16, transactionID: [UInt8], attributes: [STUNAttribute]) -> [UInt8] {
        var bytes: [UInt8] = [UInt8(type >> 8), UInt8(type & 0xFF), 0, 0, 0x21, 0x12, 0xA4, 0x42] + transactionID
        for attribute in attributes {
            let value = Array(attribute.value.prefix(0xFFFF))
            bytes += [UInt8(attribute.type >> 8), UInt8(attribute.type & 0xFF), UInt8(value.count >> 8), UInt8(value.count & 0xFF)]
            bytes += value
            let pad = (4 - value.count % 4) % 4
            bytes += attribute.padding.count == pad ? attribute.padding : [UInt8](repeating: 0, count: pad)
        }
        setLength(&bytes, bytes.count - headerSize)
        return bytes
    }

    static func setLength(_ bytes: inout [UInt8], _ length: Int) {
        bytes[2] = UInt8(length >> 8 & 0xFF)
        bytes[3] = UInt8(length & 0xFF)
    }

    static func hmacSHA1(key: [UInt8], data: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 20)
        var length: UInt32 = 20
        _ = HMAC(EVP_sha1(), key, Int32(key.count), data, data.count, &out, &length)
        return out
    }

    /// Where each attribute of a raw message starts, and its type.
    private static func attributeOffsets(_ bytes: [UInt8]) -> [(type: UInt16, offset: Int)] {
        var result: [(UInt16, Int)] = []
        var offset = headerSize
        while offset + 4 <= bytes.count {
            let type = UInt16(bytes[offset]) << 8 | UInt16(bytes[offset + 1])
            let length = Int(bytes[offset + 2]) << 8 | Int(bytes[offset + 3])
            result.append((type, offset))
            offset += 4 + (length + 3) / 4 * 4
        }
        return result
    }

    /// Checks MESSAGE-INTEGRITY of a raw message with a short-term key (the ICE password).
    public static func verifyIntegrity(_ bytes: [UInt8], key: [UInt8]) -> Bool {
        guard bytes.count >= headerSize,
              let attribute = attributeOffsets(bytes).first(where: { $0.type == STUNAttribute.messageIntegrity }),
              attribute.offset + 24 <= bytes.count
        else { return false }
        var covered = Array(bytes[..<attribute.offset])
        setLength(&covered, attribute.offset + 24 - headerSize)
        let expected = hmacSHA1(key: key, data: covered)
        // Constant-time comparison.
        var difference: UInt8 = 0
        for index in 0..<20 { difference |= expected[index] ^ bytes[attribute.offset + 4 + index] }
        return difference == 0
    }

    /// Checks FINGERPRINT of a raw message; it must be the last attribute.
    public static func verifyFingerprint(_ bytes: [UInt8]) -> Bool {
        guard let last = attributeOffsets(bytes).last, last.type == STUNAttribute.fingerprint,
              last.offset + 8 == bytes.count
        else { return false }
        var covered = Array(bytes[..<last.offset])
        setLength(&covered, bytes.count - headerSize)
        let crc = CRC32.checksum(covered) ^ 0x5354_554E
        return bytes[last.offset + 4] == UInt8(crc >> 24) && bytes[last.offset + 5] == UInt8(crc >> 16 & 0xFF)
            && bytes[last.offset + 6] == UInt8(crc >> 8 & 0xFF) && bytes[last.offset + 7] == UInt8(crc & 0xFF)
    }

    /// The first attribute of `type`.
    public func attribute(_ type: UInt16) -> STUNAttribute? { attributes.first { $0.type == type } }
}

/// `STUN 0x0020`-style names for attribute types in messages.
func stunTypeName(_ value: UInt16) -> String {
    let digits = String(value, radix: 16)
    return "STUN 0x" + String(repeating: "0", count: max(0, 4 - digits.count)) + digits
}

/// CRC-32 (ISO-HDLC, as zlib and STUN FINGERPRINT use it).
enum CRC32 {
    static let table: [UInt32] = (0..<256).map { index in
        var crc = UInt32(index)
        for _ in 0..<8 { crc = crc & 1 != 0 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        return crc
    }

    static func checksum(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes { crc = (crc >> 8) ^ table[Int((crc ^ UInt32(byte)) & 0xFF)] }
        return crc ^ 0xFFFF_FFFF
    }
}
