import NIOCore

/// A report block of an SR or RR ([RFC 3550 §6.4.1](https://www.rfc-editor.org/rfc/rfc3550#section-6.4.1)).
///
/// ```
/// |                 SSRC_1 (SSRC of first source)                 |
/// | fraction lost |       cumulative number of packets lost       |
/// |           extended highest sequence number received           |
/// |                      interarrival jitter                      |
/// |                         last SR (LSR)                         |
/// |                   delay since last SR (DLSR)                  |
/// ```
public struct ReceptionReport: Sendable, Hashable {
    public var ssrc: UInt32
    /// Fraction of packets lost since the last report, in 1/256.
    public var fractionLost: UInt8
    /// Packets lost since the beginning; 24-bit signed (duplicates can make it negative).
    public var cumulativeLost: Int32
    public var extendedHighestSequence: UInt32
    /// Interarrival jitter in RTP timestamp units.
    public var jitter: UInt32
    /// The middle 32 bits of the NTP timestamp of the last SR received.
    public var lastSenderReport: UInt32
    /// Delay since that SR was received, in 1/65536 s.
    public var delaySinceLastSenderReport: UInt32

    public init(ssrc: UInt32, fractionLost: UInt8 = 0, cumulativeLost: Int32 = 0, extendedHighestSequence: UInt32 = 0,
                jitter: UInt32 = 0, lastSenderReport: UInt32 = 0, delaySinceLastSenderReport: UInt32 = 0) {
        self.ssrc = ssrc
        self.fractionLost = fractionLost
        self.cumulativeLost = max(-0x80_0000, min(0x7F_FFFF, cumulativeLost))
        self.extendedHighestSequence = extendedHighestSequence
        self.jitter = jitter
        self.lastSenderReport = lastSenderReport
        self.delaySinceLastSenderReport = delaySinceLastSenderReport
    }

    static let size = 24

    init(parsing buffer: inout ByteBuffer) throws(ParseError) {
        guard let ssrc = buffer.readInteger(as: UInt32.self), let lost = buffer.readInteger(as: UInt32.self),
              let highest = buffer.readInteger(as: UInt32.self), let jitter = buffer.readInteger(as: UInt32.self),
              let lsr = buffer.readInteger(as: UInt32.self), let dlsr = buffer.readInteger(as: UInt32.self)
        else { throw ParseError(.truncated, "RTCP report block") }
        // Sign-extend the 24-bit cumulative loss.
        let cumulative = Int32(bitPattern: (lost & 0xFF_FFFF) << 8) >> 8
        self.init(ssrc: ssrc, fractionLost: UInt8(lost >> 24), cumulativeLost: cumulative,
                  extendedHighestSequence: highest, jitter: jitter, lastSenderReport: lsr, delaySinceLastSenderReport: dlsr)
    }

    func write(to buffer: inout ByteBuffer) {
        buffer.writeInteger(ssrc)
        buffer.writeInteger(UInt32(fractionLost) << 24 | UInt32(bitPattern: cumulativeLost) & 0xFF_FFFF)
        buffer.writeInteger(extendedHighestSequence)
        buffer.writeInteger(jitter)
        buffer.writeInteger(lastSenderReport)
        buffer.writeInteger(delaySinceLastSenderReport)
    }

    /// Round-trip time from this block (RFC 3550 §6.4.1): `arrival − LSR − DLSR`, where
    /// `arrivalNTP` is the middle 32 bits of the NTP time this report arrived. Nil without an SR.
    public func roundTripTime(arrivalNTP: UInt32) -> Double? {
        guard lastSenderReport != 0 else { return nil }
        let rtt = Int64(arrivalNTP) - Int64(lastSenderReport) - Int64(delaySinceLastSenderReport)
        guard rtt >= 0 else { return 0 }
        return Double(rtt) / 65536
    }
}

func parseReportBlocks(_ buffer: inout ByteBuffer, count: Int) throws(ParseError) -> [ReceptionReport] {
    guard buffer.readableBytes >= count * ReceptionReport.size else {
        throw ParseError(.truncated, "RTCP report with \(count) blocks")
    }
    var reports: [ReceptionReport] = []
    reports.reserveCapacity(count)
    for _ in 0..<count { reports.append(try ReceptionReport(parsing: &buffer)) }
    return reports
}

