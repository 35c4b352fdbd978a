import Foundation
import NIOConcurrencyHelpers
import NIOPosix
import NetSim
import RTCTestSupport
import ScreenShareUser
import Testing
@testable import rtc_cli

/// A server behind the impairment proxy with `profile` both ways, and a viewer that records when
/// each frame of `watched` is decoded.
struct LossyViewerRig {
    let server: TestServer
    let proxy: ImpairmentProxy
    let viewer: RTCEngine
    let events: EventLog
    let decoded = NIOLockedValueBox<[Int64]>([])

    init(profile: ImpairmentProfile, seed: UInt64, watching watched: String) async throws {
        server = try await TestServer()
        proxy = try await ImpairmentProxy.start(target: server.app.mediaAddress!, upstream: profile, downstream: profile, seed: seed,
                                                group: MultiThreadedEventLoopGroup.singleton)
        server.app.sfu.port.announcedAddress = proxy.address
        viewer = server.engine()
        events = EventLog(viewer)
        let decoded = decoded
        viewer.setRemoteVideoSink { frame in
            guard frame.uid == watched else { return }
            decoded.withLockedValue { $0.append(MediaClock.monotonicUs()) }
        }
    }

    /// The viewer's last report (every 2 s) on `uid`'s video: what it gave up and asked for.
    func lastVideoStats(of uid: String) -> RemoteTrackStats? {
        events.all.reversed().lazy.compactMap { event -> RemoteTrackStats? in
            guard case .rtcStats(let stats) = event else { return nil }
            return stats.remote.first { $0.uid == uid && $0.kind == .video }
        }.first
    }

    func close() async {
        await viewer.leave()
        await proxy.close()
        await server.shutdown()
    }
}

@Suite("Resilience through the impairment proxy", .serialized)
struct ResilienceTests {
    /// 20 s in `make test` (300 frames: a 2 s stall or a 5 % loss still shows); the figures over
    /// longer runs come from `rtc-cli bench resilience` or `RTC_RESILIENCE_SECONDS=60`.
    static let seconds = Double(ProcessInfo.processInfo.environment["RTC_RESILIENCE_SECONDS"] ?? "") ?? 20

