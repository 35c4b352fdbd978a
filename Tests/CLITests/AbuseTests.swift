import Foundation
import NIOConcurrencyHelpers
import RTCTestSupport
import Testing

/// The abuse suite: `Tests/Tools/abuse.py` (Python standard library) attacks a real `rtc-cli server`
/// process on loopback while a real pair streams through it (two `rtc-cli join` bots: 1001 publishes
/// 640x360 at 15 fps, 2001 watches and prints what it receives once a second). Every attack is
/// bounded in count and time; each test asserts what must follow (docs/server.md, "Limits").
///
/// The server starts with a soft descriptor limit of 1024, as a default shell gives it; it raises its
/// own soft limit to the hard one, so 1000 idle sockets cannot take the last descriptors.
@Suite("Abuse: attacks against a server process while a pair streams", .serialized)
struct AbuseTests {
    static let tool = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Tools/abuse.py").path
    static let secret = "abuse-secret"
    static let resumeWindow = 5

    /// The server process, the pair, and how to read them.
    final class Scene: @unchecked Sendable {
        let server: ChildProcess
        let url: String
        let publisher: ChildProcess
        let viewer: ChildProcess

        init() async throws {
            server = try ChildProcess(["sh", "-c", "ulimit -Sn 1024; exec \(cliPath) server --port 0 --udp-port 0 --secret \(AbuseTests.secret) "
                                       + "--resume-window \(AbuseTests.resumeWindow) --log-level error"])
            let deadline = Date().addingTimeInterval(20)
            var found: String?
            while found == nil, Date() < deadline, server.isRunning {
                found = server.output.lazy.compactMap { line in
                    line.split(separator: " ").first { $0.hasPrefix("ws://") }.map(String.init)
                }.first
                if found == nil { try await Task.sleep(for: .milliseconds(100)) }
            }
            guard let found else { throw CLIError("the server did not start: \(server.errorText)") }
            url = found
            func bot(_ uid: String, _ extra: [String]) throws -> ChildProcess {
                try ChildProcess([cliPath, "join", "--server", found, "--channel", "pair", "--uid", uid, "--secret", AbuseTests.secret] + extra)
            }
            publisher = try bot("1001", ["--size", "640x360", "--fps", "15", "--audio", "tone", "--no-subscribe", "--quiet"])
            viewer = try bot("2001", ["--video", "none", "--audio", "none"])
        }

        var baseURL: String { String(url.dropLast("rtc".count)) }

        /// The viewer's frame rate of 1001's camera, one sample a second (its stats lines).
        var viewerFPS: [Int] {
            viewer.output.compactMap { line -> Int? in
                guard line.hasPrefix("[2001 ") else { return nil }
                guard let part = line.components(separatedBy: " | ").first(where: { $0.hasPrefix("recv 1001/camera") }) else { return 0 }
                let words = part.split(separator: " ")
                guard let index = words.firstIndex(of: "fps"), index > 0 else { return 0 }
                return Int(words[index - 1])
            }
        }

        /// Resident memory of the server process, bytes.
        var serverRSS: Int {
            let status = (try? String(contentsOfFile: "/proc/\(server.pid)/status", encoding: .utf8)) ?? ""
            let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
            return (Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0) * 1024
        }

        /// A gauge or counter from /metrics.
        func metric(_ name: String) throws -> Double? {
            let address = "\(url.replacingOccurrences(of: "ws://", with: "http://").dropLast("rtc".count))metrics"
            let run = try runTool(["python3", "-c", "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())",
                                   address])
            let line = run.out.split(separator: "\n").first { $0.hasPrefix(name + " ") || $0.hasPrefix(name + "{") }
            return line.flatMap { Double($0.split(separator: " ").last ?? "") }
        }

        /// Waits until the viewer has decoded frames for 3 s in a row.
        func streaming() async -> Bool {
            await eventually(30) { self.viewerFPS.suffix(3).count == 3 && self.viewerFPS.suffix(3).allSatisfy { $0 > 0 } }
        }

