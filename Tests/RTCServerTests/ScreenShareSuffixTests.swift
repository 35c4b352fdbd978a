import Foundation
import NIOCore
import NIOPosix
import RTCConventions
import RTCServer
import RTCTransport
import Signaling
import TestKit
import Testing

@Suite("Screen-share uid convention with a configurable suffix", .serialized)
struct ScreenShareSuffixTests {
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)

    @Test("the rule under a suffix", arguments: [
        // suffix, uid, host (nil: not a share)
        ("_sub", "1001_sub", "1001" as String?),
        ("_sub", "_sub", nil),
        ("_sub", "1001", nil),
        ("-screen", "alice-screen", "alice"),
        ("-screen", "alice_sub", nil),
        ("-screen", "-screen", nil),
        ("", "anything", nil),
    ])
    func rule(suffix: String, uid: String, host: String?) {
        let rule = ScreenShareUID(suffix: suffix)
        #expect(rule.isScreenShare(uid) == (host != nil))
        #expect(rule.host(of: uid) == host)
        if let host, !suffix.isEmpty { #expect(rule.sharer(of: host) == uid) }
    }

    @Test("the static API is the standard suffix")
    func standard() {
        #expect(ScreenShareUID.standard == "_sub" && ScreenShareUID.suffix == "_sub" && ScreenShareUID().suffix == "_sub")
        #expect(ScreenShareUID.sharer(of: "7") == "7_sub" && ScreenShareUID.host(of: "7_sub") == "7")
        #expect(ScreenShareUID.isScreenShare("7_sub") && isScreenShareUID("7_sub") && !isScreenShareUID("7"))
    }

    @Test("a server configured with -screen hides <uid>-screen from its owner, tells clients the suffix, and treats _sub as a user")
    func configuredSuffix() async throws {
        let sfu = try await SFU.start(configuration: ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: "test-secret",
                                                                         screenShareSuffix: "-screen"), group: Self.group)
        let host = TestClient(uid: "alice", sfu: sfu, group: Self.group)
        let viewer = TestClient(uid: "bob", sfu: sfu, group: Self.group)
        let share = TestClient(uid: "alice-screen", sfu: sfu, group: Self.group)
        let other = TestClient(uid: "alice_sub", sfu: sfu, group: Self.group)
        guard case .joined(let hostJoined)? = try await host.join(channel: "room", token: testToken(uid: "alice")) else {
            Issue.record("host did not join")
            return
        }
        #expect(hostJoined.screenShareSuffix == "-screen")
        _ = try await viewer.join(channel: "room", token: testToken(uid: "bob"))
        guard case .joined(let joined)? = try await share.join(channel: "room", token: testToken(uid: "alice-screen"), autoSubscribe: false) else {
            Issue.record("share did not join")
            return
        }
        #expect(joined.participant.kind == .screenShare(owner: "alice"))
        guard case .joined(let otherJoined)? = try await other.join(channel: "room", token: testToken(uid: "alice_sub"), autoSubscribe: false) else {
            Issue.record("alice_sub did not join")
            return
        }
        #expect(otherJoined.participant.kind == .normal)
        // The viewer sees the share; the owner sees alice_sub but not its share.
        func listed(_ uid: String, to client: TestClient) -> Bool {
            client.messages.contains { envelope in
                guard case .participantUpdate(let list) = envelope.message else { return false }
                return list.contains { $0.uid == uid }
            }
        }
        #expect(await eventually { listed("alice-screen", to: viewer) && listed("alice_sub", to: host) })
        #expect(!listed("alice-screen", to: host))
        // The owner leaves: the share goes with it, alice_sub stays.
        host.send(.leave(reason: .clientRequest))
        #expect(await eventually { share.messages.contains { $0.message == .leave(reason: .ownerLeft) } })
        #expect(await eventually { try await sfu.participants(in: "room").get().map(\.uid) == ["alice_sub", "bob"] })
        for client in [host, viewer, share, other] { await client.close() }
        await sfu.shutdown()
    }

    @Test("shutting down a room of a host and its share, in either listing order, leaves both once and frees the room safely")
    func shutdownWithShare() async throws {
        // The share leaves with its owner; whichever of the two the shutdown visits second is gone
        // by then (and, with the room empty, so is the room). Several uids vary the listing order.
        for index in 0..<8 {
            let sfu = try await SFU.start(configuration: ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: "test-secret"),
                                          group: Self.group)
            let host = TestClient(uid: "host\(index)", sfu: sfu, group: Self.group)
            let share = TestClient(uid: "host\(index)_sub", sfu: sfu, group: Self.group)
            _ = try await host.join(channel: "room\(index)", token: testToken(uid: "host\(index)", channel: "room\(index)"))
            _ = try await share.join(channel: "room\(index)", token: testToken(uid: "host\(index)_sub", channel: "room\(index)"),
                                     autoSubscribe: false)
            await sfu.shutdown()
            let counters = try await sfu.counterSnapshot.get()
            #expect(counters.rooms == 0 && counters.participants == 0)
            await host.close()
            await share.close()
        }
    }
}
