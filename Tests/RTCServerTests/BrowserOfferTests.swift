import Foundation
import NIOCore
import NIOPosix
import RTCServer
import RTCTransport
import Signaling
import TestKit
import Testing

/// Publishers whose offers the SDK did not write (browser offers from `Fixtures/offers`): the SFU
/// answers in their numbering, reads their extension ids, and forwards in each subscriber's.
@Suite("SFU with browsers' offers", .serialized)
struct BrowserOfferTests {
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
    static let offers = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../RTCTransportTests/Fixtures/offers").standardizedFileURL

    static func offer(_ name: String) throws -> String {
        try String(contentsOf: offers.appendingPathComponent(name), encoding: .utf8)
    }

    func makeSFU() async throws -> SFU {
        try await SFU.start(configuration: ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: "test-secret"), group: Self.group)
    }

    /// A publisher with `offer` and a subscriber (the SDK's own answer) in one room, both joined;
    /// the publisher's answer.
    func pair(_ sfu: SFU, offer: String) async throws -> (publisher: TestClient, viewer: TestClient, answer: SessionDescription) {
        let publisher = TestClient(uid: "browser", sfu: sfu, group: Self.group)
        let viewer = TestClient(uid: "viewer", sfu: sfu, group: Self.group)
        guard case .joined? = try await publisher.join(channel: "web", token: testToken(uid: "browser", channel: "web")),
              case .joined? = try await viewer.join(channel: "web", token: testToken(uid: "viewer", channel: "web"))
        else { throw TestFailure("join failed: \(publisher.messages) \(viewer.messages)") }
        guard case .answer(let answer)? = try await publisher.publish(offerText: offer) else {
            throw TestFailure("no answer: \(publisher.messages.last.map { "\($0.message)" } ?? "nothing")")
        }
        return (publisher, viewer, try SessionDescription(parsing: answer.sdp))
    }

    struct TestFailure: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    @Test("Firefox's numbering: transport-cc 7, mid 3, toffset 5 come out as the viewer's ids, stamped per leg; mid and toffset stay behind")
    func firefoxExtensionsRenumbered() async throws {
        let sfu = try await makeSFU()
        let (publisher, viewer, answer) = try await pair(sfu, offer: try Self.offer("firefox-esr-camera.sdp"))
        // The answer keeps Firefox's ids and payload types.
        let video = try #require(answer.media.first { $0.mediaLine.kind == "video" })
        #expect(video.mediaLine.payloadTypes.first == 120)
        #expect(video.extensionMaps.contains { $0.id == 7 && $0.uri == RTPExtensionURI.transportWideSequence })
        #expect(video.extensionMaps.contains { $0.id == 3 && $0.uri == RTPExtensionURI.mid })
        let ssrc: UInt32 = 2_936_481_057
        #expect(await eventually { viewer.subscribedSSRCs.withLockedValue { $0.count } == 2 })
        #expect(await eventually { try await viewer.subscriber.withLockedValue { $0 }?.state.get() == .connected })
        try await Task.sleep(nanoseconds: 200_000_000)
        let packets = (0..<40).map { index -> RTPPacket in
            var packet = TestClient.packet(ssrc: ssrc, payloadType: 120, sequence: UInt16(index))
            packet.header.extensions = [
                RTPHeaderExtension(id: 3, bytes: Array("1".utf8)),  // mid
                RTPHeaderExtension(id: 7, data: TransportSequenceNumber(UInt16(1000 + index)).data),
                RTPHeaderExtension(id: 5, bytes: [0, 0, 9]),  // toffset: not forwarded
            ]
            return packet
        }
        publisher.sendUnchanged(packets)
        let infos = try await sfu.participants(in: "web").get()
        let trackSid = try #require(infos.first { $0.uid == "browser" }?.tracks.first { $0.kind == .video }?.sid)
        let viewerSSRC = try #require(viewer.subscribedSSRCs.withLockedValue { $0[trackSid] })
        #expect(await eventually { viewer.receivedCount(ssrc: viewerSSRC) == 40 })
        let headers = viewer.receivedHeaders.withLockedValue { $0[viewerSSRC] ?? [] }
        // Only the transport-wide number, under the viewer's id (3), numbered by the viewer's leg.
        #expect(headers.allSatisfy { $0.extensions.map(\.id) == [RTPExtensionID.transportWideSequence] })
        let legNumbers = headers.compactMap { header in
            header.extensionData(id: RTPExtensionID.transportWideSequence).flatMap { try? TransportSequenceNumber(parsing: $0).value }
        }
        #expect(legNumbers.count == 40 && !legNumbers.contains(1000))
        #expect(zip(legNumbers, legNumbers.dropFirst()).allSatisfy { $1 == $0 &+ 1 })
        // Firefox hears transport-wide feedback for its own numbers (read under its id 7).
        #expect(await eventually {
            publisher.publisherRTCP.withLockedValue { $0 }.contains { packet in
                guard case .transportFeedback(let feedback) = packet else { return false }
                return feedback.baseSequenceNumber >= 1000 && feedback.baseSequenceNumber < 1040
            }
        })
        await publisher.close()
        await viewer.close()
        await sfu.shutdown()
    }

    @Test("a simulcast offer without SSRCs: every layer is answered and found by mid and rid; a viewer gets one continuous stream of the layer it asks for, switched at keyframes")
    func simulcastLayers() async throws {
        let sfu = try await makeSFU()
        let (publisher, viewer, answer) = try await pair(sfu, offer: try Self.offer("chromium-simulcast.sdp"))
        let video = try #require(answer.media.first { $0.mediaLine.kind == "video" })
        #expect(video.rids.map(\.id) == ["q", "h", "f"] && video.simulcast == "recv q;h;f")
        #expect(await eventually { viewer.subscribedSSRCs.withLockedValue { $0.count } == 2 })
        #expect(await eventually { try await viewer.subscriber.withLockedValue { $0 }?.state.get() == .connected })
        try await Task.sleep(nanoseconds: 200_000_000)
        // Three layers arrive, each a keyframe of its size every 10 frames (a frame per packet).
        let layers: [(rid: String, ssrc: UInt32, width: Int, height: Int)] = [("q", 0x51, 320, 180), ("h", 0x52, 640, 360), ("f", 0x53, 1280, 720)]
        func frames(_ range: Range<Int>) -> [RTPPacket] {
            var packets: [RTPPacket] = []
            for index in range {
                for layer in layers {
                    var packet = RTPPacket(header: RTPHeader(marker: true, payloadType: 96, sequenceNumber: UInt16(index),
                                                             timestamp: UInt32(index) * 3000 + layer.ssrc, ssrc: layer.ssrc),
                                           payload: Self.vp8(keyframe: index % 10 == 0, pictureID: UInt16(100 * Int(layer.ssrc & 0xF) + index),
                                                             width: layer.width, height: layer.height))
                    packet.header.extensions = [
                        RTPHeaderExtension(id: 4, bytes: Array("1".utf8)), RTPHeaderExtension(id: 10, bytes: Array(layer.rid.utf8)),
                    ]
                    packets.append(packet)
                }
            }
            return packets
        }
        // At 30 frames a second (a layer with no packet for 400 ms counts as stopped).
        func send(_ range: Range<Int>) async throws {
            for index in range {
                publisher.sendUnchanged(frames(index..<index + 1))
                try await Task.sleep(nanoseconds: 33_000_000)
            }
        }
        // The first frames make the layers known (the first to arrive may be forwarded at once);
        // the next keyframe moves the viewer to the full layer (nothing limits it).
        try await send(0..<10)
        let infos = try await sfu.participants(in: "web").get()
        let track = try #require(infos.first { $0.uid == "browser" }?.tracks.first { $0.kind == .video })
        #expect(track.simulcastLayers == ["q", "h", "f"] && track.ssrc == nil)
        let viewerSSRC = try #require(viewer.subscribedSSRCs.withLockedValue { $0[track.sid] })
        let before = viewer.receivedCount(ssrc: viewerSSRC)
        try await send(10..<20)
        // Frame 10 of the layer it had may still go out just before f's keyframe of the same instant.
        #expect(await eventually { viewer.receivedCount(ssrc: viewerSSRC) >= before + 10 })
        let afterFull = viewer.receivedCount(ssrc: viewerSSRC)
        #expect(afterFull <= before + 11)
        let full = viewer.receivedPayloads.withLockedValue { $0[viewerSSRC] ?? [] }.suffix(10)
        #expect(full.first.flatMap { VP8DescriptorLayout(payload: $0)?.keyframeWidth } == 1280)
        // Asking for the low stream moves it to q at q's next keyframe (frame 20), one continuous stream.
        _ = viewer.send(.setVideoPreference(VideoPreference(uid: "browser", streamType: .low)))
        try await Task.sleep(nanoseconds: 30_000_000)
        try await send(20..<30)
        #expect(await eventually { viewer.receivedCount(ssrc: viewerSSRC) == afterFull + 10 })
        let headers = viewer.receivedHeaders.withLockedValue { $0[viewerSSRC] ?? [] }
        let payloads = viewer.receivedPayloads.withLockedValue { $0[viewerSSRC] ?? [] }
        #expect(payloads.suffix(10).first.flatMap { VP8DescriptorLayout(payload: $0)?.keyframeWidth } == 320)
        #expect(zip(headers, headers.dropFirst()).allSatisfy { $1.sequenceNumber == $0.sequenceNumber &+ 1 }, "sequence numbers continue")
        #expect(zip(headers, headers.dropFirst()).allSatisfy { $1.timestamp &- $0.timestamp > 0 && $1.timestamp &- $0.timestamp < 0x8000_0000 })
        let pictures = payloads.compactMap { payload in VP8DescriptorLayout(payload: payload)?.pictureID(inPayload: payload) }
        #expect(pictures.count == payloads.count && zip(pictures, pictures.dropFirst()).allSatisfy { $1 == ($0 + 1) & 0x7FFF },
                "picture ids continue")
        // Neither the mid nor the stream id reaches the viewer.
        #expect(headers.allSatisfy { $0.extensions.isEmpty })
        // The viewer heard which layer it gets and why.
        #expect(await eventually { viewer.messages.contains { envelope in
            if case .layerChanged(let change) = envelope.message { return change.layer == "q" && change.width == 320 && change.reason == .request }
            return false
        } })
        await publisher.close()
        await viewer.close()
        await sfu.shutdown()
    }

    @Test("a data channel section is answered (UDP/DTLS/SCTP, our sctp-port and max-message-size) with the media sections")
    func dataChannelAnswered() async throws {
        let sfu = try await makeSFU()
        let (publisher, viewer, answer) = try await pair(sfu, offer: try Self.offer("chromium-datachannel.sdp"))
        #expect(answer.media.map(\.mediaLine.kind) == ["audio", "video", "application"])
        #expect(answer.media.map { $0.mediaLine.port == "0" } == [false, false, false])
        #expect(answer.bundleGroups.first?.count == 3)
        let data = try #require(answer.media.last)
        #expect(data.mediaLine.proto == "UDP/DTLS/SCTP" && data.mediaLine.formats == ["webrtc-datachannel"])
        #expect(data.attributes("sctp-port") == ["5000"] && data.attributes("max-message-size") == ["262144"])
        #expect(data.attributes("setup") == ["passive"] && !data.attributes("fingerprint").isEmpty)
        let infos = try await sfu.participants(in: "web").get()
        #expect(infos.first { $0.uid == "browser" }?.tracks.map(\.kind).sorted { $0.rawValue < $1.rawValue } == [.audio, .video])
        await publisher.close()
        await viewer.close()
        await sfu.shutdown()
    }

    @Test("an offer with no codec the server takes gets 4002 with the reason, and the connection stays usable")
    func noSupportedCodec() async throws {
        let sfu = try await makeSFU()
        let client = TestClient(uid: "h264", sfu: sfu, group: Self.group)
        guard case .joined? = try await client.join(channel: "web", token: testToken(uid: "h264", channel: "web")) else {
            Issue.record("no join: \(client.messages)")
            return
        }
        // Chromium's camera offer with VP8 and Opus taken out.
        var offer = try SessionDescription(parsing: try Self.offer("chromium-camera.sdp"))
        for index in offer.media.indices {
            let drop = Set(offer.media[index].rtpMaps.filter { ["vp8", "opus"].contains($0.encoding.lowercased()) }.map(\.payloadType))
            offer.media[index].mediaLine.formats.removeAll { UInt8($0).map(drop.contains) ?? false }
            offer.media[index].lines.removeAll { line in
                guard let value = line.attribute?.value, ["rtpmap", "fmtp", "rtcp-fb"].contains(line.attribute?.name ?? "") else { return false }
                return value.split(separator: " ").first.flatMap { UInt8($0) }.map(drop.contains) ?? false
            }
        }
        let refused = try await client.publish(offerText: offer.serialized)
        guard case .error(let error)? = refused else {
            Issue.record("expected 4002, got \(String(describing: refused))")
            return
        }
        #expect(error.code == .negotiationFailed)
        #expect(error.reason.contains("no VP8") && error.reason.contains("no opus") && error.reason.contains("H264"), "\(error.reason)")
        // Still joined: a good offer on the same connection is answered.
        let answered = try await client.publish(offerText: try Self.offer("chromium-camera.sdp"))
        guard case .answer? = answered else {
            Issue.record("the connection did not stay usable: \(String(describing: answered))")
            return
        }
        await client.close()
        await sfu.shutdown()
    }

    @Test("a re-offer that stops the BUNDLE-tagged section with a new transport (new ICE and DTLS, as Chromium makes one) connects anew and media flows")
    func newTransportOnNewBundleTag() async throws {
        let sfu = try await makeSFU()
        let original = try Self.offer("chromium-camera.sdp")
        let (publisher, viewer, _) = try await pair(sfu, offer: original)
        // Audio (mid 0, the tag) stopped: port 0, out of BUNDLE; video (mid 1) now tags a new transport.
        var reoffer = try SessionDescription(parsing: original)
        reoffer.media[0].mediaLine.port = "0"
        reoffer.sessionLines = reoffer.sessionLines.map { line in
            line.attribute?.name == "group" ? .attribute("group", "BUNDLE 1") : line
        }
        guard case .answer(let answer)? = try await publisher.publish(offerText: reoffer.serialized) else {
            Issue.record("no answer to the re-offer: \(String(describing: publisher.messages.last))")
            return
        }
        let parsed = try SessionDescription(parsing: answer.sdp)
        #expect(parsed.media[0].mediaLine.port == "0" && parsed.bundleGroups == [["1"]])
        #expect(await eventually { try await publisher.publisher?.state.get() == .connected }, "the new transport did not connect")
        let videoSSRC: UInt32 = 3_849_474_508
        #expect(await eventually { viewer.subscribedSSRCs.withLockedValue { $0.count } >= 1 })
        #expect(await eventually { try await viewer.subscriber.withLockedValue { $0 }?.state.get() == .connected })
        let infos = try await sfu.participants(in: "web").get()
        let trackSid = try #require(infos.first { $0.uid == "browser" }?.tracks.first { $0.kind == .video }?.sid)
        let viewerSSRC = try #require(viewer.subscribedSSRCs.withLockedValue { $0[trackSid] })
        publisher.sendRTP(ssrc: videoSSRC, count: 30)
        #expect(await eventually { viewer.receivedCount(ssrc: viewerSSRC) == 30 })
        await publisher.close()
        await viewer.close()
        await sfu.shutdown()
    }

    /// A VP8 payload: descriptor with a 15-bit picture id and a frame, a keyframe header of the size when `keyframe`.
    static func vp8(keyframe: Bool, pictureID: UInt16, width: Int, height: Int) -> ByteBuffer {
        var bytes: [UInt8] = [0x90, 0x80, 0x80 | UInt8(pictureID >> 8 & 0x7F), UInt8(pictureID & 0xFF)]
        if keyframe {
            bytes += [0x10, 0x02, 0x00, 0x9D, 0x01, 0x2A, UInt8(width & 0xFF), UInt8(width >> 8), UInt8(height & 0xFF), UInt8(height >> 8)]
        } else {
            bytes += [0x11, 0x02, 0x00]
        }
        return ByteBuffer(bytes: bytes + [UInt8](repeating: 0x55, count: 100))
    }
}
