import Foundation
import NIOConcurrencyHelpers
import NIOPosix
import NetSim
import RTCTestSupport
import ScreenShareUser
import Testing

@Suite("Resilience through the impairment proxy", .serialized)
struct ResilienceTests {
    static let seconds = Double(ProcessInfo.processInfo.environment["RTC_RESILIENCE_SECONDS"] ?? "") ?? 60

    @Test("10% random loss each way and 60 ms RTT on every leg: a 720p screen share keeps ≥ 99% of its frames and never freezes over 500 ms")
    func lossyScreenShare() async throws {
        let server = try await TestServer()
        // 10 % loss each way on both legs (publisher ↔ SFU ↔ viewer), 15 ms each way per leg:
        // 60 ms round trip from publisher to viewer and back.
        let profile = ImpairmentProfile(loss: 0.10, delayMs: 15)
        let proxy = try await ImpairmentProxy.start(target: server.app.mediaAddress!, upstream: profile, downstream: profile, seed: 42,
                                                    group: MultiThreadedEventLoopGroup.singleton)
        server.app.sfu.port.announcedAddress = proxy.address
        let viewer = server.engine()
        let decoded = NIOLockedValueBox<[Int64]>([])
        viewer.setRemoteVideoSink { frame in
            guard frame.uid == "1001_sub" else { return }
            decoded.withLockedValue { $0.append(MediaClock.monotonicUs()) }
        }
        try await viewer.join(token: server.token("2001", channel: "lossy"), channel: "lossy", uid: "2001")
        let session = ScreenShareSession(configuration: ScreenShareConfiguration(
            serverURL: server.url, channel: "lossy", hostUID: "1001", token: server.token("1001_sub", channel: "lossy")))
        try await session.start()
        let pushing = Task.detached {
            let generator = try? PatternGenerator(kind: .screen, size: VideoSize(width: 1280, height: 720))
            var index = 0
            while !Task.isCancelled, let generator {
                var frame = generator.frame(at: index)
                frame.timestampUs = MediaClock.monotonicUs()
                session.pushVideoFrame(frame)
                index += 1
                try? await Task.sleep(for: .milliseconds(66))
            }
        }
        #expect(await eventually(15) { decoded.withLockedValue { $0.count } >= 1 })
        try await Task.sleep(for: .seconds(2))  // warm-up: the start's backlog is played out
        let start = MediaClock.monotonicUs()
        let sentBefore = session.engine.localVideoFramesEncoded
        try await Task.sleep(for: .seconds(Self.seconds))
        pushing.cancel()
        try await Task.sleep(for: .milliseconds(300))  // the encoder's last frame
        let sentAfter = session.engine.localVideoFramesEncoded
        try await Task.sleep(for: .milliseconds(1500))  // the last frames' recovery
        // Frames encoded from `start` on, against frames decoded from `start` on (a frame in flight
        // at `start` counts in the decoded set only: about one in 900).
        let window = decoded.withLockedValue { $0 }.filter { $0 >= start }
        let end = start + Int64(Self.seconds * 1e6)
        let playing = window.filter { $0 <= end }
        let gaps = zip(playing.dropFirst(), playing).map { Double($0 - $1) / 1000 }
        let sent = sentAfter - sentBefore
        let ratio = Double(window.count) / Double(max(1, sent))
        let counters = try await server.app.sfu.counterSnapshot.get()
        let proxyStats = proxy.statistics
        print("lossy share: \(window.count) decoded of \(sent) sent (\(String(format: "%.2f", ratio * 100)) %), longest gap "
            + "\(String(format: "%.0f", gaps.max() ?? 0)) ms; proxy dropped \(proxyStats.upDropped)/\(proxyStats.up) up, "
            + "\(proxyStats.downDropped)/\(proxyStats.down) down; SFU NACKs in \(counters.nacksReceived), up \(counters.nacksSent), "
            + "retransmitted \(counters.retransmissions), keyframe requests \(counters.keyframeRequestsForwarded)")
        #expect(ratio >= 0.99, "\(window.count) of \(sent) frames decoded")
        #expect((gaps.max() ?? 10_000) <= 500, "longest freeze \(gaps.max() ?? -1) ms")
        await session.stop()
        await viewer.leave()
        await proxy.close()
        await server.shutdown()
    }
}
