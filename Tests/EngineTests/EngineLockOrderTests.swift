import Foundation
import NIOConcurrencyHelpers
@testable import RTCCore
import RTCTestSupport
import Testing

/// The engine's ownership rule (docs/architecture.md, "Threads"): no thread is joined while a lock
/// is held that the thread itself may take. Before the split, `setClientRole(.audience)` stopped
/// the video sender under the engine lock and waited for its encode thread, whose error path
/// takes the same lock to emit the error: a deadlock whenever an encode failed during the switch.
@Suite("RTCEngine lock order", .serialized)
struct EngineLockOrderTests {
    @Test("an encode error while switching to audience: the switch returns and the error is reported")
    func encodeErrorWhileBecomingAudience() async throws {
        let server = try await TestServer()
        let host = server.engine()
        let log = EventLog(host)
        try await host.enableVideo()
        try await host.join(token: testToken(uid: "1001", channel: "locks"), channel: "locks", uid: "1001")
        let sender = try #require(host.publisherForTesting?.videoSender)
        // The next frame's encode sleeps, then fails: the role switch lands while it is inside.
        let entered = NIOLockedValueBox(false)
        sender.beforeEncode.withLock {
            $0 = {
                entered.withLockedValue { $0 = true }
                usleep(300_000)
                throw CodecError(.invalidInput, "injected encode failure")
            }
        }
        let frame = try PatternGenerator(kind: .camera, size: VideoSize(width: 320, height: 240), frameRate: FrameRate(15)).frame(at: 0)
        #expect(host.pushVideoFrame(frame))
        #expect(await eventually(5) { entered.withLockedValue { $0 } }, "the encode thread is inside the failing encode")

        let switched = NIOLockedValueBox(false)
        let switching = Task {
            try await host.setClientRole(.audience)
            switched.withLockedValue { $0 = true }
        }
        // A deadlock never returns: give it far longer than the 300 ms the encode takes.
        let returned = await eventually(10) { switched.withLockedValue { $0 } }
        #expect(returned, "setClientRole(.audience) returned while the encode thread reported an error")
        guard returned else { return }  // a deadlocked engine cannot be left; the test has failed
        try await switching.value
        let error = await log.wait(5) { event -> RTCEngineError? in if case .error(let error) = event { error } else { nil } }
        #expect(error?.code == .codec)
        #expect(error?.reason.contains("injected encode failure") == true)
        #expect(host.publisherForTesting?.videoSender == nil, "the audience has no video sender")
        #expect(!host.pushVideoFrame(frame), "frames are refused after the switch")
        await host.leave()
        await server.shutdown()
    }
}
