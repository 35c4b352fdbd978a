import NIOCore

/// An RTP packet: header plus payload, the payload a slice of the received bytes (no copy).
public struct RTPPacket: Sendable, Hashable {
    public var header: RTPHeader
    /// The payload, without padding.
    public var payload: ByteBuffer
    /// Padding bytes after the payload (RFC 3550 §5.1, P bit); 0 for none. Kept so a forwarded
    /// packet keeps its size (padding-only probes).
    public var paddingLength: UInt8

    public init(header: RTPHeader, payload: ByteBuffer, paddingLength: UInt8 = 0) {
        self.header = header
        self.payload = payload
        self.paddingLength = paddingLength
    }

    /// Parses a whole datagram.
    public init(parsing buffer: ByteBuffer) throws(ParseError) {
        var cursor = buffer
        let header = try RTPHeader(parsing: &cursor)
        var padding: UInt8 = 0
        if let first = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self), first & 0x20 != 0 {
            guard cursor.readableBytes > 0,
                  let count = cursor.getInteger(at: cursor.writerIndex - 1, as: UInt8.self), count > 0,
                  Int(count) <= cursor.readableBytes
            else { throw ParseError(.invalid, "RTP padding length") }
            padding = count
            cursor.moveWriterIndex(to: cursor.writerIndex - Int(count))
        }
        self.init(header: header, payload: cursor, paddingLength: padding)
    }

    /// A padding-only packet with `header` (marker clear): it says its sequence number carries
    /// nothing (RFC 3550 §5.1 padding; receivers keep the numbering continuous across it).
    public static func filler(_ header: RTPHeader) -> RTPPacket {
        var header = header
        header.marker = false
        return RTPPacket(header: header, payload: ByteBuffer(), paddingLength: 4)
    }

    public var serializedSize: Int { header.serializedSize + payload.readableBytes + Int(paddingLength) }

    /// Appends the packet to `buffer`.
    public func write(to buffer: inout ByteBuffer) {
        header.write(to: &buffer, padding: paddingLength > 0)
        buffer.writeImmutableBuffer(payload)
        if paddingLength > 0 {
            buffer.writeRepeatingByte(0, count: Int(paddingLength) - 1)
            buffer.writeInteger(paddingLength)
        }
    }

    /// The packet as a new buffer, with room after it for SRTP's trailer
    /// (``SRTPProfile/maxTrailer``): it is protected in place.
    public var serialized: ByteBuffer {
        var buffer = ByteBufferAllocator().buffer(capacity: serializedSize + SRTPProfile.maxTrailer)
        write(to: &buffer)
        return buffer
    }
}
