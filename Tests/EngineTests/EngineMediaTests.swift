import Foundation
import NIOConcurrencyHelpers
import NIOPosix
@testable import RTCCore
@testable import RTCRecording
import RTCTestSupport
import Signaling
import Testing

@Suite("RTCEngine end to end", .serialized)
struct EngineMediaTests {
    @Test("a publisher's video and audio arrive decoded at a subscriber, with events both ways")
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
        try await host.join(token: testToken(uid: "1001", channel: "room"), channel: "room", uid: "1001")
        try await viewer.join(token: testToken(uid: "2001", channel: "room"), channel: "room", uid: "2001")
        let video = pushPattern(host), tone = pushTone(host)
        defer { video.cancel(); tone.cancel() }
        #expect(await viewerEvents.wait { if case .userJoined(let uid) = $0 { uid } else { nil } } == "1001")
        #expect(await hostEvents.wait { if case .userJoined(let uid) = $0 { uid } else { nil } } == "2001")
        #expect(await viewerEvents.wait { if case .joinedChannel(let channel, let uid, _) = $0 { "\(channel)/\(uid)" } else { nil } } == "room/2001")
        let published = await viewerEvents.wait(5) { event -> [TrackKind]? in
            let kinds = viewerEvents.all.compactMap { if case .remoteTrackPublished(let info) = $0 { info.kind } else { nil } }
            return kinds.count >= 2 ? kinds.sorted { $0.rawValue < $1.rawValue } : nil
        }
        #expect(published == [.audio, .video])
        let first = await viewerEvents.wait { if case .firstRemoteVideoFrameDecoded(let uid, _, let size, _) = $0 { (uid, size) } else { nil } }
        #expect(first?.0 == "1001")
        #expect(first?.1 == VideoSize(width: 320, height: 240))
        #expect(await eventually { frames.withLockedValue { $0.count } >= 20 && audio.withLockedValue { $0 } >= 50 })
        // Stats every 2 s: the viewer sees both tracks with rates, the host its own sending.
        let stats = await viewerEvents.wait(5) { event -> RTCStats? in
            if case .rtcStats(let stats) = event, stats.remote.count == 2, stats.remote.allSatisfy({ $0.bitrateKbps > 0 }) { stats } else { nil }
        }
        let remoteVideo = try #require(stats?.remote.first { $0.kind == .video })
        #expect(remoteVideo.framesPerSecond > 5)
        #expect(remoteVideo.width == 320)
        let hostStats = await hostEvents.wait(5) { event -> RTCStats? in
            if case .rtcStats(let stats) = event, stats.local.count == 2, stats.local.allSatisfy({ $0.bitrateKbps > 0 }) { stats } else { nil }
        }
        #expect(hostStats?.local.first { $0.kind == .video }?.roundTripTimeMs != nil, "RTT from the server's receiver reports")
        // The publisher's bandwidth estimate, within what the app asked for plus audio; none for a viewer that publishes nothing.
        let estimate = try #require(hostStats?.estimatedBandwidthKbps)
        #expect(estimate > 0 && estimate <= VideoEncoderConfiguration().bitrateKbps + 48)
        #expect(stats?.estimatedBandwidthKbps == nil)
        await viewer.leave()
        await host.leave()
        await server.shutdown()
    }

    @Test("a Y4M clip arrives with ≥ 95% of its frames and ≥ 30 dB PSNR (ffmpeg's psnr filter on the recording)")
    func clipQuality() async throws {
        let dir = temporaryDirectory("clip")
        let source = "\(dir)/source.y4m", frameCount = 60
        let generator = try PatternGenerator(kind: .camera, size: VideoSize(width: 640, height: 360), frameRate: FrameRate(15))
        let writer = try Y4MWriter(path: source, header: Y4MHeader(width: 640, height: 360, frameRate: FrameRate(15)))
        for index in 0..<frameCount { try writer.write(generator.frame(at: index)) }
        try writer.finish()

        let server = try await TestServer()
        let host = server.engine(), viewer = server.engine()
        let viewerEvents = EventLog(viewer)
        let recorder = ChannelRecorder(directory: dir)
        recorder.attach(to: viewer)
        try viewer.setVideoEncoderConfiguration(VideoEncoderConfiguration())
        try host.setVideoEncoderConfiguration(VideoEncoderConfiguration(dimensions: VideoSize(width: 640, height: 360), frameRate: 15,
                                                                        bitrateKbps: 1200, degradationPreference: .maintainFramerate))
        try await host.enableVideo()
        try await viewer.join(token: testToken(uid: "2001", channel: "clip"), channel: "clip", uid: "2001")
        try await host.join(token: testToken(uid: "1001", channel: "clip"), channel: "clip", uid: "1001")
        // Push only once the viewer's receiving transport is up, so frame 0 reaches it.
        #expect(await viewerEvents.wait { if case .remoteTrackPublished(let info) = $0, info.kind == .video { true } else { nil } } == true)
        #expect(await eventually { await viewer.subscriberTransportState() == .connected })
        let reader = try Y4MReader(path: source)
        let failure = NIOLockedValueBox<String?>(nil)
        // Paced on a thread of its own, stamped index × 66.7 ms from the first frame.
        let pushing = PacedSource(frames: frameCount, fps: 15, frame: { _ in
            do { return try reader.readFrame() } catch {
                failure.withLockedValue { $0 = "\(error)" }
                return nil
            }
        }, push: { _ = host.pushVideoFrame($0) })
        await pushing.finished()
        #expect(failure.withLockedValue { $0 } == nil, "reading the clip: \(failure.withLockedValue { $0 } ?? "")")
        try await Task.sleep(for: .milliseconds(600))
        await host.leave()
        await viewer.leave()
        await server.shutdown()
        let files = recorder.finish()
        let ivf = try #require(files.first { $0.path.hasSuffix(".ivf") }?.path)

        let probe = try MediaProbe(ivf, select: "v:0")
        #expect(probe.status == 0, "\(probe.errors)")
        let video = probe.first
        #expect(video?.codec == "vp8" && video?.width == 640 && video?.height == 360)
        let decoded = video?.frames ?? 0
        #expect(Double(decoded) >= 0.95 * Double(frameCount), "ffmpeg decoded \(decoded) of \(frameCount) frames")
        let psnr = try PSNRMeasurement(ivf, reference: source, pairing: .timestamps(shortest: false))
        #expect(psnr.status == 0, "\(psnr.errors)")
        let value = try #require(psnr.average, "no PSNR in ffmpeg's output: \(psnr.errors.suffix(400))")
        #expect(value >= 30, "PSNR \(value) dB")
    }

    @Test("a 440 Hz tone pushed at 44.1 kHz mono plays out at 48 kHz with its frequency intact")
    func toneFrequency() async throws {
        let server = try await TestServer()
        let host = server.engine(), viewer = server.engine()
        try await host.enableAudio()
        host.setAudioProcessing(enabled: false)
        let played = NIOLockedValueBox<[Int16]>([])
        viewer.setRemoteAudioSink { frame in played.withLockedValue { $0 += frame.frame.int16Samples } }
        try await viewer.join(token: testToken(uid: "2001", channel: "tone"), channel: "tone", uid: "2001")
        try await host.join(token: testToken(uid: "1001", channel: "tone"), channel: "tone", uid: "1001")
        let tone = pushTone(host, frequency: 440, sampleRate: 44100)
        #expect(await eventually { played.withLockedValue { $0.count } >= 48000 * 2 * 2 })
        tone.cancel()
        await host.leave()
        await viewer.leave()
        await server.shutdown()
        let samples = played.withLockedValue { $0 }
        // One second, skipping the first half second (start of playout).
        let window = Array(samples[48000..<(48000 + 96000)])
        let frequency = dominantFrequency(window, channels: 2, sampleRate: 48000)
        #expect(abs(frequency - 440) < 2, "measured \(frequency) Hz")
        let peak = window.map { abs(Int($0)) }.max() ?? 0
        #expect(peak > 6000, "the tone kept its level (peak \(peak))")
    }

    @Test("muting a local track stops its media at the server and tells the others; unmuting resumes it")
    func localMute() async throws {
        let server = try await TestServer()
        let host = server.engine(), viewer = server.engine()
        let viewerEvents = EventLog(viewer)
        try await host.enableVideo()
        try await host.enableAudio()
        try await viewer.join(token: testToken(uid: "2001", channel: "mute"), channel: "mute", uid: "2001")
        try await host.join(token: testToken(uid: "1001", channel: "mute"), channel: "mute", uid: "1001")
        let video = pushPattern(host), tone = pushTone(host)
        defer { video.cancel(); tone.cancel() }
        #expect(await eventually { try await server.forwarded(to: "2001", from: "1001", kind: .video, in: "mute") > 20 })
        try await host.muteLocalVideoStream(true)
        let muted = await viewerEvents.wait { if case .remoteTrackMuted(let info, let muted) = $0, info.kind == .video { muted } else { nil } }
        #expect(muted == true)
        try await Task.sleep(for: .milliseconds(300))
        let videoBefore = try await server.forwarded(to: "2001", from: "1001", kind: .video, in: "mute")
        let audioBefore = try await server.forwarded(to: "2001", from: "1001", kind: .audio, in: "mute")
        try await Task.sleep(for: .seconds(1))
        let count1 = try await server.forwarded(to: "2001", from: "1001", kind: .video, in: "mute")
        #expect(count1 == videoBefore, "no video while muted")
        let count2 = try await server.forwarded(to: "2001", from: "1001", kind: .audio, in: "mute")
        #expect(count2 > audioBefore + 20, "audio goes on")
        try await host.muteLocalVideoStream(false)
        #expect(await viewerEvents.wait {
            if case .remoteTrackMuted(let info, let muted) = $0, info.kind == .video, !muted { true } else { nil }
        } == true)
        #expect(await eventually { try await server.forwarded(to: "2001", from: "1001", kind: .video, in: "mute") > videoBefore + 10 })
        await host.leave()
        await viewer.leave()
        await server.shutdown()
    }

    @Test("muteAllRemoteVideoStreams stops inbound video at the server, for present and later publishers; audio is untouched")
    func muteAllRemote() async throws {
        let server = try await TestServer()
        let host = server.engine(), viewer = server.engine(), late = server.engine()
        try await host.enableVideo()
        try await host.enableAudio()
        try await late.enableVideo()
        try await viewer.join(token: testToken(uid: "2001", channel: "all"), channel: "all", uid: "2001")
        try await host.join(token: testToken(uid: "1001", channel: "all"), channel: "all", uid: "1001")
        let video = pushPattern(host), tone = pushTone(host)
        defer { video.cancel(); tone.cancel() }
        #expect(await eventually { try await server.forwarded(to: "2001", from: "1001", kind: .video, in: "all") > 20 })
        try await viewer.muteAllRemoteVideoStreams(true)
        try await Task.sleep(for: .milliseconds(300))
        let videoBefore = try await server.forwarded(to: "2001", from: "1001", kind: .video, in: "all")
        let audioBefore = try await server.forwarded(to: "2001", from: "1001", kind: .audio, in: "all")
        try await late.join(token: testToken(uid: "3001", channel: "all"), channel: "all", uid: "3001")
        let lateVideo = pushPattern(late)
        defer { lateVideo.cancel() }
        try await Task.sleep(for: .seconds(1))
        let count3 = try await server.forwarded(to: "2001", from: "1001", kind: .video, in: "all")
        #expect(count3 == videoBefore)
        let count4 = try await server.forwarded(to: "2001", from: "3001", kind: .video, in: "all")
        #expect(count4 == 0, "a later publisher is not subscribed either")
        let count5 = try await server.forwarded(to: "2001", from: "1001", kind: .audio, in: "all")
        #expect(count5 > audioBefore + 20)
        try await viewer.muteAllRemoteVideoStreams(false)
        #expect(await eventually {
            let fromHost = try await server.forwarded(to: "2001", from: "1001", kind: .video, in: "all")
            let fromLate = try await server.forwarded(to: "2001", from: "3001", kind: .video, in: "all")
            return fromHost > videoBefore + 10 && fromLate > 10
        })
        // One user's video, by uid.
        try await viewer.muteRemoteVideoStream(uid: "3001", muted: true)
        try await Task.sleep(for: .milliseconds(300))
        let lateBefore = try await server.forwarded(to: "2001", from: "3001", kind: .video, in: "all")
        let hostBefore = try await server.forwarded(to: "2001", from: "1001", kind: .video, in: "all")
        try await Task.sleep(for: .seconds(1))
        let count6 = try await server.forwarded(to: "2001", from: "3001", kind: .video, in: "all")
        #expect(count6 == lateBefore)
        let count7 = try await server.forwarded(to: "2001", from: "1001", kind: .video, in: "all")
        #expect(count7 > hostBefore + 5)
        await late.leave()
        await host.leave()
        await viewer.leave()
        await server.shutdown()
    }

    @Test("leaving raises userOffline(quit) on the others")
    func leaveIsQuit() async throws {
        let server = try await TestServer()
        let host = server.engine(), viewer = server.engine()
        let viewerEvents = EventLog(viewer)
        try await viewer.join(token: testToken(uid: "2001", channel: "quit"), channel: "quit", uid: "2001")
        try await host.join(token: testToken(uid: "1001", channel: "quit"), channel: "quit", uid: "1001")
        #expect(await viewerEvents.wait { if case .userJoined(let uid) = $0 { uid } else { nil } } == "1001")
        await host.leave()
        let offline = await viewerEvents.wait { if case .userOffline(let uid, let reason) = $0 { (uid, reason) } else { nil } }
        #expect(offline?.0 == "1001")
        #expect(offline?.1 == .quit)
        #expect(viewer.remoteUsers.isEmpty)
        await viewer.leave()
        await server.shutdown()
    }

    @Test("killing a client process raises userOffline(dropped) within the keepalive window")
    func killedProcessIsDropped() async throws {
        let resumeWindow = 2
        let server = try await TestServer(pingInterval: 1, pingTimeout: 3, resumeWindow: resumeWindow)
        let viewer = server.engine()
        let viewerEvents = EventLog(viewer)
        try await viewer.join(token: testToken(uid: "2001", channel: "kill"), channel: "kill", uid: "2001")
        let bot = try ChildProcess([cliPath, "join", "--server", server.url, "--channel", "kill", "--uid", "3001", "--token",
                                    testToken(uid: "3001", channel: "kill"), "--quiet", "--size", "160x120"], output: .discarded, errors: .discarded)
        #expect(await viewerEvents.wait(20) { if case .userJoined(let uid) = $0 { uid } else { nil } } == "3001")
        bot.signal(SIGKILL)
        let killedAt = Date()
        let offline = await viewerEvents.wait(Double(resumeWindow + 5)) {
            if case .userOffline(let uid, let reason) = $0 { (uid, reason) } else { nil }
        }
        let elapsed = Date().timeIntervalSince(killedAt)
        #expect(offline?.0 == "3001")
        #expect(offline?.1 == .dropped)
        // The socket closes with the process; the server holds the seat for the resume window, then
        // drops it at its next once-a-second housekeeping.
        #expect(elapsed >= Double(resumeWindow) - 0.1 && elapsed <= Double(resumeWindow) + 2, "dropped after \(elapsed) s")
        await viewer.leave()
        await server.shutdown()
    }

    @Test("live broadcasting: the audience is invisible, and a broadcaster turning audience is userOffline(becameAudience)")
    func liveBroadcastingRoles() async throws {
        let server = try await TestServer()
        let host = server.engine(profile: .liveBroadcasting), audience = server.engine(role: .audience, profile: .liveBroadcasting)
        let hostEvents = EventLog(host), audienceEvents = EventLog(audience)
        try await host.enableVideo()
        try await host.join(token: testToken(uid: "1001", channel: "live"), channel: "live", uid: "1001")
        try await audience.join(token: testToken(uid: "2001", channel: "live"), channel: "live", uid: "2001")
        let video = pushPattern(host)
        defer { video.cancel() }
        #expect(await audienceEvents.wait { if case .userJoined(let uid) = $0 { uid } else { nil } } == "1001")
        #expect(await audienceEvents.wait { if case .firstRemoteVideoFrameDecoded(let uid, _, _, _) = $0 { uid } else { nil } } == "1001")
        try await host.setClientRole(.audience)
        let offline = await audienceEvents.wait { if case .userOffline(let uid, let reason) = $0 { (uid, reason) } else { nil } }
        #expect(offline?.0 == "1001")
        #expect(offline?.1 == .becameAudience)
        #expect(!hostEvents.all.contains { if case .userJoined = $0 { true } else { false } }, "the audience never shows up as a user")
        await audience.leave()
        await host.leave()
        await server.shutdown()
    }

    @Test("tokenPrivilegeWillExpire comes before expiry, and renewToken keeps the session")
    func tokenRenewal() async throws {
        let server = try await TestServer()
        let engine = server.engine()
        let events = EventLog(engine)
        // The server warns 30 s ahead: a 32 s token is warned about within about 2 s.
        try await engine.join(token: testToken(uid: "1001", channel: "token", ttl: 32), channel: "token", uid: "1001")
        let expiresAt = await events.wait(6) { if case .tokenPrivilegeWillExpire(let at) = $0 { at } else { nil } }
        #expect(expiresAt != nil)
        try await engine.renewToken(testToken(uid: "1001", channel: "token"))
        await #expect(throws: RTCEngineError.self) { try await engine.renewToken(testToken(uid: "1001", channel: "elsewhere")) }
        #expect(engine.connectionState == .connected)
        await engine.leave()
        await server.shutdown()
    }

    @Test("bad input gets typed errors: a second join, a malformed URL, a bad token, pushes while not joined")
    func badInput() async throws {
        let server = try await TestServer()
        let engine = server.engine()
        let frame = try PatternGenerator(kind: .camera, size: VideoSize(width: 64, height: 64)).frame(at: 0)
        #expect(!engine.pushVideoFrame(frame))
        #expect(!engine.pushAudioFrame(AudioFrame(samples: .int16([1, 2, 3]), sampleRate: 48000, channels: 2)))
        #expect(throws: RTCEngineError.self) { try engine.setVideoEncoderConfiguration(VideoEncoderConfiguration(frameRate: 0)) }
        await #expect(throws: RTCEngineError.self) {
            try await RTCEngine(configuration: RTCEngineConfiguration(serverURL: "http://nowhere")).join(token: "t", channel: "c", uid: "u")
        }
        let events = EventLog(engine)
        await #expect(throws: RTCEngineError.self) { try await engine.join(token: "not-a-jwt", channel: "bad", uid: "1001") }
        let failure = await events.wait { event -> ConnectionChangedReason? in
            if case .connectionStateChanged(let state, let reason) = event, state == .failed { reason } else { nil }
        }
        #expect(failure == .invalidToken)
        try await engine.join(token: testToken(uid: "1001", channel: "bad"), channel: "bad", uid: "1001")
        await #expect(throws: RTCEngineError.self) { try await engine.join(token: testToken(uid: "1001", channel: "bad"), channel: "bad", uid: "1001") }
        await #expect(throws: RTCEngineError.self) { try await engine.muteLocalVideoStream(true) }
        await engine.leave()
        await server.shutdown()
    }
}

