import NIOCore

/// What the TOC byte and frame-count code of an Opus packet say
/// ([RFC 6716 §3.1–3.2](https://www.rfc-editor.org/rfc/rfc6716#section-3.1)); RTP carries one Opus
/// packet per RTP payload with a 48 kHz clock ([RFC 7587 §4](https://www.rfc-editor.org/rfc/rfc7587#section-4)).
public struct OpusPacketInfo: Sendable, Hashable {
    public enum Mode: Sendable, Hashable { case silk, hybrid, celt }

    /// TOC configuration number, 0...31.
    public var configuration: UInt8
    public var mode: Mode
    public var stereo: Bool
    /// Frames in the packet (1...48).
    public var frameCount: Int
    /// Duration of one frame in 48 kHz samples (120, 240, 480, 960, 1920 or 2880).
    public var samplesPerFrame: Int

    /// Total duration in 48 kHz samples: the RTP timestamp advance for this packet.
    public var samples: Int { frameCount * samplesPerFrame }

    public init(parsing packet: ByteBuffer) throws(ParseError) {
        guard let toc = packet.getInteger(at: packet.readerIndex, as: UInt8.self) else {
            throw ParseError(.truncated, "empty Opus packet")
        }
        configuration = toc >> 3
        stereo = toc & 0x04 != 0
        switch configuration {
        case 0...11:
            mode = .silk
            samplesPerFrame = [480, 960, 1920, 2880][Int(configuration % 4)]
        case 12...15:
            mode = .hybrid
            samplesPerFrame = [480, 960][Int(configuration % 2)]
        default:
            mode = .celt
            samplesPerFrame = [120, 240, 480, 960][Int(configuration % 4)]
        }
        let length = packet.readableBytes
        switch toc & 0x03 {
        case 0:
            frameCount = 1
        case 1:
            guard (length - 1) % 2 == 0 else { throw ParseError(.invalid, "Opus code 1 packet with odd payload length") }
            frameCount = 2
        case 2:
            guard length >= 2 else { throw ParseError(.truncated, "Opus code 2 packet") }
            frameCount = 2
        default:
            guard let countByte = packet.getInteger(at: packet.readerIndex + 1, as: UInt8.self) else {
                throw ParseError(.truncated, "Opus code 3 packet")
            }
            frameCount = Int(countByte & 0x3F)
            guard frameCount > 0 else { throw ParseError(.invalid, "Opus code 3 packet with no frames") }
        }
        guard frameCount * samplesPerFrame <= 5760 else {
            throw ParseError(.invalid, "Opus packet longer than 120 ms")
        }
    }
}
