import Foundation
import NIOConcurrencyHelpers
@testable import RTCCore
@testable import RTCRecording
import RTCTestSupport
import Signaling
import Testing

/// `ChannelRecorder`: segments instead of overwrites, the manifest, a full disk, a killed bot.
@Suite("Recordings", .serialized)
struct RecordingTests {
    static let size = VideoSize(width: 640, height: 360)

    /// A publisher engine sending 640x360 at 15 fps.
    func publisher(_ server: TestServer) throws -> RTCEngine {
        let host = server.engine()
        try host.setVideoEncoderConfiguration(VideoEncoderConfiguration(dimensions: Self.size, frameRate: 15, bitrateKbps: 1200,
                                                                        degradationPreference: .maintainFramerate))
        return host
    }

    /// Pushes `count` frames of the camera pattern at 15 fps (frame i at i/15 s); `pushed` counts them.
    func push(_ engine: RTCEngine, count: Int, pushed: NIOLockedValueBox<Int>? = nil) async throws {
        let generator = try PatternGenerator(kind: .camera, size: Self.size, frameRate: FrameRate(15))
        // Paced on a thread of its own, each frame stamped index × 66.7 ms from the first; a
        // cancelled task stops it.
        let source = PacedSource(frames: count, fps: 15, frame: { generator.frame(at: $0) }, push: { frame in
            _ = engine.pushVideoFrame(frame)
            pushed?.withLockedValue { $0 += 1 }
        })
        await withTaskCancellationHandler { await source.finished() } onCancel: { source.stop() }
    }

    /// Walks an IVF's frame headers: the frames it holds and whether the file ends exactly after
    /// the last one (no partial frame).
    func ivfLayout(_ path: String) throws -> (frames: Int, declared: Int, exact: Bool) {
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        guard bytes.count >= 32 else { return (0, 0, false) }
        func le32(_ at: Int) -> Int { Int(bytes[at]) | Int(bytes[at + 1]) << 8 | Int(bytes[at + 2]) << 16 | Int(bytes[at + 3]) << 24 }
        var offset = 32, frames = 0
        while offset + 12 <= bytes.count {
            let next = offset + 12 + le32(offset)
            if next > bytes.count { break }
            offset = next
            frames += 1
        }
        return (frames, le32(24), offset == bytes.count)
    }

    func manifest(_ dir: String) throws -> [[String: Any]] {
        let data = try Data(contentsOf: URL(fileURLWithPath: "\(dir)/manifest.json"))
        let root = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        return try #require(root["files"] as? [[String: Any]])
    }

