import NIOConcurrencyHelpers
import NIOCore
import RTCServer
import Testing

/// `ProcessPlacer`: the front of `rtc-cli server --media-processes` placing rooms on itself and its
/// media processes, with no Redis.
@Suite("Media processes: room placement at the front")
struct ProcessPlacerTests {
    /// A placer over two media processes whose liveness, and this process's load and rooms, the test sets.
    final class World: Sendable {
        let alive = NIOLockedValueBox([true, true])
        let localLoad = NIOLockedValueBox(0)
        let localRooms = NIOLockedValueBox(Set<String>())
        func placer(forgetAfter: TimeAmount = .seconds(20), maxParticipants: Int = .max) -> ProcessPlacer {
            ProcessPlacer(workers: [.init(name: "media-1", signalingURL: "ws://127.0.0.1:1/rtc"), .init(name: "media-2", signalingURL: "ws://127.0.0.1:2/rtc")],
                          forgetAfter: forgetAfter, maxParticipants: maxParticipants, isAlive: { index in self.alive.withLockedValue { $0[index] } },
                          localLoad: { self.localLoad.withLockedValue { $0 } }, hasRoom: { room in self.localRooms.withLockedValue { $0.contains(room) } })
        }
    }

    static func name(_ placement: RoomPlacement) -> String {
        switch placement {
        case .local: "here"
        case .remote(let node, _): node
        case .refused: "refused"
        }
    }

    @Test("--max-participants bounds the server over its processes: participants here and relayed connections together; a released one frees a place")
    func wholeServerBound() async {
        let world = World()
        let placer = world.placer(maxParticipants: 4)
        world.localRooms.withLockedValue { _ = $0.insert("a") }
        world.localLoad.withLockedValue { $0 = 2 }
        let b = await placer.place("b"), c = await placer.place("c")
        #expect([b, c].map(Self.name) == ["media-1", "media-2"])
        // 2 here and 2 relayed: full, for a room here as for a new one or one on a media process.
        for room in ["a", "b", "d"] {
            guard case .refused(let reason) = await placer.place(room) else {
                Issue.record("\(room) placed on a full server")
                continue
            }
            #expect(reason.contains("full (4 participants"), "\(reason)")
        }
        placer.released("b", from: b)
        #expect(Self.name(await placer.place("b")) == "media-1", "a place freed by a relay that ended")
        world.localLoad.withLockedValue { $0 = 1 }
        #expect(Self.name(await placer.place("a")) == "here")
    }

    @Test("new rooms go to the least loaded (here first among equals); later joins follow their room")
    func leastLoadedAndFollowing() async {
        let world = World()
        let placer = world.placer()
        // Nobody anywhere: here (no relay).
        #expect(Self.name(await placer.place("a")) == "here")
        #expect(Self.name(await placer.place("a")) == "here", "a second join before the SFU has the room stays here")
        world.localRooms.withLockedValue { _ = $0.insert("a") }
        world.localLoad.withLockedValue { $0 = 2 }
        #expect(Self.name(await placer.place("b")) == "media-1")
        #expect(Self.name(await placer.place("c")) == "media-2")
        #expect(Self.name(await placer.place("b")) == "media-1", "b follows its room")
        #expect(Self.name(await placer.place("a")) == "here")
        #expect(placer.snapshot.load == [2, 1])
        #expect(placer.snapshot.rooms == ["b": 0, "c": 1])
    }

    @Test("a room whose relayed connections all ended is forgotten after the resume window; a dead process's rooms are placed again")
    func forgettingAndDeath() async throws {
        let world = World()
        world.localLoad.withLockedValue { $0 = 5 }
        let placer = world.placer(forgetAfter: .milliseconds(200))
        let first = await placer.place("r")
        #expect(Self.name(first) == "media-1")
        placer.released("r", from: first)
        #expect(placer.snapshot.load == [0, 0])
        // Within the window, a resume finds it where it was.
        #expect(Self.name(await placer.place("r")) == "media-1")
        placer.released("r", from: .remote(node: "media-1", signalingURL: ""))
        try await Task.sleep(for: .milliseconds(300))
        _ = await placer.place("other")  // placing prunes
        #expect(placer.snapshot.rooms["r"] == nil)

        // media-2 has "x"; it dies: "x" is placed again on a live one.
        #expect(Self.name(await placer.place("x")) == "media-2")
        world.alive.withLockedValue { $0[1] = false }
        #expect(Self.name(await placer.place("x")) == "media-1")
        // Nothing alive and a busy front: here anyway.
        world.alive.withLockedValue { $0 = [false, false] }
        #expect(Self.name(await placer.place("y")) == "here")
    }
}
