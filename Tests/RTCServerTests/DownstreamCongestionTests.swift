import NIOCore
import RTCTransport
import Testing
@testable import RTCServer

@Suite("SFU downstream congestion (transport-wide CC per subscriber leg)")
struct DownstreamCongestionTests {
    /// A serialized packet with the publisher's transport-wide number under `id`, and its header.
    static func packet(publisherSequence: UInt16, id: UInt8 = 3, payload: Int = 1000) -> (ByteBuffer, RTPHeader) {
        let header = RTPHeader(payloadType: 96, sequenceNumber: 7, timestamp: 9, ssrc: 11,
                               extensions: [RTPHeaderExtension(id: 1, bytes: [0xAA]),
                                            RTPHeaderExtension(id: id, data: TransportSequenceNumber(publisherSequence).data)])
        let packet = RTPPacket(header: header, payload: ByteBuffer(repeating: 0x55, count: payload))
        return (packet.serialized, packet.header)
    }

    static func transportSequence(in bytes: ByteBuffer, id: UInt8 = 3) throws -> UInt16? {
        let header = try RTPPacket(parsing: bytes).header
        guard let data = header.extensionData(id: id) else { return nil }
        return try TransportSequenceNumber(parsing: data).value
    }

    @Test("the leg's own numbers replace the publisher's, consecutively, only where the ids agree",
          arguments: [(UInt8(3), UInt8(3), true), (3, 5, false), (nil, 3, false)] as [(UInt8?, UInt8?, Bool)])
    func stamping(legID: UInt8?, publisherID: UInt8?, stamped: Bool) throws {
        var leg = DownstreamCongestion()
        leg.extensionID = legID
        var written: [UInt16?] = []
        for publisherSequence in UInt16(500)..<503 {
            var (bytes, header) = Self.packet(publisherSequence: publisherSequence)
            leg.stamp(&bytes, at: DownstreamCongestion.sequenceOffset(in: header, sourceID: publisherID), nowUs: 0)
            written.append(try Self.transportSequence(in: bytes))
            // The rest of the packet is untouched.
            let parsed = try RTPPacket(parsing: bytes)
            #expect(parsed.header.extensionData(id: 1).map { Array($0.readableBytesView) } == [0xAA] && parsed.payload.readableBytes == 1000)
        }
        #expect(written == (stamped ? [0, 1, 2] : [500, 501, 502]))
    }

    @Test("feedback from a leg that queues brings its estimate under the leg's capacity; stale feedback gives none")
    func estimate() throws {
        var leg = DownstreamCongestion()
        leg.extensionID = 3
        var receiver = TransportFeedbackBuilder()
        // 2 Mbps sent (1250-byte packets every 5 ms) into a 1 Mbps path: each packet waits 5 ms more.
        var sequence: UInt16 = 0
        for step in 0..<600 {
            let sendUs = Int64(step) * 5_000
            var (bytes, header) = Self.packet(publisherSequence: 0, payload: 1200)
            leg.stamp(&bytes, at: DownstreamCongestion.sequenceOffset(in: header, sourceID: 3), nowUs: sendUs)
            receiver.record(sequence: sequence, arrivalUs: sendUs + Int64(step) * 5_000 + 10_000)
            sequence &+= 1
            if step % 20 == 19, let feedback = receiver.makeFeedback(senderSSRC: 1, mediaSSRC: 2) {
                leg.received(feedback, nowUs: sendUs + 20_000, rttMs: 20)
            }
        }
        let estimate = try #require(leg.estimateBps(nowUs: 3_000_000))
        #expect(estimate < 1_000_000, "\(estimate)")
        #expect(leg.feedbackReports == 30)
        let last = try #require(leg.lastFeedbackUs)
        #expect(leg.estimateBps(nowUs: last + DownstreamCongestion.staleAfterUs - 1) != nil)
        #expect(leg.estimateBps(nowUs: last + DownstreamCongestion.staleAfterUs) == nil)
    }
}

/// Sender reports passed on to a subscriber speak of its rewritten stream.
@Suite("Sender reports through the SFU")
struct ForwardedSenderReportTests {
    @Test("the subscriber's SSRC, the RTP time on the rewritten clock, the publisher's NTP time, this leg's counts")
    func rewritten() {
        var rewriter = StreamRewriter(outputSSRC: 0xABCD)
        var header = RTPHeader(marker: false, payloadType: 96, sequenceNumber: 1, timestamp: 90_000, ssrc: 0x1111)
        rewriter.rewrite(&header)
        let report = SenderReport(ssrc: 0x1111, ntpTimestamp: 0xE000_0000_8000_0000, rtpTimestamp: 93_000, packetCount: 500, octetCount: 90_000)
        let out = rewriter.rewrite(report, packets: 42, octets: 4200)
        #expect(out.ssrc == 0xABCD && out.ntpTimestamp == report.ntpTimestamp)
        #expect(out.rtpTimestamp &- header.timestamp == 3000)
        #expect(out.packetCount == 42 && out.octetCount == 4200)
    }
}
