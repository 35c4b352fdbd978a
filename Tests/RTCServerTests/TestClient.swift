import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RTCServer
import RTCTransport
import Signaling
import TestKit

/// A signaling connection in memory: what the server sends is collected.
final class MemoryPeer: SignalingPeer, @unchecked Sendable {
    let messages = NIOLockedValueBox<[ServerEnvelope]>([])
    let closed = NIOLockedValueBox(false)
    var onMessage: (@Sendable (ServerEnvelope) -> Void)?

    func send(_ envelope: ServerEnvelope) {
        // Through the wire form, as a real connection would.
        let decoded = try! ServerEnvelope.decode(envelope.encoded())
        messages.withLockedValue { $0.append(decoded) }
        onMessage?(decoded)
    }

    func close() { closed.withLockedValue { $0 = true } }
}

/// A test participant built on RTCTransport alone (no codecs): signaling in memory, a publisher
/// transport that sends synthetic RTP, a subscriber transport that counts what arrives by SSRC.
final class TestClient: @unchecked Sendable {
    let uid: String
    let sfu: any SignalingSink
    let group: EventLoopGroup
    let peer = MemoryPeer()
    private var requestID: UInt32 = 0
    private(set) var publisher: MediaTransport?
    let subscriber = NIOLockedValueBox<MediaTransport?>(nil)
    /// RTP received on the subscriber transport, per SSRC, in arrival order.
    let received = NIOLockedValueBox<[UInt32: [UInt16]]>([:])
    /// Their headers (extensions as they arrived).
    let receivedHeaders = NIOLockedValueBox<[UInt32: [RTPHeader]]>([:])
    /// Their payloads.
    let receivedPayloads = NIOLockedValueBox<[UInt32: [ByteBuffer]]>([:])
    /// The SSRC each subscribed track arrives with (from the subscriber offers: trackID → SSRC).
    let subscribedSSRCs = NIOLockedValueBox<[String: UInt32]>([:])
    /// RFC 4588 streams in the subscriber offers (RTX SSRC → media SSRC), and the original
    /// sequence numbers repairs on them carried, by media SSRC.
    let retransmissionSSRCs = NIOLockedValueBox<[UInt32: UInt32]>([:])
    let repaired = NIOLockedValueBox<[UInt32: [UInt16]]>([:])

    init(uid: String, sfu: any SignalingSink, group: EventLoopGroup) {
        self.uid = uid
        self.sfu = sfu
        self.group = group
        peer.onMessage = { [weak self] envelope in
            guard let self, case .offer(let offer) = envelope.message, offer.transport == .subscriber else { return }
            Task { try await self.answerSubscriber(offer.sdp) }
        }
    }

    func sendRaw(_ bytes: [UInt8]) { sfu.received(bytes, from: peer) }

    @discardableResult
    func send(_ message: ClientMessage) -> UInt32 {
        requestID += 1
        sfu.received(ClientEnvelope(message, requestID: requestID).encoded(), from: peer)
        return requestID
    }

    var messages: [ServerEnvelope] { peer.messages.withLockedValue { $0 } }

    func reply(to id: UInt32) async throws -> ServerMessage? {
        _ = await eventually { self.messages.contains { $0.requestID == id } }
        return messages.first { $0.requestID == id }?.message
    }

    func join(channel: String, token: String, role: ParticipantRole = .broadcaster, autoSubscribe: Bool = true,
              ignoreScreenShare: Bool? = nil) async throws -> ServerMessage? {
        let id = send(.join(JoinRequest(token: token, channel: channel, uid: uid, role: role, autoSubscribe: autoSubscribe,
                                        ignoreScreenShare: ignoreScreenShare)))
        return try await reply(to: id)
    }

    /// Opens the publisher transport with `sections` (sendonly, with SSRCs) and waits for it to connect.
    func publish(_ sections: [MediaSectionDescription]) async throws -> ServerMessage? {
        let transport = try await MediaTransport.bind(.client(), group: group)
        transport.onRTCP = { [weak self] datagram in
            guard let self, let packets = try? RTCPPacket.parseCompound(datagram) else { return }
            self.publisherRTCP.withLockedValue { $0 += packets }
        }
        publisher = transport
        let offer = SessionDescription.make(sessionID: 1, transport: transport.localParameters, iceLite: false, setup: "actpass",
                                            sections: sections)
        let id = send(.offer(SessionDescriptionMessage(transport: .publisher, sdp: offer.serialized)))
        guard case .answer(let answer)? = try await reply(to: id) else { return try await reply(to: id) }
        transport.start(remote: try SessionDescription(parsing: answer.sdp).transportParameters(offererRole: .client))
        _ = await eventually { try await transport.state.get() == .connected }
        return .answer(answer)
    }

