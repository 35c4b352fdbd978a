import Foundation
import RTCCore
import RTCTestSupport
import Testing

/// Headless Chromium as a peer (Debian's chromium, chromium-driver and python3-selenium, driven by
/// `Tests/Tools/browser_peer.py`): the web client (`Web/`, served by the server) watching, publishing
/// and sharing with Swift bots (`rtc-cli join`) on the other side, and a plain-JS peer that is not our
/// SDK publishing with Chrome's default offer.
@Suite("Browsers as peers (headless Chromium)", .serialized)
struct BrowserTests {
    static let tools = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Tools")
    static let driver = tools.appendingPathComponent("browser_peer.py").path
    static let firefoxDriver = tools.appendingPathComponent("firefox_peer.py").path
    let dir = temporaryDirectory("browser")

    /// One run of the driver: its exit status, its JSON, and its error output.
    struct Run: @unchecked Sendable {  // the parsed JSON is read only
        var status: Int32
        var json: [String: Any]
        var err: String

        var ok: Bool { status == 0 && json["ok"] as? Bool == true }
        var videos: [[String: Any]] { json["videos"] as? [[String: Any]] ?? [] }
        func video(source: String) -> [String: Any]? { videos.first { $0["source"] as? String == source } }
        var summary: String {
            let fields = ["ok", "reason", "error", "status", "videos", "outbound", "captureMethod", "setRemoteDescriptionError", "serverErrors"]
            return fields.compactMap { key in json[key].map { "\(key)=\($0)" } }.joined(separator: " ") + (status == 2 ? " \(err)" : "")
        }
    }

