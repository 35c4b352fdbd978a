/// One STUN attribute: type, value and the padding bytes that followed it on the wire (kept so a
/// parsed message serializes to the same bytes; new attributes pad with zeros).
public struct STUNAttribute: Sendable, Hashable {
    public var type: UInt16
    public var value: [UInt8]
    public var padding: [UInt8]

    public init(type: UInt16, value: [UInt8], padding: [UInt8] = []) {
        self.type = type
        self.value = value
        self.padding = padding
    }

    // Attribute types (RFC 8489 §18.3, RFC 8445 §16.1).
    public static let mappedAddress: UInt16 = 0x0001
    public static let username: UInt16 = 0x0006
    public static let messageIntegrity: UInt16 = 0x0008
    public static let errorCode: UInt16 = 0x0009
    public static let unknownAttributes: UInt16 = 0x000A
    public static let xorMappedAddress: UInt16 = 0x0020
    public static let priority: UInt16 = 0x0024
    public static let useCandidate: UInt16 = 0x0025
    public static let software: UInt16 = 0x8022
    public static let fingerprint: UInt16 = 0x8028
    public static let iceControlled: UInt16 = 0x8029
    public static let iceControlling: UInt16 = 0x802A

    // MARK: Constructors

    public static func username(_ value: String) -> STUNAttribute { STUNAttribute(type: username, value: Array(value.utf8)) }
    public static func software(_ value: String) -> STUNAttribute { STUNAttribute(type: software, value: Array(value.utf8)) }
    public static func priority(_ value: UInt32) -> STUNAttribute { STUNAttribute(type: priority, value: bigEndian(value)) }
    public static var useCandidateFlag: STUNAttribute { STUNAttribute(type: useCandidate, value: []) }
    public static func iceControlling(tieBreaker: UInt64) -> STUNAttribute {
        STUNAttribute(type: iceControlling, value: bigEndian(tieBreaker))
    }
    public static func iceControlled(tieBreaker: UInt64) -> STUNAttribute {
        STUNAttribute(type: iceControlled, value: bigEndian(tieBreaker))
    }

    /// ERROR-CODE (RFC 8489 §14.8): class (hundreds) and number, and a reason phrase.
    public static func errorCode(_ code: Int, reason: String) -> STUNAttribute {
        let clamped = max(300, min(699, code))
        return STUNAttribute(type: errorCode, value: [0, 0, UInt8(clamped / 100), UInt8(clamped % 100)] + Array(reason.utf8.prefix(763)))
    }

    /// XOR-MAPPED-ADDRESS (RFC 8489 §14.2): the address XORed with the magic cookie (and, for IPv6,
    /// the transaction ID).
    public static func xorMappedAddress(_ address: STUNAddress, transactionID: [UInt8]) -> STUNAttribute {
        let mask = xorMask(transactionID: transactionID)
        let port = address.port ^ 0x2112
        let family: UInt8 = address.ip.count == 4 ? 0x01 : 0x02
        let ip = address.ip.enumerated().map { $0.element ^ mask[$0.offset] }
        return STUNAttribute(type: xorMappedAddress, value: [0, family, UInt8(port >> 8), UInt8(port & 0xFF)] + ip)
    }

    static func bigEndian<T: FixedWidthInteger>(_ value: T) -> [UInt8] {
        (0..<(T.bitWidth / 8)).reversed().map { UInt8(truncatingIfNeeded: value >> ($0 * 8)) }
    }

    static func xorMask(transactionID: [UInt8]) -> [UInt8] { [0x21, 0x12, 0xA4, 0x42] + transactionID }

    func integer<T: FixedWidthInteger>(_: T.Type) -> T? {
        guard value.count == T.bitWidth / 8 else { return nil }
        return value.reduce(T.zero) { $0 << 8 | T($1) }
    }
}

/// An IP address and port as STUN carries them.
public struct STUNAddress: Sendable, Hashable, CustomStringConvertible {
    /// 4 bytes (IPv4) or 16 bytes (IPv6), network order.
    public var ip: [UInt8]
    public var port: UInt16

    public init(ip: [UInt8], port: UInt16) {
        self.ip = ip
        self.port = port
    }

    /// Parses dotted IPv4 text such as `192.0.2.1`.
    public init?(ipv4 text: String, port: UInt16) {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var bytes: [UInt8] = []
        for part in parts {
            guard let value = UInt8(part) else { return nil }
            bytes.append(value)
        }
        self.init(ip: bytes, port: port)
    }

    public var description: String {
        if ip.count == 4 { return ip.map(String.init).joined(separator: ".") + ":\(port)" }
        let groups = stride(from: 0, to: ip.count, by: 2).map { String(UInt16(ip[$0]) << 8 | UInt16(ip[$0 + 1]), radix: 16) }
        return "[" + groups.joined(separator: ":") + "]:\(port)"
    }
}

extension STUNMessage {
    public var username: String? { attribute(STUNAttribute.username).map { String(decoding: $0.value, as: UTF8.self) } }
    public var software: String? { attribute(STUNAttribute.software).map { String(decoding: $0.value, as: UTF8.self) } }
    public var priority: UInt32? { attribute(STUNAttribute.priority)?.integer(UInt32.self) }
    public var hasUseCandidate: Bool { attribute(STUNAttribute.useCandidate) != nil }
    public var iceControlling: UInt64? { attribute(STUNAttribute.iceControlling)?.integer(UInt64.self) }
    public var iceControlled: UInt64? { attribute(STUNAttribute.iceControlled)?.integer(UInt64.self) }

    /// ERROR-CODE as (code, reason), e.g. (487, "Role Conflict").
    public var errorCode: (code: Int, reason: String)? {
        guard let value = attribute(STUNAttribute.errorCode)?.value, value.count >= 4 else { return nil }
        return (Int(value[2] & 0x07) * 100 + Int(value[3]), String(decoding: value[4...], as: UTF8.self))
    }

    /// XOR-MAPPED-ADDRESS, decoded with this message's transaction ID.
    public var xorMappedAddress: STUNAddress? { xorAddress(STUNAttribute.xorMappedAddress) }

    /// An XOR-encoded address attribute of `type` (XOR-MAPPED-ADDRESS, XOR-RELAYED-ADDRESS, …).
    func xorAddress(_ type: UInt16) -> STUNAddress? {
        guard let value = attribute(type)?.value, value.count >= 8 else { return nil }
        let length = value[1] == 0x01 ? 4 : value[1] == 0x02 ? 16 : 0
        guard length > 0, value.count == 4 + length else { return nil }
        let mask = STUNAttribute.xorMask(transactionID: transactionID)
        let port = (UInt16(value[2]) << 8 | UInt16(value[3])) ^ 0x2112
        let ip = (0..<length).map { value[4 + $0] ^ mask[$0] }
        return STUNAddress(ip: ip, port: port)
    }
}
