import Foundation
import RTCTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Our SDK as a LiveKit client (`rtc-cli join --protocol livekit`, docs/livekit.md "Our SDK in a
/// LiveKit room"): Swift bots speaking LiveKit's signal protocol to `rtc-server`'s LiveKit front
/// end, in rooms with LiveKit's own Python SDK and with a Swift bot on our protocol. There is no
/// LiveKit server binary here; the front end the official SDK already exercises is the counterpart.
@Suite("Swift bots speaking LiveKit's protocol", .serialized)
struct LiveKitClientTests {
    typealias LK = LiveKitInteropTests
    let dir = temporaryDirectory("livekit-client")

    /// `rtc-cli join --protocol livekit` with a token minted from the test's LiveKit key.
    static func liveKitBot(_ url: String, room: String, uid: String, _ extra: [String]) throws -> ChildProcess {
        try ChildProcess([cliPath, "join", "--protocol", "livekit", "--server", url, "--api-key", LK.apiKey, "--api-secret", LK.apiSecret,
                          "--channel", room, "--uid", uid, "--quiet"] + extra)
    }

    /// The uids a `--frame-log` shows frames of, with their counts.
    static func frameCounts(_ path: String) -> [String: Int] {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").reduce(into: [:]) { counts, line in
            let fields = line.split(separator: " ")
            if fields.count >= 2 { counts[String(fields[1]), default: 0] += 1 }
        }
    }

    @Test("one room: a Swift bot on LiveKit's protocol (camera and tone) with its 1001_sub share (started first: it waits for its owner), LiveKit's Python SDK publishing, a Swift bot on our protocol: everyone receives everyone else (the share at 1280x720 against its source, never at its own host), data both ways with a topic and a destination, speakers named, metadata and attributes seen both ways")
    func mixedRoom() async throws {
        let (server, url, _) = try await LK.server()
        defer { server.stop() }
        let p720 = dir + "/p720.y4m", p360 = dir + "/p360.y4m"
        for (path, size) in [(p720, "1280x720"), (p360, "640x360")] {
            let made = try runTool(["python3", WHIPTests.tool("pattern.py"), "y4m", path, "--size", size, "--fps", "15", "--seconds", "2"])
            #expect(made.status == 0, "\(made.err)")
        }
        let hostFrames = dir + "/host-frames.txt", nativeFrames = dir + "/native-frames.txt"
        // The share first: its owner is not there yet, so it waits for it (3003, LiveKit's
        // USER_UNAVAILABLE), as on our protocol.
        let share = try Self.liveKitBot(url, room: "mix", uid: "1001_sub", ["--source", p720, "--size", "1280x720", "--duration", "26"])
        defer { share.stop() }
        try await Task.sleep(for: .seconds(1))
        let host = try Self.liveKitBot(url, room: "mix", uid: "1001", [
            "--video", p360, "--size", "640x360", "--audio", "tone", "--print-data", "--send-data", "from swift@1", "--data-topic", "chat",
            "--set-metadata", "swift-meta", "--set-attribute", "role=bot", "--print-speakers", "--frame-log", hostFrames, "--duration", "26"])
        defer { host.stop() }
        let native = try ChildProcess([cliPath, "join", "--server", url + "/rtc", "--channel", "mix", "--uid", "2001", "--token",
                                       testToken(uid: "2001", channel: "mix"), "--video", "pattern", "--audio", "none", "--print-data",
                                       "--frame-log", nativeFrames, "--quiet", "--duration", "24"])
        defer { native.stop() }
        try await Task.sleep(for: .seconds(1))
        // The Python participant sends to 1001 only: 2001 must not get it.
        let python = try LK.peer("bot", url, ["--room", "mix", "--identity", "py", "--publish", "--size", "640x360", "--send-data", "from py@chat",
                                              "--data-to", "1001", "--wait-remote", "3", "--set-metadata", "py-meta", "--metadata-grant",
                                              "--print-data", "--duration", "16"])
        let report = try await LK.report(python)
        #expect(report["connectError"] == nil, "\(report)")

        // At the Python SDK: the LiveKit-speaking bot's camera (against its source) and tone, its
        // share at 1280x720 as SCREEN_SHARE with its owner, the native bot's camera.
        for (uid, size) in [("1001", "640x360"), ("1001_sub", "1280x720")] {
            let video = LK.track(report, identity: uid, kind: "video")
            let psnr = LK.psnr(video, size: size)
            #expect((video?["frames"] as? Int ?? 0) >= 60 && psnr.count >= 3 && psnr.suffix(3).allSatisfy { $0 >= 30 }, "\(uid): \(video ?? [:])")
            print("LiveKit's SDK receives \(uid) (LiveKit protocol): \(video?["frames"] ?? 0) frames \(video?["sizes"] ?? "") PSNR \(psnr.suffix(3))")
        }
        #expect((LK.track(report, identity: "2001", kind: "video")?["frames"] as? Int ?? 0) >= 60, "2001 at LiveKit's SDK")
        let rms = LK.track(report, identity: "1001", kind: "audio")?["rms"] as? [Double] ?? []
        #expect(!rms.isEmpty && rms.suffix(3).allSatisfy { $0 > 500 }, "1001's tone at LiveKit's SDK: \(rms.suffix(5))")
        let sources = report["sources"] as? [String: [Int]] ?? [:]
        #expect(sources["1001"] == [1, 2] && sources["1001_sub"] == [3], "CAMERA+MICROPHONE and SCREEN_SHARE: \(sources)")
        let attributes = report["attributes"] as? [String: [String: String]] ?? [:]
        #expect(attributes["1001_sub"]?["screenShareOwner"] == "1001" && attributes["1001"]?["role"] == "bot", "\(attributes)")
        let atPython = report["data"] as? [[String: Any]] ?? []
        #expect(atPython.contains { $0["from"] as? String == "1001" && $0["topic"] as? String == "chat" && $0["text"] as? String == "from swift" },
                "\(atPython.prefix(5))")
        let speakers = (report["speakers"] as? [[Any]] ?? []).flatMap { $0.count > 1 ? ($0[1] as? [String] ?? []) : [] }
        #expect(speakers.contains("1001"), "LiveKit's SDK names the Swift bot speaking: \(report["speakers"] ?? [])")

        _ = await host.wait(30)
        _ = await native.wait(30)
        // At the LiveKit-speaking bot: the Python SDK's and the native bot's video, never its own share.
        let atHost = Self.frameCounts(hostFrames), atNative = Self.frameCounts(nativeFrames)
        #expect((atHost["py"] ?? 0) >= 60 && (atHost["2001"] ?? 0) >= 60 && atHost["1001_sub"] == nil, "frames at 1001: \(atHost)")
        #expect((atNative["py"] ?? 0) >= 60 && (atNative["1001"] ?? 0) >= 60 && (atNative["1001_sub"] ?? 0) >= 60, "frames at 2001: \(atNative)")
        // Data with its destination: py's message reached 1001 and not 2001; 1001's reached 2001.
        let hostGot = DataChannelInteropTests.received(host), nativeGot = DataChannelInteropTests.received(native)
        #expect(hostGot.contains { $0.uid == "py" && $0.topic == "chat" && $0.text == "from py" }, "\(hostGot.prefix(5))")
        #expect(!nativeGot.contains { $0.uid == "py" }, "sent to 1001 only, yet 2001 got: \(nativeGot.filter { $0.uid == "py" })")
        #expect(nativeGot.contains { $0.uid == "1001" && $0.topic == "chat" && $0.text == "from swift" }, "\(nativeGot.prefix(5))")
        // Metadata and attributes: the bot's own update (seen by the Python SDK above and by 2001),
        // and the Python SDK's seen by the bot.
        #expect(host.output.contains("metadata set"), "\(host.output.suffix(5))")
        #expect(host.output.contains("participant py metadata py-meta attributes state=ready"), "\(host.output.filter { $0.hasPrefix("participant") })")
        #expect(native.output.contains("participant 1001 metadata swift-meta attributes role=bot"),
                "\(native.output.filter { $0.hasPrefix("participant") })")
        #expect(host.output.contains { $0.hasPrefix("speaker ") && !$0.hasSuffix(" -") }, "speakers at the bot: \(host.output.filter { $0.hasPrefix("speaker") })")
        print("Swift bot on LiveKit's protocol receives: \(atHost); the native bot: \(atNative)")
    }

    @Test("simulcast both ways on LiveKit's protocol: a Swift bot's three layers announced as LiveKit's VideoLayers, the Python SDK asks for the low one and gets 320x180; the Python SDK's three layers, a Swift bot with --stream-type low gets 320x180 only, another a larger one")
    func simulcast() async throws {
        let (server, url, _) = try await LK.server()
        defer { server.stop() }
        let p720 = dir + "/sim720.y4m"
        let made = try runTool(["python3", WHIPTests.tool("pattern.py"), "y4m", p720, "--size", "1280x720", "--fps", "15", "--seconds", "2"])
        #expect(made.status == 0, "\(made.err)")
        // Both ways: the Swift bot publishes three layers and wants the Python SDK's low one;
        // a second Swift bot wants its default (high) layer.
        let lowFrames = dir + "/sim-low.txt", highFrames = dir + "/sim-high.txt"
        let bot = try Self.liveKitBot(url, room: "sim", uid: "1001", ["--video", p720, "--size", "1280x720", "--bitrate", "2500", "--simulcast", "3",
                                                                     "--audio", "none", "--stream-type", "low", "--frame-log", lowFrames,
                                                                     "--duration", "22"])
        defer { bot.stop() }
        let other = try Self.liveKitBot(url, room: "sim", uid: "2001", ["--video", "none", "--audio", "none", "--frame-log", highFrames, "--duration", "22"])
        defer { other.stop() }
        try await Task.sleep(for: .seconds(1))
        let report = try await LK.report(try LK.peer("bot", url, ["--room", "sim", "--identity", "py", "--publish", "--simulcast", "--size", "1280x720",
                                                                  "--no-audio", "--low-quality-at", "7:1001", "--duration", "16"]))
        let low = report["lowQuality"] as? [String: Any] ?? [:]
        #expect(low["before"] as? String == "1280x720" && low["after"] as? String == "320x180" && low["simulcasted"] as? Bool == true, "\(low)")
        // The sizes each Swift bot decoded of the Python SDK's video, after its first 3 s.
        func sizes(_ path: String) -> [String: Int] {
            let lines = ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map { $0.split(separator: " ") }
                .filter { $0.count >= 4 && $0[1] == "py" }
            guard let first = lines.first.flatMap({ Int64($0[0]) }) else { return [:] }
            return lines.filter { (Int64($0[0]) ?? 0) > first + 3_000_000 }.reduce(into: [:]) { $0["\($1[2])x\($1[3])", default: 0] += 1 }
        }
        _ = await bot.wait(30)
        _ = await other.wait(30)
        let atLow = sizes(lowFrames), atHigh = sizes(highFrames)
        #expect(!atLow.isEmpty && atLow.keys.allSatisfy { $0 == "320x180" }, "the bot that asked for the low layer decoded \(atLow)")
        #expect(atHigh.keys.contains { $0 != "320x180" }, "the bot that asked for nothing decoded \(atHigh)")
        print("simulcast from the Swift bot on LiveKit's protocol: \(low); of the Python SDK's three layers, the low-asking bot decoded \(atLow), the other \(atHigh)")
    }

    @Test("the server killed (SIGKILL) and started again on its port: the Swift bot on LiveKit's protocol joins again by itself; its video at LiveKit's SDK and the SDK's at it within 3 s of the new server answering")
    func killed() async throws {
        let port = DrainTests.freeTCPPort()
        var (server, _) = try await DrainTests.server(port: port)
        defer { server.stop() }
        let url = "ws://127.0.0.1:\(port)"
        let frames = dir + "/killed-frames.txt"
        let bot = try Self.liveKitBot(url, room: "killed", uid: "swiftlk", ["--size", "320x180", "--audio", "none", "--frame-log", frames,
                                                                           "--duration", "30"])
        defer { bot.stop() }
        let python = try LK.peer("bot", url, ["--room", "killed", "--identity", "lk", "--publish", "--size", "320x180", "--duration", "24"])
        defer { python.stop() }
        #expect(await eventually(20) { DrainTests.frames(frames, of: "lk").count >= 30 }, "before: \(DrainTests.frames(frames, of: "lk").count) frames")
        server.signal(SIGKILL)
        _ = await server.wait(5)
        let (next, upAt) = try await DrainTests.server(port: port)
        server = next
        let report = try await LK.report(python, 60)
        let upMs = upAt / 1000
        let lkAtSwift = DrainTests.frames(frames, of: "lk").first { $0 > upAt }.map { Double($0 - upAt) / 1e6 } ?? .infinity
        let swiftAtLK = DrainTests.firstFrameMs(report, of: "swiftlk", kind: "video", after: upMs).map { Double($0 - upMs) / 1000 } ?? .infinity
        #expect(lkAtSwift <= 3 && swiftAtLK <= 3, "after the new server answered: LiveKit→Swift \(lkAtSwift) s, Swift→LiveKit \(swiftAtLK) s")
        print(String(format: "server killed and restarted: LiveKit→Swift (LiveKit's protocol) %.2f s, Swift→LiveKit %.2f s after the new server answered",
                     lkAtSwift, swiftAtLK))
    }

    /// A transcript `--livekit-transcript` wrote: (direction, kind, fields) per message.
    static func transcript(_ directory: String, identity: String) -> [(direction: String, kind: String, fields: Set<String>)] {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: directory))?.filter { $0.hasPrefix(identity + "-") } ?? []
        return files.flatMap { file in
            ((try? String(contentsOfFile: directory + "/" + file, encoding: .utf8)) ?? "").split(separator: "\n").compactMap { line in
                guard let entry = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], let direction = entry["direction"] as? String,
                      let kind = entry["kind"] as? String else { return nil }
                return (direction, kind, Set(entry["fields"] as? [String] ?? []))
            }
        }
    }

    /// Whether each AddTrack is answered (TrackPublished) before the next offer goes, as LiveKit's SDKs wait.
    static func publishesInOrder(_ entries: [(direction: String, kind: String, fields: Set<String>)]) -> Bool {
        for (index, entry) in entries.enumerated() where entry.kind == "addTrack" && entry.direction == "in" {
            guard let offer = entries[(index + 1)...].firstIndex(where: { $0.kind == "offer" && $0.direction == "in" }) else { continue }
            if !entries[(index + 1)..<offer].contains(where: { $0.kind == "trackPublished" }) { return false }
        }
        return true
    }

    /// Whether `order` is a subsequence of the transcript's kinds.
    static func follows(_ order: [String], _ entries: [(direction: String, kind: String, fields: Set<String>)]) -> Bool {
        var rest = order[...]
        for entry in entries where entry.kind == rest.first { rest = rest.dropFirst() }
        return rest.isEmpty
    }

    @Test("conformance with LiveKit's own SDK, message by message: join, publish audio and video with simulcast, subscribe, mute and unmute, data, leave; the SDK's messages still match the committed table (Tests/Fixtures/livekit-conformance.json), and ours send the same kinds, in the same order, with every field the SDK sets")
    func conformance() async throws {
        let fixtureURL = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/livekit-conformance.json")
        let fixture = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: fixtureURL)) as? [String: Any])
        let table = try #require(fixture["requests"] as? [String: [String]]).mapValues(Set.init)
        let order = try #require(fixture["order"] as? [String])
        let differences = fixture["differences"] as? [String: String] ?? [:]
        let transcripts = dir + "/transcripts"
        try FileManager.default.createDirectory(atPath: transcripts, withIntermediateDirectories: true)
        let (server, url, _) = try await LK.server(["--livekit-transcript", transcripts])
        defer { server.stop() }
        // The same actions, side by side in one room: each sees the other (subscribes), mutes at 5 s.
        let python = try LK.peer("bot", url, ["--room", "conf", "--identity", "py", "--publish", "--simulcast", "--size", "640x360",
                                              "--send-data", "hello@chat", "--wait-remote", "1", "--mute-at", "5", "--duration", "11"])
        let swift = try Self.liveKitBot(url, room: "conf", uid: "swift", ["--simulcast", "3", "--size", "640x360", "--audio", "tone",
                                                                         "--send-data", "hello", "--data-topic", "chat", "--data-wait-peers", "1",
                                                                         "--mute-audio-at", "5", "--duration", "11"])
        defer { swift.stop() }
        let report = try await LK.report(python, 60)
        _ = await swift.wait(30)
        #expect(report["mutedAndUnmuted"] as? Bool == true && swift.output.contains { $0.hasPrefix("unmuted ") }, "\(report["muteError"] ?? "") \(swift.output.suffix(3))")
        let sdk = Self.transcript(transcripts, identity: "py"), ours = Self.transcript(transcripts, identity: "swift")
        func sent(_ entries: [(direction: String, kind: String, fields: Set<String>)]) -> [String: Set<String>] {
            entries.filter { $0.direction == "in" }.reduce(into: [:]) { $0[$1.kind, default: []].formUnion($1.fields) }
        }
        let sdkSent = sent(sdk), oursSent = sent(ours)
        // The table still says what the SDK does.
        #expect(Set(sdkSent.keys) == Set(table.keys), "kinds the SDK sent: \(sdkSent.keys.sorted()) vs the table's \(table.keys.sorted())")
        for (kind, fields) in table { #expect(sdkSent[kind] == fields, "the SDK's \(kind): \(sdkSent[kind]?.sorted() ?? []) vs the table's \(fields.sorted())") }
        // Ours: every kind and field the SDK sends, but the differences the table explains.
        var rows: [String] = []
        for (kind, fields) in table.sorted(by: { $0.key < $1.key }) {
            let missing = fields.subtracting(oursSent[kind] ?? []).filter { differences[kind] == nil && differences["\(kind).\($0)"] == nil }
            #expect(differences[kind] != nil || oursSent[kind] != nil, "ours never sent \(kind)")
            #expect(missing.isEmpty, "ours sent \(kind) without \(missing.sorted())")
            let extra = (oursSent[kind] ?? []).subtracting(fields)
            rows.append("| \(kind) | \(fields.count) | \(oursSent[kind] == nil ? "not sent: \(differences[kind] ?? "?")" : missing.isEmpty ? "all" : "missing \(missing.sorted())") | \(extra.sorted().joined(separator: ", ")) |")
        }
        // The same order: AddTrack, TrackPublished, the offer; mute; leave.
        #expect(Self.publishesInOrder(sdk) && Self.publishesInOrder(ours), "an offer went before its TrackPublished")
        #expect(Self.follows(order, sdk) && Self.follows(order, ours), "\(order) in \(ours.map(\.kind))")
        print((["conformance with LiveKit's Python SDK (requests the client sends):", "| kind | SDK's fields | ours | ours besides |", "|---|---|---|---|"] + rows)
            .joined(separator: "\n"))
    }

    @Test("join to first frame, side by side against one server and one publisher: a Swift bot on LiveKit's protocol, one on ours, LiveKit's Python SDK (three joins each, interleaved; figures printed, no time asserted)")
    func joinToFirstFrame() async throws {
        let (server, url, _) = try await LK.server()
        defer { server.stop() }
        let publisher = try ChildProcess([cliPath, "join", "--server", url + "/rtc", "--channel", "ff", "--uid", "pub", "--token",
                                          testToken(uid: "pub", channel: "ff"), "--size", "640x360", "--audio", "none", "--quiet", "--duration", "90"])
        defer { publisher.stop() }
        try await Task.sleep(for: .seconds(2))
        var figures: [String: [Double]] = [:]
        for round in 0..<3 {
            for kind in ["livekit-protocol", "native", "python"] {
                let uid = "v\(round)\(kind.prefix(1))"
                switch kind {
                case "python":
                    let report = try await LK.report(try LK.peer("bot", url, ["--room", "ff", "--identity", uid, "--duration", "2.5"]), 30)
                    let first = (LK.track(report, identity: "pub", kind: "video")?["firstFrameMs"] as? NSNumber)?.doubleValue
                    figures[kind, default: []].append(first.map { $0 / 1000 } ?? .infinity)
                default:
                    // One join again if the first decodes nothing: a figure needs a first frame.
                    // A failed attempt is printed (a LiveKit-protocol join hung before its join
                    // reply once in a loaded CI run: under investigation, docs/livekit.md).
                    var seconds = Double.infinity
                    for attempt in 0..<2 where !seconds.isFinite {
                        let id = attempt == 0 ? uid : uid + "r"
                        let frames = dir + "/ff-\(id).txt"
                        // Each bot stays until its first frame (at most 10 s), then goes.
                        let extra = ["--video", "none", "--audio", "none", "--print-timing", "--frame-log", frames, "--duration", "10"]
                        let bot = kind == "native"
                            ? try ChildProcess([cliPath, "join", "--server", url + "/rtc", "--channel", "ff", "--uid", id, "--token",
                                                testToken(uid: id, channel: "ff"), "--quiet"] + extra)
                            : try Self.liveKitBot(url, room: "ff", uid: id, extra)
                        _ = await eventually(12) { !DrainTests.frames(frames, of: "pub").isEmpty || !bot.isRunning }
                        bot.stop()
                        let start = bot.output.lazy.compactMap { $0.hasPrefix("timing start ") ? Int64($0.dropFirst(13)) : nil }.first
                        let first = DrainTests.frames(frames, of: "pub").first
                        seconds = start.flatMap { start in first.map { Double($0 - start) / 1e6 } } ?? .infinity
                        if !seconds.isFinite {
                            let what = "\(kind) join \(id) decoded no frame: \(bot.output.suffix(8)) \(bot.errorText.suffix(600))"
                            if attempt == 0 { print("join to first frame: attempt 1 failed, joining again: " + what) } else { Issue.record(Comment(rawValue: what)) }
                        }
                    }
                    figures[kind, default: []].append(seconds)
                }
            }
        }
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        print("join to first frame (s), three joins each: " + ["livekit-protocol", "native", "python"].map { kind in
            let values = figures[kind] ?? []
            return "\(kind) p50 \(String(format: "%.3f", median(values))) \(values.map { String(format: "%.3f", $0) })"
        }.joined(separator: "; "))
    }

    @Test("bad input on the client side: a token that is not a LiveKit JWT, a wrong secret (the server refuses the WebSocket), a flag out of place, a refused AddTrack, a server without LiveKit's /rtc: each a clear error, no crash")
    func badInput() async throws {
        let (server, url, _) = try await LK.server()
        defer { server.stop() }
        let garbage = try runTool([cliPath, "join", "--protocol", "livekit", "--server", url, "--token", "not-a-jwt", "--duration", "2"])
        #expect(garbage.status != 0 && garbage.err.contains("not a LiveKit access token"), "\(garbage.err.suffix(300))")
        let wrong = try runTool([cliPath, "join", "--protocol", "livekit", "--server", url, "--api-key", LK.apiKey, "--api-secret", "not-the-secret",
                                 "--channel", "bad", "--uid", "x", "--duration", "2", "--quiet"])
        #expect(wrong.status != 0 && (wrong.err + wrong.out).contains("refused"), "\(wrong.err.suffix(300)) \(wrong.out.suffix(300))")
        let unknown = try runTool([cliPath, "join", "--protocol", "sip", "--channel", "c", "--uid", "u", "--secret", "s"])
        #expect(unknown.status != 0 && unknown.err.contains("--protocol is native or livekit"), "\(unknown.err.suffix(300))")
        #expect(server.isRunning, "the server survived")
        // A room that requires end-to-end encryption refuses the bot's clear tracks: its AddTrack
        // answered with LiveKit's RequestResponse NOT_ALLOWED, the reason passed on.
        let (strict, strictURL, _) = try await LK.server(["--require-encryption"])
        defer { strict.stop() }
        let refused = try runTool([cliPath, "join", "--protocol", "livekit", "--server", strictURL, "--api-key", LK.apiKey, "--api-secret", LK.apiSecret,
                                   "--channel", "strict", "--uid", "clear", "--duration", "3", "--quiet"], timeout: 30)
        #expect(refused.status != 0 && (refused.err + refused.out).contains("requires end-to-end encryption"), "\(refused.err.suffix(400)) \(refused.out.suffix(200))")
        // Not a LiveKit server (an HTTP server that answers /rtc with 404, as one that speaks only /rtc/v1 would).
        let http = try ChildProcess(["python3", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", dir])
        defer { http.stop() }
        var port: Int?
        _ = await eventually(10) {
            port = (http.output + http.errorText.split(separator: "\n").map(String.init)).lazy.compactMap { line -> Int? in
                guard let range = line.range(of: " port ") else { return nil }
                return Int(line[range.upperBound...].prefix { $0.isNumber })
            }.first
            return port != nil
        }
        let notLiveKit = try runTool([cliPath, "join", "--protocol", "livekit", "--server", "ws://127.0.0.1:\(try #require(port))", "--api-key", LK.apiKey,
                                      "--api-secret", LK.apiSecret, "--channel", "c", "--uid", "u", "--duration", "2", "--quiet"], timeout: 30)
        #expect(notLiveKit.status != 0 && (notLiveKit.err + notLiveKit.out).contains("does not serve LiveKit's /rtc"),
                "\(notLiveKit.err.suffix(400)) \(notLiveKit.out.suffix(200))")
    }
}
