import Foundation
import NIOConcurrencyHelpers
import RTCCore
import Signaling
import Testing

@Suite("RTCEngine end to end", .serialized)
struct EngineMediaTests {
    @Test("a publisher's video and audio arrive decoded at a subscriber")
    func videoAndAudioFlow() async throws {
        let server = try await TestServer()
        let host = server.engine(), viewer = server.engine()
        let hostEvents = EventLog(host), viewerEvents = EventLog(viewer)
        try await host.enableVideo()
        try await host.enableAudio()
        let frames = NIOLockedValueBox<[VideoSize]>([])
        viewer.setRemoteVideoSink { frame in frames.withLockedValue { $0.append(VideoSize(width: frame.frame.width, height: frame.frame.height)) } }
        let audio = NIOLockedValueBox<Int>(0)
        viewer.setRemoteAudioSink { _ in audio.withLockedValue { $0 += 1 } }
        try await host.join(token: server.token("1001", channel: "room"), channel: "room", uid: "1001")
        try await viewer.join(token: server.token("2001", channel: "room"), channel: "room", uid: "2001")
        let video = pushPattern(host), tone = pushTone(host)
        defer { video.cancel(); tone.cancel() }
        #expect(await viewerEvents.wait { if case .userJoined(let uid) = $0 { uid } else { nil } } == "1001")
        #expect(await hostEvents.wait { if case .userJoined(let uid) = $0 { uid } else { nil } } == "2001")
        let first = await viewerEvents.wait { if case .firstRemoteVideoFrameDecoded(let uid, _, let size, _) = $0 { (uid, size) } else { nil } }
        #expect(first?.0 == "1001")
        #expect(first?.1 == VideoSize(width: 320, height: 240))
        #expect(await eventually { frames.withLockedValue { $0.count } >= 20 && audio.withLockedValue { $0 } >= 50 })
        await viewer.leave()
        await host.leave()
        await server.shutdown()
    }
}
