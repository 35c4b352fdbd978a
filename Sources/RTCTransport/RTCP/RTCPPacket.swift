import NIOCore

/// The common RTCP header ([RFC 3550 §6.4](https://www.rfc-editor.org/rfc/rfc3550#section-6.4)).
///
/// ```
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// |V=2|P| RC/FMT  |      PT       |             length            |
/// ```
/// `length` counts 32-bit words minus one, header included.
struct RTCPCommonHeader {
    var padding: Bool
    var count: UInt8  // RC or FMT
    var packetType: UInt8
    var body: ByteBuffer  // everything after the 4-byte header, without padding

    static let size = 4

    /// Splits one packet off the front of `buffer`.
    static func parse(_ buffer: inout ByteBuffer) throws(ParseError) -> (RTCPCommonHeader, ByteBuffer) {
        var cursor = buffer
        guard let first = cursor.readInteger(as: UInt8.self), let type = cursor.readInteger(as: UInt8.self),
              let words = cursor.readInteger(as: UInt16.self)
        else { throw ParseError(.truncated, "RTCP header") }
        guard first >> 6 == 2 else { throw ParseError(.invalid, "RTCP version \(first >> 6)") }
        guard var body = cursor.readSlice(length: Int(words) * 4) else {
            throw ParseError(.truncated, "RTCP packet type \(type) of \(Int(words) * 4 + 4) bytes")
        }
        let padding = first & 0x20 != 0
        if padding {
            guard let count = body.getInteger(at: body.writerIndex &- 1, as: UInt8.self), count > 0,
                  Int(count) <= body.readableBytes
            else { throw ParseError(.invalid, "RTCP padding") }
            body.moveWriterIndex(to: body.writerIndex - Int(count))
        }
        let whole = buffer.getSlice(at: buffer.readerIndex, length: 4 + Int(words) * 4)!
        buffer = cursor
        return (RTCPCommonHeader(padding: padding, count: first & 0x1F, packetType: type, body: body), whole)
    }

    /// Writes a header for a body of `bodyBytes` (a multiple of 4).
    static func write(count: UInt8, packetType: UInt8, bodyBytes: Int, to buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt8(2 << 6) | (count & 0x1F))
        buffer.writeInteger(packetType)
        buffer.writeInteger(UInt16(bodyBytes / 4))
    }
}

/// RTCP packet types and feedback message types.
public enum RTCPType {
    public static let senderReport: UInt8 = 200
    public static let receiverReport: UInt8 = 201
    public static let sourceDescription: UInt8 = 202
    public static let goodbye: UInt8 = 203
    public static let applicationDefined: UInt8 = 204
    /// Transport-layer feedback (RFC 4585 §6.2): FMT 1 generic NACK, 15 transport-wide CC.
    public static let transportFeedback: UInt8 = 205
    /// Payload-specific feedback (RFC 4585 §6.3): FMT 1 PLI, 4 FIR, 15 application layer (REMB).
    public static let payloadFeedback: UInt8 = 206
}

/// One packet of an RTCP compound packet.
public enum RTCPPacket: Sendable, Hashable {
    case senderReport(SenderReport)
    case receiverReport(ReceiverReport)
    case sourceDescription(SourceDescription)
    case goodbye(Goodbye)
    case nack(GenericNACK)
    case pictureLossIndication(PictureLossIndication)
    case fullIntraRequest(FullIntraRequest)
    case remb(ReceiverEstimatedMaximumBitrate)
    case transportFeedback(TransportFeedback)
    /// Any other packet, kept as received (header included).
    case unknown(packetType: UInt8, count: UInt8, bytes: ByteBuffer)

    /// Parses every packet of a compound packet. Packets of unknown types are kept raw; a packet
    /// whose own layout is broken fails the whole compound packet.
    public static func parseCompound(_ datagram: ByteBuffer) throws(ParseError) -> [RTCPPacket] {
        var buffer = datagram
        var packets: [RTCPPacket] = []
        guard buffer.readableBytes >= RTCPCommonHeader.size else { throw ParseError(.truncated, "empty RTCP packet") }
        while buffer.readableBytes > 0 {
            let (header, whole) = try RTCPCommonHeader.parse(&buffer)
            packets.append(try parse(header, whole: whole))
        }
        return packets
    }

    static func parse(_ header: RTCPCommonHeader, whole: ByteBuffer) throws(ParseError) -> RTCPPacket {
        var body = header.body
        switch (header.packetType, header.count) {
        case (RTCPType.senderReport, let count):
            return .senderReport(try SenderReport(parsing: &body, reportCount: Int(count)))
        case (RTCPType.receiverReport, let count):
            return .receiverReport(try ReceiverReport(parsing: &body, reportCount: Int(count)))
        case (RTCPType.sourceDescription, let count):
            return .sourceDescription(try SourceDescription(parsing: &body, chunkCount: Int(count)))
        case (RTCPType.goodbye, let count):
            return .goodbye(try Goodbye(parsing: &body, sourceCount: Int(count)))
        case (RTCPType.transportFeedback, GenericNACK.format):
            return .nack(try GenericNACK(parsing: &body))
        case (RTCPType.transportFeedback, TransportFeedback.format):
            return .transportFeedback(try TransportFeedback(parsing: &body))
        case (RTCPType.payloadFeedback, PictureLossIndication.format):
            return .pictureLossIndication(try PictureLossIndication(parsing: &body))
        case (RTCPType.payloadFeedback, FullIntraRequest.format):
            return .fullIntraRequest(try FullIntraRequest(parsing: &body))
        case (RTCPType.payloadFeedback, ReceiverEstimatedMaximumBitrate.format)
            where ReceiverEstimatedMaximumBitrate.matches(body):
            return .remb(try ReceiverEstimatedMaximumBitrate(parsing: &body))
        default:
            return .unknown(packetType: header.packetType, count: header.count, bytes: whole)
        }
    }

    /// Appends the packet (header included, padded to 32 bits).
    public func write(to buffer: inout ByteBuffer) {
        switch self {
        case .senderReport(let packet): packet.write(to: &buffer)
        case .receiverReport(let packet): packet.write(to: &buffer)
        case .sourceDescription(let packet): packet.write(to: &buffer)
        case .goodbye(let packet): packet.write(to: &buffer)
        case .nack(let packet): packet.write(to: &buffer)
        case .pictureLossIndication(let packet): packet.write(to: &buffer)
        case .fullIntraRequest(let packet): packet.write(to: &buffer)
        case .remb(let packet): packet.write(to: &buffer)
        case .transportFeedback(let packet): packet.write(to: &buffer)
        case .unknown(_, _, let bytes): buffer.writeImmutableBuffer(bytes)
        }
    }

    /// Serializes packets as one compound packet.
    public static func serializeCompound(_ packets: [RTCPPacket]) -> ByteBuffer {
        var buffer = ByteBufferAllocator().buffer(capacity: 256)
        for packet in packets { packet.write(to: &buffer) }
        return buffer
    }
}

/// Writes a packet whose body is produced by `body`, filling in the length afterwards.
func writeRTCP(count: UInt8, packetType: UInt8, to buffer: inout ByteBuffer, body: (inout ByteBuffer) -> Void) {
    let start = buffer.writerIndex
    RTCPCommonHeader.write(count: count, packetType: packetType, bodyBytes: 0, to: &buffer)
    body(&buffer)
    let length = buffer.writerIndex - start - RTCPCommonHeader.size
    let padded = (length + 3) / 4 * 4
    buffer.writeRepeatingByte(0, count: padded - length)
    buffer.setInteger(UInt16(padded / 4), at: start + 2)
}
