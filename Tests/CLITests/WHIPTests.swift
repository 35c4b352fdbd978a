import Foundation
import RTCTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// WHIP (RFC 9725) against `rtc-server`, with clients we did not write: aiortc with aiohttp
/// (`Tests/Tools/whip_client.py`) and plain JS in headless Chromium (`browser_peer.py --raw-whip`),
/// watched and recorded by Swift bots (docs/whip.md).
@Suite("WHIP: publishing over plain HTTP", .serialized)
struct WHIPTests {
    static let tools = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Tools")
    static func tool(_ name: String) -> String { tools.appendingPathComponent(name).path }

    /// The server, its WHIP endpoint base (http://127.0.0.1:PORT) and its signaling URL.
    /// Pings every 2 s and 6 s of silence: a vanished WHIP publisher leaves 6 s after its media is gone.
    static func server() async throws -> (ChildProcess, String, String) {
        let (server, url, port) = try await DataChannelInteropTests.server(["--ping-interval", "2", "--ping-timeout", "6"])
        return (server, "http://127.0.0.1:\(port)", url)
    }

    /// The pattern as a clip (aiortc's player plays it once: as long as the publish).
    static func pattern(_ dir: String, size: String = "640x360", seconds: Int = 2) throws -> String {
        let path = dir + "/pattern.y4m"
        let made = try runTool(["python3", tool("pattern.py"), "y4m", path, "--size", size, "--fps", "15", "--seconds", "\(seconds)"])
        #expect(made.status == 0, "\(made.err)")
        return path
    }

