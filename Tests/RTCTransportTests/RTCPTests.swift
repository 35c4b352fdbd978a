import NIOCore
import Testing
@testable import RTCTransport

@Suite("RTCP (RFC 3550, 4585, 5104, REMB, transport-cc)")
struct RTCPTests {
    static let report = ReceptionReport(ssrc: 0xAABB_CCDD, fractionLost: 25, cumulativeLost: -3,
                                        extendedHighestSequence: 0x0001_0010, jitter: 90, lastSenderReport: 0x1234_5678,
                                        delaySinceLastSenderReport: 65536)

    static let packets: [(String, RTCPPacket)] = [
        ("SR", .senderReport(SenderReport(ssrc: 1, ntpTimestamp: 0xE1A2_B3C4_8000_0000, rtpTimestamp: 90000,
                                          packetCount: 10, octetCount: 12000, reports: [report]))),
        ("SR without blocks", .senderReport(SenderReport(ssrc: 1, ntpTimestamp: 1, rtpTimestamp: 2, packetCount: 3, octetCount: 4))),
        ("RR", .receiverReport(ReceiverReport(ssrc: 2, reports: [report, report]))),
        ("SDES", .sourceDescription(SourceDescription(chunks: [
            .init(ssrc: 1, items: [.cname("a1b2c3")]), .init(ssrc: 2, items: [.cname("x"), .init(type: 2, text: Array("Bot".utf8))]),
        ]))),
        ("BYE", .goodbye(Goodbye(sources: [1, 2], reason: "leaving"))),
        ("BYE without reason", .goodbye(Goodbye(sources: [7]))),
        ("NACK", .nack(GenericNACK(senderSSRC: 1, mediaSSRC: 2, lost: [100, 101, 105, 117, 118, 300]))),
        ("PLI", .pictureLossIndication(PictureLossIndication(senderSSRC: 1, mediaSSRC: 2))),
        ("FIR", .fullIntraRequest(FullIntraRequest(senderSSRC: 1, entries: [.init(ssrc: 2, sequenceNumber: 9)]))),
        ("REMB", .remb(ReceiverEstimatedMaximumBitrate(senderSSRC: 1, bitrate: 1_500_000, ssrcs: [2, 3]))),
        ("transport-cc", .transportFeedback(TransportFeedback(
            senderSSRC: 1, mediaSSRC: 2, baseSequenceNumber: 65530, referenceTime: -5, feedbackPacketCount: 7,
            packets: [.received(delta: 4), .lost, .received(delta: 300), .received(delta: -2)]
                + Array(repeating: .received(delta: 1), count: 20) + [.lost, .lost, .received(delta: 255)]))),
        ("unknown APP", .unknown(packetType: 204, count: 0, bytes: ByteBuffer(bytes: hex("80 cc 0002 00000001 6e616d65")))),
    ]

    @Test("every packet type round trips alone", arguments: packets)
    func roundTrip(name: String, packet: RTCPPacket) throws {
        let wire = RTCPPacket.serializeCompound([packet])
        #expect(wire.readableBytes % 4 == 0, "\(name)")
        let parsed = try RTCPPacket.parseCompound(wire)
        #expect(parsed == [packet], "\(name)")
        #expect(RTCPPacket.serializeCompound(parsed) == wire)
    }

    @Test("a compound packet of every type round trips")
    func compound() throws {
        let all = Self.packets.map(\.1)
        let parsed = try RTCPPacket.parseCompound(RTCPPacket.serializeCompound(all))
        #expect(parsed == all)
    }