    @Test("a publisher that leaves and joins again is recorded as two segments (IVF and WebM), nothing overwritten, both listed as left")
    func republishMakesSegments() async throws {
        let dir = temporaryDirectory("republish"), source = temporaryDirectory("republish-source") + "/source.y4m"
        let generator = try PatternGenerator(kind: .camera, size: Self.size, frameRate: FrameRate(15))
        let y4m = try Y4MWriter(path: source, header: Y4MHeader(width: 640, height: 360, frameRate: FrameRate(15)))
        for index in 0..<90 { try y4m.write(generator.frame(at: index)) }
        try y4m.finish()

        let server = try await TestServer()
        let viewer = server.engine()
        let viewerEvents = EventLog(viewer)
        let recorder = ChannelRecorder(directory: dir, options: ChannelRecorder.Options(layout: .both))
        recorder.attach(to: viewer)
        try await viewer.join(token: testToken(uid: "2001", channel: "rejoin"), channel: "rejoin", uid: "2001")
        let sessions = [90, 45]
        for (number, frames) in sessions.enumerated() {
            let host = try publisher(server)
            try await host.enableVideo()
            try await host.join(token: testToken(uid: "1001", channel: "rejoin"), channel: "rejoin", uid: "1001")
            #expect(await eventually {
                viewerEvents.all.filter { if case .remoteTrackPublished(let info) = $0 { info.kind == .video } else { false } }.count > number
            })
            #expect(await eventually { await viewer.subscriberTransportState() == .connected })
            try await Task.sleep(for: .milliseconds(400))
            try await push(host, count: frames)
            try await Task.sleep(for: .milliseconds(600))
            await host.leave()
            #expect(await eventually { viewerEvents.all.filter { if case .userOffline = $0 { true } else { false } }.count > number })
        }
        try await Task.sleep(for: .milliseconds(300))
        let all = recorder.stop()
        await viewer.leave()
        await server.shutdown()

        let names = all.map(\.name)
        #expect(Set(names) == ["1001-camera.ivf", "1001-camera.2.ivf", "1001.webm", "1001.2.webm"], "\(names)")
        let allEntries = try manifest(dir)
        let webms = all.filter { $0.format == .webm }.sorted { $0.segment < $1.segment }
        #expect(webms.map(\.ended) == [.left, .stopped] || webms.map(\.ended) == [.left, .left], "\(webms.map(\.ended))")
        for (index, file) in webms.enumerated() {
            let probe = try MediaProbe(file.path)
            let frames = try #require(probe.frames, "ffprobe failed on \(file.name): \(probe.errors)")
            #expect(frames == file.frames && frames >= (index == 0 ? 80 : 38), "\(file.name): ffprobe \(frames), recorder \(file.frames)")
            let quality = try #require(try PSNRMeasurement(file.path, reference: source, pairing: .index(fps: 15)).average,
                                       "no PSNR for \(file.name)")
            #expect(quality >= 30, "\(file.name): PSNR \(quality) dB")
            print("republish: \(file.name) \(frames) of \(sessions[index]) frames pushed, PSNR \(quality) dB, ended \(file.ended?.rawValue ?? "-")")
        }
        let files = all.filter { $0.format == .ivf }
        let entries = allEntries.filter { $0["format"] as? String == "ivf" }
        #expect(entries.map { $0["path"] as? String } == ["1001-camera.ivf", "1001-camera.2.ivf"])
        #expect(entries.first?["ended"] as? String == "left")
        #expect(entries.allSatisfy { $0["uid"] as? String == "1001" && $0["source"] as? String == "camera" && $0["codec"] as? String == "vp8" })
        #expect(entries.allSatisfy { ($0["firstArrivalMs"] as? Int64 ?? 0) > 1_600_000_000_000 })
        var total = 0
        for (index, file) in files.enumerated() {
            let probe = try MediaProbe(file.path)
            let frames = try #require(probe.frames, "ffprobe failed on \(file.name): \(probe.errors)")
            #expect(frames == file.frames, "\(file.name): ffprobe \(frames), recorder \(file.frames)")
            #expect(entries[index]["frames"] as? Int == file.frames)
            let minimum = index == 0 ? 80 : 38
            #expect(frames >= minimum, "\(file.name): \(frames) of \(sessions[index]) frames")
            total += frames
            let quality = try #require(try PSNRMeasurement(file.path, reference: source).average, "no PSNR for \(file.name)")
            #expect(quality >= 30, "\(file.name): PSNR \(quality) dB")
            print("republish: \(file.name) \(frames) of \(sessions[index]) frames pushed, PSNR \(quality) dB, ended \(file.ended?.rawValue ?? "-")")
        }
        #expect(Double(total) >= 0.9 * Double(sessions.reduce(0, +)), "\(total) of \(sessions.reduce(0, +)) frames")
    }

    @Test("files already in the folder are never overwritten: the recording takes the next free number")
    func existingFilesAreKept() throws {
        let dir = temporaryDirectory("existing")
        let precious = Data("not a recording".utf8)
        try precious.write(to: URL(fileURLWithPath: "\(dir)/1001-camera.ivf"))
        try precious.write(to: URL(fileURLWithPath: "\(dir)/1001-camera.2.ivf"))
        try Data("{\"old\": true}".utf8).write(to: URL(fileURLWithPath: "\(dir)/manifest.json"))
        let state = RecorderState(directory: dir, options: ChannelRecorder.Options(), report: { _ in }, note: { _ in })
        func frame(_ sid: String, _ index: Int) -> RemoteEncodedVideoFrame {
            RemoteEncodedVideoFrame(uid: "1001", trackSid: sid, source: .camera, data: [0x10, 0x02, 0x00, 0x9D, 0x01, 0x2A],
                                    isKeyframe: index == 0, rtpTimestamp: UInt32(index * 6000), width: 64, height: 48)
        }
        for index in 0..<5 { state.record(frame("TR_a", index)) }
        for index in 0..<3 { state.record(frame("TR_b", index)) }
        // A uid with a quote, a backslash and a newline: a safe file name, and valid JSON in the manifest.
        var odd = frame("TR_c", 0)
        odd.uid = "x\"y\\z\n"
        state.record(odd)
        let files = state.stop()
        #expect(files.map(\.name) == ["1001-camera.3.ivf", "1001-camera.4.ivf", "x_y_z_-camera.ivf"])
        #expect(files.map(\.frames) == [5, 3, 1])
        #expect(files.map(\.ended) == [.republished, .stopped, .stopped])
        for name in ["1001-camera.ivf", "1001-camera.2.ivf"] {
            #expect(try Data(contentsOf: URL(fileURLWithPath: "\(dir)/\(name)")) == precious, "\(name) was changed")
        }
        #expect(try String(contentsOfFile: "\(dir)/manifest.2.json", encoding: .utf8) == "{\"old\": true}")
        let entries = try manifest(dir)
        #expect(entries.map { $0["path"] as? String } == ["1001-camera.3.ivf", "1001-camera.4.ivf", "x_y_z_-camera.ivf"])
        #expect(entries.map { $0["frames"] as? Int } == [5, 3, 1])
        #expect(entries.last?["uid"] as? String == "x\"y\\z\n")
        let layout = try ivfLayout("\(dir)/1001-camera.3.ivf")
        #expect(layout.frames == 5 && layout.declared == 5 && layout.exact)
        #expect(!FileManager.default.fileExists(atPath: "\(dir)/.recorder-reserve"))
        // Names with quotes and control characters stay valid JSON.
        #expect(RecordingManifest.string("a\"b\\c\n\u{1}") == "\"a\\\"b\\\\c\\n\\u0001\"")
    }

    @Test("a full disk ends the file at its last whole frame (IVF) or cluster (WebM), reports it once, and the manifest says diskFull",
          arguments: [ChannelRecorder.Options.Layout.tracks, .webm])
    func diskFull(layout: ChannelRecorder.Options.Layout) async throws {
        let dir = temporaryDirectory("full")
        let mount = try runTool(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", dir])
        guard mount.status == 0 else {
            withKnownIssue("cannot mount a tmpfs here (needs root): \(mount.err)") { Issue.record("mount failed") }
            return
        }
        defer { _ = try? runTool(["umount", dir]) }
        let server = try await TestServer()
        let host = try publisher(server), viewer = server.engine()
        let viewerEvents = EventLog(viewer)
        let recorder = ChannelRecorder(directory: dir, options: ChannelRecorder.Options(layout: layout))
        let reported = NIOLockedValueBox<[ChannelRecorder.Failure]>([])
        recorder.onError = { failure in reported.withLockedValue { $0.append(failure) } }
        recorder.attach(to: viewer)
        try await host.enableVideo()
        try await viewer.join(token: testToken(uid: "2001", channel: "full"), channel: "full", uid: "2001")
        try await host.join(token: testToken(uid: "1001", channel: "full"), channel: "full", uid: "1001")
        #expect(await viewerEvents.wait { if case .remoteTrackPublished(let info) = $0, info.kind == .video { true } else { nil } } == true)
        let video = pushPattern(host, size: Self.size)
        #expect(await eventually(15) { !reported.withLockedValue { $0 }.isEmpty }, "the disk never filled")
        // The viewer keeps receiving: the engine is not affected.
        let before = try await server.forwarded(to: "2001", from: "1001", in: "full")
        try await Task.sleep(for: .milliseconds(500))
        #expect(try await server.forwarded(to: "2001", from: "1001", in: "full") > before)
        video.cancel()
        let files = recorder.stop()
        await host.leave()
        await viewer.leave()
        await server.shutdown()

        let failures = reported.withLockedValue { $0 }
        #expect(failures.count == 1, "\(failures.map(\.message))")
        #expect(failures.first?.file.ended == .diskFull)
        print("disk full (\(layout.rawValue)): \(failures.first?.message ?? "-")")
        let file = try #require(files.first)
        #expect(file.ended == .diskFull && file.error?.contains("No space left") == true, "\(file)")
        let entries = try manifest(dir)
        #expect(entries.first?["ended"] as? String == "diskFull")
        #expect(entries.first?["frames"] as? Int == file.frames)
        #expect((entries.first?["error"] as? String)?.isEmpty == false)
        if layout == .tracks {
            let ivf = try ivfLayout(file.path)
            #expect(ivf.exact && ivf.frames == file.frames && ivf.declared == file.frames, "\(ivf) vs \(file.frames)")
        } else {
            let decode = try runTool(["ffmpeg", "-hide_banner", "-nostats", "-v", "error", "-i", file.path, "-enc_time_base", "-1", "-f", "null", "-"])
            #expect(decode.err.isEmpty, "decoding the WebM: \(decode.err)")
        }
        let probe = try MediaProbe(file.path)
        #expect(probe.frames == file.frames, "ffprobe: \(probe)")
        #expect(file.frames > 10)
    }

    @Test("a recording bot killed with SIGKILL 6 s in leaves files (IVF, WAV, WebM) ffprobe reads, with no partial frame at the end")
    func killedBotKeepsItsFiles() async throws {
        let dir = temporaryDirectory("killed")
        let server = try await TestServer(pingInterval: 1, pingTimeout: 3, resumeWindow: 2)
        let host = try publisher(server)
        let hostEvents = EventLog(host)
        try await host.enableVideo()
        try await host.enableAudio()
        host.setAudioProcessing(enabled: false)
        try await host.join(token: testToken(uid: "1001", channel: "kill"), channel: "kill", uid: "1001")
        let bot = try ChildProcess([cliPath, "join", "--server", server.url, "--channel", "kill", "--uid", "2001", "--token",
                                    testToken(uid: "2001", channel: "kill"), "--video", "none", "--audio", "none", "--quiet", "--record", dir,
                                    "--record-format", "both"], output: .discarded, errors: .discarded)
        #expect(await hostEvents.wait(20) { if case .userJoined(let uid) = $0 { uid } else { nil } } == "2001")
        // The bot's subscription is set up (its transport connected) when the host's audio reaches
        // it; only then the frames counted start.
        let tone = pushTone(host)
        #expect(await eventually(15) { try await server.forwarded(to: "2001", from: "1001", kind: .audio, in: "kill") > 0 })
        let pushed = NIOLockedValueBox(0)
        let video = Task { try await push(host, count: 15 * 10, pushed: pushed) }
        try await Task.sleep(for: .milliseconds(6000))
        bot.signal(SIGKILL)
        let sent = pushed.withLockedValue { $0 }
        _ = await bot.wait(30)
        video.cancel()
        tone.cancel()
        await host.leave()
        await server.shutdown()

        let ivf = "\(dir)/1001-camera.ivf", wav = "\(dir)/1001-microphone.wav"
        let layout = try ivfLayout(ivf)
        #expect(layout.exact, "the IVF ends inside a frame")
        #expect(Double(layout.frames) >= 0.8 * Double(sent), "kept \(layout.frames) of \(sent) frames sent before the kill")
        let probe = try MediaProbe(ivf)
        #expect(probe.frames == layout.frames, "ffprobe: \(probe)")
        let audio = try MediaProbe(wav)
        #expect(audio.frames != nil, "ffprobe on the WAV: \(audio.errors)")
        let webm = "\(dir)/1001.webm"
        let muxed = try MediaProbe(webm, select: "v:0"), muxedAudio = try MediaProbe(webm, select: "a:0", count: .packets)
        #expect(muxed.errors.isEmpty && muxedAudio.errors.isEmpty, "ffprobe on the WebM: \(muxed.errors) \(muxedAudio.errors)")
        let webmFrames = muxed.first?.frames ?? 0
        #expect(Double(webmFrames) >= 0.8 * Double(sent), "the WebM kept \(webmFrames) of \(sent) frames sent before the kill")
        let decode = try runTool(["ffmpeg", "-hide_banner", "-nostats", "-v", "error", "-i", webm, "-enc_time_base", "-1", "-f", "null", "-"])
        #expect(decode.err.isEmpty, "decoding the WebM: \(decode.err)")
        let entries = try manifest(dir)
        #expect(Set(entries.compactMap { $0["path"] as? String }) == ["1001-camera.ivf", "1001-microphone.wav", "1001.webm"])
        print("SIGKILL: IVF kept \(layout.frames) of \(sent) frames sent (header declares \(layout.declared)); WAV \(audio.frames ?? 0) audio frames; "
            + "WebM \(webmFrames) frames and \(muxedAudio.first?.packets.map(String.init) ?? "") Opus packets")
    }
}