/// Sender report, PT 200 ([RFC 3550 §6.4.1](https://www.rfc-editor.org/rfc/rfc3550#section-6.4.1)).
public struct SenderReport: Sendable, Hashable {
    public var ssrc: UInt32
    /// 64-bit NTP timestamp of the report.
    public var ntpTimestamp: UInt64
    /// The same instant on the RTP clock of the stream.
    public var rtpTimestamp: UInt32
    public var packetCount: UInt32
    public var octetCount: UInt32
    public var reports: [ReceptionReport]
    /// Profile-specific extension bytes after the report blocks, kept as is.
    public var profileExtension: ByteBuffer

    public init(ssrc: UInt32, ntpTimestamp: UInt64, rtpTimestamp: UInt32, packetCount: UInt32, octetCount: UInt32,
                reports: [ReceptionReport] = [], profileExtension: ByteBuffer = ByteBuffer()) {
        self.ssrc = ssrc
        self.ntpTimestamp = ntpTimestamp
        self.rtpTimestamp = rtpTimestamp
        self.packetCount = packetCount
        self.octetCount = octetCount
        self.reports = reports
        self.profileExtension = profileExtension
    }

    init(parsing body: inout ByteBuffer, reportCount: Int) throws(ParseError) {
        guard let ssrc = body.readInteger(as: UInt32.self), let ntp = body.readInteger(as: UInt64.self),
              let rtp = body.readInteger(as: UInt32.self), let packets = body.readInteger(as: UInt32.self),
              let octets = body.readInteger(as: UInt32.self)
        else { throw ParseError(.truncated, "RTCP SR") }
        let reports = try parseReportBlocks(&body, count: reportCount)
        self.init(ssrc: ssrc, ntpTimestamp: ntp, rtpTimestamp: rtp, packetCount: packets, octetCount: octets,
                  reports: reports, profileExtension: body)
    }

    /// The middle 32 bits of the NTP timestamp, as receivers echo it in LSR.
    public var compactNTP: UInt32 { UInt32(truncatingIfNeeded: ntpTimestamp >> 16) }

    func write(to buffer: inout ByteBuffer) {
        writeRTCP(count: UInt8(min(reports.count, 31)), packetType: RTCPType.senderReport, to: &buffer) { buffer in
            buffer.writeInteger(ssrc)
            buffer.writeInteger(ntpTimestamp)
            buffer.writeInteger(rtpTimestamp)
            buffer.writeInteger(packetCount)
            buffer.writeInteger(octetCount)
            for report in reports.prefix(31) { report.write(to: &buffer) }
            buffer.writeImmutableBuffer(profileExtension)
        }
    }
}

/// Receiver report, PT 201 ([RFC 3550 §6.4.2](https://www.rfc-editor.org/rfc/rfc3550#section-6.4.2)).
public struct ReceiverReport: Sendable, Hashable {
    public var ssrc: UInt32
    public var reports: [ReceptionReport]
    public var profileExtension: ByteBuffer

    public init(ssrc: UInt32, reports: [ReceptionReport] = [], profileExtension: ByteBuffer = ByteBuffer()) {
        self.ssrc = ssrc
        self.reports = reports
        self.profileExtension = profileExtension
    }

    init(parsing body: inout ByteBuffer, reportCount: Int) throws(ParseError) {
        guard let ssrc = body.readInteger(as: UInt32.self) else { throw ParseError(.truncated, "RTCP RR") }
        let reports = try parseReportBlocks(&body, count: reportCount)
        self.init(ssrc: ssrc, reports: reports, profileExtension: body)
    }

    func write(to buffer: inout ByteBuffer) {
        writeRTCP(count: UInt8(min(reports.count, 31)), packetType: RTCPType.receiverReport, to: &buffer) { buffer in
            buffer.writeInteger(ssrc)
            for report in reports.prefix(31) { report.write(to: &buffer) }
            buffer.writeImmutableBuffer(profileExtension)
        }
    }
}