    func browser(_ arguments: [String], driver: String = BrowserTests.driver, timeout: Double = 90) throws -> Run {
        let run = try runTool(["python3", driver] + arguments, timeout: timeout)
        let line = run.out.split(separator: "\n").last.map(String.init) ?? ""
        let json = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] ?? [:]
        return Run(status: run.status, json: json, err: String(run.err.suffix(2000)))
    }

    /// `rtc-cli join` as a background bot; its output goes to a file in `dir`.
    func bot(_ server: TestServer, channel: String, uid: String, _ extra: [String]) throws -> ChildProcess {
        let log = "\(dir)/\(channel)-\(uid).log"
        return try ChildProcess([cliPath, "join", "--server", server.url, "--channel", channel, "--uid", uid, "--secret", TestServer.secret,
                                 "--quiet"] + extra, output: .file(log), errors: .file(log))
    }

    /// Stops a bot as an operator would (SIGTERM: it leaves and closes its recordings) and waits
    /// (SIGKILL after 30 s).
    func stop(_ process: ChildProcess) {
        process.stop(grace: 30)
    }

    /// ffprobe's decoded frames (of the first stream), size and codecs of a file's streams.
    func probe(_ path: String) throws -> (videoFrames: Int, size: String, codecs: [String]) {
        let probe = try MediaProbe(path)
        return (probe.first?.frames ?? 0, probe.video?.size ?? "?x?", probe.codecs)
    }

    func page(_ server: TestServer, _ query: String) -> String { "\(server.httpURL)/?\(query)" }

    @Test("the page watches a Swift bot's camera and its _sub screen share; a Swift bot and the page watch the same share side by side")
    func watch() async throws {
        let server = try await TestServer(webRoot: TestServer.webRoot, devTokens: true)
        let host = try bot(server, channel: "web-watch", uid: "1001", ["--size", "640x360", "--audio", "tone", "--no-subscribe", "--duration", "60"])
        let share = try bot(server, channel: "web-watch", uid: "1001_sub", ["--source", "pattern", "--duration", "60"])
        defer { stop(host); stop(share) }
        #expect(await eventually(15) { (try? await server.app.sfu.participants(in: "web-watch").get().flatMap(\.tracks).count) ?? 0 >= 3 })
        // The Swift side of the comparison: a bot watching only the share, started with the page.
        let swiftViewer = try bot(server, channel: "web-watch", uid: "swift-viewer",
                                  ["--video", "none", "--audio", "none", "--record", "\(dir)/watch-swift", "--record-uid", "1001_sub",
                                   "--duration", "12"])
        defer { stop(swiftViewer) }
        let run = try browser([page(server, "channel=web-watch&uid=web1&mode=watch"), "--expect-videos", "2", "--min-frames", "60",
                               "--seconds", "45"])
        #expect(run.ok, "\(run.summary)")
        let camera = try #require(run.video(source: "camera"), "\(run.summary)")
        let screen = try #require(run.video(source: "screen"), "\(run.summary)")
        #expect(camera["uid"] as? String == "1001" && screen["uid"] as? String == "1001_sub")
        #expect((camera["frames"] as? Int ?? 0) >= 60 && (screen["frames"] as? Int ?? 0) >= 60, "\(run.summary)")
        #expect(screen["width"] as? Int == 1280 && screen["height"] as? Int == 720, "\(run.summary)")
        print("browser watch: camera \(camera["frames"] ?? "?") frames \(camera["width"] ?? "?")x\(camera["height"] ?? "?"), "
              + "screen \(screen["frames"] ?? "?") frames 1280x720, first frames at \(camera["firstFrameMs"] ?? "?")/\(screen["firstFrameMs"] ?? "?") ms")
        stop(swiftViewer)
        let recorded = try probe("\(dir)/watch-swift/1001_sub-screen.ivf")
        #expect(recorded.videoFrames >= 60 && recorded.size == "1280x720", "the Swift viewer's share: \(recorded)")
        await server.shutdown()
    }

    @Test("the page publishes camera and mic, a Swift bot records them; the page never shows its own _sub share")
    func publish() async throws {
        let server = try await TestServer(webRoot: TestServer.webRoot, devTokens: true)
        // A Swift share for the browser's uid: the owner filter must hide it from the browser owner.
        // The server takes it once its owner (the page) is in: it waits for the page.
        let share = try bot(server, channel: "web-pub", uid: "3001_sub", ["--source", "pattern", "--duration", "60", "--owner-wait", "60"])
        let recorder = try bot(server, channel: "web-pub", uid: "rec", ["--video", "none", "--audio", "none", "--record", "\(dir)/pub",
                                                                         "--record-format", "both", "--record-uid", "3001", "--duration", "60"])
        defer { stop(share); stop(recorder) }
        #expect(await eventually(15) { (try? await server.app.sfu.participants(in: "web-pub").get().count) ?? 0 >= 1 })
        let browsing = Task { try browser([page(server, "channel=web-pub&uid=3001&mode=publish"), "--expect-sent", "60", "--hold", "4", "--seconds", "45"]) }
        // The share joins while the page is in, so the page runs beside its own share.
        #expect(await eventually(30) {
            (try? await server.app.sfu.participants(in: "web-pub").get())?.contains { $0.uid == "3001_sub" && !$0.tracks.isEmpty } ?? false
        }, "the page's own share never joined beside it")
        let run = try await browsing.value
        #expect(run.ok, "\(run.summary)")
        #expect(!run.videos.contains { $0["uid"] as? String == "3001_sub" }, "the owner's own share reached the page: \(run.summary)")
        #expect(try await server.forwarded(to: "3001", from: "3001_sub", in: "web-pub") == 0)
        stop(recorder)
        let video = try probe("\(dir)/pub/3001-camera.ivf")
        #expect(video.videoFrames >= 60 && video.codecs == ["vp8"], "the browser's camera as recorded: \(video)")
        let webm = try probe("\(dir)/pub/3001.webm")
        #expect(webm.codecs.contains("vp8") && webm.codecs.contains("opus"), "the browser's WebM: \(webm)")
        let audio = try probe("\(dir)/pub/3001-microphone.wav")
        #expect(audio.codecs == ["pcm_s16le"], "the browser's microphone: \(audio)")
        print("browser publish: recorded \(video.videoFrames) frames at \(video.size), WebM streams \(webm.codecs)")
        await server.shutdown()
    }

    @Test("the server restarts under the page publishing its camera: the page joins again by itself and publishes again, and a Swift viewer decodes its camera again")
    func rejoinAfterRestart() async throws {
        let server = try await TestServer(webRoot: TestServer.webRoot, devTokens: true)
        let frameLog = "\(dir)/web-rejoin-frames.txt"
        let viewer = try bot(server, channel: "web-rejoin", uid: "view", ["--video", "none", "--audio", "none", "--frame-log", frameLog,
                                                                         "--duration", "90"])
        defer { stop(viewer) }
        func frames() -> [Int64] {
            ((try? String(contentsOfFile: frameLog, encoding: .utf8)) ?? "").split(separator: "\n").compactMap { Int64($0.split(separator: " ").first ?? "") }
        }
        let browsing = Task { try browser([page(server, "channel=web-rejoin&uid=3101&mode=publish"), "--expect-sent", "30", "--hold", "25",
                                           "--seconds", "70"], timeout: 120) }
        #expect(await eventually(40) { frames().count >= 30 }, "the viewer never decoded the page's camera")
        let restartAt = MediaClock.monotonicUs()
        try await server.restart(downFor: 0.5)
        // Both sides join the new server by themselves; the page publishes its camera again.
        #expect(await eventually(25) { frames().filter { $0 > restartAt + 1_000_000 }.count >= 30 },
                "frames after the restart: \(frames().filter { $0 > restartAt }.count)")
        let after = frames().filter { $0 > restartAt + 500_000 }
        if let first = after.first {
            print("browser rejoin: the viewer decoded the page's camera again \(String(format: "%.2f", Double(first - restartAt) / 1e6)) s after the restart began")
        }
        let run = try await browsing.value
        #expect(run.ok, "\(run.summary)")
        #expect((run.json["rejoins"] as? Int ?? 0) >= 1 && run.json["left"] is NSNull, "rejoins \(run.json["rejoins"] ?? "-"), left \(run.json["left"] ?? "-")")
        await server.shutdown()
    }

    @Test("the page shares its screen as <uid>_sub and a Swift viewer records it at 1280x720")
    func share() async throws {
        let server = try await TestServer(webRoot: TestServer.webRoot, devTokens: true)
        let recorder = try bot(server, channel: "web-share", uid: "rec", ["--video", "none", "--audio", "none", "--record", "\(dir)/share",
                                                                           "--duration", "60"])
        defer { stop(recorder) }
        let run = try browser([page(server, "channel=web-share&uid=4001&mode=share"), "--expect-sent", "60", "--hold", "4", "--seconds", "45"])
        #expect(run.ok, "\(run.summary)")
        stop(recorder)
        let recorded = try probe("\(dir)/share/4001_sub-screen.ivf")
        #expect(recorded.videoFrames >= 60 && recorded.size == "1280x720", "the browser's share as recorded: \(recorded)")
        print("browser share (\(run.json["captureMethod"] ?? "?")): recorded \(recorded.videoFrames) frames at \(recorded.size)")
        await server.shutdown()
    }

    @Test("a plain-JS peer (not our SDK) publishes with Chrome's default offer, and a Swift bot records it")
    func rawPublisher() async throws {
        let server = try await TestServer(webRoot: TestServer.webRoot)
        let recorder = try bot(server, channel: "web-raw", uid: "rec", ["--video", "none", "--audio", "none", "--record", "\(dir)/raw",
                                                                         "--duration", "60"])
        defer { stop(recorder) }
        let run = try browser(["\(server.httpURL)/healthz", "--raw-publish", server.url, "--channel", "web-raw", "--uid", "5001",
                               "--token", testToken(uid: "5001", channel: "web-raw"), "--seconds", "10"])
        #expect(run.ok, "\(run.summary)")
        #expect(run.json["setRemoteDescriptionError"] is NSNull || run.json["setRemoteDescriptionError"] == nil, "\(run.summary)")
        stop(recorder)
        let recorded = try probe("\(dir)/raw/5001-camera.ivf")
        #expect(recorded.videoFrames >= 60, "the plain-JS peer's camera as recorded: \(recorded)")
        print("raw-JS publisher: recorded \(recorded.videoFrames) frames at \(recorded.size)")
        await server.shutdown()
    }

    @Test("Chromium publishes three simulcast encodings (sendEncodings q, h, f): a Swift viewer gets the largest, one asking for .low the smallest, each as one stream")
    func rawSimulcast() async throws {
        let server = try await TestServer(webRoot: TestServer.webRoot)
        let high = try bot(server, channel: "web-sim", uid: "high", ["--video", "none", "--audio", "none", "--frame-log", "\(dir)/high.log",
                                                                      "--duration", "60"])
        defer { stop(high) }
        let low = try bot(server, channel: "web-sim", uid: "low", ["--video", "none", "--audio", "none", "--stream-type", "low",
                                                                    "--frame-log", "\(dir)/low.log", "--duration", "60"])
        defer { stop(low) }
        let run = try browser(["\(server.httpURL)/healthz", "--raw-publish", server.url, "--channel", "web-sim", "--uid", "5002",
                               "--token", testToken(uid: "5002", channel: "web-sim"), "--raw-simulcast", "--seconds", "14"])
        #expect(run.ok, "\(run.summary)")
        stop(high)
        stop(low)
        let outbound = run.json["outbound"] as? [String: Any] ?? [:]
        let sentLayers = ["q", "h", "f"].filter { ((outbound["video-\($0)"] as? [String: Any])?["packetsSent"] as? Int ?? 0) > 0 }
        func sizes(_ path: String) -> [(Int, Int)] {
            ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").compactMap { line in
                let parts = line.split(separator: " ")
                return parts.count == 4 ? Int(parts[2]).flatMap { w in Int(parts[3]).map { (w, $0) } } : nil
            }
        }
        let highSizes = sizes("\(dir)/high.log"), lowSizes = sizes("\(dir)/low.log")
        let highWidest = highSizes.map(\.0).max() ?? 0, lowWidest = lowSizes.suffix(60).map(\.0).max() ?? 0
        print("Chromium simulcast: layers sent \(sentLayers); the default viewer decoded \(highSizes.count) frames up to \(highWidest) wide, "
            + "the .low viewer \(lowSizes.count) frames, its last 60 at most \(lowWidest) wide")
        #expect(sentLayers.count >= 2, "\(outbound)")
        #expect(highSizes.count >= 100 && lowSizes.count >= 100, "frames: \(highSizes.count) and \(lowSizes.count)")
        #expect(highWidest >= 640 && lowWidest <= 320 && lowWidest > 0, "widths \(highWidest) and \(lowWidest)")
        await server.shutdown()
    }

    @Test("a page opened with a bad token shows the server's error text")
    func badToken() async throws {
        let server = try await TestServer(webRoot: TestServer.webRoot)
        let run = try browser([page(server, "channel=web-bad&uid=6001&mode=watch&token=not-a-token"), "--expect-error", "JWT",
                               "--seconds", "20"])
        #expect(run.ok, "\(run.summary)")
        let error = run.json["error"] as? String ?? ""
        #expect(error.contains("not a JWT") && run.json["errorCode"] as? Int == 2002, "\(run.summary)")
        await server.shutdown()
    }
}