    /// The figures (delivered share, longest freeze) are measured by `rtc-cli bench resilience`;
    /// here the function: the losses are repaired and the share never stalls.
    @Test("10% random loss each way and 60 ms RTT on every leg: a 720p screen share keeps ≥ 95% of its frames and never stalls for 2 s")
    func lossyScreenShare() async throws {
        // 10 % loss each way on both legs (publisher ↔ SFU ↔ viewer), 15 ms each way per leg:
        // 60 ms round trip from publisher to viewer and back.
        let rig = try await LossyViewerRig(profile: ImpairmentProfile(loss: 0.10, delayMs: 15), seed: 42, watching: "1001_sub")
        let (server, proxy, viewer, decoded) = (rig.server, rig.proxy, rig.viewer, rig.decoded)
        try await viewer.join(token: testToken(uid: "2001", channel: "lossy"), channel: "lossy", uid: "2001")
        let owner = try await server.presentHost(channel: "lossy")
        let session = ScreenShareSession(configuration: ScreenShareConfiguration(
            serverURL: server.url, channel: "lossy", hostUID: "1001", token: testToken(uid: "1001_sub", channel: "lossy")))
        try await session.start()
        // The source ticks on a thread of its own at 15 fps (`PacedSource`): a Task sleeping 66 ms
        // at a time on the shared cooperative pool drifts and stalls with the machine's load, and
        // its own gaps would count as freezes of the path.
        let pushing = try PacedSource(pattern: .screen, size: VideoSize(width: 1280, height: 720), fps: 15, sceneRate: FrameRate(30)) {
            session.pushVideoFrame($0)
        }
        #expect(await eventually(15) { decoded.withLockedValue { $0.count } >= 1 })
        try await Task.sleep(for: .seconds(2))  // warm-up: the start's backlog is played out
        let start = MediaClock.monotonicUs()
        let sentBefore = session.engine.localVideoFramesEncoded
        try await Task.sleep(for: .seconds(Self.seconds))
        pushing.stop()
        try await Task.sleep(for: .milliseconds(300))  // the encoder's last frame
        try await session.pause()  // no idle re-sends after the count
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
        // The viewer's own account of the share: what it gave up and asked for.
        let received = rig.lastVideoStats(of: "1001_sub")
        print("lossy share viewer: " + (received.map {
            "\($0.framesDecoded) decoded, \($0.framesDropped) dropped, \($0.decodeFailures) decode failures, "
                + "\($0.keyframeRequests) keyframe requests, \($0.nacksSent) NACKed, \($0.packetsLost) lost"
        } ?? "no report"))
        print("lossy share: \(window.count) decoded of \(sent) sent (\(String(format: "%.2f", ratio * 100)) %), longest gap "
            + "\(String(format: "%.0f", gaps.max() ?? 0)) ms; proxy dropped \(proxyStats.upDropped)/\(proxyStats.up) up, "
            + "\(proxyStats.downDropped)/\(proxyStats.down) down; SFU NACKs in \(counters.nacksReceived), up \(counters.nacksSent), "
            + "retransmitted \(counters.retransmissions) (skipped \(counters.retransmissionsSkipped)), keyframe requests "
            + "\(counters.keyframeRequestsForwarded), layer switches down \(counters.layerSwitchesDown) up \(counters.layerSwitchesUp), padding fillers \(counters.fillersSent)")
        #expect(ratio >= 0.95, "\(window.count) of \(sent) frames decoded")
        #expect((gaps.max() ?? 10_000) < 2000, "longest freeze \(gaps.max() ?? -1) ms")
        // The server asked the publisher again for what the upstream loss took (its 20 ms NACK job
        // runs only while a gap is open: this is where that gate is seen to open).
        #expect(counters.nacksSent > 0, "no upstream NACK with \(proxyStats.upDropped) packets dropped on the way in")
        await session.stop()
        await owner.leave()
        await rig.close()
    }
}

@Suite("Temporal layers through the impairment proxy", .serialized)
struct TemporalLossTests {
    /// The server leaves the upper layer out for a `.low` viewer. Under loss, repairs of that layer
    /// come late, after later packets went out: each takes no place in the viewer's stream but the
    /// one its number had, which the server fills with padding. Before, a late packet took the
    /// next number (one already sent), and the viewer held a frame that never completed (seconds).
    @Test("10% loss each way, a .low viewer of a two-layer screen: late repairs of the upper layer become padding, the base layer plays without a stall")
    func lowViewerUnderLoss() async throws {
        let rig = try await LossyViewerRig(profile: ImpairmentProfile(loss: 0.10, delayMs: 15), seed: 11, watching: "1001")
        let (server, viewer, decoded) = (rig.server, rig.viewer, rig.decoded)
        let host = server.engine()
        try host.setVideoEncoderConfiguration(VideoEncoderConfiguration(
            dimensions: VideoSize(width: 1280, height: 720), frameRate: 15, bitrateKbps: 1200,
            degradationPreference: .maintainResolution, contentHint: .detail))
        try await host.enableVideo()
        try await viewer.join(token: testToken(uid: "2001", channel: "low"), channel: "low", uid: "2001")
        try await viewer.setRemoteVideoStreamType(uid: "1001", .low)
        try await host.join(token: testToken(uid: "1001", channel: "low"), channel: "low", uid: "1001",
                            options: JoinOptions(videoSource: .screen))
        let video = pushPattern(host, kind: .screen, size: VideoSize(width: 1280, height: 720), fps: 15)
        defer { video.cancel() }
        #expect(await eventually(15) { decoded.withLockedValue { $0.count } >= 1 })
        #expect(await eventually { viewer.remoteVideoLayer(uid: "1001")?.layer == "T0" })
        try await Task.sleep(for: .seconds(1))
        let seconds = 10.0
        let start = MediaClock.monotonicUs()
        try await Task.sleep(for: .seconds(seconds))
        let window = decoded.withLockedValue { $0 }.filter { $0 >= start && $0 <= start + Int64(seconds * 1e6) }
        let gaps = zip(window.dropFirst(), window).map { Double($0 - $1) / 1000 }
        let counters = try await server.app.sfu.counterSnapshot.get()
        let received = rig.lastVideoStats(of: "1001")
        let fps = Double(window.count) / seconds
        print("low viewer under loss: \(String(format: "%.1f", fps)) fps, longest gap \(String(format: "%.0f", gaps.max() ?? 0)) ms; "
            + "padding fillers \(counters.fillersSent), upstream NACKs \(counters.nacksSent), retransmitted \(counters.retransmissions); viewer: "
            + (received.map { "\($0.framesDropped) dropped, \($0.decodeFailures) decode failures, \($0.keyframeRequests) keyframe requests, \($0.nacksSent) NACKed" } ?? "no report"))
        // Upper-layer packets lost on the way in are repaired, late: their numbers are filled.
        #expect(counters.fillersSent > 0, "no padding for \(counters.nacksSent) upstream NACKs")
        // The base layer is 7.5 fps; its own losses are repaired (a frame now and then may wait).
        #expect(fps >= 6, "\(fps) fps of the base layer")
        #expect((gaps.max() ?? 10_000) < 1000, "longest freeze \(gaps.max() ?? -1) ms")
        video.cancel()
        await host.leave()
        await rig.close()
    }
}