/// Source description, PT 202 ([RFC 3550 §6.5](https://www.rfc-editor.org/rfc/rfc3550#section-6.5)).
public struct SourceDescription: Sendable, Hashable {
    /// One source and its items.
    public struct Chunk: Sendable, Hashable {
        public var ssrc: UInt32
        public var items: [Item]

        public init(ssrc: UInt32, items: [Item]) {
            self.ssrc = ssrc
            self.items = items
        }
    }

    /// An SDES item: type (1 CNAME, 2 NAME, ... 8 PRIV) and UTF-8 text of up to 255 bytes.
    public struct Item: Sendable, Hashable {
        public var type: UInt8
        public var text: [UInt8]

        public init(type: UInt8, text: [UInt8]) {
            self.type = type
            self.text = Array(text.prefix(255))
        }

        public static func cname(_ value: String) -> Item { Item(type: 1, text: Array(value.utf8)) }
    }

    public var chunks: [Chunk]

    public init(chunks: [Chunk]) { self.chunks = chunks }

    init(parsing body: inout ByteBuffer, chunkCount: Int) throws(ParseError) {
        var chunks: [Chunk] = []
        for _ in 0..<chunkCount {
            guard let ssrc = body.readInteger(as: UInt32.self) else { throw ParseError(.truncated, "RTCP SDES chunk") }
            var items: [Item] = []
            var used = 0
            while true {
                guard let type = body.readInteger(as: UInt8.self) else { throw ParseError(.truncated, "RTCP SDES item") }
                used += 1
                if type == 0 { break }
                guard let length = body.readInteger(as: UInt8.self), let text = body.readBytes(length: Int(length)) else {
                    throw ParseError(.truncated, "RTCP SDES item \(type)")
                }
                used += 1 + Int(length)
                items.append(Item(type: type, text: text))
            }
            // The null terminator is followed by padding to the next 32-bit boundary.
            let pad = (4 - used % 4) % 4
            guard body.readableBytes >= pad else { throw ParseError(.truncated, "RTCP SDES padding") }
            body.moveReaderIndex(forwardBy: pad)
            chunks.append(Chunk(ssrc: ssrc, items: items))
        }
        self.init(chunks: chunks)
    }

    func write(to buffer: inout ByteBuffer) {
        writeRTCP(count: UInt8(min(chunks.count, 31)), packetType: RTCPType.sourceDescription, to: &buffer) { buffer in
            for chunk in chunks.prefix(31) {
                buffer.writeInteger(chunk.ssrc)
                var used = 0
                for item in chunk.items where item.type != 0 {
                    buffer.writeInteger(item.type)
                    buffer.writeInteger(UInt8(item.text.count))
                    buffer.writeBytes(item.text)
                    used += 2 + item.text.count
                }
                buffer.writeInteger(UInt8(0))
                used += 1
                buffer.writeRepeatingByte(0, count: (4 - used % 4) % 4)
            }
        }
    }
}

/// Goodbye, PT 203 ([RFC 3550 §6.6](https://www.rfc-editor.org/rfc/rfc3550#section-6.6)).
public struct Goodbye: Sendable, Hashable {
    public var sources: [UInt32]
    public var reason: [UInt8]?

    public init(sources: [UInt32], reason: String? = nil) {
        self.sources = sources
        self.reason = reason.map { Array($0.utf8.prefix(255)) }
    }

    init(parsing body: inout ByteBuffer, sourceCount: Int) throws(ParseError) {
        var sources: [UInt32] = []
        for _ in 0..<sourceCount {
            guard let ssrc = body.readInteger(as: UInt32.self) else { throw ParseError(.truncated, "RTCP BYE") }
            sources.append(ssrc)
        }
        self.sources = sources
        reason = nil
        if let length = body.readInteger(as: UInt8.self) {
            guard let text = body.readBytes(length: Int(length)) else { throw ParseError(.truncated, "RTCP BYE reason") }
            reason = text
        }
    }

    func write(to buffer: inout ByteBuffer) {
        writeRTCP(count: UInt8(min(sources.count, 31)), packetType: RTCPType.goodbye, to: &buffer) { buffer in
            for ssrc in sources.prefix(31) { buffer.writeInteger(ssrc) }
            if let reason {
                buffer.writeInteger(UInt8(reason.count))
                buffer.writeBytes(reason)
            }
        }
    }
}