    /// Opens the publisher transport with an offer written by another peer (a browser's, from a
    /// fixture): its ICE credentials and fingerprint become this transport's, its candidates go.
    /// Returns the server's reply (an answer or an error).
    func publish(offerText: String) async throws -> ServerMessage? {
        let transport = try await MediaTransport.bind(.client(), group: group)
        transport.onRTCP = { [weak self] datagram in
            guard let self, let packets = try? RTCPPacket.parseCompound(datagram) else { return }
            self.publisherRTCP.withLockedValue { $0 += packets }
        }
        publisher = transport
        let parameters = transport.localParameters
        var offer = try SessionDescription(parsing: offerText)
        func rewrite(_ lines: [SDPLine]) -> [SDPLine] {
            lines.compactMap { line in
                switch line.attribute?.name {
                case "ice-ufrag": .attribute("ice-ufrag", parameters.ice.ufrag)
                case "ice-pwd": .attribute("ice-pwd", parameters.ice.pwd)
                case "fingerprint": .attribute("fingerprint", parameters.fingerprint.value)
                case "candidate", "end-of-candidates": nil
                default: line
                }
            }
        }
        offer.sessionLines = rewrite(offer.sessionLines)
        for index in offer.media.indices { offer.media[index].lines = rewrite(offer.media[index].lines) }
        let id = send(.offer(SessionDescriptionMessage(transport: .publisher, sdp: offer.serialized)))
        let reply = try await reply(to: id)
        guard case .answer(let answer)? = reply else { return reply }
        transport.start(remote: try SessionDescription(parsing: answer.sdp).transportParameters(offererRole: .client))
        _ = await eventually { try await transport.state.get() == .connected }
        return reply
    }

    /// Sends packets exactly as given (their extensions untouched, no transport-wide number added).
    func sendUnchanged(_ packets: [RTPPacket]) {
        publisher?.sendRTP(batch: packets.map(\.serialized))
    }

    private func answerSubscriber(_ sdp: String) async throws {
        let offer = try SessionDescription(parsing: sdp)
        for section in offer.sections {
            if let ssrc = section.ssrc, let track = section.trackID { subscribedSSRCs.withLockedValue { $0[track] = ssrc } }
            if let ssrc = section.ssrc, let rtx = section.rtxSSRC { retransmissionSSRCs.withLockedValue { $0[rtx] = ssrc } }
        }
        var transport = subscriber.withLockedValue { $0 }
        let fresh = transport == nil
        if transport == nil {
            let made = try await MediaTransport.bind(.client(), group: group)
            made.onRTP = { [weak self] datagram in
                guard let self, let packet = try? RTPPacket(parsing: datagram) else { return }
                if let media = self.retransmissionSSRCs.withLockedValue({ $0[packet.header.ssrc] }) {
                    if let original = try? RTXPacket.unwrap(packet, ssrc: media, payloadType: 96) {
                        self.repaired.withLockedValue { $0[media, default: []].append(original.header.sequenceNumber) }
                    }
                    return
                }
                self.received.withLockedValue { $0[packet.header.ssrc, default: []].append(packet.header.sequenceNumber) }
                self.receivedHeaders.withLockedValue { $0[packet.header.ssrc, default: []].append(packet.header) }
                self.receivedPayloads.withLockedValue { $0[packet.header.ssrc, default: []].append(packet.payload) }
            }
            subscriber.withLockedValue { $0 = made }
            transport = made
        }
        let answer = SessionDescription.make(sessionID: 2, transport: transport!.localParameters, iceLite: false, setup: "active",
                                             sections: offer.sections.map {
                                                 MediaSectionDescription(mid: $0.mid, kind: $0.kind, direction: $0.reversed,
                                                                         payloadType: $0.payloadType, rtxPayloadType: $0.rtxPayloadType)
                                             })
        send(.answer(SessionDescriptionMessage(transport: .subscriber, sdp: answer.serialized)))
        if fresh { transport!.start(remote: try offer.transportParameters(offererRole: .server)) }
    }

    /// The next transport-wide sequence number (header extension id 3, as SDPCodecs offers it).
    private var transportSequence: UInt16 = 0
    /// RTCP the publisher transport received (receiver reports, transport-wide feedback, PLIs).
    let publisherRTCP = NIOLockedValueBox<[RTCPPacket]>([])

    /// Sends `count` packets on `ssrc`, in batches, starting at `sequence`.
    func sendRTP(ssrc: UInt32, payloadType: UInt8 = 96, count: Int, startingAt sequence: UInt16 = 0) {
        send((0..<count).map { index in Self.packet(ssrc: ssrc, payloadType: payloadType, sequence: sequence &+ UInt16(index)) })
    }

    /// The packet `sendRTP` sends as `sequence`.
    static func packet(ssrc: UInt32, payloadType: UInt8 = 96, sequence: UInt16) -> RTPPacket {
        RTPPacket(header: RTPHeader(marker: true, payloadType: payloadType, sequenceNumber: sequence, timestamp: UInt32(sequence) * 3000, ssrc: ssrc),
                  payload: ByteBuffer(bytes: [UInt8](repeating: UInt8(truncatingIfNeeded: sequence), count: 200)))
    }

    /// Sends packets as they are, each with the next transport-wide sequence number; returns those numbers.
    @discardableResult
    func send(_ packets: [RTPPacket]) -> [UInt16] {
        guard let publisher else { return [] }
        var numbers: [UInt16] = []
        publisher.sendRTP(batch: packets.map { packet in
            var packet = packet
            transportSequence &+= 1
            numbers.append(transportSequence)
            packet.header.setExtension(id: 3, data: TransportSequenceNumber(transportSequence).data)
            return packet.serialized
        })
        return numbers
    }

    func receivedCount(ssrc: UInt32?) -> Int {
        guard let ssrc else { return 0 }
        return received.withLockedValue { $0[ssrc]?.count ?? 0 }
    }

    func close() async {
        await publisher?.close()
        await subscriber.withLockedValue { $0 }?.close()
    }
}