@Suite("Audio resilience through the impairment proxy", .serialized)
struct AudioResilienceTests {
    @Test("20% burst loss on the audio's way in: the tone still plays out continuously (594 of 600 blocks, no gap over 150 ms) at its frequency")
    func burstLossTone() async throws {
        let server = try await TestServer()
        var burst = ImpairmentProfile(delayMs: 10)
        burst.enterBurst = 0.05
        burst.leaveBurst = 0.2  // 20 % lost, in bursts of 5 packets (100 ms) on average
        let proxy = try await ImpairmentProxy.start(target: server.app.mediaAddress!, upstream: burst, downstream: ImpairmentProfile(delayMs: 10),
                                                    seed: 7, group: MultiThreadedEventLoopGroup.singleton)
        server.app.sfu.port.announcedAddress = proxy.address
        let host = server.engine(), viewer = server.engine()
        try await host.enableAudio()
        host.setAudioProcessing(enabled: false)
        let played = NIOLockedValueBox<[(at: Int64, samples: [Int16])]>([])
        viewer.setRemoteAudioSink { frame in played.withLockedValue { $0.append((MediaClock.monotonicUs(), frame.frame.int16Samples)) } }
        try await viewer.join(token: testToken(uid: "2001", channel: "burst"), channel: "burst", uid: "2001")
        try await host.join(token: testToken(uid: "1001", channel: "burst"), channel: "burst", uid: "1001")
        let tone = pushTone(host, frequency: 440, sampleRate: 48000)
        #expect(await eventually(10) { played.withLockedValue { $0.count } >= 25 })
        let start = MediaClock.monotonicUs()
        try await Task.sleep(for: .seconds(12))
        let end = MediaClock.monotonicUs()
        let blocks = played.withLockedValue { $0 }.filter { $0.at >= start }
        tone.cancel()
        // Counted up to 200 ms before the end: a block a loaded machine plays late at the window's
        // edge is not a missing one (the gap bound below catches late playout).
        let countedUntil = end - 200_000
        let counted = blocks.filter { $0.at < countedUntil }.count
        let expected = Int((countedUntil - start) / 20_000)
        let stats = proxy.statistics
        let gaps = zip(blocks.dropFirst(), blocks).map { Double($0.at - $1.at) / 1000 }
        let samples = blocks.flatMap(\.samples)
        // The tone's frequency in each 100 ms, median over the run: concealed stretches are allowed to
        // be imperfect, the tone must be what plays out.
        let windows = stride(from: 0, to: samples.count - 9600, by: 9600).map {
            dominantFrequency(Array(samples[$0..<$0 + 9600]), channels: 2, sampleRate: 48000)
        }.sorted()
        let frequency = windows.isEmpty ? 0 : windows[windows.count / 2]
        print("burst-loss audio: \(blocks.count) blocks of 20 ms in 12 s (\(counted) of \(expected) due before its last 200 ms), longest gap \(String(format: "%.1f", gaps.max() ?? 0)) ms, "
            + "proxy dropped \(stats.upDropped)/\(stats.up) upstream, tone at \(String(format: "%.1f", frequency)) Hz")
        // Continuity is the count: a burst not concealed is 5 blocks (100 ms) missing, so two of
        // them fail it (12 s hold about 24 bursts). The gap between two blocks played is the playout thread's scheduling
        // (20 ms blocks; measured 20-41 ms, 23 ms in a fresh-clone CI run): 150 ms leaves a loaded 2-core machine room and still
        // catches playout that stops for a burst and more.
        #expect((gaps.max() ?? 1000) <= 150, "longest playout gap \(gaps.max() ?? -1) ms")
        #expect(counted >= expected - 6, "\(counted) blocks of 20 ms where \(expected) were due")
        #expect(abs(frequency - 440) < 5, "\(frequency) Hz")
        await host.leave()
        await viewer.leave()
        await proxy.close()
        await server.shutdown()
    }
}

