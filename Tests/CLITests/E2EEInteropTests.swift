import Foundation
import RTCTestSupport
import Testing

/// End-to-end encryption through `rtc-server` (docs/e2ee.md) with peers we did not write: LiveKit's
/// official Python SDK (its frame cryptor is libwebrtc's, in Rust's FFI) turning on its shared-key
/// E2EE, and our Swift bots with `rtc-cli join --e2ee-key`. The server only carries the tracks'
/// declared encryption and forwards the frames as they are.
@Suite("End-to-end encryption with LiveKit's Python SDK", .serialized)
struct E2EEInteropTests {
    typealias LK = LiveKitInteropTests
    static let key = "correct horse battery staple"

    static func frames(_ track: [String: Any]?, _ field: String) -> Int { track?[field] as? Int ?? 0 }
    static func tone(_ track: [String: Any]?) -> [Double] { track?["tone"] as? [Double] ?? [] }
    /// The first JSON line a tool printed.
    static func json(_ text: String) -> [[String: Any]] {
        text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    @Test("a LiveKit pair with a shared key: the keyed subscriber decodes the pattern and the tone; one without the key and one with a wrong key decode no correct frame; the server's view of the tracks says GCM")
    func liveKitPair() async throws {
        let (server, url, port) = try await LK.server()
        defer { server.stop() }
        let alice = try LK.peer("bot", url, ["--room", "e2", "--identity", "alice", "--publish", "--size", "640x360", "--e2ee-key", Self.key,
                                             "--duration", "20"])
        defer { alice.stop() }
        try await Task.sleep(for: .seconds(2))
        let bob = try LK.peer("bot", url, ["--room", "e2", "--identity", "bob", "--e2ee-key", Self.key, "--psnr-all", "--duration", "13"])
        let carol = try LK.peer("bot", url, ["--room", "e2", "--identity", "carol", "--psnr-all", "--duration", "13"])
        let dave = try LK.peer("bot", url, ["--room", "e2", "--identity", "dave", "--e2ee-key", "a wrong key", "--psnr-all", "--duration", "13"])
        try await Task.sleep(for: .seconds(6))
        // The server's own view, through LiveKit's server SDK (livekit-api): alice's tracks as GCM.
        let listed = try runTool(["python3", WHIPTests.tool("room_api.py"), "calls", "--url", "http://127.0.0.1:\(port)", "--api-key", LK.apiKey,
                                  "--api-secret", LK.apiSecret, "--call", #"ListParticipants {"room": "e2"}"#])
        let participants = (Self.json(listed.out).first?["result"] as? [String: Any])?["participants"] as? [[String: Any]] ?? []
        let aliceTracks = participants.first { $0["identity"] as? String == "alice" }?["tracks"] as? [[String: Any]] ?? []
        #expect(aliceTracks.count == 2 && aliceTracks.allSatisfy { $0["encryption"] as? String == "GCM" }, "\(listed.out.prefix(800)) \(listed.err.suffix(300))")
        let keyed = try await LK.report(bob), keyless = try await LK.report(carol), wrong = try await LK.report(dave)
        let published = try await LK.report(alice)
        // What the SDK set up its sender from: the server's TrackInfo for its own tracks, GCM (1).
        let own = published["ownEncryption"] as? [String: Int] ?? [:]
        #expect(own.count == 2 && own.values.allSatisfy { $0 == 1 }, "\(own)")

        let bobVideo = LK.track(keyed, identity: "alice", kind: "video"), bobAudio = LK.track(keyed, identity: "alice", kind: "audio")
        #expect(Self.frames(bobVideo, "goodFrames") >= 60 && Self.frames(bobVideo, "badFrames") == 0, "keyed: \(bobVideo ?? [:])")
        #expect(bobVideo?["encryptionType"] as? Int == 1)
        #expect(Self.tone(bobAudio).count >= 5 && Self.tone(bobAudio).suffix(3).allSatisfy { $0 >= 0.9 }, "keyed tone: \(Self.tone(bobAudio))")
        for (who, report) in [("no key", keyless), ("a wrong key", wrong)] {
            let video = LK.track(report, identity: "alice", kind: "video"), audio = LK.track(report, identity: "alice", kind: "audio")
            #expect(video != nil && Self.frames(video, "goodFrames") == 0, "\(who): \(video ?? [:])")
            #expect(Self.tone(audio).allSatisfy { $0 < 0.5 }, "\(who): the tone must not come through: \(Self.tone(audio))")
            print("E2EE LiveKit pair, \(who): \(Self.frames(video, "frames")) video frames decoded, \(Self.frames(video, "goodFrames")) correct; "
                  + "tone share \(Self.tone(audio).suffix(3)), RMS \((audio?["rms"] as? [Double] ?? []).suffix(3))")
        }
        print("E2EE LiveKit pair, keyed: \(Self.frames(bobVideo, "goodFrames")) of \(Self.frames(bobVideo, "frames")) frames correct, "
              + "tone share \(Self.tone(bobAudio).suffix(3)); server's tracks \(aliceTracks.map { $0["encryption"] ?? "?" })")
    }

    @Test("a Swift bot with --e2ee-key and a LiveKit participant with the same key see each other's video and audio; a keyless Swift bot gets nothing usable, says why, and records nothing but the manifest's note")
    func swiftAndLiveKit() async throws {
        let (server, url, _) = try await LK.server()
        defer { server.stop() }
        let dir = temporaryDirectory("e2ee-mixed")
        let pattern = dir + "/pattern.y4m"
        let made = try runTool(["python3", WHIPTests.tool("pattern.py"), "y4m", pattern, "--size", "640x360", "--fps", "15", "--seconds", "2"])
        #expect(made.status == 0, "\(made.err)")
        let swift = try LK.swiftBot(url, room: "e2mix", uid: "swift", ["--video", pattern, "--size", "640x360", "--e2ee-key", Self.key,
                                                                         "--record", dir + "/keyed", "--duration", "20"])
        defer { swift.stop() }
        let keyless = try LK.swiftBot(url, room: "e2mix", uid: "keyless", ["--video", "none", "--audio", "none", "--record", dir + "/keyless",
                                                                             "--duration", "18"])
        defer { keyless.stop() }
        try await Task.sleep(for: .seconds(1.5))
        let livekit = try LK.peer("bot", url, ["--room", "e2mix", "--identity", "lk", "--publish", "--size", "640x360", "--e2ee-key", Self.key,
                                               "--psnr-all", "--duration", "14"])
        let report = try await LK.report(livekit)
        #expect(report["connectError"] == nil && report["publishError"] == nil, "\(report)")
        // Swift → LiveKit: the pattern and the tone, decrypted by libwebrtc's frame cryptor.
        let video = LK.track(report, identity: "swift", kind: "video"), audio = LK.track(report, identity: "swift", kind: "audio")
        #expect(Self.frames(video, "goodFrames") >= 60 && Self.frames(video, "badFrames") == 0, "\(video ?? [:])")
        #expect(Self.tone(audio).count >= 5 && Self.tone(audio).suffix(3).allSatisfy { $0 >= 0.9 }, "\(Self.tone(audio))")
        #expect((report["remoteEncryption"] as? [String: [Int]])?["swift"] == [1, 1], "our tracks declared GCM: \(report["remoteEncryption"] ?? "")")
        // LiveKit → Swift: the recorded camera against the pattern, and the tone's energy.
        _ = await swift.wait(30)
        _ = await keyless.wait(30)
        let ivf = dir + "/keyed/lk-camera.ivf"
        let measured = try runTool(["python3", WHIPTests.tool("pattern.py"), "psnr", ivf, "--last", "20"])
        let psnr = (Self.json(measured.out).first?["psnr"] as? [Double]) ?? []
        #expect(psnr.count >= 10 && psnr.allSatisfy { $0 >= 25 }, "\(measured.out) \(measured.err.suffix(300))")
        let keyedManifest = try String(contentsOfFile: dir + "/keyed/manifest.json", encoding: .utf8)
        let keyedFiles = (try JSONSerialization.jsonObject(with: Data(keyedManifest.utf8)) as? [String: Any])?["files"] as? [[String: Any]] ?? []
        let audioMs = keyedFiles.first { $0["uid"] as? String == "lk" && $0["kind"] as? String == "audio" }?["durationMs"] as? Int ?? 0
        #expect(audioMs >= 8000, "the tone recorded as WAV: \(keyedManifest)")
        #expect(swift.output.contains { $0.hasPrefix("e2ee lk/video ok") } && swift.output.contains { $0.hasPrefix("e2ee lk/audio ok") },
                "\(swift.output.filter { $0.hasPrefix("e2ee") })")
        // The keyless bot: every encrypted track reported, none decoded or written.
        let failures = keyless.output.filter { $0.hasPrefix("e2ee failed") }
        #expect(Set(failures.compactMap { $0.split(separator: " ").dropFirst(2).first.map(String.init) }) == ["swift", "lk"], "\(failures)")
        let written = (FileManager.default.enumerator(atPath: dir + "/keyless")?.allObjects as? [String] ?? []).filter { $0.hasSuffix(".ivf") || $0.hasSuffix(".wav") }
        #expect(written.isEmpty, "a keyless recorder wrote \(written)")
        let manifest = try String(contentsOfFile: dir + "/keyless/manifest.json", encoding: .utf8)
        let undecryptable = (try JSONSerialization.jsonObject(with: Data(manifest.utf8)) as? [String: Any])?["undecryptable"] as? [[String: Any]] ?? []
        #expect(undecryptable.count == 4, "two tracks each of swift and lk: \(manifest)")
        print("E2EE Swift ↔ LiveKit: at LiveKit \(Self.frames(video, "goodFrames")) of \(Self.frames(video, "frames")) frames correct, tone \(Self.tone(audio).suffix(3)); "
              + "at Swift PSNR \(psnr.suffix(3)), WAV \(audioMs) ms; keyless: \(failures.count) tracks reported, \(written.count) files")
    }

    @Test("a key rotated mid-call (a new key at index 1) keeps the stream both ways: the longest gap at each subscriber across the change")
    func rotation() async throws {
        let (server, url, _) = try await LK.server()
        defer { server.stop() }
        let dir = temporaryDirectory("e2ee-rotate")
        let pattern = dir + "/pattern.y4m"
        _ = try runTool(["python3", WHIPTests.tool("pattern.py"), "y4m", pattern, "--size", "640x360", "--fps", "15", "--seconds", "2"])
        let frameLog = dir + "/frames.log"
        // Each adds the second key at index 1 (the Swift bot 7 s after its join, the LiveKit
        // participant 6 s after its start, about a second later) and sends with it 2 s on: each
        // receiver has the key before the frames sealed with it come.
        let swift = try LK.swiftBot(url, room: "e2rot", uid: "swift", ["--video", pattern, "--size", "640x360", "--e2ee-key", Self.key,
                                                                         "--e2ee-rotate", "7:second key:1", "--frame-log", frameLog, "--duration", "18"])
        defer { swift.stop() }
        try await Task.sleep(for: .seconds(1))
        let livekit = try LK.peer("bot", url, ["--room", "e2rot", "--identity", "lk", "--publish", "--size", "640x360", "--e2ee-key", Self.key,
                                               "--e2ee-rotate", "6:second key:1", "--psnr-all", "--duration", "14"])
        let report = try await LK.report(livekit)
        _ = await swift.wait(30)
        let video = LK.track(report, identity: "swift", kind: "video")
        let gapAtLiveKit = video?["maxGapMs"] as? Double ?? .infinity
        #expect(Self.frames(video, "goodFrames") >= 100 && Self.frames(video, "badFrames") == 0, "\(video ?? [:])")
        #expect((report["rotated"] as? [[Any]])?.isEmpty == false, "\(report["rotated"] ?? "")")
        #expect(swift.output.contains { $0.hasPrefix("e2ee key index 1") }, "\(swift.output.suffix(5))")
        // The Swift bot's decoded frames of lk, from its frame log: none missing for long across the change.
        let times = (try? String(contentsOfFile: frameLog, encoding: .utf8))?.split(separator: "\n")
            .filter { $0.split(separator: " ").dropFirst().first == "lk" }.compactMap { Int64($0.split(separator: " ")[0]) } ?? []
        let gapAtSwift = zip(times, times.dropFirst()).map { Double($1 - $0) / 1000 }.max() ?? .infinity
        #expect(times.count >= 100, "\(times.count) frames of lk at the Swift bot")
        // A frame sealed with the old key still opens after the switch, and the new key was there
        // first: no keyframe wait, no freeze (a lost frame at 15 fps is 67 ms; 500 ms is a stall).
        #expect(gapAtLiveKit < 500 && gapAtSwift < 500, "longest gaps: at LiveKit \(gapAtLiveKit) ms, at Swift \(gapAtSwift) ms")
        print("E2EE key rotation: longest gap at the LiveKit subscriber \(gapAtLiveKit) ms (\(Self.frames(video, "goodFrames")) correct frames), "
              + "at the Swift subscriber \(gapAtSwift) ms (\(times.count) frames)")
    }

    @Test("simulcast under E2EE: the server still finds keyframes and switches layers in ciphertext (their clear bytes); a viewer asking for the low layer decodes it, one on the full layer the full size")
    func simulcastLayers() async throws {
        let (server, url, _) = try await LK.server()
        defer { server.stop() }
        let dir = temporaryDirectory("e2ee-simulcast")
        let publisher = try LK.swiftBot(url, room: "e2sim", uid: "pub", ["--size", "1280x720", "--bitrate", "2500", "--simulcast", "3",
                                                                          "--e2ee-key", Self.key, "--audio", "none", "--duration", "16"])
        defer { publisher.stop() }
        try await Task.sleep(for: .seconds(1))
        let low = try LK.swiftBot(url, room: "e2sim", uid: "low", ["--video", "none", "--audio", "none", "--stream-type", "low", "--e2ee-key", Self.key,
                                                                    "--frame-log", dir + "/low.log", "--duration", "12"])
        let high = try LK.swiftBot(url, room: "e2sim", uid: "high", ["--video", "none", "--audio", "none", "--e2ee-key", Self.key,
                                                                      "--frame-log", dir + "/high.log", "--duration", "12"])
        _ = await low.wait(30)
        _ = await high.wait(30)
        func sizes(_ path: String) -> [String: Int] {
            let lines = (try? String(contentsOfFile: path, encoding: .utf8))?.split(separator: "\n") ?? []
            return lines.reduce(into: [:]) { counts, line in
                let fields = line.split(separator: " ")
                if fields.count == 4, fields[1] == "pub" { counts["\(fields[2])x\(fields[3])", default: 0] += 1 }
            }
        }
        let lowSizes = sizes(dir + "/low.log"), highSizes = sizes(dir + "/high.log")
        #expect((lowSizes["320x180"] ?? 0) >= 60, "the low viewer: \(lowSizes)")
        #expect((highSizes["1280x720"] ?? 0) >= 60, "the full viewer: \(highSizes)")
        #expect(!low.output.contains { $0.hasPrefix("e2ee failed") } && !high.output.contains { $0.hasPrefix("e2ee failed") },
                "\(low.output.filter { $0.hasPrefix("e2ee") }) \(high.output.filter { $0.hasPrefix("e2ee") })")
        print("E2EE simulcast: low viewer \(lowSizes), full viewer \(highSizes)")
    }

    @Test("a room that requires encryption refuses a plain publisher with an error each SDK surfaces, and takes an encrypted one")
    func requiredEncryption() async throws {
        let (server, url, _) = try await LK.server(["--require-encryption"])
        defer { server.stop() }
        let plain = try LK.swiftBot(url, room: "e2req", uid: "plain", ["--duration", "5"])
        let status = await plain.wait(30)
        #expect(status != 0 && plain.errorText.contains("requires end-to-end encryption"), "\(plain.errorText.suffix(400))")
        let encrypted = try LK.swiftBot(url, room: "e2req", uid: "sealed", ["--e2ee-key", Self.key, "--duration", "14"])
        defer { encrypted.stop() }
        let livekitPlain = try LK.peer("bot", url, ["--room", "e2req", "--identity", "lkplain", "--publish", "--size", "320x180", "--duration", "14"])
        let viewer = try LK.peer("bot", url, ["--room", "e2req", "--identity", "lkview", "--e2ee-key", Self.key, "--psnr-all", "--duration", "12"])
        let refused = try await LK.report(livekitPlain), watched = try await LK.report(viewer)
        // LiveKit's SDK 1.2 waits for its TrackPublished and gives up (its RequestResponse carries our reason; this SDK does not read it).
        #expect((refused["publishError"] as? String)?.contains("PublishTrackError") == true, "\(refused)")
        let sealed = LK.track(watched, identity: "sealed", kind: "video")
        #expect(Self.frames(sealed, "frames") >= 60 && LK.track(watched, identity: "lkplain", kind: "video") == nil, "\(watched["tracks"] ?? "")")
        print("E2EE required: rtc-cli: \(plain.errorText.split(separator: "\n").last ?? ""); LiveKit SDK: \(refused["publishError"] ?? "")")
    }

    @Test("one room made by CreateRoom with require_encryption (our field 100) refuses a plain publisher; a room beside it on the same server takes one")
    func createdRoomRequiresEncryption() async throws {
        let (server, url, port) = try await LK.server()
        defer { server.stop() }
        let made = try runTool(["python3", WHIPTests.tool("room_api.py"), "calls", "--url", "http://127.0.0.1:\(port)", "--api-key", LK.apiKey,
                                "--api-secret", LK.apiSecret, "--call",
                                #"Raw {"path": "/twirp/livekit.RoomService/CreateRoom", "token": "create", "contentType": "application/json", "body": "{\"name\": \"sealed\", \"require_encryption\": true}"}"#])
        let answer = Self.json(made.out).first?["json"] as? [String: Any]
        #expect(answer?["requireEncryption"] as? Bool == true, "\(made.out) \(made.err.suffix(300))")
        let refused = try LK.swiftBot(url, room: "sealed", uid: "plain", ["--duration", "4"])
        let refusedStatus = await refused.wait(30)
        #expect(refusedStatus != 0 && refused.errorText.contains("requires end-to-end encryption"), "\(refused.errorText.suffix(400))")
        let sealed = try LK.swiftBot(url, room: "sealed", uid: "sealed", ["--e2ee-key", Self.key, "--duration", "4"])
        let other = try LK.swiftBot(url, room: "open", uid: "plain", ["--duration", "4"])
        let sealedStatus = await sealed.wait(30), openStatus = await other.wait(30)
        #expect(sealedStatus == 0 && openStatus == 0, "\(sealed.errorText.suffix(300)) \(other.errorText.suffix(300))")
    }
}
