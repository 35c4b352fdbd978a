import NIOCore

/// RFC 4588 retransmission packets: the original packet's payload, prefixed with its sequence
/// number (OSN), sent on a stream of its own (own SSRC, payload type and sequence numbers, the
/// original's timestamp and marker). A retransmission stream also carries padding-only packets:
/// bandwidth probes that are not media.
public enum RTXPacket {
    /// The retransmission of `original` as packet `sequenceNumber` of the RTX stream `ssrc`; it
    /// keeps the original's header extensions, and its padding (a padding-only original, one that
    /// fills its number, stays one: its OSN and padding).
    public static func wrap(_ original: RTPPacket, ssrc: UInt32, payloadType: UInt8, sequenceNumber: UInt16) -> RTPPacket {
        var header = original.header
        header.ssrc = ssrc
        header.payloadType = payloadType
        header.sequenceNumber = sequenceNumber
        var payload = ByteBufferAllocator().buffer(capacity: 2 + original.payload.readableBytes)
        payload.writeInteger(original.header.sequenceNumber)
        payload.writeImmutableBuffer(original.payload)
        return RTPPacket(header: header, payload: payload, paddingLength: original.paddingLength)
    }

    /// The original packet an RTX packet carries, on stream `ssrc` with `payloadType`; nil for a
    /// padding-only packet (no payload). A payload too short for the OSN is an error.
    public static func unwrap(_ packet: RTPPacket, ssrc: UInt32, payloadType: UInt8) throws(ParseError) -> RTPPacket? {
        guard packet.payload.readableBytes > 0 else { return nil }
        var payload = packet.payload
        guard let original = payload.readInteger(as: UInt16.self) else {
            throw ParseError(.truncated, "RTX payload of \(packet.payload.readableBytes) byte, shorter than its 2-byte OSN")
        }
        var header = packet.header
        header.ssrc = ssrc
        header.payloadType = payloadType
        header.sequenceNumber = original
        return RTPPacket(header: header, payload: payload, paddingLength: packet.paddingLength)
    }
}