@Suite("Blackout through the impairment proxy", .serialized)
struct BlackoutTests {
    @Test("a 3 s media blackout: video is back within 1 s of the path returning, and nobody sees userOffline")
    func blackout() async throws {
        let server = try await TestServer()
        let proxy = try await ImpairmentProxy.start(target: server.app.mediaAddress!, upstream: ImpairmentProfile(delayMs: 5),
                                                    downstream: ImpairmentProfile(delayMs: 5), seed: 9, group: MultiThreadedEventLoopGroup.singleton)
        server.app.sfu.port.announcedAddress = proxy.address
        let host = server.engine(), viewer = server.engine()
        let hostEvents = EventLog(host), viewerEvents = EventLog(viewer)
        try await host.enableVideo()
        let decoded = NIOLockedValueBox<[Int64]>([])
        viewer.setRemoteVideoSink { _ in decoded.withLockedValue { $0.append(MediaClock.monotonicUs()) } }
        try await viewer.join(token: testToken(uid: "2001", channel: "dark"), channel: "dark", uid: "2001")
        try await host.join(token: testToken(uid: "1001", channel: "dark"), channel: "dark", uid: "1001")
        let video = pushPattern(host)
        defer { video.cancel() }
        #expect(await eventually { decoded.withLockedValue { $0.count } >= 15 })
        // Everything dropped both ways for 3 s, from now.
        var dark = ImpairmentProfile(delayMs: 5)
        let elapsed = Double(MediaClock.monotonicUs() - proxyStartUs(proxy)) / 1e6
        dark.blackouts = [elapsed...(elapsed + 3)]
        proxy.setProfiles(upstream: dark, downstream: dark)
        let darkFrom = MediaClock.monotonicUs()
        try await Task.sleep(for: .seconds(3))
        let back = darkFrom + 3_000_000
        #expect(await eventually(5) { decoded.withLockedValue { $0 }.contains { $0 > back + 100_000 } })
        let firstAfter = decoded.withLockedValue { $0 }.first { $0 > back } ?? Int64.max
        let restoredMs = Double(firstAfter - back) / 1000
        print("blackout: first frame \(String(format: "%.0f", restoredMs)) ms after the path returned")
        // 92 ms in a fresh-clone CI run (2026-11-27): the path's return is noticed by the next
        // packet either way. A second leaves a loaded machine room and still catches a return
        // that waits for an ICE restart or a keyframe request's retry (seconds).
        #expect(restoredMs <= 1000, "media back after \(restoredMs) ms")
        #expect(!viewerEvents.all.contains { if case .userOffline = $0 { true } else { false } })
        #expect(!hostEvents.all.contains { if case .userOffline = $0 { true } else { false } })
        #expect(host.connectionState == .connected && viewer.connectionState == .connected)
        await host.leave()
        await viewer.leave()
        await proxy.close()
        await server.shutdown()
    }

