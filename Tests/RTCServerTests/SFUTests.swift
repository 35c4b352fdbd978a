import Foundation
import NIOCore
import NIOPosix
import RTCServer
import RTCTransport
import Signaling
import TestKit
import Testing

@Suite("SFU: rooms, publishing, subscribing and forwarding", .serialized)
struct SFUTests {
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)

    func makeSFU() async throws -> SFU {
        try await SFU.start(configuration: ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: "test-secret"), group: Self.group)
    }

    static let video = MediaSectionDescription(mid: "0", kind: .video, direction: .sendonly, ssrc: 0xA0, trackID: "cam")
    static func video(_ ssrc: UInt32) -> MediaSectionDescription {
        MediaSectionDescription(mid: "0", kind: .video, direction: .sendonly, ssrc: ssrc, trackID: "video-\(ssrc)")
    }

    @Test("three participants publish and subscribe; each receives exactly the others' packets, in order, and decrypted")
    func threeParticipants() async throws {
        let sfu = try await makeSFU()
        let names = ["alice", "bob", "carol"]
        var clients: [TestClient] = []
        for name in names {
            let client = TestClient(uid: name, sfu: sfu, group: Self.group)
            guard case .joined? = try await client.join(channel: "room", token: testToken(uid: name)) else {
                Issue.record("\(name) did not join: \(client.messages)")
                return
            }
            clients.append(client)
        }
        for (index, client) in clients.enumerated() {
            let answer = try await client.publish([Self.video(UInt32(0x100 + index))])
            guard case .answer? = answer else { Issue.record("no answer: \(String(describing: answer))"); return }
        }
        // Each subscriber transport connects and has the other two tracks.
        for client in clients {
            #expect(await eventually { client.subscribedSSRCs.withLockedValue { $0.count } == 2 })
            #expect(await eventually { try await client.subscriber.withLockedValue { $0 }?.state.get() == .connected })
        }
        try await Task.sleep(nanoseconds: 200_000_000)
        // The server names tracks itself; subscribers find them by that sid in the offers' msid.
        let infos = try await sfu.participants(in: "room").get()
        let trackSid = Dictionary(uniqueKeysWithValues: infos.map { ($0.uid, $0.tracks.first?.sid ?? "") })
        for (index, client) in clients.enumerated() { client.sendRTP(ssrc: UInt32(0x100 + index), count: 50) }
        for (index, client) in clients.enumerated() {
            for (other, _) in clients.enumerated() where other != index {
                let ssrc = client.subscribedSSRCs.withLockedValue { $0[trackSid[names[other]]!] }
                #expect(await eventually { client.receivedCount(ssrc: ssrc) == 50 }, "\(names[index]) from \(names[other])")
                let sequences = client.received.withLockedValue { $0[ssrc!] ?? [] }
                // Rewritten: not the publisher's numbers, but consecutive and in order.
                #expect(zip(sequences, sequences.dropFirst()).allSatisfy { $1 == $0 &+ 1 })
                #expect(ssrc != UInt32(0x100 + other))
            }
            #expect(client.received.withLockedValue { $0.count } == 2)  // nothing of its own comes back
        }
        // Mute bob: his packets stop reaching the others; unmute and they flow again.
        let bobTrack = try #require(try await sfu.participants(in: "room").get().first { $0.uid == "bob" }?.tracks.first)
        // Each request below is known handled before RTP is sent (the server's view shows it), not
        // only slept on: on a loaded machine the server's loop may come to it late.
        clients[1].send(.mute(MuteRequest(trackSid: bobTrack.sid, muted: true)))
        #expect(await eventually { try await sfu.participants(in: "room").get().first { $0.uid == "bob" }?.tracks.first?.muted == true })
        try await Task.sleep(nanoseconds: 100_000_000)
        clients[1].sendRTP(ssrc: 0x101, count: 10, startingAt: 50)
        try await Task.sleep(nanoseconds: 300_000_000)
        let bobAtAlice = clients[0].subscribedSSRCs.withLockedValue { $0[bobTrack.sid] }
        #expect(clients[0].receivedCount(ssrc: bobAtAlice) == 50)
        clients[1].send(.mute(MuteRequest(trackSid: bobTrack.sid, muted: false)))
        #expect(await eventually { try await sfu.participants(in: "room").get().first { $0.uid == "bob" }?.tracks.first?.muted == false })
        try await Task.sleep(nanoseconds: 100_000_000)
        clients[1].sendRTP(ssrc: 0x101, count: 10, startingAt: 60)
        #expect(await eventually { clients[0].receivedCount(ssrc: bobAtAlice) == 60 })
        // Carol unsubscribes from bob: she stops receiving him; alice still does.
        let bobAtCarol = clients[2].subscribedSSRCs.withLockedValue { $0[bobTrack.sid] }
        #expect(await eventually { clients[2].receivedCount(ssrc: bobAtCarol) == 60 })  // all in before she unsubscribes
        let carolBefore = clients[2].receivedCount(ssrc: bobAtCarol)
        clients[2].send(.updateSubscription(SubscriptionUpdate(trackSids: [bobTrack.sid], subscribe: false)))
        _ = try await sfu.participants(in: "room").get()  // runs on the server's loop after the request
        try await Task.sleep(nanoseconds: 300_000_000)
        clients[1].sendRTP(ssrc: 0x101, count: 10, startingAt: 70)
        #expect(await eventually { clients[0].receivedCount(ssrc: bobAtAlice) == 70 })
        #expect(clients[2].receivedCount(ssrc: bobAtCarol) == carolBefore && carolBefore == 60)
        // Alice leaves: the others are told, and the room shrinks.
        clients[0].send(.leave(reason: .clientRequest))
        #expect(await eventually { clients[1].messages.contains { $0.message == .participantLeft(uid: "alice", reason: .clientRequest) } })
        #expect(try await sfu.participants(in: "room").get().map(\.uid) == ["bob", "carol"])
        // Publishers get transport-wide CC feedback covering what they sent, and receiver reports.
        #expect(await eventually {
            let feedback = clients[1].publisherRTCP.withLockedValue { $0 }.compactMap { packet -> TransportFeedback? in
                if case .transportFeedback(let feedback) = packet { return feedback }
                return nil
            }
            return feedback.flatMap(\.packets).filter { $0.status != .notReceived }.count >= 70
        })
        #expect(await eventually {
            clients[1].publisherRTCP.withLockedValue { $0 }.contains { packet in
                if case .receiverReport(let report) = packet { return report.reports.contains { $0.ssrc == 0x101 } }
                return false
            }
        })
        let counters = try await sfu.counterSnapshot.get()
        #expect(counters.packetsIn >= 170 && counters.packetsOut >= 300 && counters.keyframeRequestsForwarded > 0)
        for client in clients { await client.close() }
        await sfu.shutdown()
    }

    @Test("an audience member cannot publish")
    func audience() async throws {
        let sfu = try await makeSFU()
        let viewer = TestClient(uid: "viewer", sfu: sfu, group: Self.group)
        _ = try await viewer.join(channel: "room", token: testToken(uid: "viewer"), role: .audience)
        let id = viewer.send(.publishTrack(PublishTrackRequest(kind: .video, source: .camera)))
        guard case .error(let error)? = try await viewer.reply(to: id) else { Issue.record("publishTrack was accepted"); return }
        #expect(error.code == .permissionDenied)
        let answer = try await viewer.publish([Self.video(7)])
        guard case .error(let offerError)? = answer else { Issue.record("offer with a send section was accepted"); return }
        #expect(offerError.code == .permissionDenied)
        #expect(try await sfu.participants(in: "room").get().first?.tracks.isEmpty == true)
        await viewer.close()
        await sfu.shutdown()
    }

    @Test("publishTrack after the offer names the offered track's source: one track, not a second one without media")
    func publishTrackAfterOffer() async throws {
        let sfu = try await makeSFU()
        let client = TestClient(uid: "late", sfu: sfu, group: Self.group)
        _ = try await client.join(channel: "room", token: testToken(uid: "late"))
        guard case .answer? = try await client.publish([Self.video(0xC0)]) else { Issue.record("no answer: \(client.messages)"); return }
        let offered = try #require(try await sfu.participants(in: "room").get().first?.tracks.first)
        #expect(offered.source == .camera)
        let id = client.send(.publishTrack(PublishTrackRequest(kind: .video, source: .screen, mid: "0")))
        guard case .trackPublished(let info)? = try await client.reply(to: id) else { Issue.record("\(client.messages)"); return }
        #expect(info.sid == offered.sid && info.source == .screen)
        let tracks = try #require(try await sfu.participants(in: "room").get().first?.tracks)
        #expect(tracks.map(\.sid) == [offered.sid] && tracks.first?.source == .screen)
    }

    @Test("a _sub participant is reported with its owner, hidden from the owner, and removed when the owner leaves")
    func screenShare() async throws {
        let sfu = try await makeSFU()
        let host = TestClient(uid: "1001", sfu: sfu, group: Self.group)
        let viewer = TestClient(uid: "2002", sfu: sfu, group: Self.group)
        let share = TestClient(uid: "1001_sub", sfu: sfu, group: Self.group)
        _ = try await host.join(channel: "room", token: testToken(uid: "1001"))
        _ = try await viewer.join(channel: "room", token: testToken(uid: "2002"))
        guard case .joined(let joined)? = try await share.join(channel: "room", token: testToken(uid: "1001_sub"), autoSubscribe: false) else {
            Issue.record("share did not join")
            return
        }
        #expect(joined.participant.kind == .screenShare(owner: "1001"))
        _ = try await share.publish([MediaSectionDescription(mid: "0", kind: .video, direction: .sendonly, ssrc: 0x5C, trackID: "screen")])
        // The viewer sees the share and its screen track; the owner does not.
        #expect(await eventually {
            viewer.messages.contains { envelope in
                guard case .participantUpdate(let list) = envelope.message else { return false }
                return list.contains { $0.uid == "1001_sub" && $0.kind == .screenShare(owner: "1001") && $0.tracks.first?.source == .screen }
            }
        })
        #expect(await eventually { viewer.subscribedSSRCs.withLockedValue { $0.count } == 1 })
        #expect(!host.messages.contains { envelope in
            if case .participantUpdate(let list) = envelope.message { return list.contains { $0.uid == "1001_sub" } }
            return false
        })
        #expect(host.subscribedSSRCs.withLockedValue { $0.isEmpty })
        // The owner leaves: the share is told and removed.
        host.send(.leave(reason: .clientRequest))
        #expect(await eventually { share.messages.contains { $0.message == .leave(reason: .ownerLeft) } })
        #expect(await eventually { viewer.messages.contains { $0.message == .participantLeft(uid: "1001_sub", reason: .ownerLeft) } })
        #expect(share.peer.closed.withLockedValue { $0 })
        #expect(try await sfu.participants(in: "room").get().map(\.uid) == ["2002"])
        for client in [host, viewer, share] { await client.close() }
        await sfu.shutdown()
    }

    @Test("tokens: missing, forged, expired, wrong channel and wrong uid are each refused with their code", arguments: [
        ("", SignalingError.Code.tokenMissing),
        ("forged", .tokenInvalid),
        ("expired", .tokenExpired),
        ("channel", .tokenWrongChannel),
        ("uid", .tokenWrongUID),
        ("nojoin", .permissionDenied),
    ])
    func tokens(kind: String, code: SignalingError.Code) async throws {
        let sfu = try await makeSFU()
        let client = TestClient(uid: "u1", sfu: sfu, group: Self.group)
        let now = Int64(Date().timeIntervalSince1970)
        let value: String = switch kind {
        case "": ""
        case "forged": testToken(uid: "u1", secret: "not-the-server-secret")
        case "expired": testToken(uid: "u1", ttl: 10, now: now - 100)
        case "channel": testToken(uid: "u1", channel: "other")
        case "uid": testToken(uid: "u2")
        default: testToken(uid: "u1", grants: TokenGrants(join: false))
        }
        guard case .error(let error)? = try await client.join(channel: "room", token: value) else { Issue.record("joined"); return }
        #expect(error.code == code)
        await sfu.shutdown()
    }

    @Test("bad input is answered or dropped and counted, and forwarding keeps going")
    func badInput() async throws {
        let sfu = try await makeSFU()
        let alice = TestClient(uid: "alice", sfu: sfu, group: Self.group)
        let bob = TestClient(uid: "bob", sfu: sfu, group: Self.group)
        let stranger = TestClient(uid: "stranger", sfu: sfu, group: Self.group)
        _ = try await alice.join(channel: "room", token: testToken(uid: "alice"))
        _ = try await bob.join(channel: "room", token: testToken(uid: "bob"))
        _ = try await alice.publish([Self.video(0xAA)])
        let ssrc = try #require(await eventually { bob.subscribedSSRCs.withLockedValue { $0.count } == 1 } ? bob.subscribedSSRCs.withLockedValue { $0.values.first } : nil)
        _ = await eventually { try await bob.subscriber.withLockedValue { $0 }?.state.get() == .connected }
        // Before join, malformed JSON, an unknown type, an oversized message.
        stranger.send(.ping(timestamp: 1))
        stranger.send(.mute(MuteRequest(trackSid: "x", muted: true)))
        bob.sendRaw(Array("{not json".utf8))
        bob.sendRaw(Array(#"{"v":"1.0","id":5,"type":"teleport","payload":{}}"#.utf8))
        bob.sendRaw([UInt8](repeating: 0x20, count: 70_000))
        // And a flood of random datagrams at the media port.
        let flood = try await DatagramBootstrap(group: Self.group).bind(host: "127.0.0.1", port: 0).get()
        let target = try #require(sfu.mediaAddress)
        var random = SystemRandomNumberGenerator()
        for index in 0..<500 {
            let junk = (0..<Int.random(in: 1...200, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            flood.write(AddressedEnvelope(remoteAddress: target, data: ByteBuffer(bytes: junk)), promise: nil)
            if index % 50 == 0 { flood.flush() }
        }
        flood.flush()
        alice.sendRTP(ssrc: 0xAA, count: 100)
        #expect(await eventually { bob.receivedCount(ssrc: ssrc) == 100 })
        let codes = bob.messages.compactMap { envelope -> Int? in
            if case .error(let error) = envelope.message { return error.code.rawValue }
            return nil
        }
        #expect(codes.contains(1001) && codes.contains(1002) && codes.contains(1003))
        #expect(stranger.messages.contains { $0.message == .pong(timestamp: 1) })
        #expect(stranger.messages.contains { if case .error(let error) = $0.message { return error.code == .notJoined }; return false })
        #expect(try await sfu.port.unroutableDatagrams.get() >= 400)
        #expect(try await sfu.counterSnapshot.get().signalingErrors >= 4)
        try await flood.close()
        for client in [alice, bob] { await client.close() }
        await sfu.shutdown()
    }
}

@Suite("SFU: RTCP termination and token lifetime", .serialized)
struct SFURTCPTests {
    /// A server with two joined clients in "room".
    static func publisherAndViewer() async throws -> (SFU, TestClient, TestClient) {
        let sfu = try await SFU.start(configuration: ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: "test-secret"),
                                      group: SFUTests.group)
        let publisher = TestClient(uid: "pub", sfu: sfu, group: SFUTests.group)
        let viewer = TestClient(uid: "view", sfu: sfu, group: SFUTests.group)
        _ = try await publisher.join(channel: "room", token: testToken(uid: "pub"))
        _ = try await viewer.join(channel: "room", token: testToken(uid: "view"))
        return (sfu, publisher, viewer)
    }

    @Test("NACKs are answered from the packet cache; PLIs go upstream at most once per 500 ms per track, the rest coalesced")
    func nackAndPLI() async throws {
        let (sfu, publisher, viewer) = try await Self.publisherAndViewer()
        _ = try await publisher.publish([SFUTests.video(0xB0)])
        #expect(await eventually { viewer.subscribedSSRCs.withLockedValue { $0.count } == 1 })
        #expect(await eventually { try await viewer.subscriber.withLockedValue { $0 }?.state.get() == .connected })
        let ssrc = try #require(viewer.subscribedSSRCs.withLockedValue { $0.values.first })
        try await Task.sleep(nanoseconds: 600_000_000)  // past the keyframe request made on subscribing
        publisher.sendRTP(ssrc: 0xB0, count: 20)
        #expect(await eventually { viewer.receivedCount(ssrc: ssrc) == 20 })
        let sequences = viewer.received.withLockedValue { $0[ssrc] ?? [] }
        let before = try await sfu.counterSnapshot.get()
        let transport = try #require(viewer.subscriber.withLockedValue { $0 })
        transport.sendRTCP(RTCPPacket.serializeCompound([
            .receiverReport(ReceiverReport(ssrc: 1)),
            .nack(GenericNACK(senderSSRC: 1, mediaSSRC: ssrc, lost: [sequences[3], sequences[4], sequences[10]])),
        ]))
        // The viewer's answer kept the rtx format: the repairs come on its RFC 4588 stream, the
        // original (rewritten) sequence numbers inside.
        #expect(await eventually { viewer.repaired.withLockedValue { $0[ssrc] ?? [] } == [sequences[3], sequences[4], sequences[10]] })
        for _ in 0..<5 {
            transport.sendRTCP(RTCPPacket.serializeCompound([
                .receiverReport(ReceiverReport(ssrc: 1)), .pictureLossIndication(PictureLossIndication(senderSSRC: 1, mediaSSRC: ssrc)),
            ]))
        }
        #expect(await eventually {
            let now = try await sfu.counterSnapshot.get()
            return now.retransmissions - before.retransmissions == 3
                && now.keyframeRequestsForwarded + now.keyframeRequestsThrottled - before.keyframeRequestsForwarded - before.keyframeRequestsThrottled == 5
        })
        let after = try await sfu.counterSnapshot.get()
        #expect(after.nacksReceived - before.nacksReceived == 1)
        #expect(after.keyframeRequestsForwarded - before.keyframeRequestsForwarded == 1)
        #expect(after.keyframeRequestsThrottled - before.keyframeRequestsThrottled == 4)
        // The throttled four coalesce into one request when the window ends (500 ms; waited for,
        // not slept through: a loaded machine runs the window's timer late).
        #expect(await eventually { try await sfu.counterSnapshot.get().keyframeRequestsForwarded - before.keyframeRequestsForwarded == 2 })
        #expect(await eventually {
            publisher.publisherRTCP.withLockedValue { $0 }.contains { packet in
                if case .pictureLossIndication(let pli) = packet { return pli.mediaSSRC == 0xB0 }
                return false
            }
        })
        await publisher.close()
        await viewer.close()
        await sfu.shutdown()
    }

    @Test("RFC 4588 from a publisher: a repair is forwarded as the original; a copy of what is here and padding are dropped, yet acknowledged in transport-wide feedback")
    func rtxFromPublisher() async throws {
        let (sfu, publisher, viewer) = try await Self.publisherAndViewer()
        var section = SFUTests.video(0xB0)
        section.rtxPayloadType = 97
        section.rtxSSRC = 0xB1
        guard case .answer(let answer)? = try await publisher.publish([section]) else { Issue.record("no answer"); return }
        #expect(try SessionDescription(parsing: answer.sdp).sections.first?.rtxPayloadType == 97)
        #expect(await eventually { try await viewer.subscriber.withLockedValue { $0 }?.state.get() == .connected })
        let ssrc = try #require(viewer.subscribedSSRCs.withLockedValue { $0.values.first })
        // 0...9 but 5.
        publisher.send((0..<10).filter { $0 != 5 }.map { TestClient.packet(ssrc: 0xB0, sequence: $0) })
        #expect(await eventually { viewer.receivedCount(ssrc: ssrc) == 9 })
        let before = try await sfu.counterSnapshot.get()
        let repair = RTXPacket.wrap(TestClient.packet(ssrc: 0xB0, sequence: 5), ssrc: 0xB1, payloadType: 97, sequenceNumber: 100)
        let copy = RTXPacket.wrap(TestClient.packet(ssrc: 0xB0, sequence: 6), ssrc: 0xB1, payloadType: 97, sequenceNumber: 101)
        let padding = RTPPacket(header: RTPHeader(payloadType: 97, sequenceNumber: 102, timestamp: 0, ssrc: 0xB1),
                                payload: ByteBuffer(), paddingLength: 200)
        let numbers = publisher.send([repair, copy, padding])
        #expect(await eventually { viewer.receivedCount(ssrc: ssrc) == 10 })
        #expect(await eventually {
            let now = try await sfu.counterSnapshot.get()
            return now.rtxRepairs - before.rtxRepairs == 1 && now.rtxDropped - before.rtxDropped == 2
        })
        // The repair arrives as packet 5 (sequence numbers map one to one on this fresh stream).
        let sequences = viewer.received.withLockedValue { $0[ssrc] ?? [] }
        #expect(sequences.count == 10 && Set(sequences).count == 10)
        #expect(try await sfu.counterSnapshot.get().packetsDropped == before.packetsDropped)
        // All three are acknowledged by the server's transport-wide feedback.
        #expect(await eventually {
            var acknowledged: Set<UInt16> = []
            for case .transportFeedback(let feedback) in publisher.publisherRTCP.withLockedValue({ $0 }) {
                for (offset, packet) in feedback.packets.enumerated() where packet.status != .notReceived {
                    acknowledged.insert(feedback.baseSequenceNumber &+ UInt16(truncatingIfNeeded: offset))
                }
            }
            return Set(numbers).isSubset(of: acknowledged)
        })
        await publisher.close()
        await viewer.close()
        await sfu.shutdown()
    }

    @Test("tokenWillExpire comes before expiry, refreshToken renews without leaving, and expiry removes the participant")
    func tokenLifetime() async throws {
        // Warn 58 s before expiry: a 60 s token is warned at the first housekeeping tick.
        let sfu = try await SFU.start(configuration: ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: "test-secret",
                                                                         tokenWarning: 58),
                                      group: SFUTests.group)
        let client = TestClient(uid: "t", sfu: sfu, group: SFUTests.group)
        _ = try await client.join(channel: "room", token: testToken(uid: "t", ttl: 60))
        #expect(await eventually(5) { client.messages.contains { if case .tokenWillExpire = $0.message { return true }; return false } })
        let id = client.send(.refreshToken(token: testToken(uid: "t", ttl: 3600)))
        guard case .tokenRefreshed(let expiry)? = try await client.reply(to: id) else { Issue.record("no refresh"); return }
        #expect(expiry > Int64(Date().timeIntervalSince1970) + 3000)
        #expect(try await sfu.participants(in: "room").get().map(\.uid) == ["t"])
        // A refresh with a token for someone else is refused.
        let bad = client.send(.refreshToken(token: testToken(uid: "other")))
        guard case .error(let error)? = try await client.reply(to: bad) else { Issue.record("accepted"); return }
        #expect(error.code == .tokenWrongUID)
        // A short token expires: the participant is told and removed.
        let short = TestClient(uid: "short", sfu: sfu, group: SFUTests.group)
        _ = try await short.join(channel: "room", token: testToken(uid: "short", ttl: 2))
        #expect(await eventually(6) { short.messages.contains { $0.message == .leave(reason: .tokenExpired) } })
        #expect(try await sfu.participants(in: "room").get().map(\.uid) == ["t"])
        await sfu.shutdown()
    }
}
