import NIOCore

/// Transport-wide congestion control feedback, RTPFB FMT 15
/// ([draft-holmer-rmcat-transport-wide-cc-extensions-01 §3.1](https://datatracker.ietf.org/doc/html/draft-holmer-rmcat-transport-wide-cc-extensions-01#section-3.1)).
///
/// ```
/// |                     SSRC of packet sender                     |
/// |                      SSRC of media source                     |
/// |      base sequence number     |      packet status count      |
/// |                 reference time                | fb pkt. count |
/// |          packet chunk         |         packet chunk          |  ...
/// |  recv delta   |  recv delta   | ...
/// ```
/// Chunks are run-length (`0|S S|run length(13)`) or status vectors (`1|S|symbols(14)`: fourteen
/// 1-bit or seven 2-bit symbols). Receive deltas count 250 µs: one unsigned byte for a small delta,
/// two signed bytes for a large or negative one.
public struct TransportFeedback: Sendable, Hashable {
    public static let format: UInt8 = 15
    /// One receive delta tick, in microseconds.
    public static let deltaTickUs = 250
    /// One reference time tick, in microseconds.
    public static let referenceTickUs = 64_000

    /// What happened to one transport-wide sequence number.
    public enum Status: UInt8, Sendable, Hashable {
        case notReceived = 0
        case smallDelta = 1
        case largeDelta = 2
    }

    /// One packet's outcome; `delta` (in 250 µs ticks, from the previous received packet or the
    /// reference time) is meaningful only when received.
    public struct PacketResult: Sendable, Hashable {
        public var status: Status
        public var delta: Int16

        public init(status: Status, delta: Int16 = 0) {
            self.status = status
            self.delta = status == .notReceived ? 0 : delta
        }

        /// A received packet; the status follows from the delta's size.
        public static func received(delta: Int16) -> PacketResult {
            PacketResult(status: (0...255).contains(delta) ? .smallDelta : .largeDelta, delta: delta)
        }

        public static let lost = PacketResult(status: .notReceived)
    }

    public var senderSSRC: UInt32
    public var mediaSSRC: UInt32
    public var baseSequenceNumber: UInt16
    /// 24-bit signed, in 64 ms ticks.
    public var referenceTime: Int32
    public var feedbackPacketCount: UInt8
    /// Results for `baseSequenceNumber`, `baseSequenceNumber + 1`, ...
    public var packets: [PacketResult]

    public init(senderSSRC: UInt32, mediaSSRC: UInt32, baseSequenceNumber: UInt16, referenceTime: Int32,
                feedbackPacketCount: UInt8, packets: [PacketResult]) {
        self.senderSSRC = senderSSRC
        self.mediaSSRC = mediaSSRC
        self.baseSequenceNumber = baseSequenceNumber
        self.referenceTime = max(-0x80_0000, min(0x7F_FFFF, referenceTime))
        self.feedbackPacketCount = feedbackPacketCount
        self.packets = Array(packets.prefix(Int(UInt16.max)))
    }

    init(parsing body: inout ByteBuffer) throws(ParseError) {
        guard let sender = body.readInteger(as: UInt32.self), let media = body.readInteger(as: UInt32.self),
              let base = body.readInteger(as: UInt16.self), let count = body.readInteger(as: UInt16.self),
              let referenceAndCount = body.readInteger(as: UInt32.self)
        else { throw ParseError(.truncated, "RTCP transport-cc header") }
        let statusCount = Int(count)
        var statuses: [Status] = []
        statuses.reserveCapacity(min(statusCount, body.readableBytes * 8))
        func append(_ raw: UInt8) throws(ParseError) {
            guard let status = Status(rawValue: raw) else { throw ParseError(.invalid, "RTCP transport-cc reserved status") }
            statuses.append(status)
        }
        while statuses.count < statusCount {
            guard let chunk = body.readInteger(as: UInt16.self) else { throw ParseError(.truncated, "RTCP transport-cc chunks") }
            let remaining = statusCount - statuses.count
            if chunk & 0x8000 == 0 {
                let symbol = UInt8(chunk >> 13 & 0x03)
                let run = Int(chunk & 0x1FFF)
                guard run > 0 else { throw ParseError(.invalid, "RTCP transport-cc empty run") }
                for _ in 0..<min(run, remaining) { try append(symbol) }
            } else if chunk & 0x4000 == 0 {
                for index in 0..<min(14, remaining) { try append(UInt8(chunk >> (13 - index) & 0x01)) }
            } else {
                for index in 0..<min(7, remaining) { try append(UInt8(chunk >> (12 - 2 * index) & 0x03)) }
            }
        }
        var packets: [PacketResult] = []
        packets.reserveCapacity(statuses.count)
        for status in statuses {
            switch status {
            case .notReceived:
                packets.append(.lost)
            case .smallDelta:
                guard let delta = body.readInteger(as: UInt8.self) else { throw ParseError(.truncated, "RTCP transport-cc deltas") }
                packets.append(PacketResult(status: .smallDelta, delta: Int16(delta)))
            case .largeDelta:
                guard let delta = body.readInteger(as: Int16.self) else { throw ParseError(.truncated, "RTCP transport-cc deltas") }
                packets.append(PacketResult(status: .largeDelta, delta: delta))
            }
        }
        self.init(senderSSRC: sender, mediaSSRC: media, baseSequenceNumber: base,
                  referenceTime: Int32(bitPattern: referenceAndCount & 0xFFFF_FF00) >> 8,
                  feedbackPacketCount: UInt8(referenceAndCount & 0xFF), packets: packets)
    }

    /// Chunks that encode `statuses`: runs of seven or more alike as run-length chunks, the rest
    /// as 1-bit vectors when they need no large deltas, else 2-bit vectors.
    static func chunks(for statuses: [Status]) -> [UInt16] {
        var chunks: [UInt16] = []
        var index = 0
        while index < statuses.count {
            var run = 1
            while index + run < statuses.count && statuses[index + run] == statuses[index] && run < 0x1FFF { run += 1 }
            if run >= 7 {
                chunks.append(UInt16(statuses[index].rawValue) << 13 | UInt16(run))
                index += run
                continue
            }
            let window14 = statuses[index..<min(index + 14, statuses.count)]
            if !window14.contains(.largeDelta) {
                var chunk: UInt16 = 0x8000
                for (offset, status) in window14.enumerated() { chunk |= UInt16(status.rawValue) << (13 - offset) }
                chunks.append(chunk)
                index += window14.count
            } else {
                let window7 = statuses[index..<min(index + 7, statuses.count)]
                var chunk: UInt16 = 0xC000
                for (offset, status) in window7.enumerated() { chunk |= UInt16(status.rawValue) << (12 - 2 * offset) }
                chunks.append(chunk)
                index += window7.count
            }
        }
        return chunks
    }

    func write(to buffer: inout ByteBuffer) {
        writeRTCP(count: Self.format, packetType: RTCPType.transportFeedback, to: &buffer) { buffer in
            buffer.writeInteger(senderSSRC)
            buffer.writeInteger(mediaSSRC)
            buffer.writeInteger(baseSequenceNumber)
            buffer.writeInteger(UInt16(packets.count))
            buffer.writeInteger(UInt32(bitPattern: referenceTime << 8) | UInt32(feedbackPacketCount))
            for chunk in Self.chunks(for: packets.map(\.status)) { buffer.writeInteger(chunk) }
            for packet in packets {
                switch packet.status {
                case .notReceived: break
                case .smallDelta: buffer.writeInteger(UInt8(clamping: packet.delta))
                case .largeDelta: buffer.writeInteger(packet.delta)
                }
            }
        }
    }
}