    @Test("the media path is lost for good while signaling stays up: both clients restart ICE onto the new path, and nobody sees userOffline")
    func mediaPathLost() async throws {
        let server = try await TestServer()
        let group = MultiThreadedEventLoopGroup.singleton
        let first = try await ImpairmentProxy.start(target: server.app.mediaAddress!, upstream: ImpairmentProfile(delayMs: 5),
                                                    downstream: ImpairmentProfile(delayMs: 5), seed: 3, group: group)
        server.app.sfu.port.announcedAddress = first.address
        let host = server.engine(mediaTimeoutSeconds: 1.5), viewer = server.engine(mediaTimeoutSeconds: 1.5)
        let hostEvents = EventLog(host), viewerEvents = EventLog(viewer)
        try await host.enableVideo()
        let decoded = NIOLockedValueBox<[Int64]>([])
        viewer.setRemoteVideoSink { _ in decoded.withLockedValue { $0.append(MediaClock.monotonicUs()) } }
        try await viewer.join(token: testToken(uid: "2001", channel: "path"), channel: "path", uid: "2001")
        try await host.join(token: testToken(uid: "1001", channel: "path"), channel: "path", uid: "1001")
        let video = pushPattern(host)
        defer { video.cancel() }
        #expect(await eventually { decoded.withLockedValue { $0.count } >= 15 })
        let restartsBefore = try await server.app.sfu.counterSnapshot.get().iceRestarts
        // The first path goes away (a relay gone, a new network); the server is reachable at a
        // new address, which only an ICE restart (an offer/answer with its candidate) tells.
        let second = try await ImpairmentProxy.start(target: server.app.mediaAddress!, upstream: ImpairmentProfile(delayMs: 5),
                                                     downstream: ImpairmentProfile(delayMs: 5), seed: 4, group: group)
        server.app.sfu.port.announcedAddress = second.address
        await first.close()
        let cut = MediaClock.monotonicUs()
        func reasons(_ log: EventLog) -> [ConnectionChangedReason] {
            log.all.compactMap { if case .connectionStateChanged(_, let reason) = $0 { reason } else { nil } }
        }
        #expect(await eventually(20) { decoded.withLockedValue { $0 }.contains { $0 > cut + 2_000_000 } && second.statistics.down > 0 })
        // Media is back at the first frame after the stall (frames in flight at the cut come first).
        let after = decoded.withLockedValue { $0 }.filter { $0 > cut }
        let resumedAt = zip(after.dropFirst(), after).first { $0 - $1 > 300_000 }?.0 ?? after.first ?? Int64.max
        let restoredMs = Double(resumedAt - cut) / 1000
        #expect(await eventually(10) { reasons(hostEvents).suffix(2) == [.mediaInterrupted, .resumed]
                && reasons(viewerEvents).suffix(2) == [.mediaInterrupted, .resumed] })
        let restarts = try await server.app.sfu.counterSnapshot.get().iceRestarts - restartsBefore
        print("media path lost: video back \(String(format: "%.0f", restoredMs)) ms after the cut (1.5 s to notice), "
            + "\(restarts) ICE restarts at the server; host reasons \(reasons(hostEvents).map(\.rawValue)), viewer \(reasons(viewerEvents).map(\.rawValue))")
        #expect(restoredMs <= 5000, "video back \(restoredMs) ms after the cut")
        // The host's publisher and the viewer's subscriber transports, at least.
        #expect(restarts >= 2)
        #expect(second.statistics.up > 0 && second.statistics.down > 0)
        #expect(!viewerEvents.all.contains { if case .userOffline = $0 { true } else { false } })
        #expect(!hostEvents.all.contains { if case .userOffline = $0 { true } else { false } })
        #expect(host.connectionState == .connected && viewer.connectionState == .connected)
        await host.leave()
        await viewer.leave()
        await second.close()
        await server.shutdown()
    }

    /// The model counts blackout time from the first packet it saw; the proxy started just before.
    func proxyStartUs(_ proxy: ImpairmentProxy) -> Int64 { proxy.firstPacketUs ?? MediaClock.monotonicUs() }
}