        func stop() {
            publisher.stop()
            viewer.stop()
            server.stop()
        }
    }

    struct CLIError: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    /// One attack's JSON (the tool's last line), read only.
    struct Report: @unchecked Sendable, CustomStringConvertible {
        let json: [String: Any]
        subscript(_ key: String) -> Any? { json[key] }
        var description: String { "\(json)" }
    }

    /// Runs one attack.
    static func attack(_ arguments: [String], timeout: Double = 120) throws -> Report {
        let run = try runTool(["python3", tool] + arguments, timeout: timeout)
        let line = run.out.split(separator: "\n").last.map(String.init) ?? ""
        guard let json = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] else {
            throw CLIError("abuse.py \(arguments.first ?? "") printed no JSON (status \(run.status)): \(run.out.suffix(400)) \(run.err.suffix(800))")
        }
        return Report(json: json)
    }

    /// The pair's frame rate over a window of the viewer's samples against the baseline before it,
    /// and the longest run of seconds without a frame.
    static func pairHealth(_ samples: [Int], baseline: Int, from start: Int) -> (ratio: Double, stallSeconds: Int) {
        let window = Array(samples.dropFirst(start))
        let before = samples.prefix(baseline).suffix(3)  // `streaming()` saw these three with frames
        let base = Double(before.reduce(0, +)) / Double(max(1, before.count))
        let during = Double(window.reduce(0, +)) / Double(max(1, window.count))
        var stall = 0, run = 0
        for fps in window {
            run = fps == 0 ? run + 1 : 0
            stall = max(stall, run)
        }
        return (base > 0 ? during / base : 0, stall)
    }

    static func number(_ value: Any?) -> Double? { (value as? NSNumber)?.doubleValue }

    @Test("1000 connections that never join (800 WebSockets, 200 bare TCP, from four addresses) are closed within 10-30 s; a real user joins while they are open")
    func idleSockets() async throws {
        let scene = try await Scene()
        defer { scene.stop() }
        #expect(await scene.streaming(), "the pair never streamed: \(scene.viewer.output.suffix(3))")
        let probe = ["--probe-join", "yes", "--secret", Self.secret, "--probe-uid", "3001", "--probe-channel", "pair"]
        let sources = ["--sources", "127.0.0.2,127.0.0.3,127.0.0.4,127.0.0.5"]
        async let websockets = Task.detached {
            try Self.attack(["idle", "--url", scene.url, "--mode", "ws", "--count", "800", "--seconds", "40"] + sources + probe)
        }.value
        async let bare = Task.detached {
            try Self.attack(["idle", "--url", scene.url, "--mode", "tcp", "--count", "200", "--seconds", "40"] + sources)
        }.value
        let (ws, tcp) = try await (websockets, bare)
        for result in [ws, tcp] {
            let closedAfter = result["closed_after_s"] as? [String: Any]
            let (low, high) = (Self.number(closedAfter?["min"]) ?? -1, Self.number(closedAfter?["max"]) ?? -1)
            print("idle \(result["mode"] ?? "?"): opened \(result["opened"] ?? "?"), refused \(result["refused"] ?? "?"), closed \(result["closed"] ?? "?") "
                  + "after \(String(format: "%.1f", low))-\(String(format: "%.1f", high)) s, still open \(result["still_open"] ?? "?")")
            #expect(Self.number(result["opened"]) == (result["mode"] as? String == "ws" ? 800 : 200), "\(result)")
            #expect(Self.number(result["still_open"]) == 0, "\(result)")
            #expect(low >= 9 && high <= 30, "closed after \(low)-\(high) s")
        }
        #expect(ws["probe_joined"] as? Bool == true, "a real user was kept out: \(ws)")
        print("idle: a real user joined in \(ws["probe_ms"] ?? "?") ms beside 1000 idle connections")
        #expect(try scene.metric("rtc_connections_closed_unjoined_total") ?? 0 >= 1000)
    }

    @Test("clients that never read (a ping flood, 16 MB of large messages, 20k pipelined /metrics): server RSS grows ≤ 24 MB in all; the pair keeps ≥ 50 % of its frame rate with no stall ≥ 2 s")
    func nonReadingFloods() async throws {
        let scene = try await Scene()
        defer { scene.stop() }
        #expect(await scene.streaming(), "the pair never streamed")
        let rssBefore = scene.serverRSS
        let start = scene.viewerFPS.count
        let peakBox = NIOLockedValueBox(rssBefore)
        let sampling = Task {
            while !Task.isCancelled {
                let now = scene.serverRSS
                peakBox.withLockedValue { $0 = max($0, now) }
                try? await Task.sleep(for: .milliseconds(200))
            }
        }
        // The three floods at once, each started again on a new connection whenever the server
        // closes it, for 12 s: a persistent attacker, not one connection's worth.
        let floods = ["ping", "big", "http"].enumerated().map { index, kind in
            Task.detached { () throws -> (kind: String, connections: Int, messages: Double, bytes: Double, closed: Int) in
                let until = Date().addingTimeInterval(12)
                var connections = 0, closed = 0
                var messages = 0.0, bytes = 0.0
                while Date() < until {
                    let result = try Self.attack(["nonreading", "--url", scene.url, "--kind", kind, "--seconds", "\(max(1, Int(until.timeIntervalSinceNow)))",
                                                  "--secret", Self.secret, "--channel", "flood", "--uid", "f\(index)-\(connections)"])
                    connections += 1
                    messages += Self.number(result["sent_messages"]) ?? 0
                    bytes += Self.number(result["sent_bytes"]) ?? 0
                    if result["closed_by_server"] as? Bool == true { closed += 1 }
                }
                return (kind, connections, messages, bytes, closed)
            }
        }
        var reports: [String] = []
        for flood in floods {
            let result = try await flood.value
            reports.append("\(result.kind): \(result.connections) connections (\(result.closed) closed by the server), "
                           + "\(Int(result.messages)) messages, \(String(format: "%.1f", result.bytes / 1e6)) MB")
            #expect(result.messages > 0, "\(result.kind) sent nothing")
        }
        try await Task.sleep(for: .seconds(1))
        sampling.cancel()
        let peak = peakBox.withLockedValue { $0 }
        let samples = scene.viewerFPS
        let health = Self.pairHealth(samples, baseline: start, from: start)
        let growth = Double(peak - rssBefore) / 1e6
        print("non-reading floods: \(reports.joined(separator: "; ")); server RSS \(rssBefore / 1_000_000) MB → peak \(peak / 1_000_000) MB "
              + "(+\(String(format: "%.1f", growth)) MB); the pair kept \(String(format: "%.0f", health.ratio * 100)) % of its frame rate, "
              + "longest stall \(health.stallSeconds) s (fps \(samples.dropFirst(start)))")
        #expect(growth <= 24, "server RSS grew \(growth) MB")
        #expect(health.ratio >= 0.5, "the pair kept \(health.ratio) of its frame rate")
        #expect(health.stallSeconds < 2, "a stall of \(health.stallSeconds) s")
    }

    @Test("2000 publishTrack requests from one client: refused past the cap with 4004, while a bystander's ping stays under 1 s")
    func trackFlood() async throws {
        let scene = try await Scene()
        defer { scene.stop() }
        #expect(await scene.streaming(), "the pair never streamed")
        async let pinger = Task.detached {
            try Self.attack(["pinger", "--url", scene.url, "--seconds", "12", "--secret", Self.secret, "--channel", "bystanders", "--uid", "b1"])
        }.value
        try await Task.sleep(for: .seconds(1))
        let flood = try await Task.detached {
            try Self.attack(["tracks", "--url", scene.url, "--count", "2000", "--seconds", "8", "--secret", Self.secret,
                             "--channel", "flooders", "--uid", "t1"])
        }.value
        let ping = try await pinger
        // What the server holds (the flooder's session stays for the resume window): its tracks at
        // the cap at most, beside the pair's camera and microphone.
        let tracks = try scene.metric("rtc_tracks") ?? 99
        print("track flood: \(flood["published"] ?? "?") published, \(flood["refused"] ?? "?") refused (4004), other errors \(flood["other_errors"] ?? "?"), "
              + "closed \(flood["closed_by_server"] ?? "?"); bystander pings \(ping["pongs"] ?? "?")/\(ping["pings"] ?? "?"), "
              + "p95 \(ping["p95_ms"] ?? "?") ms, max \(ping["max_ms"] ?? "?") ms; \(tracks) tracks on the server")
        #expect(Self.number(flood["published"]) ?? 99 <= 8, "\(flood)")
        #expect(tracks <= 8 + 2, "\(tracks) tracks on the server")
        // Refused one by one until the message budget closes the connection.
        #expect(Self.number(flood["refused"]) ?? 0 >= 1, "\(flood)")
        #expect(Self.number(ping["pongs"]) ?? 0 >= 50, "\(ping)")
        #expect(Self.number(ping["max_ms"]) ?? 10_000 < 1000, "\(ping)")
    }

    @Test("forbidden actions are refused with their codes: an audio-only token publishing video, an audience setRole, a _sub without its owner, an over-long token")
    func forbidden() async throws {
        let scene = try await Scene()
        defer { scene.stop() }
        let result = try await Task.detached { try Self.attack(["forbidden", "--url", scene.url, "--secret", Self.secret]) }.value
        let cases = result["cases"] as? [String: [String: Any]] ?? [:]
        func code(_ name: String) -> Int? { (cases[name]?["code"] as? NSNumber)?.intValue }
        print("forbidden: " + cases.keys.sorted().map { "\($0) → \(code($0).map(String.init) ?? "none")" }.joined(separator: ", "))
        #expect(code("audio_only_publishes_video") == 2007, "\(result)")
        #expect(code("audience_set_role") == 2007, "\(result)")
        #expect(code("sub_without_owner") == 3003, "\(result)")
        #expect(code("long_token") == 2002, "\(result)")
    }

    @Test("300 joins then abrupt drops: ≤ 256 KB of server memory each while joined, all forgotten within the resume window")
    func joinFlood() async throws {
        let scene = try await Scene()
        defer { scene.stop() }
        #expect(await scene.streaming(), "the pair never streamed")
        let before = scene.serverRSS
        let peak = NIOLockedValueBox(before)
        let sampling = Task {
            while !Task.isCancelled {
                let now = scene.serverRSS
                peak.withLockedValue { $0 = max($0, now) }
                try? await Task.sleep(for: .milliseconds(100))
            }
        }
        let result = try await Task.detached {
            // From two addresses: 300 from one would pass the per-address connection limit (256).
            try Self.attack(["joins", "--url", scene.url, "--count", "300", "--hold", "3", "--secret", Self.secret, "--channel", "crowd",
                             "--sources", "127.0.0.2,127.0.0.3"])
        }.value
        sampling.cancel()
        let dropped = Date()
        let perParticipant = Double(peak.withLockedValue { $0 } - before) / 300
        #expect(Self.number(result["joined"]) == 300, "\(result)")
        let forgotten = await eventually(Double(Self.resumeWindow) + 10) { (try? scene.metric("rtc_participants")) == 2 }
        let after = Date().timeIntervalSince(dropped)
        print("300 joins: all joined in \(result["join_seconds"] ?? "?") s (p50 \(result["p50_join_ms"] ?? "?") ms, p95 \(result["p95_join_ms"] ?? "?") ms); "
              + "\(String(format: "%.0f", perParticipant / 1024)) KB of server RSS each; forgotten \(String(format: "%.1f", after)) s after the drops "
              + "(resume window \(Self.resumeWindow) s)")
        #expect(perParticipant <= 256 * 1024, "\(perParticipant) bytes per participant")
        #expect(forgotten, "participants left: \(String(describing: try? scene.metric("rtc_participants")))")
    }
}