/// Firefox ESR (Debian's firefox-esr, headless, driven over its Marionette protocol by
/// `Tests/Tools/firefox_peer.py`): another browser's numbering (VP8 120, Opus 109, transport-cc 7)
/// and max-bundle offers whose sections after the first are `bundle-only` with port 0.
@Suite("Firefox as a peer (headless, Marionette)", .serialized)
struct FirefoxTests {
    let kit = BrowserTests()

    func firefox(_ arguments: [String]) throws -> BrowserTests.Run {
        try kit.browser(arguments, driver: BrowserTests.firefoxDriver, timeout: 120)
    }

    @Test("Firefox watches a Swift bot's camera and its _sub share, publishes camera and mic a bot records, shares a screen as _sub, and shows a bad token's error")
    func firefoxPeer() async throws {
        let server = try await TestServer(webRoot: TestServer.webRoot, devTokens: true)
        let host = try kit.bot(server, channel: "ff", uid: "1001", ["--size", "640x360", "--no-subscribe", "--duration", "90"])
        let share = try kit.bot(server, channel: "ff", uid: "1001_sub", ["--source", "pattern", "--duration", "90"])
        let recorder = try kit.bot(server, channel: "ff", uid: "rec", ["--video", "none", "--audio", "none", "--record", "\(kit.dir)/ff",
                                                                        "--record-format", "both", "--record-uid", "3001",
                                                                        "--record-uid", "4001_sub", "--duration", "90"])
        defer { kit.stop(host); kit.stop(share); kit.stop(recorder) }
        #expect(await eventually(15) { (try? await server.app.sfu.participants(in: "ff").get().flatMap(\.tracks).count) ?? 0 >= 3 })

        let watch = try firefox([kit.page(server, "channel=ff&uid=ff1&mode=watch"), "--expect-videos", "2", "--min-frames", "60",
                                 "--seconds", "45"])
        #expect(watch.ok, "\(watch.summary)")
        #expect(watch.video(source: "screen")?["width"] as? Int == 1280 && watch.video(source: "screen")?["height"] as? Int == 720,
                "\(watch.summary)")
        print("firefox watch: camera \(watch.video(source: "camera")?["frames"] ?? "?") frames, screen \(watch.video(source: "screen")?["frames"] ?? "?") "
              + "frames, first frames at \(watch.video(source: "camera")?["firstFrameMs"] ?? "?")/\(watch.video(source: "screen")?["firstFrameMs"] ?? "?") ms")

