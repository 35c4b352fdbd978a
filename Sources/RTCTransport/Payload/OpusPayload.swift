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
        firstFrameHasFEC = mode != .celt && Self.firstFrameHasLBRR(packet, stereo: stereo, samplesPerFrame: samplesPerFrame)
    }

    /// Whether the first frame carries in-band FEC: a low-bitrate copy of the frame before this
    /// packet (SILK's LBRR, RFC 6716 §4.2.4), which `opus_decode` with FEC recovers. Without it
    /// (CELT, or a SILK frame the encoder judged inactive) a FEC decode is only concealment.
    public var firstFrameHasFEC = false

    /// The LBRR flags among the first frame's SILK header bits (RFC 6716 §4.2.3): per channel
    /// (mid, then side) one VAD flag per 20 ms SILK frame, then one LBRR flag, each a range-coded
    /// bit of probability 1/2 (§4.1). Any channel's flag counts. False where the frame cannot be
    /// found (a malformed length) or is empty (DTX).
    static func firstFrameHasLBRR(_ packet: ByteBuffer, stereo: Bool, samplesPerFrame: Int) -> Bool {
        let bytes = packet.readableBytesView
        guard let toc = bytes.first else { return false }
        var offset = bytes.startIndex + 1
        /// A frame length (§3.2.1): one byte under 252, else two.
        func frameLength() -> Int? {
            guard offset < bytes.endIndex else { return nil }
            let first = Int(bytes[offset])
            if first < 252 { offset += 1; return first }
            guard offset + 1 < bytes.endIndex else { return nil }
            defer { offset += 2 }
            return first + 4 * Int(bytes[offset + 1])
        }
        var length: Int
        switch toc & 0x03 {
        case 0: length = bytes.endIndex - offset
        case 1: length = (bytes.endIndex - offset) / 2
        case 2:
            guard let first = frameLength() else { return false }
            length = first
        default:
            guard offset < bytes.endIndex else { return false }
            let countByte = bytes[offset]
            offset += 1
            let count = Int(countByte & 0x3F)
            var padding = 0
            if countByte & 0x40 != 0 {
                while true {
                    guard offset < bytes.endIndex else { return false }
                    let value = Int(bytes[offset])
                    offset += 1
                    padding += value == 255 ? 254 : value
                    if value != 255 { break }
                }
            }
            if countByte & 0x80 != 0, count > 1 {
                // VBR: the lengths of all frames but the last, then the frames.
                guard let first = frameLength() else { return false }
                length = first
                for _ in 0..<(count - 2) where frameLength() == nil { return false }
            } else {
                length = (bytes.endIndex - offset - padding) / max(1, count)
            }
        }
        guard length > 0, offset + length <= bytes.endIndex else { return false }
        var decoder = RangeDecoder(bytes[offset..<(offset + length)])
        let silkFrames = max(1, samplesPerFrame / 960)
        var lbrr = false
        for _ in 0..<(stereo ? 2 : 1) {
            for _ in 0..<silkFrames { _ = decoder.bit() }
            if decoder.bit() { lbrr = true }
        }
        return lbrr
    }
}

/// The start of Opus's range decoder (RFC 6716 §4.1): enough to read the equiprobable header bits.
/// Bytes past the end read as zero, as the RFC's decoder does.
struct RangeDecoder {
    private let bytes: ByteBufferView.SubSequence
    private var next: Int
    private var range: UInt32 = 128
    private var value: UInt32
    private var remainder: UInt32

    init(_ bytes: ByteBufferView.SubSequence) {
        self.bytes = bytes
        next = bytes.startIndex
        remainder = 0
        value = 0
        remainder = readByte()
        value = 127 - (remainder >> 1)
        normalize()
    }

    private mutating func readByte() -> UInt32 {
        guard next < bytes.endIndex else { return 0 }
        defer { next += 1 }
        return UInt32(bytes[next])
    }

    private mutating func normalize() {
        while range <= 1 << 23 {
            range <<= 8
            let previous = remainder
            remainder = readByte()
            let symbol = ((previous << 8) | remainder) >> 1
            value = ((value << 8) &+ (255 & ~symbol)) & 0x7FFF_FFFF
        }
    }

    /// One bit of probability 1/2 (`ec_dec_bit_logp` with a log-probability of 1).
    mutating func bit() -> Bool {
        let half = range >> 1
        let one = value < half
        if !one { value -= half }
        range = one ? half : range - half
        normalize()
        return one
    }
}
