import Foundation
import NIOConcurrencyHelpers
@testable import RTCCore
@testable import RTCRecording
import RTCTestSupport
import Signaling
import Testing

/// Per-participant WebM recordings: lip sync from sender reports (measured on flashes and beeps a
/// bot publishes), playback in Chromium, a mid-stream resolution change, an unwritable folder.
@Suite("WebM recordings", .serialized)
struct WebMRecordingTests {
    static let playbackScript = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Tools/webm_playback.py").path

    /// What headless Chromium reported after playing a file to its end.
    struct Playback: Decodable {
        var frames: Int
        var totalVideoFrames: Int
        var sizes: [String]
        var audioBytes: Int?
        var error: String?
    }

    func playInChromium(_ path: String) throws -> (status: Int32, playback: Playback?, err: String) {
        let run = try runTool(["python3", Self.playbackScript, path, "--timeout", "60"], timeout: 90)
        let line = run.out.split(separator: "\n").last.map(String.init) ?? ""
        return (run.status, try? JSONDecoder().decode(Playback.self, from: Data(line.utf8)), run.err)
    }

    /// ffprobe's decoded frame count per stream type, and its error output.
    func probe(_ path: String) throws -> (video: Int?, audio: Int?, err: String) {
        let video = try MediaProbe(path, select: "v:0"), audio = try MediaProbe(path, select: "a:0")
        return (video.first?.frames, audio.first?.frames, video.errors + audio.errors)
    }

    /// Errors ffmpeg reports while decoding every frame of `path`. The output keeps the input's time
    /// base: at the null muxer's default 1/fps, WebM's millisecond timestamps can round onto one tick
    /// and ffmpeg complains about its own output, not the file.
    func decodeErrors(_ path: String) throws -> String {
        try runTool(["ffmpeg", "-hide_banner", "-nostats", "-v", "error", "-i", path, "-enc_time_base", "-1", "-f", "null", "-"]).err
    }

    /// A publisher (video and unprocessed audio) and an audience viewer whose media `recorder`
    /// records, both joined to `channel`.
    func joinPair(_ server: TestServer, recorder: ChannelRecorder, channel: String,
                  video: VideoEncoderConfiguration? = nil) async throws -> (host: RTCEngine, viewer: RTCEngine, viewerEvents: EventLog) {
        let host = server.engine(), viewer = server.engine(role: .audience)
        let viewerEvents = EventLog(viewer)
        if let video { try host.setVideoEncoderConfiguration(video) }
        recorder.attach(to: viewer)
        try await host.enableVideo()
        try await host.enableAudio()
        host.setAudioProcessing(enabled: false)
        try await viewer.join(token: testToken(uid: "2001", channel: channel), channel: channel, uid: "2001")
        try await host.join(token: testToken(uid: "1001", channel: channel), channel: channel, uid: "1001")
        return (host, viewer, viewerEvents)
    }

    func manifest(_ dir: String) throws -> [[String: Any]] {
        let data = try Data(contentsOf: URL(fileURLWithPath: "\(dir)/manifest.json"))
        let root = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        return try #require(root["files"] as? [[String: Any]])
    }

    @Test("a bot's flashes and beeps land within 40 ms of each other in the viewer's WebM, and Chromium plays the file")
    func lipSync() async throws {
        let dir = temporaryDirectory("avsync"), clipDir = temporaryDirectory("avsync-clip")
        let clip = try AVSyncProbe.writeClip(directory: clipDir, seconds: 10, fps: 30, width: 640, height: 360)
        let server = try await TestServer()
        let viewer = server.engine(role: .audience)
        let events = EventLog(viewer)
        let recorder = ChannelRecorder(directory: dir, options: ChannelRecorder.Options(layout: .webm))
        recorder.attach(to: viewer)
        try await viewer.join(token: testToken(uid: "2001", channel: "sync"), channel: "sync", uid: "2001")
        let bot = try runTool([cliPath, "join", "--server", server.url, "--channel", "sync", "--uid", "1001", "--token",
                               testToken(uid: "1001", channel: "sync"), "--video", clip.y4m, "--audio", clip.wav, "--fps", "30",
                               "--size", "640x360", "--bitrate", "1500", "--duration", "8", "--no-subscribe", "--quiet"], timeout: 60)
        #expect(bot.status == 0, "the publishing bot failed: \(bot.err)")
        #expect(await eventually { events.all.contains { if case .userOffline = $0 { true } else { false } } })
        let files = recorder.stop()
        await viewer.leave()
        await server.shutdown()

        let file = try #require(files.first { $0.format == .webm }, "no WebM among \(files.map(\.name))")
        #expect(file.name == "1001.webm" && file.hasAudio && file.synchronization == .senderReports, "\(file)")
        let onsets = try AVSyncProbe.detect(file: file.path)
        let offsets = AVSyncProbe.offsets(onsets)
        print("lip sync: \(offsets.count) flash/beep pairs, offsets ms \(offsets.map { Int(($0 * 1000).rounded()) }); "
            + "\(onsets.flashes.count) flashes, \(onsets.beeps.count) beeps")
        #expect(offsets.count >= 5, "flashes \(onsets.flashes), beeps \(onsets.beeps)")
        #expect(offsets.allSatisfy { abs($0) <= 0.040 }, "offsets \(offsets)")

        let probed = try probe(file.path)
        #expect(probed.err.isEmpty, "ffprobe: \(probed.err)")
        #expect(probed.video == file.frames, "ffprobe \(String(describing: probed.video)) frames, manifest \(file.frames)")
        let played = try playInChromium(file.path)
        let playback = try #require(played.playback, "no result from Chromium (status \(played.status)): \(played.err)")
        print("chromium: \(playback.totalVideoFrames) frames decoded (\(playback.frames) presented) of \(file.frames), sizes \(playback.sizes), "
            + "audio \(playback.audioBytes ?? 0) bytes")
        #expect(played.status == 0 && playback.error == nil, "\(played.err) \(playback)")
        #expect(Double(playback.totalVideoFrames) >= 0.95 * Double(file.frames), "\(playback.totalVideoFrames) of \(file.frames)")
        #expect((playback.audioBytes ?? 0) > 0)
    }