        let publish = try firefox([kit.page(server, "channel=ff&uid=3001&mode=publish"), "--expect-sent", "60", "--hold", "4",
                                   "--seconds", "45"])
        #expect(publish.ok, "\(publish.summary)")
        let sharePage = try firefox([kit.page(server, "channel=ff&uid=4001&mode=share"), "--expect-sent", "60", "--hold", "4",
                                     "--seconds", "45"])
        #expect(sharePage.ok, "\(sharePage.summary)")
        let bad = try firefox([kit.page(server, "channel=ff&uid=6001&mode=watch&token=bad"), "--expect-error", "JWT", "--seconds", "20"])
        #expect(bad.ok && bad.json["errorCode"] as? Int == 2002, "\(bad.summary)")

        kit.stop(recorder)
        let camera = try kit.probe("\(kit.dir)/ff/3001-camera.ivf")
        #expect(camera.videoFrames >= 60 && camera.codecs == ["vp8"], "Firefox's camera as recorded: \(camera)")
        let webm = try kit.probe("\(kit.dir)/ff/3001.webm")
        #expect(webm.codecs.contains("vp8") && webm.codecs.contains("opus"), "Firefox's WebM: \(webm)")
        let screen = try kit.probe("\(kit.dir)/ff/4001_sub-screen.ivf")
        #expect(screen.videoFrames >= 60 && screen.size == "1280x720", "Firefox's share as recorded: \(screen)")
        print("firefox publish: recorded \(camera.videoFrames) frames at \(camera.size), WebM \(webm.codecs); "
              + "share (\(sharePage.json["captureMethod"] ?? "?")): \(screen.videoFrames) frames at \(screen.size)")
        await server.shutdown()
    }
}
