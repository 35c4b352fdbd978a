import Foundation
import NIOCore
import Testing
@testable import RTCTransport

/// The receive-side helpers client and server share: the inbound stream map, the RTCP compound
/// builders, the retransmission budget and the extension-id lookup.
@Suite("Shared receiver types")
struct SharedReceiverTypesTests {
    static let media: UInt32 = 0x1111
    static let rtx: UInt32 = 0x2222

    static func packet(ssrc: UInt32, payloadType: UInt8, sequence: UInt16, transportSequence: UInt16?, payload: [UInt8]) -> RTPPacket {
        let extensions = transportSequence.map { [RTPHeaderExtension(id: 3, data: TransportSequenceNumber($0).data)] } ?? []
        return RTPPacket(header: RTPHeader(payloadType: payloadType, sequenceNumber: sequence, timestamp: 900, ssrc: ssrc, extensions: extensions),
                         payload: ByteBuffer(bytes: payload))
    }

    static func map() -> InboundStreamMap {
        var map = InboundStreamMap(transportWideSequenceID: 3)
        map.setRepairStream(.init(mediaSSRC: media, payloadType: 96, rtxPayloadType: 97), rtxSSRC: rtx)
        return map
    }

    @Test("each packet is media, an unwrapped repair or discarded, and its transport-wide arrival counts either way", arguments: [
        // ssrc, payload type, payload, outcome, (ssrc, payload type, sequence) after
        (media, UInt8(96), [UInt8](repeating: 7, count: 10), InboundStreamMap.Outcome.media, (media, UInt8(96), UInt16(500))),
        (0x3333, 111, [1, 2, 3], .media, (0x3333, 111, 500)),
        (rtx, 97, [0x01, 0x2C, 9, 9, 9], .repair, (media, 96, 300)),  // OSN 0x012C = 300
        (rtx, 97, [], .discarded(.padding), (rtx, 97, 500)),
        (rtx, 97, [0x01], .discarded(.malformed), (rtx, 97, 500)),
        (rtx, 98, [0x01, 0x2C, 9], .discarded(.unexpectedPayloadType), (rtx, 98, 500)),
    ] as [(UInt32, UInt8, [UInt8], InboundStreamMap.Outcome, (UInt32, UInt8, UInt16))])
    func receive(ssrc: UInt32, payloadType: UInt8, payload: [UInt8], outcome: InboundStreamMap.Outcome,
                 after: (ssrc: UInt32, payloadType: UInt8, sequence: UInt16)) throws {
        var map = Self.map()
        var packet = Self.packet(ssrc: ssrc, payloadType: payloadType, sequence: 500, transportSequence: 40, payload: payload)
        let result = map.receive(&packet, arrivalUs: 1_000)
        #expect(result == outcome)
        #expect(packet.header.ssrc == after.ssrc && packet.header.payloadType == after.payloadType
            && packet.header.sequenceNumber == after.sequence)
        if outcome == .repair { #expect(Array(packet.payload.readableBytesView) == [9, 9, 9] && packet.header.timestamp == 900) }
        #expect(map.hasPendingFeedback)
        let made = map.makeFeedback(senderSSRC: 1, mediaSSRC: 2)
        let feedback = try #require(made)
        #expect(feedback.baseSequenceNumber == 40 && feedback.packets.count == 1)
        #expect(!map.hasPendingFeedback)
    }

    @Test("without a transport-wide id nothing is recorded; a removed repair stream is media again")
    func configuration() {
        var map = Self.map()
        map.transportWideSequenceID = nil
        var packet = Self.packet(ssrc: Self.media, payloadType: 96, sequence: 1, transportSequence: 7, payload: [1])
        let first = map.receive(&packet, arrivalUs: 0)
        #expect(first == .media && !map.hasPendingFeedback)
        map.setRepairStream(nil, rtxSSRC: Self.rtx)
        var repair = Self.packet(ssrc: Self.rtx, payloadType: 97, sequence: 1, transportSequence: nil, payload: [0, 5, 1])
        let second = map.receive(&repair, arrivalUs: 0)
        #expect(second == .media && repair.header.ssrc == Self.rtx)
        map.replaceRepairStreams([Self.rtx: .init(mediaSSRC: 9, payloadType: 100, rtxPayloadType: 97)])
        let third = map.receive(&repair, arrivalUs: 0)
        #expect(third == .repair && repair.header.ssrc == 9 && repair.header.payloadType == 100)
    }

