import NIOCore
import NIOPosix
@testable import RTCServer
import RTCTransport
import Signaling
import TestKit
import Testing

@Suite("Shards: rooms spread over event loops, each with its own media port", .serialized)
struct ShardingTests {
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)

    func start(threads: Int = 2, maxParticipants: Int? = nil) async throws -> ShardedSFU {
        var configuration = ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: "test-secret")
        configuration.mediaThreads = threads
        if let maxParticipants { configuration.limits.maxParticipants = maxParticipants }
        return try await ShardedSFU.start(configuration: configuration, group: Self.group)
    }

    /// Thread IDs would be better, but a loop is a loop: each shard must be on its own.
    @Test("two shards run on two loops with two media ports, and sids carry their shard")
    func shardsAreDistinct() async throws {
        let sfu = try await start()
        #expect(sfu.shards.count == 2)
        #expect(sfu.shards[0].loop !== sfu.shards[1].loop)
        #expect(Set(sfu.mediaAddresses.compactMap(\.port)).count == 2)
        let a = TestClient(uid: "a", sfu: sfu, group: Self.group), b = TestClient(uid: "b", sfu: sfu, group: Self.group)
        guard case .joined(let first)? = try await a.join(channel: "one", token: testToken(uid: "a", channel: "one")),
              case .joined(let second)? = try await b.join(channel: "two", token: testToken(uid: "b", channel: "two")) else {
            Issue.record("joins failed: \(a.messages) \(b.messages)")
            return
        }
        #expect(first.participant.sid != second.participant.sid)
        #expect(first.participant.sid.hasPrefix("PA_0x") && second.participant.sid.hasPrefix("PA_1x"), "\(first.participant.sid) \(second.participant.sid)")
        await sfu.shutdown()
    }

    @Test("two rooms land on two shards; each room's media flows through its own shard's port, and a later join follows its room")
    func roomsSpreadAndMediaFlows() async throws {
        let sfu = try await start()
        var rooms: [(publisher: TestClient, viewer: TestClient)] = []
        for room in ["left", "right"] {
            let publisher = TestClient(uid: "pub-\(room)", sfu: sfu, group: Self.group)
            let viewer = TestClient(uid: "view-\(room)", sfu: sfu, group: Self.group)
            guard case .joined? = try await publisher.join(channel: room, token: testToken(uid: "pub-\(room)", channel: room)),
                  case .joined? = try await viewer.join(channel: room, token: testToken(uid: "view-\(room)", channel: room)) else {
                Issue.record("joins failed in \(room)")
                return
            }
            rooms.append((publisher, viewer))
        }
        #expect(sfu.shard(of: "left") == 0 && sfu.shard(of: "right") == 1)
        #expect(sfu.participantsPerShard == [2, 2])
        for (index, room) in rooms.enumerated() {
            guard case .answer(let answer)? = try await room.publisher.publish([MediaSectionDescription(mid: "0", kind: .video, direction: .sendonly,
                                                                                                      ssrc: 0x500, trackID: "cam")]) else {
                Issue.record("no answer")
                return
            }
            // The answer offers the room's shard's port, not the other one's.
            let candidates = try SessionDescription(parsing: answer.sdp).transportParameters(offererRole: .client).candidates
            #expect(candidates.allSatisfy { $0.port == sfu.mediaAddresses[index].port }, "\(candidates)")
            #expect(await eventually { room.viewer.subscribedSSRCs.withLockedValue { $0.count } == 1 })
            #expect(await eventually { try await room.viewer.subscriber.withLockedValue { $0 }?.state.get() == .connected })
        }
        try await Task.sleep(for: .milliseconds(200))
        for room in rooms { room.publisher.sendRTP(ssrc: 0x500, count: 40) }
        for room in rooms {
            let ssrc = room.viewer.subscribedSSRCs.withLockedValue { $0.values.first }
            #expect(await eventually { room.viewer.receivedCount(ssrc: ssrc) == 40 })
        }
        let perShard = try await sfu.shardCounters.get()
        #expect(perShard.allSatisfy { $0.packetsOut >= 40 }, "\(perShard.map(\.packetsOut))")
        #expect(try await sfu.counterSnapshot.get().packetsOut == perShard.reduce(0) { $0 + $1.packetsOut })
        // A third participant of "right" goes where "right" is, though shard 0 is now as loaded.
        let late = TestClient(uid: "late", sfu: sfu, group: Self.group)
        guard case .joined(let joined)? = try await late.join(channel: "right", token: testToken(uid: "late", channel: "right")) else {
            Issue.record("late join failed")
            return
        }
        #expect(joined.others.map(\.uid).sorted() == ["pub-right", "view-right"])
        #expect(sfu.participantsPerShard == [2, 3])
        await sfu.shutdown()
    }

    @Test("an emptied room is forgotten, and its next join is placed again; a refused join leaves no place behind")
    func placesAreForgotten() async throws {
        let sfu = try await start()
        let a = TestClient(uid: "a", sfu: sfu, group: Self.group)
        _ = try await a.join(channel: "gone", token: testToken(uid: "a", channel: "gone"))
        #expect(sfu.shard(of: "gone") == 0)
        a.send(.leave(reason: .clientRequest))
        #expect(await eventually { sfu.shard(of: "gone") == nil })
        let bad = TestClient(uid: "b", sfu: sfu, group: Self.group)
        guard case .error? = try await bad.join(channel: "never", token: "not-a-token") else {
            Issue.record("a bad token joined")
            return
        }
        #expect(await eventually { sfu.shard(of: "never") == nil })
        await sfu.shutdown()
    }

    @Test("a resume is checked token first: a forged token is tokenInvalid whether or not the session exists (nothing learnt about sessions); a good token for no session is resumeFailed")
    func forgedResume() async throws {
        let sfu = try await start()
        let client = TestClient(uid: "v", sfu: sfu, group: Self.group)
        guard case .joined(let joined)? = try await client.join(channel: "kept", token: testToken(uid: "v", channel: "kept")) else {
            Issue.record("join failed")
            return
        }
        sfu.disconnected(client.peer)
        var codes: [String: SignalingError.Code] = [:]
        for (name, token, sid) in [("forged, live session", testToken(uid: "v", channel: "kept", secret: "not-the-secret"), joined.participant.sid),
                                   ("forged, no session", testToken(uid: "v", channel: "kept", secret: "not-the-secret"), "PA_nope"),
                                   ("good token, no session", testToken(uid: "v", channel: "kept"), "PA_nope")] {
            let probe = TestClient(uid: "v", sfu: sfu, group: Self.group)
            let id = probe.send(.resume(ResumeRequest(token: token, participantSid: sid)))
            if case .error(let error)? = try await probe.reply(to: id) { codes[name] = error.code }
        }
        #expect(codes == ["forged, live session": .tokenInvalid, "forged, no session": .tokenInvalid, "good token, no session": .resumeFailed],
                "\(codes)")
        await sfu.shutdown()
    }

    @Test("a resume on a new connection reaches the shard its room is on")
    func resumeFollowsRoom() async throws {
        let sfu = try await start()
        let filler = TestClient(uid: "f", sfu: sfu, group: Self.group)
        _ = try await filler.join(channel: "first", token: testToken(uid: "f", channel: "first"))
        let client = TestClient(uid: "r", sfu: sfu, group: Self.group)
        guard case .joined(let joined)? = try await client.join(channel: "second", token: testToken(uid: "r", channel: "second")) else {
            Issue.record("join failed")
            return
        }
        #expect(sfu.shard(of: "second") == 1)
        sfu.disconnected(client.peer)
        let again = TestClient(uid: "r", sfu: sfu, group: Self.group)
        let id = again.send(.resume(ResumeRequest(token: testToken(uid: "r", channel: "second"), participantSid: joined.participant.sid)))
        guard case .resumed(let resumed)? = try await again.reply(to: id) else {
            Issue.record("resume refused: \(again.messages)")
            return
        }
        #expect(resumed.participant.sid == joined.participant.sid)
        guard case .pong? = try await again.reply(to: again.send(.ping(timestamp: 1))) else { Issue.record("no pong after resume"); return }
        await sfu.shutdown()
    }

    @Test("maxParticipants bounds the whole server, whichever shards the rooms are on")
    func serverWideLimit() async throws {
        let sfu = try await start(maxParticipants: 2)
        for (uid, room) in [("a", "x"), ("b", "y")] {
            let client = TestClient(uid: uid, sfu: sfu, group: Self.group)
            guard case .joined? = try await client.join(channel: room, token: testToken(uid: uid, channel: room)) else {
                Issue.record("\(uid) did not join")
                return
            }
        }
        #expect(sfu.participantsPerShard == [1, 1])
        let third = TestClient(uid: "c", sfu: sfu, group: Self.group)
        guard case .error(let error)? = try await third.join(channel: "z", token: testToken(uid: "c", channel: "z")) else {
            Issue.record("the third joined a full server")
            return
        }
        #expect(error.code == .limitExceeded)
        await sfu.shutdown()
    }

    @Test("placement: least loaded by participants plus joins on their way; a place stays while a join is pending",
          arguments: [
              // (load per shard, rooms placed before, expected shard)
              ([0, 0], 0, 0), ([3, 0], 0, 1), ([0, 0], 1, 1), ([5, 5, 1], 0, 2),
          ])
    func placement(load: [Int], placedBefore: Int, expected: Int) {
        var router = ShardRouter(shards: load.count)
        var fake = 1000
        func peer() -> ObjectIdentifier { fake += 1; return ObjectIdentifier(FakePeer.make(fake)) }
        for index in 0..<placedBefore { _ = router.route(peer(), channel: "before\(index)", placing: true, load: load) }
        #expect(router.route(peer(), channel: "new", placing: true, load: load) == expected)
        // Dropped while a join is on its way: kept; the join then finds no room (refused): forgotten.
        router.roomDropped("new", shard: expected)
        #expect(router.placed("new") == expected)
        router.joinHandled("new", shard: expected, roomExists: false)
        #expect(router.placed("new") == nil)
    }
}

/// Distinct objects to take identifiers of.
private final class FakePeer {
    nonisolated(unsafe) static var kept: [FakePeer] = []
    static func make(_ tag: Int) -> FakePeer {
        let peer = FakePeer()
        kept.append(peer)
        return peer
    }
}
