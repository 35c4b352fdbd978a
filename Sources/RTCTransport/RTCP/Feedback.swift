import NIOCore

/// Reads the two SSRCs every RFC 4585 feedback message starts with.
private func readFeedbackSSRCs(_ body: inout ByteBuffer, _ what: String) throws(ParseError) -> (UInt32, UInt32) {
    guard let sender = body.readInteger(as: UInt32.self), let media = body.readInteger(as: UInt32.self) else {
        throw ParseError(.truncated, what)
    }
    return (sender, media)
}

/// Generic NACK, RTPFB FMT 1 ([RFC 4585 §6.2.1](https://www.rfc-editor.org/rfc/rfc4585#section-6.2.1)).
///
/// FCI entries: `| PID (16) | BLP (16) |` — PID is a lost sequence number, bit i of BLP marks PID+i+1 lost.
public struct GenericNACK: Sendable, Hashable {
    public static let format: UInt8 = 1

    public var senderSSRC: UInt32
    public var mediaSSRC: UInt32
    /// The FCI entries as on the wire.
    public var entries: [Entry]

    public struct Entry: Sendable, Hashable {
        public var packetID: UInt16
        public var lostBitmask: UInt16

        public init(packetID: UInt16, lostBitmask: UInt16) {
            self.packetID = packetID
            self.lostBitmask = lostBitmask
        }
    }

    public init(senderSSRC: UInt32, mediaSSRC: UInt32, entries: [Entry]) {
        self.senderSSRC = senderSSRC
        self.mediaSSRC = mediaSSRC
        self.entries = entries
    }

    /// Packs lost sequence numbers (in order of loss, wrap-aware) into as few entries as possible.
    public init(senderSSRC: UInt32, mediaSSRC: UInt32, lost: [UInt16]) {
        var entries: [Entry] = []
        for sequence in lost {
            if var last = entries.last {
                let distance = sequence &- last.packetID
                if distance == 0 { continue }
                if distance <= 16 {
                    last.lostBitmask |= 1 << (distance - 1)
                    entries[entries.count - 1] = last
                    continue
                }
            }
            entries.append(Entry(packetID: sequence, lostBitmask: 0))
        }
        self.init(senderSSRC: senderSSRC, mediaSSRC: mediaSSRC, entries: entries)
    }

    /// Every sequence number reported lost.
    public var lostSequenceNumbers: [UInt16] {
        var lost: [UInt16] = []
        for entry in entries {
            lost.append(entry.packetID)
            for bit in 0..<16 where entry.lostBitmask & (1 << bit) != 0 {
                lost.append(entry.packetID &+ UInt16(bit + 1))
            }
        }
        return lost
    }

    init(parsing body: inout ByteBuffer) throws(ParseError) {
        (senderSSRC, mediaSSRC) = try readFeedbackSSRCs(&body, "RTCP NACK")
        var entries: [Entry] = []
        while let pid = body.readInteger(as: UInt16.self) {
            guard let blp = body.readInteger(as: UInt16.self) else { throw ParseError(.truncated, "RTCP NACK entry") }
            entries.append(Entry(packetID: pid, lostBitmask: blp))
        }
        guard !entries.isEmpty else { throw ParseError(.invalid, "RTCP NACK without entries") }
        self.entries = entries
    }

    func write(to buffer: inout ByteBuffer) {
        writeRTCP(count: Self.format, packetType: RTCPType.transportFeedback, to: &buffer) { buffer in
            buffer.writeInteger(senderSSRC)
            buffer.writeInteger(mediaSSRC)
            for entry in entries {
                buffer.writeInteger(entry.packetID)
                buffer.writeInteger(entry.lostBitmask)
            }
        }
    }
}

/// Picture loss indication, PSFB FMT 1 ([RFC 4585 §6.3.1](https://www.rfc-editor.org/rfc/rfc4585#section-6.3.1)).
public struct PictureLossIndication: Sendable, Hashable {
    public static let format: UInt8 = 1
    public var senderSSRC: UInt32
    public var mediaSSRC: UInt32

    public init(senderSSRC: UInt32, mediaSSRC: UInt32) {
        self.senderSSRC = senderSSRC
        self.mediaSSRC = mediaSSRC
    }

    init(parsing body: inout ByteBuffer) throws(ParseError) {
        (senderSSRC, mediaSSRC) = try readFeedbackSSRCs(&body, "RTCP PLI")
    }

    func write(to buffer: inout ByteBuffer) {
        writeRTCP(count: Self.format, packetType: RTCPType.payloadFeedback, to: &buffer) { buffer in
            buffer.writeInteger(senderSSRC)
            buffer.writeInteger(mediaSSRC)
        }
    }
}

/// Full intra request, PSFB FMT 4 ([RFC 5104 §4.3.1](https://www.rfc-editor.org/rfc/rfc5104#section-4.3.1)).
///
/// FCI entries: `| SSRC (32) | Seq nr. (8) | Reserved (24) |`; the media SSRC field is 0.
public struct FullIntraRequest: Sendable, Hashable {
    public static let format: UInt8 = 4

    public struct Entry: Sendable, Hashable {
        public var ssrc: UInt32
        /// Incremented by the requester for each new request, so repeats can be told apart.
        public var sequenceNumber: UInt8

        public init(ssrc: UInt32, sequenceNumber: UInt8) {
            self.ssrc = ssrc
            self.sequenceNumber = sequenceNumber
        }
    }

    public var senderSSRC: UInt32
    public var mediaSSRC: UInt32
    public var entries: [Entry]

