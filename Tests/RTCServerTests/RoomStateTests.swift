import Foundation
import NIOCore
import NIOPosix
@testable import RTCServer
import Signaling
import TestKit
import Testing

/// What a drain hands over (``RoomState``): its bytes, the `--state-file` that carries them to a
/// restarted server, and the rooms and participants that get their settings back from it.
@Suite("Room state across a drain")
struct RoomStateTests {
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)

    static let sample = RoomState(savedAt: 1_790_000_000, rooms: [
        "kept": RoomSettings(sid: "RM_abc", createdAt: 1_789_999_000, metadata: "{\"topic\":\"x\"}", maxParticipants: 3, emptyTimeout: 60,
                             requireEncryption: true,
                             participants: ["lk": SavedParticipant(name: "LK", metadata: "m", attributes: ["role": "host"])]),
    ])

    @Test("a state round-trips through its JSON, each field kept")
    func roundTrip() throws {
        #expect(try RoomState.decode(Self.sample.encoded()) == Self.sample)
    }

    @Test("bad state is refused with its reason, never a crash", arguments: [
        ("", "not a room state"),
        ("{\"version\":1}", "not a room state"),
        ("[1,2]", "not a room state"),
        ("{\"version\":2,\"savedAt\":0,\"rooms\":{}}", "version 2"),
        ("{\"version\":1,\"savedAt\":0,\"rooms\":{\"\":{\"sid\":\"s\",\"createdAt\":0,\"metadata\":\"\",\"maxParticipants\":0,\"emptyTimeout\":5,"
            + "\"requireEncryption\":false,\"waitingSince\":0,\"participants\":{}}}}", "a room named"),
        ("{\"version\":1,\"savedAt\":0,\"rooms\":{\"r\":{\"sid\":\"s\",\"createdAt\":0,\"metadata\":\"\",\"maxParticipants\":0,\"emptyTimeout\":-1,"
            + "\"requireEncryption\":false,\"waitingSince\":0,\"participants\":{}}}}", "empty timeout -1"),
    ])
    func refused(text: String, reason: String) {
        #expect {
            _ = try RoomState.decode(Data(text.utf8))
        } throws: { error in
            guard case .unreadable(let why) = error as? RoomStateError else { return false }
            return why.contains(reason)
        }
    }

    @Test("random bytes never decode to a state")
    func randomBytes() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<500 {
            let bytes = (0..<Int.random(in: 0..<200, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            #expect(throws: RoomStateError.self) { _ = try RoomState.decode(Data(bytes)) }
        }
    }

    @Test("the state file: saved, taken once (then gone); an unreadable one is moved aside for the operator, not lost")
    func stateFile() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("room-state-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let file = RoomStateFile(path: dir + "/state.json")
        #expect(try file.take() == nil)
        try file.save(Self.sample)
        #expect(try file.take() == Self.sample)
        #expect(try file.take() == nil, "taken once")
        try Data("garbage".utf8).write(to: URL(fileURLWithPath: file.path))
        #expect(throws: RoomStateError.self) { _ = try file.take() }
        #expect(!FileManager.default.fileExists(atPath: file.path))
        #expect((try? String(contentsOfFile: file.path + ".unreadable", encoding: .utf8)) == "garbage")
    }

    @Test("a drained server's rooms come back on the next: room metadata, the CreateRoom cap and encryption rule, and each participant's metadata and attributes as the API last set them")
    func handOver() async throws {
        let configuration = ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: "test-secret")
        let first = try await ShardedSFU.start(configuration: configuration, group: Self.group)
        _ = try await first.createRoom("capped", metadata: "waiting", maxParticipants: 1, emptyTimeout: 600, requireEncryption: true).get()
        let alice = TestClient(uid: "alice", sfu: first, group: Self.group), bob = TestClient(uid: "bob", sfu: first, group: Self.group)
        guard case .joined? = try await alice.join(channel: "live", token: testToken(uid: "alice", channel: "live")),
              case .joined? = try await bob.join(channel: "live", token: testToken(uid: "bob", channel: "live")) else {
            Issue.record("joins failed: \(alice.messages) \(bob.messages)")
            return
        }
        _ = try await first.updateRoomMetadata("live", metadata: "agenda").get()
        _ = try await first.updateParticipant("alice", in: "live", ParticipantChange(metadata: "presenter", attributes: ["hand": "up"])).get()
        let state = await first.roomState()
        await first.shutdown()
        #expect(Set(state.rooms.keys) == ["live", "capped"])
        #expect(state.rooms["live"]?.participants["alice"] == SavedParticipant(metadata: "presenter", attributes: ["hand": "up"]))

        // The next server, with the state taken up (through its bytes, as the file or Redis carries it).
        let next = try await ShardedSFU.start(configuration: configuration, group: Self.group)
        defer { Task { await next.shutdown() } }
        next.restore(try RoomState.decode(state.encoded()))
        let listed = try await next.listRooms().get()
        #expect(listed.map(\.name) == ["capped", "live"])
        #expect(listed.first { $0.name == "capped" }.map { ($0.metadata, $0.maxParticipants, $0.requireEncryption) } ?? ("", 0, false) == ("waiting", 1, true))
        #expect(listed.first { $0.name == "live" }?.sid == state.rooms["live"]?.sid, "the room keeps its sid")
        let back = TestClient(uid: "alice", sfu: next, group: Self.group)
        guard case .joined(let joined)? = try await back.join(channel: "live", token: testToken(uid: "alice", channel: "live")) else {
            Issue.record("rejoin failed: \(back.messages)")
            return
        }
        #expect(joined.roomMetadata == "agenda")
        #expect(joined.participant.metadata == "presenter" && joined.participant.attributes == ["hand": "up"], "\(joined.participant)")
        // The cap holds on the next server too.
        let one = TestClient(uid: "one", sfu: next, group: Self.group), two = TestClient(uid: "two", sfu: next, group: Self.group)
        guard case .joined? = try await one.join(channel: "capped", token: testToken(uid: "one", channel: "capped")) else {
            Issue.record("join to capped failed: \(one.messages)")
            return
        }
        let refused = try await two.join(channel: "capped", token: testToken(uid: "two", channel: "capped"))
        guard case .error(let error)? = refused else {
            Issue.record("a second join to a room capped at 1 was not refused: \(String(describing: refused))")
            return
        }
        #expect(error.code == .limitExceeded)
    }
}