@Suite("Congestion control through the impairment proxy", .serialized)
struct CongestionTests {
    /// The figures (seconds to the cap and back, queueing p95) are measured by `rtc-cli bench
    /// resilience --scenario steps`, which runs this same scenario (`ResilienceBench.stepsRun`);
    /// here the function: the sender finds each new capacity within its phase.
    @Test("capacity steps 2.5 → 0.5 → 2.5 Mbps: the 720p sender gets under the cap and back to 85 % within each 13 s phase")
    func capacitySteps() async throws {
        let figures = try await ResilienceBench.stepsRun(phase: 13)
        print("capacity steps: under 0.5 Mbps \(figures.underS.map { String(format: "%.1f", $0) } ?? "never") s after the drop, "
            + "85 % of 2.5 Mbps \(figures.recoveredS.map { String(format: "%.1f", $0) } ?? "never") s after the rise, queueing p95 "
            + "\(String(format: "%.0f", figures.queueingP95Ms)) ms, \(figures.dropped)/\(figures.packets) dropped at the queue; "
            + "Mbps: \(figures.table.joined(separator: ", "))")
        // 1.0 s in the runs of 2026-11-26/27 (the bench's figure); 5 s leaves a loaded machine room
        // and still catches a sender that never finds the cap.
        #expect(figures.underS.map { $0 <= 5 } == true, "under the cap \(String(describing: figures.underS)) s after the drop")
        // 4.5-8.5 s in those runs; within the phase is the function.
        #expect(figures.recoveredS != nil, "85 % \(String(describing: figures.recoveredS)) s after the rise")
    }