    @Test("known bytes: a receiver report and a PLI as the RFC lays them out")
    func knownBytes() throws {
        let wire = hex("""
            81 c9 0007 00000001              # RR, RC=1, length 7, sender SSRC 1
            00000002 0a fffffe 00010010      # SSRC 2, fraction 10, cumulative -2, ext highest
            0000005a 12345678 00010000       # jitter 90, LSR, DLSR 1 s
            81 ce 0002 00000001 00000002     # PSFB FMT 1 (PLI)
            """)
        let packets = try RTCPPacket.parseCompound(buffer(wire))
        guard case .receiverReport(let rr) = packets[0], case .pictureLossIndication(let pli) = packets[1] else {
            Issue.record("wrong types: \(packets)")
            return
        }
        #expect(rr.ssrc == 1 && rr.reports.count == 1)
        #expect(rr.reports[0].fractionLost == 10 && rr.reports[0].cumulativeLost == -2 && rr.reports[0].jitter == 90)
        #expect(pli == PictureLossIndication(senderSSRC: 1, mediaSSRC: 2))
        #expect(bytes(RTCPPacket.serializeCompound(packets)) == wire)
    }

    @Test("NACK packs lost sequence numbers into PID/BLP pairs and back")
    func nackPacking() {
        let nack = GenericNACK(senderSSRC: 1, mediaSSRC: 2, lost: [65534, 65535, 0, 1, 40])
        #expect(nack.entries == [.init(packetID: 65534, lostBitmask: 0b111), .init(packetID: 40, lostBitmask: 0)])
        #expect(nack.lostSequenceNumbers == [65534, 65535, 0, 1, 40])
    }

    @Test("REMB keeps an 18-bit mantissa", arguments: [(UInt64(0), UInt64(0)), (262_143, 262_143), (1_500_001, 1_500_000), (10_000_000_000, 152_587 << 16)])
    func rembEncoding(requested: UInt64, carried: UInt64) {
        #expect(ReceiverEstimatedMaximumBitrate(senderSSRC: 0, bitrate: requested, ssrcs: []).bitrate == carried)
    }

    @Test("REMB with an overflowing exponent saturates and still round trips (fuzz regression)")
    func rembOverflow() throws {
        let remb = ReceiverEstimatedMaximumBitrate(senderSSRC: 1, exponent: 63, mantissa: 0x3DC6C, ssrcs: [2])
        #expect(remb.bitrate == .max)
        #expect(try RTCPPacket.parseCompound(RTCPPacket.serializeCompound([.remb(remb)])) == [.remb(remb)])
    }

    @Test("transport-cc chooses run-length and vector chunks")
    func transportCCChunks() {
        typealias S = TransportFeedback.Status
        #expect(TransportFeedback.chunks(for: Array(repeating: S.smallDelta, count: 20)) == [0x2000 | 20])
        #expect(TransportFeedback.chunks(for: [.smallDelta, .notReceived, .smallDelta]) == [0x8000 | 0x2000 | 0x0800])
        #expect(TransportFeedback.chunks(for: [.largeDelta, .smallDelta]) == [0xC000 | 0x2000 | 0x0400])
    }

