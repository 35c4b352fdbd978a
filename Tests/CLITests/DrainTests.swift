import Foundation
import RTCTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A server drained with SIGTERM, as an operator's rolling restart does (docs/server.md): every
/// client of every dialect is told to join again and comes back to the next server (or another
/// node of the cluster) by itself, with media. LiveKit's Python SDK is the peer we did not write;
/// the Swift bot and the web client in headless Chromium are ours.
@Suite("Drain and restart with SIGTERM", .serialized)
struct DrainTests {
    typealias LK = LiveKitInteropTests
    let dir = temporaryDirectory("drain")
    /// Seconds within which everyone must be back with media after a restart or a node's drain.
    static let backWithin = 10.0

    /// A TCP port free on every address a moment ago (bound on 0.0.0.0, then closed): the port a
    /// server and the one that replaces it listen on.
    static func freeTCPPort() -> Int {
        for _ in 0..<50 {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(fd) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafeMutablePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
            }
            if bound { return Int(UInt16(bigEndian: address.sin_port)) }
        }
        return 17_880
    }

    /// `rtc-server` on `port` with the LiveKit key; returns once it answers, with the monotonic µs of that moment.
    static func server(port: Int, _ extra: [String] = []) async throws -> (ChildProcess, Int64) {
        let server = try ChildProcess([DataChannelInteropTests.serverPath, "--secret", testSecret, "--port", String(port), "--udp-port", "0",
                                       "--media-threads", "1", "--log-level", "warning", "--api-key", LK.apiKey, "--api-secret", LK.apiSecret]
                                      + extra)
        var up: Int64 = 0
        let started = await eventually(20) {
            guard server.output.contains(where: { $0.contains("ws://") }) else { return false }
            up = ClusterTests.monotonicMicroseconds()
            return true
        }
        try #require(started, "rtc-server did not start on port \(port): \(server.errorText.suffix(500))")
        return (server, up)
    }

    /// The monotonic µs of the frames a `--frame-log` shows of `uid`.
    static func frames(_ path: String, of uid: String) -> [Int64] {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ")
            return fields.count >= 2 && fields[1] == uid ? Int64(fields[0]) : nil
        }
    }

    /// The first frame (monotonic ms) a LiveKit peer decoded of `identity`'s `kind` track after `afterMs`:
    /// the tracks the restarted server published anew are new entries in its report.
    static func firstFrameMs(_ report: [String: Any], of identity: String, kind: String, after afterMs: Int64) -> Int64? {
        LK.tracks(report).filter { $0["identity"] as? String == identity && $0["kind"] as? String == kind }
            .compactMap { ($0["firstFrameMono"] as? NSNumber)?.int64Value }.filter { $0 > afterMs }.min()
    }

    /// LiveKit's SDK (publishing) and the web client in Chromium (publishing its camera) in `room`,
    /// once the Swift bot whose `frameLog` shows their video is in; returns once that bot decodes both.
    func others(liveKitURL: String, room: String, page: String, seconds: Int, frameLog: String) async throws -> (livekit: ChildProcess, web: ChildProcess) {
        let livekit = try LK.peer("bot", liveKitURL, ["--room", room, "--identity", "lk", "--publish", "--size", "640x360", "--duration", String(seconds)])
        let web = try ChildProcess(["python3", DataChannelInteropTests.browserTool("browser_peer.py"), page, "--expect-sent", "30",
                                    "--hold", String(seconds - 8), "--seconds", String(seconds + 40)])
        #expect(await eventually(40) { Self.frames(frameLog, of: "lk").count >= 30 && Self.frames(frameLog, of: "web").count >= 30 },
                "before: lk \(Self.frames(frameLog, of: "lk").count), web \(Self.frames(frameLog, of: "web").count) frames at the Swift bot")
        return (livekit, web)
    }

    /// The page's run once it ends: it joined again by itself at least once.
    func expectPageRejoined(_ web: ChildProcess) async {
        _ = await web.wait(60)
        let run = web.output.last.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] } ?? [:]
        #expect(run["ok"] as? Bool == true && (run["rejoins"] as? Int ?? 0) >= 1, "the page: \(web.output.suffix(1)) \(web.errorText.suffix(600))")
    }

    /// Sets the room's metadata and LiveKit's participant's metadata and attributes through the API
    /// (livekit-api, at `url`), as a backend does during a call.
    static func setState(_ url: String, room: String) async throws {
        let results = try await RoomServiceTests.calls(url, [
            #"UpdateRoomMetadata {"room": "\#(room)", "metadata": "agenda-\#(room)"}"#,
            #"UpdateParticipant {"room": "\#(room)", "identity": "lk", "metadata": "presenter", "attributes": {"hand": "up"}}"#,
        ])
        #expect(results.count == 2 && results.allSatisfy { $0["ok"] as? Bool == true }, "\(results)")
    }

    /// Whether the API at `url` shows, within 10 s, the room's metadata and LiveKit's participant's
    /// as ``setState(_:room:)`` left them on the server before the drain; the last answers.
    static func stateKept(_ url: String, room: String) async -> (Bool, [[String: Any]]) {
        var results: [[String: Any]] = []
        let kept = await eventually(10) {
            results = (try? await RoomServiceTests.calls(url, [#"ListRooms {"names": ["\#(room)"]}"#,
                                                               #"GetParticipant {"room": "\#(room)", "identity": "lk"}"#])) ?? []
            guard results.count == 2, let rooms = (results[0]["result"] as? [String: Any])?["rooms"] as? [[String: Any]],
                  let participant = results[1]["result"] as? [String: Any] else { return false }
            return rooms.first?["metadata"] as? String == "agenda-\(room)" && participant["metadata"] as? String == "presenter"
                && (participant["attributes"] as? [String: String]) == ["hand": "up"]
        }
        return (kept, results)
    }

    @Test("SIGTERM, then a new server on the same port: LiveKit's Python SDK, a Swift bot and the web client in Chromium each publish again and receive within 10 s of the new server answering (the times are printed as figures); the room's and the participants' metadata come back (--state-file); the old one drains in well under its timeout")
    func restart() async throws {
        let port = Self.freeTCPPort()
        let stateFile = dir + "/state.json"
        var (server, _) = try await Self.server(port: port, ["--drain-timeout", "8", "--state-file", stateFile])
        defer { server.stop() }
        let url = "ws://127.0.0.1:\(port)"
        let frameLog = dir + "/swift-frames.txt"
        let swift = try LK.swiftBot(url, room: "drain", uid: "swift", ["--size", "640x360", "--audio", "tone", "--frame-log", frameLog,
                                                                       "--duration", "45"])
        defer { swift.stop() }
        // A Swift bot speaking LiveKit's protocol too (docs/livekit.md, "Our SDK in a LiveKit room").
        let liveKitFrames = dir + "/swiftlk-frames.txt"
        let swiftLK = try LiveKitClientTests.liveKitBot(url, room: "drain", uid: "swiftlk", ["--size", "320x180", "--audio", "none",
                                                                                            "--frame-log", liveKitFrames, "--duration", "45"])
        defer { swiftLK.stop() }
        let page = "http://127.0.0.1:\(port)/?channel=drain&uid=web&mode=publish&token=\(testToken(uid: "web", channel: "drain"))"
        let (livekit, web) = try await others(liveKitURL: url, room: "drain", page: page, seconds: 38, frameLog: frameLog)
        defer { livekit.stop(); web.stop() }
        try await Self.setState(url, room: "drain")

        let termAt = ClusterTests.monotonicMicroseconds()
        server.signal(SIGTERM)
        let status = await server.wait(15)
        let exitedAt = ClusterTests.monotonicMicroseconds()
        #expect(status == 0, "the drained server's exit: \(status.map(String.init) ?? "still running") \(server.output.suffix(3))")
        #expect(server.output.contains("drained"), "\(server.output.suffix(5)) \(server.errorText.suffix(400))")
        let (next, upAt) = try await Self.server(port: port, ["--state-file", stateFile])
        server = next
        // The room's and the participants' state came with it (the file, taken up and removed).
        let (kept, answers) = await Self.stateKept(url, room: "drain")
        #expect(kept, "after the restart: \(answers)")
        #expect(!FileManager.default.fileExists(atPath: stateFile))
        // Back with media: each one's video decoded by another, and each one receiving, after upAt.
        let upMs = upAt / 1000
        let report = try await LK.report(livekit, 60)
        _ = await eventually(10) { Self.frames(frameLog, of: "web").contains { $0 > upAt } && Self.frames(frameLog, of: "lk").contains { $0 > upAt } }
        func seconds(_ at: Int64?) -> Double { at.map { Double($0 - upMs) / 1000 } ?? .infinity }
        let lkAtSwift = seconds(Self.frames(frameLog, of: "lk").first { $0 > upAt }.map { $0 / 1000 })
        let webAtSwift = seconds(Self.frames(frameLog, of: "web").first { $0 > upAt }.map { $0 / 1000 })
        let swiftAtLK = seconds(Self.firstFrameMs(report, of: "swift", kind: "video", after: upMs))
        let webAtLK = seconds(Self.firstFrameMs(report, of: "web", kind: "video", after: upMs))
        let swiftAudioAtLK = seconds(Self.firstFrameMs(report, of: "swift", kind: "audio", after: upMs))
        let lkAtSwiftLK = seconds(Self.frames(liveKitFrames, of: "lk").first { $0 > upAt }.map { $0 / 1000 })
        let swiftLKAtLK = seconds(Self.firstFrameMs(report, of: "swiftlk", kind: "video", after: upMs))
        for (what, value) in [("LiveKit's video at the Swift bot", lkAtSwift), ("the page's video at the Swift bot", webAtSwift),
                              ("the Swift bot's video at LiveKit", swiftAtLK), ("the page's video at LiveKit", webAtLK),
                              ("the Swift bot's audio at LiveKit", swiftAudioAtLK), ("LiveKit's video at the LiveKit-protocol Swift bot", lkAtSwiftLK),
                              ("the LiveKit-protocol Swift bot's video at LiveKit", swiftLKAtLK)] {
            // The bound tells "came back" from "never" (LiveKit's SDK before issue 51) or a
            // backoff run away; the times themselves are figures (printed below), not a claim:
            // on a loaded 2-core CI machine LiveKit's SDK republished in 3.2 s where 2.2 s is usual.
            #expect(value <= Self.backWithin, "\(what): \(value) s after the new server answered")
        }
        let connection = report["connection"] as? [[Any]] ?? []
        #expect(report["disconnectReason"] is NSNull || report["disconnectReason"] == nil, "the SDK gave up: \(report["disconnectReason"] ?? "")")
        #expect(connection.contains { $0.first as? String == "reconnected" }, "\(connection)")
        swift.stop()
        await expectPageRejoined(web)
        print(String(format: "drain and restart: drained in %.2f s, down %.2f s; back after the new server answered: LiveKit→Swift %.2f s, page→Swift %.2f s, "
                     + "Swift→LiveKit %.2f s (audio %.2f s), page→LiveKit %.2f s, LiveKit→Swift on LiveKit's protocol %.2f s, and back %.2f s; LiveKit SDK %@",
                     Double(exitedAt - termAt) / 1e6, Double(upAt - termAt) / 1e6, lkAtSwift, webAtSwift, swiftAtLK, swiftAudioAtLK, webAtLK,
                     lkAtSwiftLK, swiftLKAtLK,
                     "\(connection.map { $0.first as? String ?? "?" })"))
    }

    @Test("a 2-node cluster, one node drained with SIGTERM: the room moves to the other node and everyone follows with media (LiveKit's SDK and the page through the other node, a Swift bot by its fallback URL) within 10 s (times printed), with the room's and the participants' metadata (Redis)")
    func clusterDrain() async throws {
        guard ClusterTests.redisAvailable else { Issue.record("redis-server is not installed (make test installs it)"); return }
        let lab = ClusterTests()
        let cluster = try await lab.startTwoNodes(["--api-key", LK.apiKey, "--api-secret", LK.apiSecret, "--drain-timeout", "8"])
        defer { cluster.stop() }
        let frameLog = dir + "/cluster-frames.txt"
        // The room starts on A (its first joiner is there); the rest join through B and are relayed to A.
        let swift = try lab.join(cluster.urlA, uid: "swift", channel: "moving", ["--size", "640x360", "--audio", "tone", "--quiet",
                                                                                  "--fallback-server", cluster.urlB, "--frame-log", frameLog])
        defer { swift.stop() }
        #expect(await eventually(10) { (try? lab.redisCLI(cluster.redisPort, ["GET", "rtc:room:moving"]))?.contains("A") == true })
        let httpB = cluster.urlB.replacingOccurrences(of: "ws://", with: "http://").replacingOccurrences(of: "/rtc", with: "")
        let page = "\(httpB)/?channel=moving&uid=web&mode=publish&token=\(testToken(uid: "web", channel: "moving", secret: ClusterTests.secret))"
        let (livekit, web) = try await others(liveKitURL: httpB.replacingOccurrences(of: "http://", with: "ws://"), room: "moving", page: page,
                                              seconds: 30, frameLog: frameLog)
        defer { livekit.stop(); web.stop() }
        try await Self.setState(httpB, room: "moving")

        let termAt = ClusterTests.monotonicMicroseconds()
        cluster.nodeA.signal(SIGTERM)
        let status = await cluster.nodeA.wait(15)
        #expect(status == 0 && cluster.nodeA.output.contains("drained"), "A: \(cluster.nodeA.output.suffix(3)) \(cluster.nodeA.errorText.suffix(300))")
        // B took the room with its state (Redis): the same API answers there now.
        let (kept, answers) = await Self.stateKept(httpB, room: "moving")
        #expect(kept, "after A's drain, at B: \(answers)")
        let report = try await LK.report(livekit, 60)
        _ = await eventually(10) { Self.frames(frameLog, of: "web").contains { $0 > termAt } && Self.frames(frameLog, of: "lk").contains { $0 > termAt } }
        let termMs = termAt / 1000
        func seconds(_ at: Int64?) -> Double { at.map { Double($0 - termMs) / 1000 } ?? .infinity }
        // A frame decoded after the drain began is one forwarded by B: A stopped forwarding at once.
        let lkAtSwift = seconds(Self.frames(frameLog, of: "lk").first { $0 > termAt + 200_000 }.map { $0 / 1000 })
        let webAtSwift = seconds(Self.frames(frameLog, of: "web").first { $0 > termAt + 200_000 }.map { $0 / 1000 })
        let swiftAtLK = seconds(Self.firstFrameMs(report, of: "swift", kind: "video", after: termMs))
        let webAtLK = seconds(Self.firstFrameMs(report, of: "web", kind: "video", after: termMs))
        for (what, value) in [("LiveKit's video at the Swift bot", lkAtSwift), ("the page's video at the Swift bot", webAtSwift),
                              ("the Swift bot's video at LiveKit", swiftAtLK), ("the page's video at LiveKit", webAtLK)] {
            #expect(value <= Self.backWithin, "\(what): \(value) s after A's drain began")
        }
        #expect(try lab.redisCLI(cluster.redisPort, ["GET", "rtc:room:moving"]).contains("B"), "the room's node now")
        #expect(report["disconnectReason"] is NSNull || report["disconnectReason"] == nil, "the SDK gave up: \(report["disconnectReason"] ?? "")")
        swift.stop()
        await expectPageRejoined(web)
        print(String(format: "cluster drain: node A drained; back through B after the drain began: LiveKit→Swift %.2f s, page→Swift %.2f s, "
                     + "Swift→LiveKit %.2f s, page→LiveKit %.2f s", lkAtSwift, webAtSwift, swiftAtLK, webAtLK))
    }
}