    /// One viewer's downlink is narrower than what its publisher sends. With the server's lever
    /// (REMB to the publisher from that leg's transport-wide estimate), the publisher is held under
    /// it; without (`publisherLimitFloorKbps: nil`), the leg overflows: that comparison is
    /// `rtc-cli bench resilience --scenario downlink`'s (with and without the lever, side by side).
    @Test("a viewer's downlink capped at 0.8 Mbps: the SFU's estimate of that leg finds the cap and holds the 2 Mbps publisher under it; the video keeps flowing",
          arguments: [true])
    func cappedDownlink(lever: Bool) async throws {
        let server = try await TestServer(publisherLimitFloorKbps: lever ? .some(150) : .some(nil))
        var link = ImpairmentProfile(delayMs: 10)
        link.bandwidthBps = 800_000
        link.queueMs = 1000
        let proxy = try await ImpairmentProxy.start(target: server.app.mediaAddress!, upstream: ImpairmentProfile(delayMs: 10),
                                                    downstream: link, seed: 13, group: MultiThreadedEventLoopGroup.singleton)
        server.app.sfu.port.announcedAddress = proxy.address
        let host = server.engine(), viewer = server.engine()
        try host.setVideoEncoderConfiguration(VideoEncoderConfiguration(
            dimensions: VideoSize(width: 1280, height: 720), frameRate: 30, bitrateKbps: 2000))
        try await host.enableVideo()
        let decoded = NIOLockedValueBox<[Int64]>([])
        viewer.setRemoteVideoSink { _ in decoded.withLockedValue { $0.append(MediaClock.monotonicUs()) } }
        try await viewer.join(token: testToken(uid: "2001", channel: "downlink"), channel: "downlink", uid: "2001")
        try await host.join(token: testToken(uid: "1001", channel: "downlink"), channel: "downlink", uid: "1001")
        let camera = pushPattern(host, kind: .camera, size: VideoSize(width: 1280, height: 720), fps: 30)
        defer { camera.cancel() }
        try await Task.sleep(for: .seconds(10))  // the leg's estimate comes down, the publisher follows
        proxy.traceUpstream(true)
        proxy.traceDownstream(true)
        let start = MediaClock.monotonicUs()
        // The leg's estimate, every 250 ms of the 8 s: it hovers around the cap (a probe goes a
        // little over before the queue answers), so the figure is the median, not one reading
        // (one read at the end gave 845 kbps against 880 allowed on a CI run).
        func reading() async throws -> Double? { try await server.app.sfu.downstreamEstimates(in: "downlink").get()["2001"] }
        var samples: [Double] = []
        while MediaClock.monotonicUs() - start < 8_000_000 {
            try await Task.sleep(for: .milliseconds(250))
            if let value = try await reading() { samples.append(value) }
        }
        let up = proxy.upstreamTrace, down = proxy.downstreamTrace
        let traced = Double(MediaClock.monotonicUs() - start) / 1e6
        // An overflowing leg's feedback can be late (its estimate counts as stale after 2 s): ask
        // again for up to 3 s before calling it missing.
        let asked = MediaClock.monotonicUs()
        while samples.isEmpty, MediaClock.monotonicUs() - asked < 3_000_000 {
            try await Task.sleep(for: .milliseconds(100))
            if let value = try await reading() { samples.append(value) }
        }
        let sorted = samples.sorted()
        let estimate = sorted.isEmpty ? nil : sorted[sorted.count / 2]
        camera.cancel()
        let counters = try await server.app.sfu.counterSnapshot.get()
        let window = decoded.withLockedValue { $0 }.filter { $0 >= start }
        let gaps = zip(window.dropFirst(), window).map { Double($0 - $1) / 1000 }
        let sentBps = Double(up.reduce(0) { $0 + $1.bytes }) * 8 / traced
        let queueing = down.map { $0.queueUs.map { Double($0) / 1000 } ?? .infinity }.sorted()
        let p95 = queueing.isEmpty ? .infinity : queueing[queueing.count * 95 / 100]
        let dropped = down.filter { $0.queueUs == nil }.count
        print("capped downlink (\(lever ? "publisher held to the leg" : "no lever")): leg estimate median "
            + "\(estimate.map { String(format: "%.0f", $0 / 1000) } ?? "none") kbps "
            + "(\(sorted.first.map { String(format: "%.0f", $0 / 1000) } ?? "-")-\(sorted.last.map { String(format: "%.0f", $0 / 1000) } ?? "-") over \(sorted.count) readings), publisher sends \(String(format: "%.0f", sentBps / 1000)) kbps, "
            + "downstream queueing p95 \(String(format: "%.0f", p95)) ms, \(dropped)/\(down.count) dropped; viewer decoded \(window.count) frames "
            + "in 8 s, longest gap \(String(format: "%.0f", gaps.max() ?? 0)) ms; \(counters.downstreamFeedback) feedback reports, "
            + "\(counters.publisherLimitsSent) limits sent, \(counters.keyframeRequestsForwarded) keyframe requests")
        #expect(counters.downstreamFeedback > 0)
        if lever {
            // The estimate finds the leg's capacity (it hovers around it once the leg is not
            // overloaded; without the lever an overflowing leg's feedback can be too late to count).
            #expect(estimate.map { $0 >= 400_000 && $0 <= 880_000 } == true, "leg estimate median \(String(describing: estimate)) of \(sorted)")
            #expect(counters.publisherLimitsSent > 0)
            #expect(sentBps <= 800_000, "publisher sends \(sentBps) bps")
            // The viewer keeps decoding (without the lever it decodes nothing). Queueing and frame
            // rate are printed: on a loaded machine the leg can still overflow for seconds before
            // the publisher has come down.
            #expect(window.count >= 8, "\(window.count) frames in 8 s")
        } else {
            #expect(counters.publisherLimitsSent == 0)
        }
        await host.leave()
        await viewer.leave()
        await proxy.close()
        await server.shutdown()
    }