    @Test("unknown packet types are kept raw between known ones")
    func unknownKept() throws {
        let wire = hex("80 cc 0001 00000009   81 ce 0002 00000001 00000002")
        let packets = try RTCPPacket.parseCompound(buffer(wire))
        #expect(packets.count == 2)
        if case .unknown(let type, _, let raw) = packets[0] { #expect(type == 204 && bytes(raw) == Array(wire[..<8])) }
        else { Issue.record("APP not kept raw") }
    }

    @Test("every prefix of a valid compound packet is an error, never a trap")
    func truncation() {
        let whole = bytes(RTCPPacket.serializeCompound(Self.packets.map(\.1)))
        // Prefixes that end on a packet boundary are valid compounds; all others must fail.
        var boundaries: Set<Int> = [0]
        var offset = 0
        while offset < whole.count {
            offset += 4 + (Int(whole[offset + 2]) << 8 | Int(whole[offset + 3])) * 4
            boundaries.insert(offset)
        }
        for length in 1..<whole.count where !boundaries.contains(length) {
            #expect(throws: ParseError.self, "prefix \(length)") { try RTCPPacket.parseCompound(buffer(Array(whole[..<length]))) }
        }
        for (name, packet) in Self.packets {
            let single = bytes(RTCPPacket.serializeCompound([packet]))
            expectEveryPrefixFails(single, name) { try _ = RTCPPacket.parseCompound(buffer($0)) }
        }
    }
}

@Suite("Reception statistics (RFC 3550 A.3, A.8)")
struct ReceptionStatisticsTests {
    @Test("loss, fraction lost and extended sequence across a wrap")
    func loss() {
        var stats = ReceptionStatistics(ssrc: 5, clockRate: 90000)
        var sequence: UInt16 = 65530
        for index in 0..<20 {
            if index != 3 && index != 9 {
                stats.record(sequenceNumber: sequence, rtpTimestamp: UInt32(index * 3000), arrivalUs: Int64(index) * 33_333)
            }
            sequence &+= 1
        }
        let report = stats.makeReport(nowUs: 1_000_000)
        #expect(report.extendedHighestSequence == 0x0001_0000 | UInt32(sequence &- 1))
        #expect(report.cumulativeLost == 2)
        #expect(report.fractionLost == UInt8(2 * 256 / 20))
        // The next interval, with no loss, reports a fraction of zero.
        for index in 20..<30 {
            stats.record(sequenceNumber: sequence, rtpTimestamp: UInt32(index * 3000), arrivalUs: Int64(index) * 33_333)
            sequence &+= 1
        }
        #expect(stats.makeReport(nowUs: 2_000_000).fractionLost == 0)
    }

    @Test("jitter follows J += (|D| - J)/16", arguments: [0, 5_000])
    func jitter(wobbleUs: Int64) {
        var stats = ReceptionStatistics(ssrc: 5, clockRate: 90000)
        for index in 0..<400 {
            let wobble = index % 2 == 0 ? 0 : wobbleUs
            stats.record(sequenceNumber: UInt16(index), rtpTimestamp: UInt32(index * 3000),
                         arrivalUs: Int64(index) * 33_333 + wobble)
        }
        // Alternating delay of w: |D| = w every packet, so J converges to w in timestamp units.
        let expected = Double(wobbleUs) * 90 / 1000
        #expect(abs(Double(stats.jitter) - expected) <= max(3, expected * 0.05), "jitter \(stats.jitter), expected \(expected)")
    }

    @Test("round-trip time from LSR and DLSR")
    func roundTrip() {
        let sent = NTPTime.timestamp(unixMicroseconds: 1_700_000_000_000_000)
        var stats = ReceptionStatistics(ssrc: 1, clockRate: 48000)
        stats.record(sequenceNumber: 1, rtpTimestamp: 0, arrivalUs: 0)
        stats.recordSenderReport(compactNTP: NTPTime.compact(sent), arrivalUs: 10_000)  // arrives after 10 ms
        let report = stats.makeReport(nowUs: 60_000)                                    // answered 50 ms later
        #expect(report.delaySinceLastSenderReport == 50 * 65536 / 1000)
        let back = NTPTime.timestamp(unixMicroseconds: 1_700_000_000_000_000 + 80_000)  // 80 ms after the SR
        let rtt = report.roundTripTime(arrivalNTP: NTPTime.compact(back))!
        #expect(abs(rtt - 0.030) < 0.001, "rtt \(rtt)")
    }
}

@Suite("Transport-wide CC feedback builder")
struct TransportFeedbackBuilderTests {
    @Test("arrivals become deltas in 250 µs ticks from a 64 ms reference; gaps are lost; a wrap is followed")
    func build() throws {
        var builder = TransportFeedbackBuilder()
        // 65534, 65535, (0 lost), 1, arriving 1 ms apart from t = 1 000 000 µs.
        builder.record(sequence: 65534, arrivalUs: 1_000_000)
        builder.record(sequence: 65535, arrivalUs: 1_001_000)
        builder.record(sequence: 1, arrivalUs: 1_003_000)
        let made = builder.makeFeedback(senderSSRC: 1, mediaSSRC: 2)
        let feedback = try #require(made)
        #expect(feedback.baseSequenceNumber == 65534 && feedback.packets.count == 4)
        #expect(feedback.referenceTime == 1_000_000 / 64_000)
        let firstDelta = (1_000_000 - Int64(feedback.referenceTime) * 64_000) / 250
        #expect(feedback.packets == [.received(delta: Int16(firstDelta)), .received(delta: 4), .lost, .received(delta: 8)])
        // The packet round trips through RTCP.
        #expect(try RTCPPacket.parseCompound(RTCPPacket.serializeCompound([.transportFeedback(feedback)])) == [.transportFeedback(feedback)])
        // The next feedback starts after the last one; a late packet from before is ignored.
        builder.record(sequence: 0, arrivalUs: 1_004_000)
        builder.record(sequence: 2, arrivalUs: 1_005_000)
        let madeNext = builder.makeFeedback(senderSSRC: 1, mediaSSRC: 2)
        let next = try #require(madeNext)
        #expect(next.baseSequenceNumber == 2 && next.packets.count == 1 && next.feedbackPacketCount == 1)
        #expect(builder.makeFeedback(senderSSRC: 1, mediaSSRC: 2) == nil)
    }