    @Test("compound builders: an empty receiver report first, then the one feedback message", arguments: [
        ("pli", RTCPCompound.pictureLoss(sender: 5, media: 6),
         [RTCPPacket.receiverReport(ReceiverReport(ssrc: 5)), .pictureLossIndication(PictureLossIndication(senderSSRC: 5, mediaSSRC: 6))]),
        ("nack", RTCPCompound.nack(sender: 5, media: 6, lost: [10, 11, 40]),
         [.receiverReport(ReceiverReport(ssrc: 5)), .nack(GenericNACK(senderSSRC: 5, mediaSSRC: 6, lost: [10, 11, 40]))]),
        ("remb", RTCPCompound.remb(sender: 5, bitrate: 300_000, ssrcs: [6, 7]),
         [.receiverReport(ReceiverReport(ssrc: 5)), .remb(ReceiverEstimatedMaximumBitrate(senderSSRC: 5, bitrate: 300_000, ssrcs: [6, 7]))]),
        ("rr", RTCPCompound.receiverReports(ssrc: 5, [ReceptionReport(ssrc: 6, fractionLost: 3)]),
         [.receiverReport(ReceiverReport(ssrc: 5, reports: [ReceptionReport(ssrc: 6, fractionLost: 3)]))]),
        ("twcc", RTCPCompound.transportFeedback(sender: 5, Self.feedback),
         [.receiverReport(ReceiverReport(ssrc: 5)), .transportFeedback(Self.feedback)]),
    ] as [(String, ByteBuffer, [RTCPPacket])])
    func compound(name: String, bytes: ByteBuffer, expected: [RTCPPacket]) throws {
        #expect(try RTCPPacket.parseCompound(bytes) == expected, "\(name)")
        #expect(bytes == RTCPPacket.serializeCompound(expected), "\(name)")
    }

    static let feedback = TransportFeedback(senderSSRC: 5, mediaSSRC: 6, baseSequenceNumber: 100, referenceTime: 7, feedbackPacketCount: 1,
                                            packets: [.received(delta: 4), .lost, .received(delta: 8)])

    @Test("the retransmission budget refills at its share of the estimate, holds at most its window, and is open without an estimate",
          arguments: [
              // A quarter of 1 Mbps over 200 ms (the SFU's leg): 250 kbps, at most 50 000 bits (6 250 bytes); starts empty.
              (RetransmissionBudget(share: 0.25, windowUs: 200_000), [
                  (1_000_000, nil, 0, true),  // no estimate: open, nothing spent
                  (1, 1_000_000, 0, false),
                  (3_126, 1_000_000, 100_000, false),  // 100 ms: 25 000 bits, 3 125 bytes
                  (3_000, 1_000_000, 100_000, true),
                  (126, 1_000_000, 100_000, false),
                  (6_251, 1_000_000, 10_000_000, false),  // a long quiet time fills only the window
                  (6_250, 1_000_000, 10_000_000, true),
              ]),
              // The client's shape: half the estimate over 400 ms, never under 16 kB, full at first.
              (RetransmissionBudget(share: 0.5, windowUs: 400_000, floorBytes: 16_000, startsFull: true), [
                  (16_000, 100_000, 5_000_000, true),
                  (1, 100_000, 5_000_000, false),
                  (6_250, 100_000, 6_000_000, true),  // 1 s at 50 kbps
              ]),
          ] as [(RetransmissionBudget, [(Int, Double?, Int64, Bool)])])
    func budget(start: RetransmissionBudget, steps: [(bytes: Int, estimateBps: Double?, nowUs: Int64, allowed: Bool)]) {
        var budget = start
        for (index, step) in steps.enumerated() {
            let allowed = budget.mayRetransmit(bytes: step.bytes, estimateBps: step.estimateBps, nowUs: step.nowUs)
            #expect(allowed == step.allowed, "step \(index)")
        }
    }

    @Test("extension ids come from the session, and the offered table is RTPExtensionID's")
    func extensionIDs() throws {
        let transport = TransportParameters(ice: .random(), fingerprint: try DTLSCertificate().fingerprint,
                                            candidates: [try SocketAddress(ipAddress: "127.0.0.1", port: 7882)], dtlsRole: .server)
        let audioOnly = SessionDescription.make(sessionID: 1, transport: transport, iceLite: true, setup: "actpass",
                                                sections: [MediaSectionDescription(mid: "0", kind: .audio, direction: .sendonly, ssrc: 1)])
        let parsed = try SessionDescription(parsing: audioOnly.serialized)
        #expect(parsed.extensionID(for: RTPExtensionURI.transportWideSequence) == RTPExtensionID.transportWideSequence)
        #expect(parsed.extensionID(for: RTPExtensionURI.audioLevel) == RTPExtensionID.audioLevel)
        #expect(parsed.extensionID(for: RTPExtensionURI.videoOrientation) == nil)  // video only
        #expect(parsed.extensionID(for: "urn:example:unknown") == nil)
        // A peer's own id wins over ours.
        let remapped = try SessionDescription(parsing: audioOnly.serialized.replacingOccurrences(
            of: "a=extmap:3 ", with: "a=extmap:9 "))
        #expect(remapped.extensionID(for: RTPExtensionURI.transportWideSequence) == 9)
        let table: [(UInt8, String)] = [(RTPExtensionID.audioLevel, RTPExtensionURI.audioLevel), (RTPExtensionID.absSendTime, RTPExtensionURI.absSendTime),
                                        (RTPExtensionID.transportWideSequence, RTPExtensionURI.transportWideSequence),
                                        (RTPExtensionID.mid, RTPExtensionURI.mid), (RTPExtensionID.videoOrientation, RTPExtensionURI.videoOrientation),
                                        (RTPExtensionID.rtpStreamID, RTPExtensionURI.rtpStreamID),
                                        (RTPExtensionID.repairedRTPStreamID, RTPExtensionURI.repairedRTPStreamID)]
        #expect(SDPCodecs.extensions.map(\.id) == table.map(\.0) && SDPCodecs.extensions.map(\.uri) == table.map(\.1))
    }
}