    /// Frames a `--frame-log` file lists, by uid.
    static func framesByUID(_ path: String) -> [String: Int] {
        var counts: [String: Int] = [:]
        for line in ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n") {
            let parts = line.split(separator: " ")
            if parts.count >= 2 { counts[String(parts[1]), default: 0] += 1 }
        }
        return counts
    }

    @Test("an aiortc WHIP publisher (its own HTTP client) publishes a clip that a Swift bot records: frames, PSNR against the clip; PATCH and DELETE")
    func aiortcPublishes() async throws {
        let (server, base, url) = try await Self.server()
        defer { server.stop() }
        let dir = temporaryDirectory("whip-aiortc")
        let clip = try Self.pattern(dir, seconds: 10)
        let recorder = try ChildProcess([cliPath, "join", "--server", url, "--channel", "whip", "--uid", "recorder", "--token",
                                         testToken(uid: "recorder", channel: "whip"), "--video", "none", "--audio", "none", "--quiet",
                                         "--record", dir + "/rec", "--duration", "16"])
        defer { recorder.stop() }
        try await Task.sleep(for: .seconds(1.5))
        let publisher = try ChildProcess(["python3", Self.tool("whip_client.py"), "publish", "--url", base + "/whip/whip", "--token",
                                          testToken(uid: "obs", channel: "whip"), "--clip", clip, "--seconds", "8"])
        _ = await publisher.wait(40)
        let report = try DataChannelInteropTests.report(publisher)
        #expect(report["status"] as? Int == 201 && report["contentType"] as? String == "application/sdp", "\(report)")
        #expect((report["location"] as? String ?? "").hasPrefix("/whip/whip/") && report["etag"] != nil, "\(report)")
        #expect(report["ok"] as? Bool == true && report["patchStatus"] as? Int == 204, "\(report)")
        #expect(report["deleteAgainStatus"] as? Int == 404, "a deleted session is gone: \(report)")
        _ = await recorder.wait(30)
        let ivfs = (FileManager.default.enumerator(atPath: dir + "/rec")?.allObjects as? [String] ?? []).filter { $0.hasSuffix(".ivf") && $0.contains("obs") }
        let ivf = try #require(ivfs.first.map { dir + "/rec/" + $0 }, "no IVF of obs in \(dir)/rec: \(recorder.output.suffix(5))")
        let measured = try runTool(["python3", Self.tool("pattern.py"), "psnr", ivf, "--last", "20"])
        let json = try #require(JSONSerialization.jsonObject(with: Data(measured.out.utf8)) as? [String: Any], "\(measured.err)")
        let psnr = json["psnr"] as? [Double] ?? []
        #expect((json["frames"] as? Int ?? 0) >= 60 && psnr.count >= 10 && psnr.allSatisfy { $0 >= 30 }, "\(json)")
        print("WHIP from aiortc: 201 in \(report["answerMs"] ?? "?") ms, connected at \(report["connectedMs"] ?? "?") ms; recorded \(json["frames"] ?? 0) frames "
            + "\(json["width"] ?? 0)x\(json["height"] ?? 0), PSNR \(psnr.suffix(3))")
    }

    @Test("a WHIP publisher announces no size: the server takes it from the first keyframe, so a LiveKit participant's publication and the server API say 640x360 (they said 0x0)")
    func whipTrackSize() async throws {
        let (server, url, _) = try await LiveKitInteropTests.server()
        defer { server.stop() }
        let base = url.replacingOccurrences(of: "ws://", with: "http://")
        let dir = temporaryDirectory("whip-size")
        let clip = try Self.pattern(dir, seconds: 12)
        let publisher = try ChildProcess(["python3", Self.tool("whip_client.py"), "publish", "--url", base + "/whip/whipsize", "--token",
                                          testToken(uid: "obs", channel: "whipsize"), "--clip", clip, "--seconds", "14"])
        defer { publisher.stop() }
        try await Task.sleep(for: .seconds(3))
        let viewer = try LiveKitInteropTests.peer("bot", url, ["--room", "whipsize", "--identity", "lk", "--duration", "6"])
        let report = try await LiveKitInteropTests.report(viewer)
        let published = (report["publications"] as? [String: [[String: Any]]])?["obs"]?.first { $0["kind"] as? String == "video" }
        #expect(published?["width"] as? Int == 640 && published?["height"] as? Int == 360, "the LiveKit SDK's publication: \(report["publications"] ?? "")")
        let listed = try await RoomServiceTests.calls(url, [#"ListParticipants {"room": "whipsize"}"#])
        let participants = ((listed.first?["result"] as? [String: Any])?["participants"] as? [[String: Any]]) ?? []
        let track = (participants.first { $0["identity"] as? String == "obs" }?["tracks"] as? [[String: Any]])?.first { $0["type"] as? String == "VIDEO" }
        #expect(track?["width"] as? Int == 640 && track?["height"] as? Int == 360, "ListParticipants: \(track ?? [:])")
        print("WHIP track size: at the LiveKit SDK \(published?["width"] ?? "?")x\(published?["height"] ?? "?"), in ListParticipants \(track?["width"] ?? "?")x\(track?["height"] ?? "?")")
    }

    /// The presentation times (s) of a file's packets of one stream (`v:0`, `a:0`), in order.
    static func packetTimes(_ path: String, stream: String) throws -> [Double] {
        let probe = try runTool(["ffprobe", "-v", "error", "-select_streams", stream, "-show_entries", "packet=pts_time", "-of", "csv=p=0", path])
        return probe.out.split(separator: "\n").compactMap { Double($0.trimmingCharacters(in: .whitespaces).trimmingCharacters(in: CharacterSet(charactersIn: ","))) }.sorted()
    }

    @Test("a WHIP publisher whose sender reports lie (aiortc with its NTP clock at half speed, the RTP clock twice the wall clock): the Swift recorder's WebM spans what its IVF spans (within 1 %), keeps the audio, and its manifest counts the reports discounted")
    func lyingReportsRecorded() async throws {
        let (server, base, url) = try await Self.server()
        defer { server.stop() }
        let dir = temporaryDirectory("whip-liar")
        let clip = try Self.pattern(dir, seconds: 12)
        let recorder = try ChildProcess([cliPath, "join", "--server", url, "--channel", "liar", "--uid", "recorder", "--token",
                                         testToken(uid: "recorder", channel: "liar"), "--video", "none", "--audio", "none", "--quiet",
                                         "--record", dir + "/rec", "--record-format", "both", "--duration", "19"])
        defer { recorder.stop() }
        try await Task.sleep(for: .seconds(1.5))
        let publisher = try ChildProcess(["python3", Self.tool("whip_client.py"), "publish", "--url", base + "/whip/liar", "--token",
                                          testToken(uid: "obs", channel: "liar"), "--clip", clip, "--seconds", "12", "--with-audio", "--lying-reports"])
        _ = await publisher.wait(40)
        #expect(try DataChannelInteropTests.report(publisher)["ok"] as? Bool == true, "\(publisher.output.suffix(2)) \(publisher.errorText.suffix(300))")
        _ = await recorder.wait(30)
        let files = (FileManager.default.enumerator(atPath: dir + "/rec")?.allObjects as? [String] ?? []).filter { $0.hasPrefix("obs") }
        let webm = try #require(files.first { $0.hasSuffix(".webm") }.map { dir + "/rec/" + $0 }, "\(files)")
        let ivf = try #require(files.first { $0.hasSuffix(".ivf") }.map { dir + "/rec/" + $0 }, "\(files)")
        let webmVideo = try Self.packetTimes(webm, stream: "v:0"), ivfVideo = try Self.packetTimes(ivf, stream: "v:0")
        let webmAudio = try Self.packetTimes(webm, stream: "a:0")
        let webmSpan = (webmVideo.last ?? 0) - (webmVideo.first ?? 0), ivfSpan = (ivfVideo.last ?? 0) - (ivfVideo.first ?? 0)
        #expect(ivfVideo.count >= 100 && abs(webmSpan / max(ivfSpan, 0.001) - 1) < 0.01,
                "WebM video spans \(webmSpan) s over \(webmVideo.count) frames, the IVF \(ivfSpan) s over \(ivfVideo.count)")
        // Audio: 50 Opus packets a second for as long as the video ran, none dropped for time going back.
        let audioSpan = (webmAudio.last ?? 0) - (webmAudio.first ?? 0)
        #expect(Double(webmAudio.count) >= 0.95 * audioSpan * 50 && audioSpan >= 0.9 * ivfSpan,
                "WebM audio: \(webmAudio.count) packets over \(audioSpan) s (video \(ivfSpan) s)")
        let manifest = try String(contentsOfFile: dir + "/rec/manifest.json", encoding: .utf8)
        let entries = (try JSONSerialization.jsonObject(with: Data(manifest.utf8)) as? [String: Any])?["files"] as? [[String: Any]] ?? []
        let discounted = entries.first { ($0["path"] as? String ?? "").hasSuffix(".webm") && $0["uid"] as? String == "obs" }?["discountedSenderReports"] as? Int ?? 0
        #expect(discounted >= 4, "the manifest counts the lying reports: \(manifest.prefix(1200))")
        print(String(format: "lying sender reports: WebM video %.2f s over %d frames vs IVF %.2f s over %d; WebM audio %d packets over %.2f s; %d reports discounted",
                     webmSpan, webmVideo.count, ivfSpan, ivfVideo.count, webmAudio.count, audioSpan, discounted))
    }

    @Test("plain JS in headless Chromium publishes over WHIP (fetch + RTCPeerConnection, no SDK) and a Swift bot decodes it; DELETE ends it")
    func chromiumPublishes() async throws {
        let (server, base, url) = try await Self.server()
        defer { server.stop() }
        let dir = temporaryDirectory("whip-chromium")
        let viewer = try ChildProcess([cliPath, "join", "--server", url, "--channel", "whipweb", "--uid", "viewer", "--token",
                                       testToken(uid: "viewer", channel: "whipweb"), "--video", "none", "--audio", "none", "--quiet",
                                       "--frame-log", dir + "/frames.log", "--duration", "30"])
        defer { viewer.stop() }
        let browser = try ChildProcess(["python3", DataChannelInteropTests.browserTool("browser_peer.py"), "--raw-whip", base + "/whip/whipweb",
                                        "--token", testToken(uid: "page", channel: "whipweb"), "--seconds", "8"])
        _ = await browser.wait(60)
        let report = try DataChannelInteropTests.report(browser)
        #expect(report["ok"] as? Bool == true, "\(report)")
        #expect((Self.framesByUID(dir + "/frames.log")["page"] ?? 0) >= 30, "the Swift viewer decoded the page: \(Self.framesByUID(dir + "/frames.log"))")
    }

    @Test("a LiveKit token (rtc-cli token --api-key) publishes over WHIP too; one for another room is refused with 401")
    func liveKitToken() async throws {
        let (server, _, port) = try await DataChannelInteropTests.server(["--api-key", "whipkey", "--api-secret", "whip-secret-0123456789"])
        defer { server.stop() }
        let base = "http://127.0.0.1:\(port)"
        let dir = temporaryDirectory("whip-livekit")
        let clip = try Self.pattern(dir)
        func token(_ room: String) throws -> String {
            let minted = try runTool([cliPath, "token", "--api-key", "whipkey", "--api-secret", "whip-secret-0123456789", "--channel", room, "--uid", "lk-obs"])
            return String(minted.out.split(separator: "\n").last ?? "")
        }
        let good = try ChildProcess(["python3", Self.tool("whip_client.py"), "publish", "--url", base + "/whip/lkroom", "--token", try token("lkroom"),
                                     "--clip", clip, "--seconds", "1"])
        _ = await good.wait(40)
        let report = try DataChannelInteropTests.report(good)
        #expect(report["status"] as? Int == 201 && report["ok"] as? Bool == true, "\(report)")
        let wrong = try ChildProcess(["python3", Self.tool("whip_client.py"), "publish", "--url", base + "/whip/lkroom", "--token", try token("elsewhere"),
                                      "--clip", clip, "--seconds", "1"])
        _ = await wrong.wait(40)
        let refused = try DataChannelInteropTests.report(wrong)
        #expect(refused["status"] as? Int == 401 && (refused["error"] as? String ?? "").contains("elsewhere"), "\(refused)")
    }

    @Test("a WHIP publisher that vanishes without its DELETE (SIGKILL) leaves once its transport is lost, and its uid can publish again")
    func vanishedPublisher() async throws {
        let (server, base, _) = try await Self.server()
        defer { server.stop() }
        let port = Int(base.split(separator: ":").last ?? "") ?? 0
        let dir = temporaryDirectory("whip-vanish")
        let clip = try Self.pattern(dir)
        let token = testToken(uid: "gone", channel: "vanish")
        let publisher = try ChildProcess(["python3", Self.tool("whip_client.py"), "publish", "--url", base + "/whip/vanish", "--token", token,
                                          "--clip", clip, "--seconds", "60"])
        func participants() -> Double? {
            let metrics = try? runTool(["python3", "-c", "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())",
                                        "http://127.0.0.1:\(port)/metrics"], timeout: 10)
            return metrics?.out.split(separator: "\n").first { $0.hasPrefix("rtc_participants ") }.flatMap { Double($0.split(separator: " ").last ?? "") }
        }
        #expect(await eventually(15) { participants() == 1 }, "the WHIP publisher joined")
        kill(publisher.pid, SIGKILL)
        let killed = Date()
        #expect(await eventually(60) { participants() == 0 }, "still there \(Date().timeIntervalSince(killed)) s after the kill")
        print("WHIP publisher killed without DELETE: gone after \(Int(Date().timeIntervalSince(killed))) s")
        let again = try ChildProcess(["python3", Self.tool("whip_client.py"), "publish", "--url", base + "/whip/vanish", "--token", token,
                                      "--clip", clip, "--seconds", "1"])
        _ = await again.wait(30)
        #expect(try DataChannelInteropTests.report(again)["status"] as? Int == 201)
    }

    @Test("rtc-cli bench whip runs: aiortc's pattern over WHIP and over our signaling, a first frame each way at a Swift viewer, and their ratio")
    func firstFrameBench() async throws {
        let bench = try runTool([cliPath, "bench", "whip", "--runs", "1"])
        #expect(bench.status == 0, "\(bench.err)")
        func ms(_ prefix: String) -> Int? {
            bench.out.split(separator: "\n").first { $0.hasPrefix(prefix) }?.components(separatedBy: "p50 ").last.flatMap { Int($0.prefix { $0.isNumber }) }
        }
        print(bench.out)
        #expect((ms("over WHIP") ?? 0) > 0 && (ms("over our signaling") ?? 0) > 0 && bench.out.contains("WHIP / our signaling (p50): "), "\(bench.out)")
    }

    @Test("plain JS in headless Chromium publishes by WHIP and another page watches it by WHEP (fetch + RTCPeerConnection, no SDK), the room's and the uid's URL")
    func chromiumWHIPToWHEP() async throws {
        let (server, base, _) = try await Self.server()
        defer { server.stop() }
        let publisher = try ChildProcess(["python3", DataChannelInteropTests.browserTool("browser_peer.py"), "--raw-whip", base + "/whip/whep",
                                          "--token", testToken(uid: "camera", channel: "whep"), "--seconds", "22"])
        defer { publisher.stop() }
        try await Task.sleep(for: .seconds(4))
        for (name, path) in [("room", "/whep/whep"), ("uid", "/whep/whep/camera")] {
            let viewer = try ChildProcess(["python3", DataChannelInteropTests.browserTool("browser_peer.py"), "--raw-whep", base + path,
                                           "--token", testToken(uid: "viewer-\(name)", channel: "whep"), "--min-frames", "30", "--seconds", "20"])
            _ = await viewer.wait(40)
            let report = try DataChannelInteropTests.report(viewer)
            #expect(report["ok"] as? Bool == true && (report["width"] as? Int ?? 0) > 0, "WHEP at \(path): \(report)")
            print("WHEP at \(path): \(report["framesDecoded"] ?? 0) frames \(report["width"] ?? 0)x\(report["height"] ?? 0), DELETE \(report["deleted"] ?? "")")
        }
        _ = await publisher.wait(40)
        #expect(try DataChannelInteropTests.report(publisher)["ok"] as? Bool == true)
    }

    /// One run of `whip_client.py watch` (aiortc's WHEP viewer) and its JSON.
    static func aiortcWHEP(_ url: String, uid: String, room: String, receive: String, seconds: Int) async throws -> [String: Any] {
        let viewer = try ChildProcess(["python3", tool("whip_client.py"), "watch", "--url", url, "--token", testToken(uid: uid, channel: room),
                                       "--receive", receive, "--seconds", String(seconds)])
        _ = await viewer.wait(Double(seconds) + 30)
        return try DataChannelInteropTests.report(viewer)
    }

    @Test("aiortc as a WHEP viewer, with its own payload type numbers (VP8 97, Opus 96 where the room sends 96 and 111), decodes a Swift publisher's pattern (PSNR) and its tone")
    func aiortcWHEPOwnNumbers() async throws {
        let (server, base, url) = try await Self.server()
        defer { server.stop() }
        let dir = temporaryDirectory("whep-aiortc")
        let pattern = try Self.pattern(dir)
        let publisher = try ChildProcess([cliPath, "join", "--server", url, "--channel", "whepnum", "--uid", "pub", "--token",
                                          testToken(uid: "pub", channel: "whepnum"), "--video", pattern, "--size", "640x360",
                                          "--audio", "tone", "--no-subscribe", "--quiet", "--duration", "30"])
        defer { publisher.stop() }
        try await Task.sleep(for: .seconds(2))
        let report = try await Self.aiortcWHEP(base + "/whep/whepnum/pub", uid: "viewer", room: "whepnum", receive: "video,audio", seconds: 10)
        let offered = report["offeredPayloadTypes"] as? [String: Int] ?? [:]
        #expect(report["status"] as? Int == 201, "\(report)")
        #expect(offered["vp8"] != nil && offered["vp8"] != 96, "aiortc's own number for VP8, not the room's: \(offered)")
        let tracks = report["tracks"] as? [[String: Any]] ?? []
        let video = tracks.first { $0["kind"] as? String == "video" }, audio = tracks.first { $0["kind"] as? String == "audio" }
        let psnr = video?["psnr"] as? [Double] ?? []
        #expect((video?["frames"] as? Int ?? 0) >= 60 && (video?["sizes"] as? [String: Int])?["640x360"] != nil, "\(video ?? [:])")
        #expect(psnr.count >= 5 && psnr.suffix(3).allSatisfy { $0 >= 25 }, "PSNR against the pattern: \(psnr)")
        #expect((audio?["frames"] as? Int ?? 0) >= 200, "\(audio ?? [:])")
        print("WHEP with aiortc's numbers \(offered): \(video?["frames"] ?? 0) frames \(video?["sizes"] ?? [:]), PSNR \(psnr.suffix(3)), "
              + "\(audio?["frames"] ?? 0) audio frames")
    }

    @Test("the room's WHEP URL with one transceiver for three tracks: the core's answer declines the rest and the server forwards only the one the viewer's answer names (its own packet counts)")
    func whepFewerTransceivers() async throws {
        let (server, url, _) = try await LiveKitInteropTests.server()
        defer { server.stop() }
        let base = url.replacingOccurrences(of: "ws://", with: "http://")
        let first = try LiveKitInteropTests.swiftBot(url, room: "wheprest", uid: "a", ["--video", "pattern", "--size", "320x180", "--audio", "tone",
                                                                                        "--no-subscribe", "--duration", "40"])
        defer { first.stop() }
        let second = try LiveKitInteropTests.swiftBot(url, room: "wheprest", uid: "b", ["--video", "pattern", "--size", "320x180", "--audio", "none",
                                                                                         "--no-subscribe", "--duration", "40"])
        defer { second.stop() }
        try await Task.sleep(for: .seconds(2))
        let viewer = try ChildProcess(["python3", Self.tool("whip_client.py"), "watch", "--url", base + "/whep/wheprest", "--token",
                                       testToken(uid: "viewer", channel: "wheprest"), "--receive", "video", "--seconds", "12"])
        defer { viewer.stop() }
        try await Task.sleep(for: .seconds(8))
        let results = try await RoomServiceTests.calls(url, [
            #"Raw {"method": "GET", "path": "/debug/forwarded?room=wheprest&identity=viewer", "token": "admin", "room": "wheprest"}"#,
        ])
        _ = await viewer.wait(40)
        let report = try DataChannelInteropTests.report(viewer)
        let forwarded = (results.first?["json"] as? [String: Any])?["forwarded"] as? [[String: Any]] ?? []
        let sent = forwarded.filter { ($0["packets"] as? Int ?? 0) > 0 }
        #expect(report["status"] as? Int == 201 && (report["answeredMids"] as? [String])?.count == 1, "\(report)")
        #expect(sent.count == 1 && sent.first?["kind"] as? String == "video", "only the section the answer names is sent: \(forwarded)")
        let video = (report["tracks"] as? [[String: Any]] ?? []).first
        #expect((video?["frames"] as? Int ?? 0) >= 30, "\(report)")
        print("WHEP, one transceiver for three tracks: the server forwarded \(forwarded), "
              + "\(video?["frames"] ?? 0) frames decoded")
    }

    @Test("WHEP with nothing to watch answers 404 with the reason")
    func whepNothing() async throws {
        let (server, base, _) = try await Self.server()
        defer { server.stop() }
        let viewer = try ChildProcess(["python3", DataChannelInteropTests.browserTool("browser_peer.py"), "--raw-whep", base + "/whep/empty",
                                       "--token", testToken(uid: "viewer", channel: "empty"), "--seconds", "15"])
        _ = await viewer.wait(30)
        let report = try DataChannelInteropTests.report(viewer)
        #expect(report["status"] as? Int == 404 && (report["error"] as? String ?? "").contains("nothing to watch"), "\(report)")
    }

    @Test("a WHIP screen share 1001_sub never reaches its owner 1001; another viewer gets it")
    func shareSkipsOwner() async throws {
        let (server, base, url) = try await Self.server()
        defer { server.stop() }
        let dir = temporaryDirectory("whip-share")
        let clip = try Self.pattern(dir, size: "1280x720", seconds: 4)
        func bot(_ uid: String) throws -> ChildProcess {
            try ChildProcess([cliPath, "join", "--server", url, "--channel", "whipshare", "--uid", uid, "--token", testToken(uid: uid, channel: "whipshare"),
                              "--video", "none", "--audio", "none", "--quiet", "--frame-log", "\(dir)/\(uid).log", "--duration", "20"])
        }
        let owner = try bot("1001"), other = try bot("2001")
        defer { owner.stop(); other.stop() }
        try await Task.sleep(for: .seconds(1.5))
        let share = try ChildProcess(["python3", Self.tool("whip_client.py"), "publish", "--url", base + "/whip/whipshare", "--token",
                                      testToken(uid: "1001_sub", channel: "whipshare"), "--clip", clip, "--seconds", "6"])
        _ = await share.wait(40)
        let report = try DataChannelInteropTests.report(share)
        #expect(report["status"] as? Int == 201, "\(report)")
        let atOther = Self.framesByUID("\(dir)/2001.log")["1001_sub"] ?? 0, atOwner = Self.framesByUID("\(dir)/1001.log")["1001_sub"] ?? 0
        #expect(atOther >= 30 && atOwner == 0, "2001 decoded \(atOther) frames of the share, its owner \(atOwner)")
    }

    @Test("bad requests get RFC 9725's statuses with a reason, never a crash: no or a bad token 401, a wrong type 415, no media or no SDP 400, too large 413, POST on a session 405, a second session for the uid 409, a stale ETag 412, an unknown session 404; an ICE restart over PATCH 200; CORS preflight 204")
    func badRequests() async throws {
        let (server, base, _) = try await Self.server()
        defer { server.stop() }
        let dir = temporaryDirectory("whip-bad")
        let clip = try Self.pattern(dir)
        let probe = try ChildProcess(["python3", Self.tool("whip_client.py"), "probe", "--url", base + "/whip/bad", "--token",
                                      testToken(uid: "prober", channel: "bad"), "--clip", clip])
        _ = await probe.wait(40)
        let report = try DataChannelInteropTests.report(probe)
        let expected: [(String, Int)] = [("noToken", 401), ("badToken", 401), ("wrongType", 415), ("noMedia", 400), ("notSDP", 400),
                                         ("tooLarge", 413), ("live", 201), ("postOnSession", 405), ("secondSession", 409), ("staleETag", 412),
                                         ("delete", 200), ("deleteUnknown", 404)]
        for (name, status) in expected {
            let answer = report[name] as? [Any] ?? []
            #expect(answer.first as? Int == status, "\(name): \(answer)")
            if status >= 400 { #expect(!(answer.last as? String ?? "").isEmpty, "\(name) says why") }
        }
        // An ICE restart over PATCH: 200, the server's new credentials and candidates, a new ETag (the old one is then stale: 412 above).
        let restart = report["restart"] as? [Any] ?? []
        #expect(restart.first as? Int == 200 && (restart[safe: 1] as? String ?? "").hasPrefix("application/trickle-ice-sdpfrag")
                && restart[safe: 2] as? Bool == true && restart[safe: 3] as? Bool == true && restart[safe: 4] as? Bool == true, "\(restart)")
        #expect((report["preflight"] as? [Any])?.first as? Int == 204 && (report["preflight"] as? [Any])?[1] as? String == "*", "\(report)")
        #expect(report["healthz"] as? Int == 200)
    }
}

private extension Array {
    subscript(safe index: Int) -> Element? { indices.contains(index) ? self[index] : nil }
}
