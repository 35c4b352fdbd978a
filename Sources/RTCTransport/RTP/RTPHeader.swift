import NIOCore

/// The RTP fixed header, CSRC list and header extension
/// ([RFC 3550 §5.1](https://www.rfc-editor.org/rfc/rfc3550#section-5.1),
/// [RFC 8285](https://www.rfc-editor.org/rfc/rfc8285)).
///
/// ```
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |V=2|P|X|  CC   |M|     PT      |       sequence number         |
/// |                           timestamp                           |
/// |           synchronization source (SSRC) identifier            |
/// |            contributing source (CSRC) identifiers  ...        |
/// |      defined by profile       |           length              |  (if X)
/// |                        header extension  ...                  |
/// ```
public struct RTPHeader: Sendable, Hashable {
    public var marker: Bool
    public var payloadType: UInt8
    public var sequenceNumber: UInt16
    public var timestamp: UInt32
    public var ssrc: UInt32
    public var csrcs: [UInt32]
    /// Header extension elements (RFC 8285), in wire order.
    public var extensions: [RTPHeaderExtension]
    /// Which RFC 8285 form the extensions use; chosen automatically when nil (one-byte when every
    /// element fits it).
    public var extensionProfile: RTPExtensionProfile?

    public init(marker: Bool = false, payloadType: UInt8, sequenceNumber: UInt16, timestamp: UInt32, ssrc: UInt32,
                csrcs: [UInt32] = [], extensions: [RTPHeaderExtension] = [], extensionProfile: RTPExtensionProfile? = nil) {
        self.marker = marker
        self.payloadType = payloadType
        self.sequenceNumber = sequenceNumber
        self.timestamp = timestamp
        self.ssrc = ssrc
        self.csrcs = csrcs
        self.extensions = extensions
        self.extensionProfile = extensionProfile
    }

    /// The data of extension element `id`, if present.
    public func extensionData(id: UInt8) -> ByteBuffer? {
        extensions.first { $0.id == id }?.data
    }

    /// Sets (replacing) extension element `id`.
    public mutating func setExtension(id: UInt8, data: ByteBuffer) {
        extensions.removeAll { $0.id == id }
        extensions.append(RTPHeaderExtension(id: id, data: data))
    }

    /// The profile the serializer will use.
    var effectiveProfile: RTPExtensionProfile {
        let fitsOneByte = extensions.allSatisfy { (1...14).contains($0.id) && (1...16).contains($0.data.readableBytes) }
        if !fitsOneByte { return .twoByte }
        return extensionProfile ?? .oneByte
    }

    /// Bytes of the extension block's elements, before padding to 32 bits (two-byte data is capped at 255).
    private var extensionElementBytes: Int {
        let perElement = effectiveProfile == .oneByte ? 1 : 2
        return extensions.reduce(0) { $0 + perElement + min(255, $1.data.readableBytes) }
    }

    /// The header's size on the wire.
    public var serializedSize: Int {
        var size = 12 + 4 * csrcs.count
        if !extensions.isEmpty { size += 4 + (extensionElementBytes + 3) / 4 * 4 }
        return size
    }
}

/// One RFC 8285 header extension element.
public struct RTPHeaderExtension: Sendable, Hashable {
    /// 1...14 in the one-byte form, 1...255 in the two-byte form.
    public var id: UInt8
    public var data: ByteBuffer

    public init(id: UInt8, data: ByteBuffer) {
        self.id = id
        self.data = data
    }

    public init(id: UInt8, bytes: [UInt8]) {
        self.init(id: id, data: ByteBuffer(bytes: bytes))
    }
}

/// The two header extension forms of RFC 8285.
public enum RTPExtensionProfile: Sendable, Hashable {
    /// 0xBEDE: IDs 1–14, 1–16 bytes of data (§4.2).
    case oneByte
    /// 0x100X: IDs 1–255, 0–255 bytes of data (§4.3); the low 4 bits are "appbits".
    case twoByte

    static let oneByteMarker: UInt16 = 0xBEDE
    static let twoByteMarker: UInt16 = 0x1000
}