@Suite("RTCEngine reconnect", .serialized)
struct EngineReconnectTests {
    typealias Frames = NIOLockedValueBox<[Int64]>

    /// A host (1001, on `hostProtocol`) and a viewer (2001, ours) in `channel`, each with video on
    /// and a sink stamping the frames it decodes; joined, not yet sending.
    static func streamingPair(_ server: TestServer, channel: String, hostProtocol: RTCEngineConfiguration.SignalingProtocol = .native) async throws
        -> (host: RTCEngine, viewer: RTCEngine, hostEvents: EventLog, viewerEvents: EventLog, atViewer: Frames, atHost: Frames) {
        let host = server.engine(signalingProtocol: hostProtocol), viewer = server.engine()
        let hostEvents = EventLog(host), viewerEvents = EventLog(viewer)
        try await host.enableVideo()
        try await viewer.enableVideo()
        let atViewer = Frames([]), atHost = Frames([])
        viewer.setRemoteVideoSink { _ in atViewer.withLockedValue { $0.append(MediaClock.monotonicUs()) } }
        host.setRemoteVideoSink { _ in atHost.withLockedValue { $0.append(MediaClock.monotonicUs()) } }
        try await viewer.join(token: testToken(uid: "2001", channel: channel), channel: channel, uid: "2001")
        let token = hostProtocol == .livekit ? TestServer.liveKitToken(uid: "1001", channel: channel) : testToken(uid: "1001", channel: channel)
        try await host.join(token: token, channel: channel, uid: "1001")
        return (host, viewer, hostEvents, viewerEvents, atViewer, atHost)
    }
    @Test("a dropped signaling connection resumes in the window: same identity, ICE restarts on both transports, no userOffline, media both ways")
    func resumeWithICERestart() async throws {
        let server = try await TestServer()
        let (host, viewer, hostEvents, viewerEvents, atViewer, atHost) = try await Self.streamingPair(server, channel: "resume")
        let video = [pushPattern(host), pushPattern(viewer)]
        defer { for task in video { task.cancel() } }
        #expect(await eventually { atViewer.withLockedValue { $0.count } >= 10 && atHost.withLockedValue { $0.count } >= 10 })
        let sid = try await server.app.sfu.participants(in: "resume").get().first { $0.uid == "1001" }?.sid
        let before = try await server.app.sfu.counterSnapshot.get()
        let droppedAt = MediaClock.monotonicUs()
        await host.dropSignalingConnection()
        #expect(await eventually {
            hostEvents.all.contains { if case .connectionStateChanged(.connected, .resumed) = $0 { true } else { false } }
        })
        // Both transports restarted ICE: the host's offer for its publisher transport, the server's for its subscriber one.
        #expect(await eventually { try await server.app.sfu.counterSnapshot.get().iceRestarts - before.iceRestarts == 2 })
        let restartedAt = MediaClock.monotonicUs()
        #expect(await eventually {
            atViewer.withLockedValue { $0.filter { $0 > restartedAt }.count } >= 10
                && atHost.withLockedValue { $0.filter { $0 > restartedAt }.count } >= 10
        })
        print("resume: back \(String(format: "%.2f", Double(restartedAt - droppedAt) / 1e6)) s after the drop, ICE restarted on both transports")
        // The restart itself is not mistaken for a lost path.
        #expect(!hostEvents.all.contains { if case .connectionStateChanged(_, .mediaInterrupted) = $0 { true } else { false } })
        #expect(hostEvents.all.contains { if case .connectionStateChanged(.reconnecting, .interrupted) = $0 { true } else { false } })
        #expect(!hostEvents.all.contains { if case .connectionStateChanged(_, .rejoined) = $0 { true } else { false } })
        #expect(!viewerEvents.all.contains { if case .userOffline = $0 { true } else { false } })
        #expect(try await server.app.sfu.participants(in: "resume").get().first { $0.uid == "1001" }?.sid == sid)
        #expect(host.connectionState == .connected)
        await host.leave()
        await viewer.leave()
        await server.shutdown()
    }

    @Test("LiveKit's protocol: a dropped signal connection resumes (reconnect=1, then SyncState and the publisher's re-offer): the same participant, no userOffline at the other, media both ways")
    func liveKitResume() async throws {
        let server = try await TestServer(liveKit: true)
        let (host, viewer, hostEvents, viewerEvents, atViewer, atHost) = try await Self.streamingPair(server, channel: "lkresume", hostProtocol: .livekit)
        let video = [pushPattern(host), pushPattern(viewer)]
        defer { for task in video { task.cancel() } }
        #expect(await eventually { atViewer.withLockedValue { $0.count } >= 10 && atHost.withLockedValue { $0.count } >= 10 })
        let sid = try await server.app.sfu.participants(in: "lkresume").get().first { $0.uid == "1001" }?.sid
        let droppedAt = MediaClock.monotonicUs()
        await host.dropSignalingConnection()
        #expect(await eventually {
            hostEvents.all.contains { if case .connectionStateChanged(.connected, .resumed) = $0 { true } else { false } }
        })
        let resumedAt = MediaClock.monotonicUs()
        #expect(await eventually {
            atViewer.withLockedValue { $0.filter { $0 > resumedAt }.count } >= 10
                && atHost.withLockedValue { $0.filter { $0 > resumedAt }.count } >= 10
        })
        print("LiveKit resume: resumed \(String(format: "%.2f", Double(resumedAt - droppedAt) / 1e6)) s after the drop; media both ways after it")
        #expect(!hostEvents.all.contains { if case .connectionStateChanged(_, .rejoined) = $0 { true } else { false } })
        #expect(!viewerEvents.all.contains { if case .userOffline = $0 { true } else { false } })
        #expect(try await server.app.sfu.participants(in: "lkresume").get().first { $0.uid == "1001" }?.sid == sid)
        #expect(host.connectionState == .connected)
        await host.leave()
        await viewer.leave()
        await server.shutdown()
    }

    @Test("a server restart: both clients join again and media flows within 5 s")
    func serverRestart() async throws {
        let server = try await TestServer()
        let host = server.engine(), viewer = server.engine()
        let viewerEvents = EventLog(viewer)
        try await host.enableVideo()
        let decoded = NIOLockedValueBox<[Int64]>([])
        viewer.setRemoteVideoSink { _ in decoded.withLockedValue { $0.append(MediaClock.monotonicUs()) } }
        try await viewer.join(token: testToken(uid: "2001", channel: "restart"), channel: "restart", uid: "2001")
        try await host.join(token: testToken(uid: "1001", channel: "restart"), channel: "restart", uid: "1001")
        let video = pushPattern(host)
        defer { video.cancel() }
        #expect(await eventually { decoded.withLockedValue { $0.count } >= 10 })
        let restartAt = MediaClock.monotonicUs()
        try await server.restart(downFor: 0.5)
        #expect(await eventually(10) { decoded.withLockedValue { $0 }.contains { $0 > restartAt + 600_000 } })
        let firstAfter = decoded.withLockedValue { $0 }.first { $0 > restartAt + 500_000 } ?? Int64.max
        let seconds = Double(firstAfter - restartAt) / 1e6
        print("server restart: media again \(String(format: "%.2f", seconds)) s after the restart began")
        #expect(seconds <= 5)
        #expect(viewerEvents.all.contains { if case .connectionStateChanged(.reconnecting, _) = $0 { true } else { false } })
        #expect(viewerEvents.all.contains { if case .connectionStateChanged(.connected, .rejoined) = $0 { true } else { false } })
        #expect(host.connectionState == .connected && viewer.connectionState == .connected)
        let users = try await server.app.sfu.participants(in: "restart").get().map(\.uid)
        #expect(users == ["1001", "2001"])
        await host.leave()
        await viewer.leave()
        await server.shutdown()
    }

    /// A rejoin can land on a server that takes the join and then goes away before the publish
    /// completes (one shutting down, or a node dying). That attempt failing must not end the
    /// rejoining as if the user had left: the host tries again and is back once a server is.
    @Test("a rejoin that joins but cannot publish is one failed attempt: the host joins again when the server is back")
    func rejoinPublishFailure() async throws {
        let server = try await TestServer()
        let port = server.app.signalingAddress!.port!
        let host = server.engine()
        let events = EventLog(host)
        try await host.enableVideo()
        try await host.join(token: testToken(uid: "1001", channel: "again"), channel: "again", uid: "1001")
        let video = pushPattern(host)
        defer { video.cancel() }
        await server.app.shutdown()
        // In its place, a server that takes every join and drops the connection at the publish.
        var stand: ScriptedSignalingServer?
        for _ in 0..<50 where stand == nil {
            stand = try? await ScriptedSignalingServer(group: MultiThreadedEventLoopGroup.singleton, port: port) { request in
                guard case .join(let join) = request.message else { return .init(reply: nil, closeAfter: .zero) }
                let me = ParticipantInfo(uid: join.uid, sid: "PA_stand", role: join.role, kind: .normal)
                return .init(reply: .joined(JoinResponse(participant: me, others: [])))
            }
            if stand == nil { try await Task.sleep(for: .milliseconds(100)) }
        }
        guard let stand else {
            Issue.record("port \(port) could not be bound again")
            return
        }
        #expect(await eventually(10) { stand.requests("publishTrack") >= 1 }, "joins: \(stand.requests("join"))")
        await stand.stop()
        try await server.restart()
        #expect(await eventually(15) { host.connectionState == .connected && events.all.contains {
            if case .connectionStateChanged(.connected, .rejoined) = $0 { true } else { false }
        } }, "\(host.connectionState)")
        #expect(await eventually(5) { (try? await server.app.sfu.participants(in: "again").get().map(\.uid)) == ["1001"] })
        await host.leave()
        await server.shutdown()
    }
}
