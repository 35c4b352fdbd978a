import Foundation
import RTCTestSupport
import Signaling
import Testing

/// LiveKit's official server SDK (PyPI `livekit-api`) against `rtc-server`: its RoomService client
/// calls every method the server answers, and its `WebhookReceiver` checks the server's webhooks,
/// in a room where a Swift bot, a LiveKit Python participant and the web client in Chromium are
/// (`Tests/Tools/room_api.py`, docs/server-api.md).
@Suite("Server API: LiveKit's RoomService and webhooks", .serialized)
struct RoomServiceTests {
    static let tool = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Tools/room_api.py").path

    /// A webhook receiver (LiveKit's WebhookReceiver) on a free port, writing what it got to `out`.
    static func receiver(out: String, hang: Bool = false, port: Int = 0) async throws -> (ChildProcess, Int) {
        let process = try ChildProcess(["python3", tool, "webhooks", "--port", "\(port)", "--out", out, "--api-key", LiveKitInteropTests.apiKey,
                                        "--api-secret", LiveKitInteropTests.apiSecret] + (hang ? ["--hang"] : []))
        var found: Int?
        _ = await eventually(20) {
            found = process.output.lazy.compactMap { $0.hasPrefix("listening ") ? Int($0.dropFirst(10)) : nil }.first
            return found != nil
        }
        return (process, try #require(found, "the webhook receiver did not start: \(process.errorText.suffix(500))"))
    }

    /// Runs the calls in order through livekit-api; one JSON object per call.
    static func calls(_ url: String, _ calls: [String]) async throws -> [[String: Any]] {
        let process = try ChildProcess(["python3", tool, "calls", "--url", url.replacingOccurrences(of: "ws://", with: "http://"),
                                        "--api-key", LiveKitInteropTests.apiKey, "--api-secret", LiveKitInteropTests.apiSecret]
                                       + calls.flatMap { ["--call", $0] })
        _ = await process.wait(120)
        return process.output.compactMap { line in
            guard line.hasPrefix("{") else { return nil }
            return (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
        }
    }

    /// Whether ListRooms at `url` lists exactly `names` within 15 s, and its last answer.
    static func waitForRooms(_ url: String, _ names: [String]) async -> (Bool, [[String: Any]]) {
        var results: [[String: Any]] = []
        let listed = await eventually(15) {
            results = (try? await calls(url, [#"ListRooms {}"#])) ?? []
            return ((results.first?["result"] as? [String: Any])?["rooms"] as? [[String: Any]] ?? []).compactMap { $0["name"] as? String } == names
        }
        return (listed, results)
    }

    static func events(_ path: String) -> [[String: Any]] {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
        }
    }

    @Test("livekit-api calls every RoomService method on a room where a Swift bot, a LiveKit participant and the web client publish; each sees what was done to it (metadata, data, a mute, its removal with the reason); LiveKit's WebhookReceiver verifies the events, in order")
    func everyMethod() async throws {
        let dir = temporaryDirectory("room-api")
        let hooks = dir + "/hooks.jsonl"
        let (receiver, hookPort) = try await Self.receiver(out: hooks)
        defer { receiver.stop() }
        let (server, url, port) = try await LiveKitInteropTests.server(["--webhook-url", "http://127.0.0.1:\(hookPort)/hook"])
        defer { server.stop() }

        let created = try await Self.calls(url, [#"CreateRoom {"name": "api", "metadata": "created by the API", "max_participants": 10}"#,
                                                 #"ListRooms {}"#])
        #expect(created.first?["ok"] as? Bool == true && ((created.last?["result"] as? [String: Any])?["rooms"] as? [[String: Any]])?
            .first?["metadata"] as? String == "created by the API", "\(created)")

        let swift = try LiveKitInteropTests.swiftBot(url, room: "api", uid: "swift", ["--video", "pattern", "--print-data", "--duration", "60"])
        defer { swift.stop() }
        let lk = try LiveKitInteropTests.peer("bot", url, ["--room", "api", "--identity", "lk", "--print-data", "--publish", "--size", "320x180",
                                                           "--duration", "60"])
        defer { lk.stop() }
        let page = "http://127.0.0.1:\(port)/?channel=api&uid=web&mode=publish&token=\(testToken(uid: "web", channel: "api"))"
        let web = try ChildProcess(["python3", DataChannelInteropTests.browserTool("browser_peer.py"), page, "--expect-sent", "10",
                                    "--hold", "60", "--seconds", "90"])
        defer { web.stop() }

        let results = try await Self.calls(url, [
            #"WaitParticipants {"room": "api", "count": 3, "timeout": 40}"#,
            #"Sleep {"seconds": 3}"#,
            #"ListRooms {"names": ["api"]}"#,
            #"ListParticipants {"room": "api"}"#,
            #"GetParticipant {"room": "api", "identity": "swift"}"#,
            #"UpdateParticipant {"room": "api", "identity": "lk", "metadata": "hand raised", "name": "LiveKit Bot", "attributes": {"role": "host"}}"#,
            #"UpdateRoomMetadata {"room": "api", "metadata": "agenda v2"}"#,
            #"SendData {"room": "api", "data": "from the server", "kind": "RELIABLE", "topic": "announce"}"#,
            #"MutePublishedTrack {"room": "api", "identity": "swift", "track_sid": "@swift/audio", "muted": true}"#,
            #"UpdateSubscriptions {"room": "api", "identity": "lk", "track_sids": ["@swift/video"], "subscribe": false}"#,
            #"Sleep {"seconds": 2}"#,
            #"GetParticipant {"room": "api", "identity": "lk"}"#,
            #"MutePublishedTrack {"room": "api", "identity": "web", "track_sid": "@web/audio", "muted": true}"#,
            #"Sleep {"seconds": 1}"#,
            #"RemoveParticipant {"room": "api", "identity": "lk"}"#,
            #"RemoveParticipant {"room": "api", "identity": "swift"}"#,
            #"Sleep {"seconds": 1}"#,
            #"ListParticipants {"room": "api"}"#,
            #"DeleteRoom {"room": "api"}"#,
            #"Sleep {"seconds": 1}"#,
            #"ListRooms {}"#,
        ])
        func result(_ index: Int) -> [String: Any] { index < results.count ? results[index]["result"] as? [String: Any] ?? [:] : [:] }
        #expect(results.count == 16 && results.allSatisfy { $0["ok"] as? Bool == true }, "\(results.filter { $0["ok"] as? Bool != true })")
        #expect((results.first?["result"] as? [String]) == ["lk", "swift", "web"], "\(results.first ?? [:])")
        let room = (result(1)["rooms"] as? [[String: Any]])?.first ?? [:]
        #expect(room["numParticipants"] as? Int == 3 && room["metadata"] as? String == "created by the API" && room["maxParticipants"] as? Int == 10,
                "ListRooms: \(room)")
        let listed = (result(2)["participants"] as? [[String: Any]] ?? []).compactMap { $0["identity"] as? String }.sorted()
        #expect(listed == ["lk", "swift", "web"], "ListParticipants: \(listed)")
        let swiftInfo = result(3)
        // (protobuf JSON leaves out enum values that are 0: AUDIO is the type when none is written.)
        let swiftTracks = (swiftInfo["tracks"] as? [[String: Any]] ?? []).map { $0["type"] as? String ?? "AUDIO" }.sorted()
        #expect(swiftInfo["state"] as? String == "ACTIVE" && swiftTracks == ["AUDIO", "VIDEO"], "GetParticipant swift: \(swiftInfo)")
        let updated = result(4)
        #expect(updated["metadata"] as? String == "hand raised" && updated["name"] as? String == "LiveKit Bot"
                && (updated["attributes"] as? [String: String])?["role"] == "host", "UpdateParticipant: \(updated)")
        #expect(result(5)["metadata"] as? String == "agenda v2", "UpdateRoomMetadata: \(result(5))")
        #expect((result(7)["track"] as? [String: Any])?["muted"] as? Bool == true, "MutePublishedTrack: \(result(7))")
        #expect((result(9)["metadata"] as? String) == "hand raised", "GetParticipant lk after the update: \(result(9))")
        #expect((result(10)["track"] as? [String: Any])?["muted"] as? Bool == true, "MutePublishedTrack web: \(result(10))")
        #expect((result(13)["participants"] as? [[String: Any]] ?? []).compactMap { $0["identity"] as? String } == ["web"], "\(result(13))")
        #expect((result(15)["rooms"] as? [[String: Any]] ?? []).isEmpty, "ListRooms after DeleteRoom: \(result(15))")

        // The LiveKit participant: the others' metadata and the room's, the server's data, swift's
        // audio muted, swift's video unsubscribed, then its own removal with LiveKit's reason.
        let lkReport = try await LiveKitInteropTests.report(lk, 30)
        let changes = lkReport["changes"] as? [[Any]] ?? []
        #expect(changes.contains { $0.count >= 3 && $0[0] as? String == "roomMetadata" && $0[2] as? String == "agenda v2" }, "changes: \(changes)")
        #expect(lkReport["disconnectReason"] as? String == "PARTICIPANT_REMOVED", "\(lkReport["disconnectReason"] ?? "none")")
        let lkData = lkReport["data"] as? [[String: Any]] ?? []
        #expect(lkData.contains { $0["text"] as? String == "from the server" && $0["topic"] as? String == "announce" }, "data at lk: \(lkData)")
        #expect((lkReport["muted"] as? [[String]] ?? []).contains { $0.first == "swift" }, "mutes seen at lk: \(lkReport["muted"] ?? [])")
        // Swift's audio goes silent at lk once muted (the tone before, near nothing from 1 s after the
        // call), and swift's video stops reaching lk once unsubscribed (lk's clock is the same
        // monotonic clock as the calls' atMs).
        let mutedAt = results.count > 7 ? results[7]["atMs"] as? Int ?? 0 : 0
        let unsubscribedAt = results.count > 8 ? results[8]["atMs"] as? Int ?? 0 : 0
        let audio = LiveKitInteropTests.track(lkReport, identity: "swift", kind: "audio")
        let levels = zip(audio?["rms"] as? [Double] ?? [], audio?["rmsAtMono"] as? [Int] ?? []).map { (rms: $0, at: $1) }
        let before = levels.filter { $0.at < mutedAt }, after = levels.filter { $0.at > mutedAt + 1000 }
        #expect(before.contains { $0.rms > 500 } && !after.isEmpty && after.allSatisfy { $0.rms < 100 },
                "swift's tone at lk, before the mute \(before.map(\.rms).suffix(4)), from 1 s after \(after.map(\.rms).prefix(6))")
        let video = LiveKitInteropTests.track(lkReport, identity: "swift", kind: "video")
        let lastFrame = video?["lastFrameMono"] as? Int ?? 0
        #expect((video?["frames"] as? Int ?? 0) > 10 && lastFrame < unsubscribedAt + 1000,
                "swift's video at lk: last frame \(lastFrame - unsubscribedAt) ms after the unsubscription, \(video?["frames"] ?? 0) frames")

        // The Swift bot: the server's data, its own track muted by the server, the room's metadata,
        // and its removal.
        #expect(await eventually(10) { swift.output.contains("server left bannedByServer") }, "\(swift.output.suffix(8))")
        let swiftData = DataChannelInteropTests.received(swift)
        #expect(swiftData.contains { $0.topic == "announce" && $0.text == "from the server" }, "\(swiftData.prefix(5))")
        #expect(swift.output.contains { $0.hasPrefix("server muted TR_") && $0.hasSuffix(" true") }, "\(swift.output.suffix(8))")
        #expect(swift.output.contains("server roomMetadata created by the API") && swift.output.contains("server roomMetadata agenda v2"),
                "\(swift.output.filter { $0.hasPrefix("server") })")

        // The web client (protocol 1.6): lk's metadata as the API set it, the room's metadata, its
        // own microphone muted by the API, and its leave when the room was deleted.
        _ = await web.wait(30)
        let state = try DataChannelInteropTests.report(web)
        #expect(state["left"] as? String == "roomDeleted", "the page's leave: \(state["left"] ?? "none") \(state["reason"] ?? "")")
        #expect(state["roomMetadata"] as? String == "agenda v2", "the page's room metadata: \(state["roomMetadata"] ?? "none")")
        let serverMutes = state["mutedByServer"] as? [[String: Any]] ?? []
        #expect(serverMutes.contains { $0["muted"] as? Bool == true && $0["kind"] as? String == "audio" }, "the page's mutes by the server: \(serverMutes)")
        let metadata = (state["metadata"] as? [String: [String: Any]])?["lk"]
        #expect(metadata?["metadata"] as? String == "hand raised" && metadata?["name"] as? String == "LiveKit Bot", "page's view of lk: \(metadata ?? [:])")

        // The webhooks, each verified by LiveKit's WebhookReceiver, in the room's order.
        #expect(await eventually(10) { Self.events(hooks).contains { $0["event"] as? String == "room_finished" } })
        let events = Self.events(hooks).filter { $0["room"] as? String == "api" }
        #expect(!events.isEmpty && events.allSatisfy { $0["error"] == nil && $0["contentType"] as? String == "application/webhook+json" },
                "\(events.filter { $0["error"] != nil })")
        let names = events.map { "\($0["event"] ?? "")" + (($0["participant"] as? String).map { $0.isEmpty ? "" : " " + $0 } ?? "") }
        #expect(names.first == "room_started" && names.last == "room_finished", "\(names)")
        for who in ["swift", "lk", "web"] {
            let joined = names.firstIndex(of: "participant_joined \(who)"), left = names.firstIndex(of: "participant_left \(who)")
            #expect(joined != nil && left != nil && joined! < left!, "\(who): \(names)")
        }
        for who in ["swift", "lk", "web"] {
            // Each published video and audio; each track ends when its publisher leaves.
            #expect(names.filter { $0 == "track_published \(who)" }.count == 2 && names.filter { $0 == "track_unpublished \(who)" }.count == 2,
                    "\(who): \(names)")
        }
        let reasons = Dictionary(events.filter { $0["event"] as? String == "participant_left" }
            .map { ($0["participant"] as? String ?? "", $0["disconnectReason"] as? String ?? "") }, uniquingKeysWith: { first, _ in first })
        #expect(reasons == ["lk": "PARTICIPANT_REMOVED", "swift": "PARTICIPANT_REMOVED", "web": "ROOM_DELETED"], "\(reasons)")
        let times = events.compactMap { $0["createdAt"] as? Int }
        #expect(times == times.sorted(), "createdAt in order: \(times)")
        print("webhooks for room api: \(names.joined(separator: ", "))")
    }

    @Test("Twirp's edges: a body sent as text/plain or with no Content-Type is refused with bad_route and the reason (it was read as protobuf), a type with parameters is taken, and an unknown service answers Twirp's JSON, which livekit-api reports with its code and message")
    func twirpEdges() async throws {
        let (server, url, _) = try await LiveKitInteropTests.server()
        defer { server.stop() }
        let list = "/twirp/livekit.RoomService/ListRooms", participants = "/twirp/livekit.RoomService/ListParticipants"
        let results = try await Self.calls(url, [
            #"Raw {"path": "\#(list)", "token": "admin", "contentType": "text/plain", "body": ""}"#,
            #"Raw {"path": "\#(list)", "token": "admin", "contentType": null, "body": ""}"#,
            #"Raw {"path": "\#(participants)", "token": "admin", "room": "tw", "contentType": "application/json; charset=utf-8", "body": "{\"room\": \"tw\"}"}"#,
            #"Raw {"path": "\#(participants)", "token": "admin", "room": "tw", "contentType": "Application/Protobuf", "body": "\n\u0002tw"}"#,
            #"Raw {"path": "/twirp/livekit.Egress/ListEgress", "token": "admin", "contentType": "application/json", "body": "{}"}"#,
            #"ListEgress {"room": "r"}"#,
        ])
        let codes = results.map { "\($0["status"] as? Int ?? 0) \($0["code"] as? String ?? "-")" }
        // The JSON and protobuf bodies are read (room tw is named, and there is no such room).
        #expect(codes == ["404 bad_route", "404 bad_route", "404 not_found", "404 not_found", "404 bad_route", "404 bad_route"], "\(codes) \(results)")
        #expect(results[2..<4].allSatisfy { ($0["msg"] as? String ?? "").contains("tw") }, "\(results[2..<4].map { $0["msg"] ?? "" })")
        #expect((results[0]["msg"] as? String ?? "").contains("text/plain") && (results[1]["msg"] as? String ?? "").contains("no Content-Type"),
                "\(results.prefix(2).map { $0["msg"] ?? "" })")
        // LiveKit's server SDK names the code and the reason, not `unknown` with an empty message.
        #expect((results[5]["msg"] as? String ?? "").contains("livekit.Egress"), "\(results[5])")
        print("Twirp edges: \(codes); livekit-api on an unknown service: \(results[5]["code"] ?? "?") \(results[5]["msg"] ?? "")")
    }

    @Test("bad input: no token, a participant's token, a token for another room, an unknown method, a malformed body, a 1 MB and a 20 KB metadata, a flood past the rate: a Twirp error each, and the server still answers")
    func badInput() async throws {
        let (server, url, _) = try await LiveKitInteropTests.server()
        defer { server.stop() }
        let swift = try LiveKitInteropTests.swiftBot(url, room: "bad", uid: "swift", ["--video", "none", "--audio", "none", "--duration", "30"])
        defer { swift.stop() }
        let results = try await Self.calls(url, [
            #"WaitParticipants {"room": "bad", "count": 1}"#,
            #"Raw {"path": "/twirp/livekit.RoomService/ListRooms"}"#,
            #"Raw {"path": "/twirp/livekit.RoomService/ListParticipants", "token": "participant", "room": "bad"}"#,
            #"Raw {"path": "/twirp/livekit.RoomService/ListParticipants", "token": "admin", "room": "other", "body": "\n\u0003bad"}"#,
            #"Raw {"path": "/twirp/livekit.RoomService/NoSuchMethod", "token": "admin", "room": "bad"}"#,
            #"Raw {"path": "/twirp/livekit.RoomService/ListParticipants", "token": "admin", "room": "bad", "body": "\u00ff\u00ff\u00ff\u00ff"}"#,
            #"Raw {"path": "/twirp/livekit.RoomService/ListParticipants", "token": "admin", "room": "bad", "contentType": "application/json", "body": "{not json"}"#,
            #"UpdateParticipant {"room": "bad", "identity": "swift", "metadata_bytes": 1048576}"#,
            #"UpdateParticipant {"room": "bad", "identity": "swift", "metadata_bytes": 20000}"#,
            #"RemoveParticipant {"room": "bad", "identity": "nobody"}"#,
            #"Raw {"path": "/twirp/livekit.RoomService/ListParticipants", "token": "admin", "room": "bad", "contentType": "application/json", "body": "{\"room\": \"bad\"}"}"#,
        ])
        let codes = results.dropFirst().map { "\($0["status"] as? Int ?? 0) \($0["code"] as? String ?? "-")" }
        #expect(codes == ["401 unauthenticated", "403 permission_denied", "403 permission_denied", "404 bad_route", "400 malformed", "400 malformed",
                          "400 invalid_argument", "400 invalid_argument", "404 not_found", "200 -"], "\(codes) \(results.suffix(3))")
        for result in results.dropFirst().prefix(9) {
            #expect(!(result["msg"] as? String ?? "").isEmpty, "a message says why: \(result)")
        }
        // The JSON form answers JSON (the last call).
        // A flood of calls with one key: the burst (200, plus 50 a second) answered, the rest refused with 429, and the server goes on.
        let flood = try await Self.calls(url, [#"Flood {"count": 600}"#, #"Sleep {"seconds": 1.5}"#, #"ListRooms {}"#])
        let statuses = flood.first?["result"] as? [String: Int] ?? [:]
        #expect((statuses["200"] ?? 0) >= 200 && (statuses["429"] ?? 0) > 0 && (statuses["200"] ?? 0) + (statuses["429"] ?? 0) == 600,
                "\(statuses)")
        #expect(flood.last?["ok"] as? Bool == true, "after the flood: \(flood.last ?? [:])")
        print("600 calls at once with one key: \(statuses)")
        let lastBody = results.last?["body"] as? String ?? ""
        #expect(lastBody.contains("\"identity\":\"swift\""), "\(results.last ?? [:])")
        #expect(server.isRunning, "the server is still up: \(server.errorText.suffix(300))")
    }

    @Test("PerformRpc: the server calls a LiveKit participant's RPC methods through its SDK (LiveKit's Python SDK): the answer's payload; the handler's own error, an unknown method and a handler slower than the timeout each as LiveKit answers them; a Swift bot (no LiveKit RPC) and an unknown identity refused at once; nothing relayed to the others")
    func performRpc() async throws {
        let (server, url, _) = try await LiveKitInteropTests.server()
        defer { server.stop() }
        // It reports what its handlers served when its 9 s are up.
        let bot = try LiveKitInteropTests.peer("bot", url, ["--room", "rpc", "--identity", "lk", "--duration", "9"])
        defer { bot.stop() }
        let swift = try LiveKitInteropTests.swiftBot(url, room: "rpc", uid: "swift", ["--video", "none", "--audio", "none", "--print-data", "--duration", "40"])
        defer { swift.stop() }
        func rpc(_ identity: String, _ method: String, _ payload: String, timeoutMs: Int = 0) -> String {
            let body = #"{"room": "rpc", "destination_identity": "\#(identity)", "method": "\#(method)", "payload": "\#(payload)", "response_timeout_ms": \#(timeoutMs)}"#
            let escaped = body.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            return #"Raw {"path": "/twirp/livekit.RoomService/PerformRpc", "contentType": "application/json", "token": "admin", "room": "rpc", "body": "\#(escaped)"}"#
        }
        // The bot prints `ready` once connected with its handlers registered: a call before that
        // would meet the SDK without them (WaitParticipants only sees the join).
        #expect(await eventually(20) { bot.output.contains("ready") }, "\(bot.output.suffix(3)) \(bot.errorText)")
        let results = try await Self.calls(url, [
            #"WaitParticipants {"room": "rpc", "count": 2}"#,
            #"Sleep {"seconds": 1}"#,
            rpc("lk", "echo", "ping"),
            rpc("lk", "refuse", "nope"),
            rpc("lk", "nothing-here", "x"),
            rpc("lk", "slow", "zzz", timeoutMs: 1000),
            rpc("swift", "echo", "ping"),
            rpc("nobody", "echo", "ping"),
            rpc("", "echo", "ping"),
        ])
        let answers = Array(results.dropFirst())  // after WaitParticipants (Sleep answers nothing)
        let shown = answers.map { "\($0["status"] as? Int ?? 0) \($0["code"] as? String ?? "-") \($0["msg"] as? String ?? "")" }
        print("PerformRpc: \(shown)")
        #expect(answers.count == 7, "\(results)")
        guard answers.count == 7 else { return }
        #expect(answers[0]["status"] as? Int == 200 && (answers[0]["json"] as? [String: Any])?["payload"] as? String == "echo:ping", "\(answers[0])")
        // The handler's own error, with its code and data, as LiveKit's server gives it (internal).
        #expect(answers[1]["status"] as? Int == 500 && answers[1]["code"] as? String == "internal"
                && (answers[1]["msg"] as? String ?? "").contains("RpcError 2001: refused by the bot: nope"), "\(answers[1])")
        // The SDK answers an unknown method with 1400 (invalid_argument).
        #expect(answers[2]["code"] as? String == "invalid_argument" && (answers[2]["msg"] as? String ?? "").contains("RpcError 1400"), "\(answers[2])")
        // Acked, but no answer within the 1 s asked: 1502 (canceled, 408).
        #expect(answers[3]["status"] as? Int == 408 && (answers[3]["msg"] as? String ?? "").contains("RpcError 1502"), "\(answers[3])")
        #expect(answers[4]["code"] as? String == "invalid_argument" && (answers[4]["msg"] as? String ?? "").contains("no LiveKit data channel"), "\(answers[4])")
        #expect(answers[5]["code"] as? String == "not_found", "\(answers[5])")
        #expect(answers[6]["code"] as? String == "invalid_argument", "\(answers[6])")
        #expect(await bot.wait(30) == 0, "\(bot.output.suffix(3)) \(bot.errorText)")
        let served = bot.output.compactMap { line -> [String: Any]? in
            guard line.hasPrefix("{") else { return nil }
            return (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
        }.last?["rpcServed"] as? [[String: Any]] ?? []
        #expect(served.compactMap { $0["payload"] as? String } == ["ping", "nope", "zzz"], "\(served)")
        // The requests, acks and answers went to no one else.
        #expect(!swift.output.contains { $0.contains("ping") || $0.contains("echo:") }, "\(swift.output.suffix(5))")
    }

    @Test("/debug/forwarded: RTP packets the server forwarded to one participant, by sender and kind, for a roomAdmin token of its room; no token 401, another room's token 403, an unknown identity or room 404, no query 400, a POST 404")
    func forwardedPackets() async throws {
        let (server, url, _) = try await LiveKitInteropTests.server()
        defer { server.stop() }
        let publisher = try LiveKitInteropTests.swiftBot(url, room: "fwd", uid: "pub", ["--video", "pattern", "--size", "320x180", "--audio", "tone",
                                                                                       "--no-subscribe", "--duration", "30"])
        defer { publisher.stop() }
        let viewer = try LiveKitInteropTests.swiftBot(url, room: "fwd", uid: "view", ["--video", "none", "--audio", "none", "--duration", "30"])
        defer { viewer.stop() }
        let path = "/debug/forwarded?room=fwd&identity="
        let results = try await Self.calls(url, [
            #"WaitParticipants {"room": "fwd", "count": 2}"#,
            #"Sleep {"seconds": 3}"#,
            #"Raw {"method": "GET", "path": "\#(path)view", "token": "admin", "room": "fwd"}"#,
            #"Raw {"method": "GET", "path": "\#(path)pub", "token": "admin", "room": "fwd"}"#,
            #"Raw {"method": "GET", "path": "\#(path)view"}"#,
            #"Raw {"method": "GET", "path": "\#(path)view", "token": "admin", "room": "other"}"#,
            #"Raw {"method": "GET", "path": "\#(path)view", "token": "participant", "room": "fwd"}"#,
            #"Raw {"method": "GET", "path": "\#(path)nobody", "token": "admin", "room": "fwd"}"#,
            #"Raw {"method": "GET", "path": "/debug/forwarded?room=gone&identity=view", "token": "admin", "room": "gone"}"#,
            #"Raw {"method": "GET", "path": "/debug/forwarded", "token": "admin", "room": "fwd"}"#,
            #"Raw {"path": "\#(path)view", "token": "admin", "room": "fwd"}"#,
        ])
        let answers = Array(results.dropFirst())  // after WaitParticipants (Sleep answers nothing)
        let codes = answers.map { "\($0["status"] as? Int ?? 0) \($0["code"] as? String ?? "-")" }
        #expect(codes == ["200 -", "200 -", "401 unauthenticated", "403 permission_denied", "403 permission_denied", "404 not_found", "404 not_found",
                          "400 invalid_argument", "404 bad_route"], "\(codes) \(answers.map { $0["msg"] ?? "" })")
        // The viewer got the publisher's video and audio; the publisher (subscribing to nothing) got nothing.
        let toViewer = (answers.first?["json"] as? [String: Any])?["forwarded"] as? [[String: Any]] ?? []
        let video = toViewer.first { $0["from"] as? String == "pub" && $0["kind"] as? String == "video" }?["packets"] as? Int ?? 0
        let audio = toViewer.first { $0["from"] as? String == "pub" && $0["kind"] as? String == "audio" }?["packets"] as? Int ?? 0
        #expect(video > 20 && audio > 20, "\(toViewer)")
        let toPublisher = (answers.dropFirst().first?["json"] as? [String: Any])?["forwarded"] as? [[String: Any]]
        #expect(toPublisher?.allSatisfy { ($0["packets"] as? Int ?? 1) == 0 } == true, "\(String(describing: toPublisher))")
    }

    @Test("rtc-cli room lists, updates, messages and removes like lk room: each line names what it did; a refusal is one error line and a non-zero exit")
    func cli() async throws {
        let (server, url, _) = try await LiveKitInteropTests.server()
        defer { server.stop() }
        let bot = try LiveKitInteropTests.swiftBot(url, room: "cli", uid: "bot", ["--video", "none", "--audio", "none", "--print-data", "--duration", "30"])
        defer { bot.stop() }
        let keys = ["--url", url, "--api-key", LiveKitInteropTests.apiKey, "--api-secret", LiveKitInteropTests.apiSecret]
        func room(_ arguments: [String]) throws -> (status: Int32, out: String, err: String) { try runTool([cliPath, "room"] + arguments + keys) }
        #expect(await eventually(15) { (try? room(["participants", "--room", "cli"]))?.out.hasPrefix("bot\t") == true })
        let listed = try room(["list"])
        #expect(listed.status == 0 && listed.out.hasPrefix("cli\t") && listed.out.contains("1 participants"), "\(listed)")
        let updated = try room(["update", "--room", "cli", "--identity", "bot", "--metadata", "presenter", "--attribute", "hand=up"])
        #expect(updated.status == 0 && updated.out.contains("metadata: presenter") && updated.out.contains("attributes: hand=up"), "\(updated)")
        let sent = try room(["send", "--room", "cli", "--data", "hello from rtc-cli", "--topic", "ops"])
        #expect(sent.status == 0, "\(sent)")
        #expect(await eventually(5) { DataChannelInteropTests.received(bot).contains { $0.text == "hello from rtc-cli" && $0.topic == "ops" } },
                "\(bot.output.suffix(5))")
        let metadata = try room(["metadata", "--room", "cli", "--metadata", "agenda"])
        #expect(metadata.status == 0 && metadata.out.contains("metadata: agenda"), "\(metadata)")
        let missing = try room(["participants", "--room", "nowhere"])
        #expect(missing.status != 0 && missing.err.contains("404 not_found") && missing.err.split(separator: "\n").count == 1, "\(missing)")
        let removed = try room(["remove", "--room", "cli", "--identity", "bot"])
        #expect(removed.status == 0 && removed.out.contains("removed bot from cli"), "\(removed)")
        #expect(await eventually(5) { bot.output.contains("server left bannedByServer") && bot.output.contains("server roomMetadata agenda") },
                "\(bot.output.suffix(5))")
        let wrong = try runTool([cliPath, "room", "list", "--url", url, "--api-key", LiveKitInteropTests.apiKey, "--api-secret", "not-the-secret-at-all"])
        #expect(wrong.status != 0 && wrong.err.contains("401 unauthenticated"), "\(wrong)")
    }

    @Test("as lk and LiveKit's server SDKs: rtc-cli room, token and join read LIVEKIT_URL, LIVEKIT_API_KEY and LIVEKIT_API_SECRET; room takes --server and join --url as the other's name; without keys anywhere, one clear error")
    func liveKitEnvironment() async throws {
        let (server, url, _) = try await LiveKitInteropTests.server()
        defer { server.stop() }
        let environment = ["env", "LIVEKIT_URL=\(url)", "LIVEKIT_API_KEY=\(LiveKitInteropTests.apiKey)", "LIVEKIT_API_SECRET=\(LiveKitInteropTests.apiSecret)"]
        // A LiveKit token from the environment's keys; a Swift bot (our token) joins at $LIVEKIT_URL's /rtc.
        let minted = try runTool(environment + [cliPath, "token", "--channel", "envroom", "--uid", "envbot"])
        #expect(minted.status == 0 && minted.out.hasPrefix("LiveKit token for identity envbot"), "\(minted)")
        let bot = try ChildProcess(environment + [cliPath, "join", "--channel", "envroom", "--uid", "envbot", "--token", testToken(uid: "envbot", channel: "envroom"),
                                                  "--video", "none", "--audio", "none", "--quiet", "--duration", "20"])
        defer { bot.stop() }
        #expect(await eventually(15) { (try? runTool(environment + [cliPath, "room", "participants", "--room", "envroom"]))?.out.hasPrefix("envbot\t") == true },
                "the bot joined at $LIVEKIT_URL/rtc and room read the keys: \(bot.output.suffix(3)) \(bot.errorText.suffix(300))")
        let byServer = try runTool([cliPath, "room", "list", "--server", url, "--api-key", LiveKitInteropTests.apiKey, "--api-secret", LiveKitInteropTests.apiSecret])
        #expect(byServer.status == 0 && byServer.out.hasPrefix("envroom\t"), "\(byServer)")
        let joinByURL = try runTool([cliPath, "join", "--url", url + "/rtc", "--channel", "envroom", "--uid", "second", "--token",
                                     testToken(uid: "second", channel: "envroom"), "--video", "none", "--audio", "none", "--quiet", "--duration", "2"], timeout: 30)
        #expect(joinByURL.status == 0, "\(joinByURL.err.suffix(300))")
        let flagWins = try runTool(environment + [cliPath, "room", "list", "--api-secret", "not-the-secret-at-all"])
        #expect(flagWins.status != 0 && flagWins.err.contains("401 unauthenticated"), "a flag wins over the environment: \(flagWins)")
        let none = try runTool(["env", "-u", "LIVEKIT_API_KEY", "-u", "LIVEKIT_API_SECRET", cliPath, "room", "list", "--url", url])
        #expect(none.status != 0 && none.err.contains("LIVEKIT_API_KEY") && !none.err.contains("Fatal"), "\(none)")
    }

    @Test("participants set their own metadata when their token allows: a LiveKit participant through its SDK, a Swift bot through the engine; the others see it, the API lists it; without the grant both are refused")
    func ownMetadata() async throws {
        let (server, url, _) = try await LiveKitInteropTests.server()
        defer { server.stop() }
        var allowed = TokenGrants.all
        allowed.updateMetadata = true
        let watcher = try LiveKitInteropTests.peer("bot", url, ["--room", "meta", "--identity", "watcher", "--duration", "12"])
        defer { watcher.stop() }
        try await Task.sleep(for: .seconds(2))
        let swift = try ChildProcess([cliPath, "join", "--server", url + "/rtc", "--channel", "meta", "--uid", "swift", "--quiet", "--video", "none",
                                      "--audio", "none", "--token", testToken(uid: "swift", channel: "meta", grants: allowed),
                                      "--set-metadata", "swift ready", "--duration", "10"])
        let refused = try ChildProcess([cliPath, "join", "--server", url + "/rtc", "--channel", "meta", "--uid", "plain", "--quiet", "--video", "none",
                                        "--audio", "none", "--token", testToken(uid: "plain", channel: "meta"), "--set-metadata", "nope", "--duration", "4"])
        defer { swift.stop(); refused.stop() }
        let lk = try LiveKitInteropTests.peer("bot", url, ["--room", "meta", "--identity", "lk", "--metadata-grant", "--set-metadata", "lk ready",
                                                           "--duration", "8"])
        let lkRefused = try LiveKitInteropTests.peer("bot", url, ["--room", "meta", "--identity", "lk-plain", "--set-metadata", "nope", "--duration", "6"])
        defer { lk.stop(); lkRefused.stop() }
        // The API lists what each set (while they are there).
        var listed: [[String: Any]] = []
        let seen = await eventually(15) {
            listed = (try? await Self.calls(url, [#"GetParticipant {"room": "meta", "identity": "swift"}"#,
                                                  #"GetParticipant {"room": "meta", "identity": "lk"}"#])) ?? []
            let lkInfo = listed.last?["result"] as? [String: Any]
            return (listed.first?["result"] as? [String: Any])?["metadata"] as? String == "swift ready"
                && lkInfo?["metadata"] as? String == "lk ready" && (lkInfo?["attributes"] as? [String: String])?["state"] == "ready"
        }
        #expect(seen, "\(listed)")
        let lkReport = try await LiveKitInteropTests.report(lk, 30), lkRefusedReport = try await LiveKitInteropTests.report(lkRefused, 30)
        #expect(lkReport["metadataSet"] as? Bool == true && lkReport["ownMetadata"] as? String == "lk ready", "\(lkReport["metadataError"] ?? "")")
        // LiveKit's SDK 1.2 does not raise on the refusal (NOT_ALLOWED): its metadata stays empty, nobody sees it.
        #expect(lkRefusedReport["ownMetadata"] as? String == "", "\(lkRefusedReport)")
        #expect(await eventually(10) { swift.output.contains("metadata set") }, "\(swift.output)")
        #expect(await eventually(10) { refused.output.contains { line in line.hasPrefix("metadata refused:") && line.contains("updateMetadata") } },
                "\(refused.output)")
        let watched = try await LiveKitInteropTests.report(watcher, 30)
        let changes = watched["changes"] as? [[Any]] ?? []
        for (who, text) in [("swift", "swift ready"), ("lk", "lk ready")] {
            #expect(changes.contains { $0.count >= 3 && $0[0] as? String == "metadata" && $0[1] as? String == who && $0[2] as? String == text },
                    "\(who) at the watcher: \(changes)")
        }
        #expect(!changes.contains { $0.count >= 3 && $0[2] as? String == "nope" }, "a refused change reached the watcher: \(changes)")
    }

    @Test("in a cluster, calls reaching node B about a room on node A are answered by A: ListRooms lists both nodes' rooms, ListParticipants, UpdateParticipant, /debug/forwarded and RemoveParticipant act on A's room",
          .enabled(if: ClusterTests.redisAvailable))
    func cluster() async throws {
        let nodes = try await ClusterTests().startTwoNodes(["--api-key", LiveKitInteropTests.apiKey, "--api-secret", LiveKitInteropTests.apiSecret])
        defer { nodes.stop() }
        let onA = try ClusterTests().join(nodes.urlA, uid: "far", channel: "on-a", ["--video", "none", "--audio", "none", "--quiet"])
        let onB = try ClusterTests().join(nodes.urlB, uid: "near", channel: "on-b", ["--video", "none", "--audio", "none", "--quiet"])
        defer { onA.stop(); onB.stop() }
        let urlB = nodes.urlB.replacingOccurrences(of: "/rtc", with: "")
        let (listed, rooms) = await Self.waitForRooms(urlB, ["on-a", "on-b"])
        #expect(listed, "ListRooms at B: \(rooms)")
        let results = try await Self.calls(urlB, [
            #"ListParticipants {"room": "on-a"}"#,
            #"UpdateParticipant {"room": "on-a", "identity": "far", "metadata": "set through B"}"#,
            #"Raw {"method": "GET", "path": "/debug/forwarded?room=on-a&identity=far", "token": "admin", "room": "on-a"}"#,
            #"RemoveParticipant {"room": "on-a", "identity": "far"}"#,
            #"ListParticipants {"room": "nowhere"}"#,
        ])
        #expect(results.count == 5, "\(results)")
        // /debug/forwarded at B about A's participant: answered by A (its JSON names the room and identity).
        let forwarded = results.count > 2 ? results[2]["json"] as? [String: Any] : nil
        #expect(results.count > 2 && results[2]["status"] as? Int == 200 && forwarded?["identity"] as? String == "far"
                && forwarded?["room"] as? String == "on-a", "\(results.count > 2 ? results[2] : [:])")
        let participants = ((results.first?["result"] as? [String: Any])?["participants"] as? [[String: Any]] ?? []).compactMap { $0["identity"] as? String }
        #expect(participants == ["far"], "\(results.first ?? [:])")
        #expect((results.count > 1 ? results[1]["result"] as? [String: Any] : nil)?["metadata"] as? String == "set through B", "\(results)")
        #expect(results.count > 3 && results[3]["ok"] as? Bool == true, "\(results)")
        #expect(results.last?["code"] as? String == "not_found", "\(results.last ?? [:])")
        #expect(await eventually(10) { onA.output.contains("server left bannedByServer") }, "\(onA.output.suffix(3))")
    }

    @Test("in a cluster, a room made by CreateRoom at node A takes the joins that arrive at node B, with its settings: the first is relayed to A, the second refused (max_participants 1), and B lists the room's metadata",
          .enabled(if: ClusterTests.redisAvailable))
    func clusterCreatedRoom() async throws {
        let nodes = try await ClusterTests().startTwoNodes(["--api-key", LiveKitInteropTests.apiKey, "--api-secret", LiveKitInteropTests.apiSecret])
        defer { nodes.stop() }
        let (apiA, apiB) = (nodes.urlA.replacingOccurrences(of: "/rtc", with: ""), nodes.urlB.replacingOccurrences(of: "/rtc", with: ""))
        let made = try await Self.calls(apiA, [#"CreateRoom {"name": "made", "metadata": "agenda", "max_participants": 1}"#])
        #expect((made.first?["result"] as? [String: Any])?["name"] as? String == "made", "\(made)")
        let quiet = ["--video", "none", "--audio", "none", "--quiet"]
        let first = try ClusterTests().join(nodes.urlB, uid: "first", channel: "made", quiet)
        defer { first.stop() }
        var listed: [[String: Any]] = []
        #expect(await eventually(15) {
            listed = (try? await Self.calls(apiB, [#"ListParticipants {"room": "made"}"#])) ?? []
            return ((listed.first?["result"] as? [String: Any])?["participants"] as? [[String: Any]] ?? []).compactMap { $0["identity"] as? String } == ["first"]
        }, "\(listed) \(first.errorText)")
        // The room's bound came with it: a second participant is one too many.
        let second = try ClusterTests().join(nodes.urlB, uid: "second", channel: "made", quiet)
        defer { second.stop() }
        #expect(await second.wait(15) != 0 && second.errorText.contains("made is full"), "\(second.output.suffix(3)) \(second.errorText)")
        let rooms = try await Self.calls(apiB, [#"ListRooms {"names": ["made"]}"#])
        let room = ((rooms.first?["result"] as? [String: Any])?["rooms"] as? [[String: Any]])?.first
        #expect(room?["metadata"] as? String == "agenda" && room?["maxParticipants"] as? Int == 1, "\(rooms)")
    }

    @Test("with --media-processes 2, calls reaching the front about a room in the media process act there: ListRooms lists both processes' rooms, ListParticipants, UpdateParticipant, /debug/forwarded and RemoveParticipant on the child's room; an unknown room is not_found")
    func mediaProcesses() async throws {
        let (server, url, _) = try await MediaProcessesTests().startServer(["--api-key", LiveKitInteropTests.apiKey, "--api-secret", LiveKitInteropTests.apiSecret])
        defer { server.stop() }
        let secret = ["--secret", MediaProcessesTests.secret, "--duration", "60"]
        // The first room stays on the front (here first among equals); the second goes to the child.
        let front = try ChildProcess([cliPath, "join", "--server", url, "--channel", "on-front", "--uid", "near", "--video", "none", "--audio", "none", "--quiet"] + secret)
        defer { front.stop() }
        try await Task.sleep(for: .milliseconds(1500))
        let publisher = try ChildProcess([cliPath, "join", "--server", url, "--channel", "on-child", "--uid", "pub", "--video", "pattern", "--size", "320x180",
                                          "--audio", "none", "--no-subscribe", "--quiet"] + secret)
        defer { publisher.stop() }
        try await Task.sleep(for: .milliseconds(1500))
        let viewer = try ChildProcess([cliPath, "join", "--server", url, "--channel", "on-child", "--uid", "far", "--video", "none", "--audio", "none"] + secret)
        defer { viewer.stop() }
        // The child's room is relayed: its viewer's media comes from the child's port, not the front's.
        let frontPort = server.output.first { $0.hasPrefix("media candidates:") }?.split(separator: " ").dropFirst(2).first?
            .split(separator: ":").last.map(String.init) ?? "?"
        #expect(await eventually(20) { viewer.output.contains { $0.contains("path down udp") && !$0.contains(":\(frontPort) ") } },
                "\(viewer.output.suffix(3)) front port \(frontPort)")
        let api = url.replacingOccurrences(of: "/rtc", with: "")
        let (listed, rooms) = await Self.waitForRooms(api, ["on-child", "on-front"])
        #expect(listed, "ListRooms at the front: \(rooms)")
        let results = try await Self.calls(api, [
            #"ListParticipants {"room": "on-child"}"#,
            #"UpdateParticipant {"room": "on-child", "identity": "far", "metadata": "set through the front"}"#,
            #"Raw {"method": "GET", "path": "/debug/forwarded?room=on-child&identity=far", "token": "admin", "room": "on-child"}"#,
            #"RemoveParticipant {"room": "on-child", "identity": "far"}"#,
            #"ListParticipants {"room": "nowhere"}"#,
        ])
        #expect(results.count == 5, "\(results)")
        let participants = ((results.first?["result"] as? [String: Any])?["participants"] as? [[String: Any]] ?? []).compactMap { $0["identity"] as? String }
        #expect(participants.sorted() == ["far", "pub"], "\(results.first ?? [:])")
        #expect((results.count > 1 ? results[1]["result"] as? [String: Any] : nil)?["metadata"] as? String == "set through the front", "\(results)")
        let forwarded = (results.count > 2 ? results[2]["json"] as? [String: Any] : nil)?["forwarded"] as? [[String: Any]] ?? []
        let video = forwarded.first { $0["from"] as? String == "pub" && $0["kind"] as? String == "video" }?["packets"] as? Int ?? 0
        #expect(video > 0, "/debug/forwarded through the front: \(results.count > 2 ? results[2] : [:])")
        #expect(results.count > 3 && results[3]["ok"] as? Bool == true, "\(results)")
        #expect(results.last?["code"] as? String == "not_found", "\(results.last ?? [:])")
        #expect(await eventually(10) { viewer.output.contains("server left bannedByServer") }, "\(viewer.output.suffix(3))")
    }

    @Test("a webhook receiver that never answers: the room's media flows, the server's memory stays bounded and the queue at its bound (figures), and the events arrive once a receiver answers again")
    func deadReceiver() async throws {
        let dir = temporaryDirectory("room-api-dead")
        let hooks = dir + "/hooks.jsonl"
        let (hanging, hookPort) = try await Self.receiver(out: hooks, hang: true)
        let (server, url, port) = try await LiveKitInteropTests.server(["--webhook-url", "http://127.0.0.1:\(hookPort)/hook", "--webhook-queue-limit", "20"])
        defer { server.stop() }
        let viewer = try LiveKitInteropTests.swiftBot(url, room: "dead", uid: "viewer", ["--video", "none", "--audio", "none",
                                                                                         "--frame-log", dir + "/frames.log", "--duration", "40"])
        defer { viewer.stop() }
        let publisher = try LiveKitInteropTests.swiftBot(url, room: "dead", uid: "camera", ["--video", "pattern", "--duration", "9"])
        defer { publisher.stop() }
        // Joins and leaves: more events than the queue holds (each short bot: joined, 2 published, 2 unpublished, left).
        for index in 0..<3 {
            let bot = try LiveKitInteropTests.swiftBot(url, room: "dead", uid: "churn\(index)", ["--video", "pattern", "--duration", "2"])
            _ = await bot.wait(20)
        }
        _ = await publisher.wait(30)
        let frames = ((try? String(contentsOfFile: dir + "/frames.log", encoding: .utf8)) ?? "").split(separator: "\n")
        #expect(frames.count >= 90, "the viewer decoded \(frames.count) frames of the camera while the webhooks hung")
        let metrics = try runTool(["python3", "-c", "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())",
                                   "http://127.0.0.1:\(port)/metrics"]).out
        func value(_ name: String) -> Int { Int(metrics.split(separator: "\n").first { $0.hasPrefix(name + " ") }?.split(separator: " ").last ?? "") ?? -1 }
        #expect(value("rtc_webhook_events_queued") == 20 && value("rtc_webhook_events_dropped_total") > 0
                && value("rtc_webhook_events_delivered_total") == 0, "\(metrics.split(separator: "\n").filter { $0.hasPrefix("rtc_webhook") })")
        let rss = try String(contentsOfFile: "/proc/\(server.pid)/status", encoding: .utf8).split(separator: "\n")
            .first { $0.hasPrefix("VmRSS:") }.flatMap { Int($0.split(separator: " ").dropFirst().first ?? "") } ?? 0
        print("webhooks hanging: viewer decoded \(frames.count) frames; queued \(value("rtc_webhook_events_queued")), "
              + "dropped \(value("rtc_webhook_events_dropped_total")); server RSS \(rss / 1024) MB")
        // The receiver comes back on the same port: the queued events arrive, in order.
        hanging.stop()
        _ = await hanging.wait(10)
        let (answering, _) = try await Self.receiver(out: hooks, port: hookPort)
        defer { answering.stop() }
        #expect(await eventually(45) { Self.events(hooks).count >= 20 }, "\(Self.events(hooks).count) delivered after the receiver came back")
        let events = Self.events(hooks)
        #expect(events.allSatisfy { $0["error"] == nil } && events.first?["event"] as? String == "room_started", "\(events.prefix(3))")
        let times = events.compactMap { $0["createdAt"] as? Int }
        #expect(times == times.sorted())
    }
}