    /// Sequence numbers of every received packet `feedback` reports.
    static func received(_ feedback: TransportFeedback) -> [UInt16] {
        feedback.packets.enumerated().compactMap { offset, result in
            result == .lost ? nil : feedback.baseSequenceNumber &+ UInt16(offset)
        }
    }

    /// Feedback until the builder has none left (at most 50).
    static func drain(_ builder: inout TransportFeedbackBuilder) -> [TransportFeedback] {
        var made: [TransportFeedback] = []
        while made.count < 50, let feedback = builder.makeFeedback(senderSSRC: 1, mediaSSRC: 2) { made.append(feedback) }
        return made
    }

    // An outage longer than one feedback holds (1000 numbers) used to stop feedback for good: the
    // window after the last report had no arrival, and the builder waited for one there forever.
    @Test("an outage of more than one feedback's numbers (1500 lost in a row, with a wrap): the gap is skipped and the packets after it are reported, then every one after them",
          arguments: [UInt16(0), 65000])
    func outage(start: UInt16) throws {
        var builder = TransportFeedbackBuilder()
        for index in 0..<10 { builder.record(sequence: start &+ UInt16(index), arrivalUs: 1_000_000 + Int64(index) * 1000) }
        #expect(Self.drain(&builder).flatMap(Self.received) == (0..<10).map { start &+ UInt16($0) })
        for index in 1510..<1520 { builder.record(sequence: start &+ UInt16(index), arrivalUs: 9_000_000 + Int64(index) * 1000) }
        let after = Self.drain(&builder)
        #expect(after.flatMap(Self.received) == (1510..<1520).map { start &+ UInt16($0) })
        #expect(after.allSatisfy { $0.packets.count <= 1000 })
        for index in 1520..<1530 { builder.record(sequence: start &+ UInt16(index), arrivalUs: 10_000_000 + Int64(index) * 1000) }
        #expect(Self.drain(&builder).flatMap(Self.received) == (1520..<1530).map { start &+ UInt16($0) })
    }