    /// Camera at 720p30 under 0.3 Mbps: below what 720p needs (the encoder floor), so it halves.
    /// Screen at 720p15 under 0.6 Mbps: a quarter of what it asks for, and it keeps its size.
    /// (Screen content under 0.3 Mbps does not get through at all: see docs/resilience.md.)
    @Test("under a capped uplink, screen content keeps 1280x720 and gives frames; camera content gives resolution",
          arguments: [(VideoContentHint.detail, 600_000.0), (.motion, 300_000)])
    func degradationPreference(hint: VideoContentHint, capBps: Double) async throws {
        let server = try await TestServer()
        var link = ImpairmentProfile(delayMs: 10)
        link.bandwidthBps = capBps
        link.queueMs = 1000
        let proxy = try await ImpairmentProxy.start(target: server.app.mediaAddress!, upstream: link,
                                                    downstream: ImpairmentProfile(delayMs: 10), seed: 11,
                                                    group: MultiThreadedEventLoopGroup.singleton)
        server.app.sfu.port.announcedAddress = proxy.address
        let host = server.engine(), viewer = server.engine(), hostEvents = EventLog(host)
        let screen = hint == .detail
        try host.setVideoEncoderConfiguration(VideoEncoderConfiguration(
            dimensions: VideoSize(width: 1280, height: 720), frameRate: screen ? 15 : 30, bitrateKbps: 2500, contentHint: hint))
        try await host.enableVideo()
        let decoded = NIOLockedValueBox<[(atUs: Int64, width: Int, height: Int)]>([])
        viewer.setRemoteVideoSink { frame in
            decoded.withLockedValue { $0.append((MediaClock.monotonicUs(), frame.frame.width, frame.frame.height)) }
        }
        try await viewer.join(token: testToken(uid: "2001", channel: "degrade"), channel: "degrade", uid: "2001")
        try await host.join(token: testToken(uid: "1001", channel: "degrade"), channel: "degrade", uid: "1001",
                            options: JoinOptions(videoSource: screen ? .screen : .camera))
        let video = pushPattern(host, kind: screen ? .screen : .camera, size: VideoSize(width: 1280, height: 720), fps: screen ? 15 : 30)
        defer { video.cancel() }
        // Settle: the estimate falls from 2.5 Mbps to the cap and the queue drains.
        try await Task.sleep(for: .seconds(10))
        proxy.traceUpstream(true)
        let start = MediaClock.monotonicUs()
        let seconds = 6.0
        try await Task.sleep(for: .seconds(seconds))
        let trace = proxy.upstreamTrace
        video.cancel()
        let window = decoded.withLockedValue { $0 }.filter { $0.atUs >= start }
        let sizes = Set(window.map { "\($0.width)x\($0.height)" })
        let sentBps = Double(trace.reduce(0) { $0 + $1.bytes }) * 8 / seconds
        print("degradation (\(screen ? "screen" : "camera")): \(window.count) frames in \(Int(seconds)) s at \(sizes.sorted()), "
            + String(format: "%.0f kbps into a %.0f kbps cap", sentBps / 1000, capBps / 1000))
        // Screen content gives frames: this test pattern scrolls its window of text every second,
        // and at the coarsest quantizer such a 720p frame is tens of kB, a third of a second of
        // this path. 20-47 frames came in 6 s (310-386 kbps) in six runs here, 64 and 15 in two
        // fresh-clone CI runs; before libvpx's clock was fixed (VPXFrameClock) and the estimate
        // measured the path while busy (BandwidthEstimator.deliveryRateBps), it was 1-8 frames, and
        // in one run in four a frame in several seconds, the state this bound catches. Camera
        // content keeps its frame rate.
        #expect(window.count >= (screen ? 8 : 15), "\(window.count) frames decoded in \(Int(seconds)) s")
        if screen {
            #expect(sizes == ["1280x720"], "screen content changed size: \(sizes)")
        } else {
            #expect(window.suffix(10).allSatisfy { $0.width == 640 && $0.height == 360 }, "camera content sizes \(sizes)")
        }
        #expect(sentBps <= capBps * 1.05)
        // The screen asks for two temporal layers (its default), but a 0.6 Mbps uplink leaves the
        // estimate no headroom for them at 720p15 (3 x its 197 kbps floor): it is sent in one
        // (TemporalLayerPolicy).
        let encodedLayers = hostEvents.all.compactMap { event -> Int? in
            guard case .rtcStats(let stats) = event else { return nil }
            return stats.local.first { $0.kind == .video }?.temporalLayers
        }
        #expect(encodedLayers.last == 1, "temporal layers encoded: \(encodedLayers)")
        await host.leave()
        await viewer.leave()
        await proxy.close()
        await server.shutdown()
    }
}
