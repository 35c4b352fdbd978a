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
    /// The 16-bit profile field of the header extension (0xBEDE, 0x100X or another), nil without one.
    public private(set) var extensionProfileField: UInt16?
    /// The header extension's elements as on the wire, padding included (a slice of the received
    /// bytes: parsing allocates nothing for it, and forwarding writes it back unchanged).
    public private(set) var extensionBlock: ByteBuffer

    public init(marker: Bool = false, payloadType: UInt8, sequenceNumber: UInt16, timestamp: UInt32, ssrc: UInt32,
                csrcs: [UInt32] = [], extensions: [RTPHeaderExtension] = [], extensionProfile: RTPExtensionProfile? = nil) {
        self.marker = marker
        self.payloadType = payloadType
        self.sequenceNumber = sequenceNumber
        self.timestamp = timestamp
        self.ssrc = ssrc
        self.csrcs = csrcs
        self.extensionProfileField = nil
        self.extensionBlock = Self.emptyBlock
        if !extensions.isEmpty { setExtensions(extensions, profile: extensionProfile) }
    }

    /// Shared by every header without extensions, so making one allocates nothing.
    static let emptyBlock = ByteBuffer()

    /// The RFC 8285 form of the extension block, nil when there is none or it has another profile.
    public var extensionProfile: RTPExtensionProfile? {
        guard let field = extensionProfileField else { return nil }
        if field == RTPExtensionProfile.oneByteMarker { return .oneByte }
        if field & 0xFFF0 == RTPExtensionProfile.twoByteMarker { return .twoByte }
        return nil
    }

    /// The header extension elements (RFC 8285), in wire order. Setting them rebuilds the block,
    /// in the one-byte form when every element fits it.
    public var extensions: [RTPHeaderExtension] {
        get {
            var elements: [RTPHeaderExtension] = []
            forEachExtension { id, data in elements.append(RTPHeaderExtension(id: id, data: data)); return true }
            return elements
        }
        set { setExtensions(newValue, profile: nil) }
    }

    /// Calls `body` with each element until it returns false. The block was validated when parsed.
    func forEachExtension(_ body: (UInt8, ByteBuffer) -> Bool) {
        forEachExtensionElement { id, data, _ in body(id, data) }
    }

    /// As ``forEachExtension(_:)``, with where each element's data starts in the block.
    private func forEachExtensionElement(_ body: (UInt8, ByteBuffer, Int) -> Bool) {
        guard let profile = extensionProfile else { return }
        var block = extensionBlock
        let base = block.readerIndex
        if profile == .oneByte {
            while let byte = block.readInteger(as: UInt8.self) {
                if byte >> 4 == 0 { continue }  // ID 0: a padding byte (RFC 8285 §4.2)
                let id = byte >> 4
                if id == 15 { return }
                let at = block.readerIndex - base
                guard let data = block.readSlice(length: Int(byte & 0x0F) + 1), body(id, data, at) else { return }
            }
        } else {
            while let id = block.readInteger(as: UInt8.self) {
                if id == 0 { continue }
                guard let length = block.readInteger(as: UInt8.self) else { return }
                let at = block.readerIndex - base
                guard let data = block.readSlice(length: Int(length)), body(id, data, at) else { return }
            }
        }
    }

    /// Where the data of extension element `id` starts in the serialized header (bytes from its
    /// first byte), and its length: to overwrite a value in place in a serialized packet.
    public func extensionDataOffset(id: UInt8) -> (offset: Int, length: Int)? {
        let blockStart = 12 + 4 * min(csrcs.count, 15) + 4
        var found: (offset: Int, length: Int)?
        forEachExtensionElement { elementID, data, at in
            if elementID == id { found = (blockStart + at, data.readableBytes); return false }
            return true
        }
        return found
    }

    /// The data of extension element `id`, if present (no allocation).
    public func extensionData(id: UInt8) -> ByteBuffer? {
        var found: ByteBuffer?
        forEachExtension { elementID, data in
            if elementID == id { found = data; return false }
            return true
        }
        return found
    }

    /// Sets (replacing) extension element `id`.
    public mutating func setExtension(id: UInt8, data: ByteBuffer) {
        var elements = extensions.filter { $0.id != id }
        elements.append(RTPHeaderExtension(id: id, data: data))
        setExtensions(elements, profile: extensionProfile)
    }

    /// Rebuilds the block from elements. Elements with ID 0 (padding in both forms) are left out,
    /// and two-byte data is capped at 255 bytes.
    private mutating func setExtensions(_ elements: [RTPHeaderExtension], profile requested: RTPExtensionProfile?) {
        let kept = elements.filter { $0.id != 0 }
        guard !kept.isEmpty else {
            extensionProfileField = nil
            extensionBlock = Self.emptyBlock
            return
        }
        let fitsOneByte = kept.allSatisfy { (1...14).contains($0.id) && (1...16).contains($0.data.readableBytes) }
        let profile: RTPExtensionProfile = fitsOneByte ? (requested ?? .oneByte) : .twoByte
        var block = ByteBufferAllocator().buffer(capacity: 64)
        for element in kept {
            if profile == .oneByte {
                block.writeInteger(element.id << 4 | UInt8(element.data.readableBytes - 1))
                block.writeImmutableBuffer(element.data)
            } else {
                let length = min(255, element.data.readableBytes)
                block.writeInteger(element.id)
                block.writeInteger(UInt8(length))
                block.writeImmutableBuffer(element.data.getSlice(at: element.data.readerIndex, length: length)!)
            }
        }
        block.writeRepeatingByte(0, count: (4 - block.readableBytes % 4) % 4)
        extensionProfileField = profile == .oneByte ? RTPExtensionProfile.oneByteMarker : RTPExtensionProfile.twoByteMarker
        extensionBlock = block
    }

    /// The header's size on the wire.
    public var serializedSize: Int {
        12 + 4 * min(csrcs.count, 15) + (extensionProfileField == nil ? 0 : 4 + extensionBlock.readableBytes)
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
        self.init(marker: second & 0x80 != 0, payloadType: second & 0x7F, sequenceNumber: sequence,
                  timestamp: timestamp, ssrc: ssrc, csrcs: csrcs)
        if first & 0x10 != 0 {
            guard let profile = cursor.readInteger(as: UInt16.self), let words = cursor.readInteger(as: UInt16.self),
                  let block = cursor.readSlice(length: Int(words) * 4)
            else { throw ParseError(.truncated, "RTP header extension") }
            try Self.validate(block: block, profile: profile)
            extensionProfileField = profile
            extensionBlock = block
        }
        buffer = cursor
    }

    /// Walks an RFC 8285 block once, so that later reads of it cannot fail.
    private static func validate(block: ByteBuffer, profile: UInt16) throws(ParseError) {
        var cursor = block
        if profile == RTPExtensionProfile.oneByteMarker {
            while let byte = cursor.readInteger(as: UInt8.self) {
                if byte >> 4 == 0 { continue }  // ID 0: a padding byte (RFC 8285 §4.2)
                if byte >> 4 == 15 { return }  // reserved: stop processing (RFC 8285 §4.2)
                let length = Int(byte & 0x0F) + 1
                guard cursor.readableBytes >= length else {
                    throw ParseError(.truncated, "RTP one-byte extension element \(byte >> 4)")
                }
                cursor.moveReaderIndex(forwardBy: length)
            }
        } else if profile & 0xFFF0 == RTPExtensionProfile.twoByteMarker {
            while let id = cursor.readInteger(as: UInt8.self) {
                if id == 0 { continue }
                guard let length = cursor.readInteger(as: UInt8.self), cursor.readableBytes >= Int(length) else {
                    throw ParseError(.truncated, "RTP two-byte extension element \(id)")
                }
                cursor.moveReaderIndex(forwardBy: Int(length))
            }
        }
        // Another profile (RFC 3550 §5.3.1): carried through as opaque bytes.
    }

    /// Writes the header; `padding` sets the P bit. Returns the bytes written.
    @discardableResult
    public func write(to buffer: inout ByteBuffer, padding: Bool = false) -> Int {
        let start = buffer.writerIndex
        let csrcCount = min(csrcs.count, 15)
        let first = UInt8(2 << 6) | (padding ? 0x20 : 0) | (extensionProfileField == nil ? 0 : 0x10) | UInt8(csrcCount)
        buffer.writeMultipleIntegers(first, (marker ? 0x80 : 0) | (payloadType & 0x7F), sequenceNumber, timestamp, ssrc)
        for csrc in csrcs.prefix(csrcCount) { buffer.writeInteger(csrc) }
        if let extensionProfileField {
            buffer.writeMultipleIntegers(extensionProfileField, UInt16(extensionBlock.readableBytes / 4))
            buffer.writeImmutableBuffer(extensionBlock)
        }
        return buffer.writerIndex - start
    }
}