    public init(senderSSRC: UInt32, mediaSSRC: UInt32 = 0, entries: [Entry]) {
        self.senderSSRC = senderSSRC
        self.mediaSSRC = mediaSSRC
        self.entries = entries
    }

    init(parsing body: inout ByteBuffer) throws(ParseError) {
        (senderSSRC, mediaSSRC) = try readFeedbackSSRCs(&body, "RTCP FIR")
        var entries: [Entry] = []
        while let ssrc = body.readInteger(as: UInt32.self) {
            guard let sequence = body.readInteger(as: UInt8.self), body.readableBytes >= 3 else {
                throw ParseError(.truncated, "RTCP FIR entry")
            }
            body.moveReaderIndex(forwardBy: 3)
            entries.append(Entry(ssrc: ssrc, sequenceNumber: sequence))
        }
        guard !entries.isEmpty else { throw ParseError(.invalid, "RTCP FIR without entries") }
        self.entries = entries
    }

    func write(to buffer: inout ByteBuffer) {
        writeRTCP(count: Self.format, packetType: RTCPType.payloadFeedback, to: &buffer) { buffer in
            buffer.writeInteger(senderSSRC)
            buffer.writeInteger(mediaSSRC)
            for entry in entries {
                buffer.writeInteger(entry.ssrc)
                buffer.writeInteger(entry.sequenceNumber)
                buffer.writeRepeatingByte(0, count: 3)
            }
        }
    }
}

/// Receiver estimated maximum bitrate, PSFB FMT 15 with the "REMB" identifier
/// ([draft-alvestrand-rmcat-remb-03 §2.2](https://datatracker.ietf.org/doc/html/draft-alvestrand-rmcat-remb-03#section-2.2)).
///
/// ```
/// |  Unique identifier 'R' 'E' 'M' 'B'                            |
/// |  Num SSRC     | BR Exp    |  BR Mantissa                      |
/// |   SSRC feedback ...                                           |
/// ```
public struct ReceiverEstimatedMaximumBitrate: Sendable, Hashable {
    public static let format: UInt8 = 15
    static let identifier: UInt32 = 0x5245_4D42  // "REMB"

    public var senderSSRC: UInt32
    /// The bitrate as carried: `mantissa × 2^exponent` bits per second.
    public var exponent: UInt8
    /// 18 bits.
    public var mantissa: UInt32
    public var ssrcs: [UInt32]

    /// Bits per second (saturating at `UInt64.max` for exponents that overflow).
    public var bitrate: UInt64 {
        guard mantissa > 0 else { return 0 }
        guard Int(exponent) + (32 - mantissa.leadingZeroBitCount) <= 64 else { return .max }
        return UInt64(mantissa) << exponent
    }

    /// Encodes `bitrate`, rounded down to what an 18-bit mantissa can carry.
    public init(senderSSRC: UInt32, bitrate: UInt64, ssrcs: [UInt32]) {
        let (exponent, mantissa) = Self.encode(bitrate)
        self.init(senderSSRC: senderSSRC, exponent: UInt8(exponent), mantissa: mantissa, ssrcs: ssrcs)
    }

    public init(senderSSRC: UInt32, exponent: UInt8, mantissa: UInt32, ssrcs: [UInt32]) {
        self.senderSSRC = senderSSRC
        self.exponent = exponent & 0x3F
        self.mantissa = mantissa & 0x3_FFFF
        self.ssrcs = Array(ssrcs.prefix(255))
    }

    static func matches(_ body: ByteBuffer) -> Bool {
        body.getInteger(at: body.readerIndex + 8, as: UInt32.self) == identifier
    }

    /// The smallest exponent whose 18-bit mantissa holds the value.
    static func encode(_ bitrate: UInt64) -> (exponent: Int, mantissa: UInt32) {
        var exponent = 0
        while exponent < 63 && bitrate >> exponent > 0x3_FFFF { exponent += 1 }
        return (exponent, UInt32(min(bitrate >> exponent, 0x3_FFFF)))
    }

    init(parsing body: inout ByteBuffer) throws(ParseError) {
        let (sender, _) = try readFeedbackSSRCs(&body, "RTCP REMB")
        guard body.readInteger(as: UInt32.self) == Self.identifier, let count = body.readInteger(as: UInt8.self),
              let exponentAndHigh = body.readInteger(as: UInt8.self), let low = body.readInteger(as: UInt16.self)
        else { throw ParseError(.truncated, "RTCP REMB") }
        var ssrcs: [UInt32] = []
        for _ in 0..<count {
            guard let ssrc = body.readInteger(as: UInt32.self) else { throw ParseError(.truncated, "RTCP REMB SSRC list") }
            ssrcs.append(ssrc)
        }
        self.init(senderSSRC: sender, exponent: exponentAndHigh >> 2,
                  mantissa: UInt32(exponentAndHigh & 0x03) << 16 | UInt32(low), ssrcs: ssrcs)
    }

    func write(to buffer: inout ByteBuffer) {
        writeRTCP(count: Self.format, packetType: RTCPType.payloadFeedback, to: &buffer) { buffer in
            buffer.writeInteger(senderSSRC)
            buffer.writeInteger(UInt32(0))
            buffer.writeInteger(Self.identifier)
            buffer.writeInteger(UInt8(ssrcs.count))
            buffer.writeInteger(exponent << 2 | UInt8(mantissa >> 16))
            buffer.writeInteger(UInt16(mantissa & 0xFFFF))
            for ssrc in ssrcs { buffer.writeInteger(ssrc) }
        }
    }
}
