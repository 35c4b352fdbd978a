import Foundation
import NIOCore
import NIOPosix
import RTCTestSupport
import Signaling
import Testing

@Suite("Signaling client: resuming against a server that answers and closes", .serialized)
struct SignalingResumeTests {
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)

    /// Each refused resume closes the connection while the client waits to retry. That close
    /// must not start a second resume loop: loops that multiply flood the server (a cluster node
    /// refused hundreds of connections from one viewer while a dead owner's heartbeat expired).
    @Test("a resume answered with an error and a close is retried by one loop, every 250 ms, until the window ends")
    func oneResumeLoop() async throws {
        // It answers `join`, then drops the connection; every `resume` gets `internalError` and a
        // close, as a node answers whose room's owner just died (its relay to the owner is refused).
        let server = try await ScriptedSignalingServer(group: Self.group) { request in
            switch request.message {
            case .join(let join):
                let me = ParticipantInfo(uid: join.uid, sid: "PA_1", role: join.role, kind: .normal)
                return .init(reply: .joined(JoinResponse(participant: me, others: [], pingInterval: 30, resumeWindow: 3)), closeAfter: .milliseconds(200))
            case .resume:
                return .init(reply: .error(SignalingError(.internalError, "the room's node A cannot be reached", requestID: request.requestID)),
                             closeAfter: .zero)
            default:
                return .init(reply: nil)
            }
        }
        let client = try SignalingClient(url: server.url, group: Self.group)
        try await client.connect()
        guard case .joined = try await client.request(.join(JoinRequest(token: "t", channel: "c", uid: "2001", role: .audience))) else {
            Issue.record("no joined reply")
            return
        }
        // The server drops the joined connection: the client resumes for the 3 s window, refused each time.
        var events: [SignalingConnectionEvent] = []
        for await event in client.connectionEvents { events.append(event) }
        let connections = server.accepted
        await server.stop()
        print("signaling resume: \(connections) connections to a server refusing resumes over a 3 s window")
        // One loop: the join's connection, then one attempt per 250 ms pause over 3 s (12), with slack.
        #expect(events == [.lost], "\(events)")
        #expect(connections >= 6 && connections <= 16, "\(connections) connections in a 3 s resume window")
        #expect(await client.resumes == 0)
    }
}