    // A single number far ahead of the stream (a bogus packet) used to run the window past every
    // real packet: those were then dropped as already reported, and feedback stopped.
    @Test("one number far ahead of the stream (30000 on) does not stop the reports of the packets around it")
    func outlier() throws {
        var builder = TransportFeedbackBuilder()
        for index in 0..<20 { builder.record(sequence: UInt16(index), arrivalUs: 1_000_000 + Int64(index) * 1000) }
        builder.record(sequence: 30_000, arrivalUs: 1_020_500)
        for index in 20..<40 { builder.record(sequence: UInt16(index), arrivalUs: 1_021_000 + Int64(index) * 1000) }
        let first = Self.drain(&builder).flatMap(Self.received)
        #expect(Array(first.prefix(40)) == (0..<40).map { UInt16($0) }, "\(first)")
        // Feedback goes on for what follows, whether or not the stray number was reported meanwhile.
        for index in 40..<60 { builder.record(sequence: UInt16(index), arrivalUs: 2_000_000 + Int64(index) * 1000) }
        let next = Self.drain(&builder).flatMap(Self.received).filter { $0 != 30_000 }
        #expect(next == (40..<60).map { UInt16($0) }, "\(next)")
    }

    @Test("numbering that starts again far back (a sender that restarted its counter) is reported again; a packet a little late is still ignored")
    func restart() throws {
        var builder = TransportFeedbackBuilder()
        for index in 5000..<5010 { builder.record(sequence: UInt16(index), arrivalUs: 1_000_000 + Int64(index)) }
        #expect(Self.drain(&builder).flatMap(Self.received).count == 10)
        builder.record(sequence: 5005, arrivalUs: 2_000_000)  // late: reported lost already
        #expect(Self.drain(&builder).isEmpty)
        for index in 0..<10 { builder.record(sequence: UInt16(index), arrivalUs: 3_000_000 + Int64(index) * 1000) }
        #expect(Self.drain(&builder).flatMap(Self.received) == (0..<10).map { UInt16($0) })
    }
}

/// NTP timestamps of sender reports against Unix microseconds, on random values rather than round
/// numbers: a time whose fraction of a second was lost (`x * 1_000_000 >> 32` is `x * 0` in Swift)
/// passed a test at a whole second.
@Suite("NTP time conversions")
struct NTPTimeTests {
    @Test("Unix µs → NTP → Unix µs is exact for random times, and the fraction survives")
    func roundTrip() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<100_000 {
            // 1970 to the end of NTP era 0 (February 2036): the seconds field is 32 bits.
            let us = UInt64.random(in: 0...2_085_978_495_999_999, using: &generator)
            let ntp = NTPTime.timestamp(unixMicroseconds: us)
            #expect(NTPTime.unixMicroseconds(ntp) == Int64(us), "\(us)")
            if NTPTime.unixMicroseconds(ntp) != Int64(us) { return }
        }
    }

    @Test("the fraction is read as a fraction of a second", arguments: [
        (UInt64(0x8000_0000), Int64(500_000)),
        (UInt64(0x4000_0000), Int64(250_000)),
        (UInt64(0x0000_10C7), Int64(1)),          // 2^32 / 1e6 = 4294.97: one microsecond
        (UInt64(0xFFFF_FFFF), Int64(1_000_000)),  // a hair under the next second, to the nearest µs
        (UInt64(0), Int64(0)),
    ])
    func fraction(ntpFraction: UInt64, microseconds: Int64) {
        let second: UInt64 = NTPTime.unixEpochOffset + 1_700_000_000
        #expect(NTPTime.unixMicroseconds(second << 32 | ntpFraction) == 1_700_000_000 * 1_000_000 + microseconds)
    }

    @Test("NTP → Unix µs → NTP stays within one microsecond's worth of NTP units for random stamps")
    func reverse() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<100_000 {
            let seconds = UInt64.random(in: NTPTime.unixEpochOffset...0xFFFF_FFFF, using: &generator)
            let ntp = seconds << 32 | UInt64.random(in: 0...0xFFFF_FFFF, using: &generator)
            let back = NTPTime.timestamp(unixMicroseconds: UInt64(NTPTime.unixMicroseconds(ntp)))
            let difference = back > ntp ? back - ntp : ntp - back
            #expect(difference <= 4295, "\(ntp) came back as \(back)")
            if difference > 4295 { return }
        }
    }
}