    @Test("a resolution change mid-stream (360p to 720p) stays in one WebM that ffmpeg decodes and Chromium plays through")
    func resolutionChange() async throws {
        let dir = temporaryDirectory("resize")
        let server = try await TestServer()
        let recorder = ChannelRecorder(directory: dir, options: ChannelRecorder.Options(layout: .webm))
        let (host, viewer, viewerEvents) = try await joinPair(
            server, recorder: recorder, channel: "resize",
            video: VideoEncoderConfiguration(dimensions: VideoSize(width: 640, height: 360), frameRate: 15, bitrateKbps: 1500,
                                             degradationPreference: .maintainResolution))
        #expect(await viewerEvents.wait { if case .remoteTrackPublished(let info) = $0, info.kind == .video { true } else { nil } } == true)
        let tone = pushTone(host)
        var video = pushPattern(host, size: VideoSize(width: 640, height: 360))
        try await Task.sleep(for: .seconds(3))
        video.cancel()
        try host.setVideoEncoderConfiguration(VideoEncoderConfiguration(dimensions: VideoSize(width: 1280, height: 720), frameRate: 15,
                                                                        bitrateKbps: 1500, degradationPreference: .maintainResolution))
        video = pushPattern(host, size: VideoSize(width: 1280, height: 720))
        try await Task.sleep(for: .seconds(3))
        video.cancel()
        tone.cancel()
        try await Task.sleep(for: .milliseconds(500))
        let files = recorder.stop()
        await host.leave()
        await viewer.leave()
        await server.shutdown()

        let file = try #require(files.first { $0.format == .webm })
        #expect(files.count == 1, "\(files.map(\.name))")
        let probed = try probe(file.path)
        #expect(probed.err.isEmpty && probed.video == file.frames, "ffprobe: \(probed), manifest \(file.frames)")
        #expect(try decodeErrors(file.path).isEmpty)
        let sizes = try runTool(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "frame=width,height", "-of", "csv=p=0",
                                 file.path]).out
        #expect(sizes.contains("640,360") && sizes.contains("1280,720"), "decoded sizes: \(Set(sizes.split(separator: "\n")))")
        let played = try playInChromium(file.path)
        let playback = try #require(played.playback, "no result from Chromium (status \(played.status)): \(played.err)")
        print("resize: \(file.frames) frames; chromium decoded \(playback.totalVideoFrames), sizes \(playback.sizes)")
        #expect(played.status == 0 && playback.error == nil, "\(played.err) \(playback)")
        #expect(playback.sizes.contains("640x360") && playback.sizes.contains("1280x720"), "\(playback.sizes)")
        #expect(Double(playback.totalVideoFrames) >= 0.95 * Double(file.frames), "\(playback.totalVideoFrames) of \(file.frames)")
    }

    @Test("an unwritable folder: one error per file on onError and on the engine's events, media keeps flowing")
    func unwritableFolder() async throws {
        let dir = temporaryDirectory("readonly")
        let mount = try runTool(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", dir])
        guard mount.status == 0 else {
            withKnownIssue("cannot mount a tmpfs here (needs root): \(mount.err)") { Issue.record("mount failed") }
            return
        }
        defer { _ = try? runTool(["umount", dir]) }
        let server = try await TestServer()
        let recorder = ChannelRecorder(directory: dir, options: ChannelRecorder.Options(layout: .both))
        let reported = NIOLockedValueBox<[ChannelRecorder.Failure]>([])
        recorder.onError = { failure in reported.withLockedValue { $0.append(failure) } }
        let (host, viewer, viewerEvents) = try await joinPair(server, recorder: recorder, channel: "ro")
        let tone = pushTone(host), video = pushPattern(host)
        #expect(await eventually(15) { reported.withLockedValue { $0 }.count >= 3 }, "\(reported.withLockedValue { $0.map(\.message) })")
        let before = try await server.forwarded(to: "2001", from: "1001", in: "ro")
        try await Task.sleep(for: .seconds(2))
        #expect(try await server.forwarded(to: "2001", from: "1001", in: "ro") > before, "media stopped")
        video.cancel()
        tone.cancel()
        let files = recorder.stop()
        await host.leave()
        await viewer.leave()
        await server.shutdown()

        let failures = reported.withLockedValue { $0 }
        // One per file (the IVF, the WAV, the WebM), not one per frame.
        #expect(failures.count == 3, "\(failures.map(\.message))")
        #expect(failures.allSatisfy { $0.message.contains("Read-only file system") && $0.file.ended == .writeFailed }, "\(failures.map(\.message))")
        #expect(Set(files.map(\.format)) == [.ivf, .wav, .webm] && files.allSatisfy { $0.ended == .writeFailed })
        let engineErrors = viewerEvents.all.compactMap { if case .error(let error) = $0, error.code == .recording { error } else { nil } }
        #expect(engineErrors.count == 3, "\(engineErrors)")
        print("unwritable: \(failures.first?.message ?? "-")")
    }
}