extension RTPHeader {
    /// Parses a header from the front of `buffer`, consuming it only on success.
    public init(parsing buffer: inout ByteBuffer) throws(ParseError) {
        var cursor = buffer
        guard let first = cursor.readInteger(as: UInt8.self), let second = cursor.readInteger(as: UInt8.self),
              let sequence = cursor.readInteger(as: UInt16.self), let timestamp = cursor.readInteger(as: UInt32.self),
              let ssrc = cursor.readInteger(as: UInt32.self)
        else { throw ParseError(.truncated, "RTP header shorter than 12 bytes") }
        guard first >> 6 == 2 else { throw ParseError(.invalid, "RTP version \(first >> 6)") }
        let csrcCount = Int(first & 0x0F)
        var csrcs: [UInt32] = []
        if csrcCount > 0 {
            csrcs.reserveCapacity(csrcCount)
            for _ in 0..<csrcCount {
                guard let csrc = cursor.readInteger(as: UInt32.self) else {
                    throw ParseError(.truncated, "RTP CSRC list of \(csrcCount)")
                }
                csrcs.append(csrc)
            }
        }
        var extensions: [RTPHeaderExtension] = []
        var profile: RTPExtensionProfile?
        if first & 0x10 != 0 {
            guard let marker = cursor.readInteger(as: UInt16.self), let words = cursor.readInteger(as: UInt16.self),
                  var block = cursor.readSlice(length: Int(words) * 4)
            else { throw ParseError(.truncated, "RTP header extension") }
            if marker == RTPExtensionProfile.oneByteMarker {
                profile = .oneByte
                extensions = try Self.parseOneByte(&block)
            } else if marker & 0xFFF0 == RTPExtensionProfile.twoByteMarker {
                profile = .twoByte
                extensions = try Self.parseTwoByte(&block)
            } else {
                // A header extension of another profile (RFC 3550 §5.3.1): skipped, not kept.
                profile = nil
            }
        }
        self.init(marker: second & 0x80 != 0, payloadType: second & 0x7F, sequenceNumber: sequence,
                  timestamp: timestamp, ssrc: ssrc, csrcs: csrcs, extensions: extensions, extensionProfile: profile)
        buffer = cursor
    }

    private static func parseOneByte(_ block: inout ByteBuffer) throws(ParseError) -> [RTPHeaderExtension] {
        var elements: [RTPHeaderExtension] = []
        while let byte = block.readInteger(as: UInt8.self) {
            if byte == 0 { continue }  // padding
            let id = byte >> 4
            if id == 15 { break }  // reserved: stop processing (RFC 8285 §4.2)
            let length = Int(byte & 0x0F) + 1
            guard let data = block.readSlice(length: length) else {
                throw ParseError(.truncated, "RTP one-byte extension element \(id)")
            }
            elements.append(RTPHeaderExtension(id: id, data: data))
        }
        return elements
    }

    private static func parseTwoByte(_ block: inout ByteBuffer) throws(ParseError) -> [RTPHeaderExtension] {
        var elements: [RTPHeaderExtension] = []
        while let id = block.readInteger(as: UInt8.self) {
            if id == 0 { continue }  // padding
            guard let length = block.readInteger(as: UInt8.self), let data = block.readSlice(length: Int(length)) else {
                throw ParseError(.truncated, "RTP two-byte extension element \(id)")
            }
            elements.append(RTPHeaderExtension(id: id, data: data))
        }
        return elements
    }

    /// Writes the header; `padding` sets the P bit. Returns the bytes written.
    @discardableResult
    public func write(to buffer: inout ByteBuffer, padding: Bool = false) -> Int {
        let start = buffer.writerIndex
        let first = UInt8(2 << 6) | (padding ? 0x20 : 0) | (extensions.isEmpty ? 0 : 0x10) | UInt8(min(csrcs.count, 15))
        buffer.writeInteger(first)
        buffer.writeInteger((marker ? 0x80 : 0) | (payloadType & 0x7F))
        buffer.writeInteger(sequenceNumber)
        buffer.writeInteger(timestamp)
        buffer.writeInteger(ssrc)
        for csrc in csrcs.prefix(15) { buffer.writeInteger(csrc) }
        if !extensions.isEmpty {
            let profile = effectiveProfile
            buffer.writeInteger(profile == .oneByte ? RTPExtensionProfile.oneByteMarker : RTPExtensionProfile.twoByteMarker)
            let bytes = extensionElementBytes
            let words = (bytes + 3) / 4
            buffer.writeInteger(UInt16(words))
            for element in extensions {
                if profile == .oneByte {
                    // effectiveProfile guarantees 1...16 bytes and an ID of 1...14 here.
                    buffer.writeInteger(element.id << 4 | UInt8(element.data.readableBytes - 1))
                    buffer.writeImmutableBuffer(element.data)
                } else {
                    let length = min(255, element.data.readableBytes)
                    buffer.writeInteger(element.id)
                    buffer.writeInteger(UInt8(length))
                    buffer.writeImmutableBuffer(element.data.getSlice(at: element.data.readerIndex, length: length)!)
                }
            }
            buffer.writeRepeatingByte(0, count: words * 4 - bytes)
        }
        return buffer.writerIndex - start
    }
}
