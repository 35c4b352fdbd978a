import Foundation
import RTCTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `rtc-cli server --media-processes 2`: rooms on the front and on a child process, joins relayed
/// to the child through the front, the child restarted when it dies, and no child outliving its front.
@Suite("rtc-cli server --media-processes", .serialized)
struct MediaProcessesTests {
    static let secret = "processes-secret"

    /// A server with `--media-processes 2`: the process, its signaling URL and its child's pid.
    func startServer(_ extra: [String] = []) async throws -> (ChildProcess, String, pid_t) {
        let server = try ChildProcess([cliPath, "server", "--port", "0", "--udp-port", "0", "--secret", Self.secret, "--media-processes", "2",
                                       "--log-level", "error"] + extra)
        guard await eventually(30, { server.output.contains { $0.hasPrefix("media processes: 2") } }) else {
            throw CLIFailure("the server did not start its media process: \(server.output) \(server.errorText)")
        }
        let url = server.output.first { $0.hasPrefix("signaling: ") }?.split(separator: " ").first { $0.hasPrefix("ws://") }.map(String.init) ?? ""
        let line = server.output.first { $0.hasPrefix("media processes: 2") } ?? ""
        let pid = line.components(separatedBy: "pids ").last.flatMap { pid_t($0.prefix { $0.isNumber }) } ?? 0
        return (server, url, pid)
    }

    /// Whether `pid` runs (a zombie does not).
    static func running(_ pid: pid_t) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return false }
        return !(stat.split(separator: ")").last?.trimmingCharacters(in: .whitespaces).hasPrefix("Z") ?? true)
    }

    func frames(_ path: String) -> [Int64] {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").compactMap { Int64($0.split(separator: " ").first ?? "") }
    }

    func join(_ url: String, uid: String, channel: String, _ extra: [String]) throws -> ChildProcess {
        try ChildProcess([cliPath, "join", "--server", url, "--channel", channel, "--uid", uid, "--secret", Self.secret, "--duration", "60"] + extra)
    }

    @Test("two rooms: one on the front, one on the child (relayed), each viewer decodes from its room's own port; the child killed: started again, media back; the front stopped: the child too")
    func twoRoomsTwoProcesses() async throws {
        let dir = temporaryDirectory("processes")
        let (server, url, child) = try await startServer()
        defer { server.stop() }
        #expect(child > 0 && Self.running(child), "\(server.output)")
        let frontPort = server.output.first { $0.hasPrefix("media candidates:") }?.split(separator: " ").dropFirst(2).first?
            .split(separator: ":").last.map(String.init) ?? "?"
        var logs: [String] = []
        var bots: [ChildProcess] = []
        defer { for bot in bots { bot.stop() } }
        for room in ["one", "two"] {
            bots.append(try join(url, uid: "pub-\(room)", channel: room, ["--no-subscribe", "--quiet"]))
            try await Task.sleep(for: .milliseconds(1500))  // the room is placed by its first join
            let log = "\(dir)/\(room).txt"
            logs.append(log)
            bots.append(try join(url, uid: "view-\(room)", channel: room, ["--video", "none", "--audio", "none", "--frame-log", log]))
        }
        let viewers = [bots[1], bots[3]]
        #expect(await eventually(20) { logs.allSatisfy { frames($0).count >= 30 } }, "\(viewers.map { $0.output.suffix(3) }) \(server.errorText)")
        func port(_ viewer: ChildProcess) -> String? {
            viewer.output.last { $0.contains("path down udp 127.0.0.1:") }?.components(separatedBy: "path down udp 127.0.0.1:").last
                .map { String($0.prefix { $0.isNumber }) }
        }
        #expect(await eventually(5) { port(viewers[0]) != nil && port(viewers[1]) != nil })
        #expect(port(viewers[0]) == frontPort, "room one on the front (port \(frontPort)): \(viewers[0].output.suffix(2))")
        #expect(port(viewers[1]) != nil && port(viewers[1]) != frontPort, "room two on the child: \(viewers[1].output.suffix(2))")

        // The child dies: the front starts it again (on a new port: --udp-port 0); room two's bots
        // rejoin through the front, and media is back from there.
        let before = port(viewers[1])
        let killed = CrossProcessClock.microseconds()
        kill(child, SIGKILL)
        #expect(await eventually(30) { (frames(logs[1]).last ?? 0) > killed + 2_000_000 && port(viewers[1]) != before },
                "viewer two: \(viewers[1].output.suffix(4)); server: \(server.errorText.suffix(400))")
        let after = frames(logs[1]).filter { $0 > killed - 1_000_000 }
        let gap = zip(after, after.dropFirst()).map { $1 - $0 }.max() ?? 0
        print("media processes: room two's viewer went from port \(before ?? "?") to \(port(viewers[1]) ?? "?"), longest gap between frames \(gap / 1000) ms")
        #expect(server.errorText.contains("media process 1 (pid \(child)) exited"), "\(server.errorText.suffix(400))")
        #expect(await eventually(5) { frames(logs[0]).last.map { $0 > killed + 1_000_000 } == true },
                "room one kept streaming: last frame \((frames(logs[0]).last ?? 0) - killed) µs after the kill; \(viewers[0].output.suffix(4))")

        // SIGTERM to the front: its children stop with it.
        let children = (try? runTool(["pgrep", "-P", String(server.pid)]))?.out.split(separator: "\n").compactMap { pid_t($0) } ?? []
        #expect(!children.isEmpty)
        kill(server.pid, SIGTERM)
        #expect(await server.wait(15) != nil)
        #expect(await eventually(5) { children.allSatisfy { !Self.running($0) } }, "children \(children) still running")
    }

    @Test("--max-participants 2 over two processes: one participant on the front and one relayed to the child fill the server (the front's /metrics counts both); a third join is refused as full")
    func wholeServerLimit() async throws {
        let (server, url, _) = try await startServer(["--max-participants", "2"])
        defer { server.stop() }
        var bots: [ChildProcess] = []
        defer { for bot in bots { bot.stop() } }
        for room in ["one", "two"] {
            let bot = try join(url, uid: "in-\(room)", channel: room, ["--role", "audience", "--video", "none", "--audio", "none"])
            bots.append(bot)
            #expect(await eventually(15) { bot.output.contains { $0.contains("connection connected") } }, "\(bot.output.suffix(3)) \(bot.errorText)")
        }
        // The front's /metrics is the whole server's: its participant and the media process's.
        let metrics = "\(url.replacingOccurrences(of: "ws://", with: "http://").dropLast("rtc".count))metrics"
        func participants() -> String? {
            let run = try? runTool(["python3", "-c", "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())",
                                    metrics])
            return run?.out.split(separator: "\n").first { $0.hasPrefix("rtc_participants ") }.map(String.init)
        }
        #expect(await eventually(5) { participants() == "rtc_participants 2" }, "\(participants() ?? "no rtc_participants line")")
        let third = try join(url, uid: "late", channel: "three", ["--role", "audience", "--video", "none", "--audio", "none"])
        let status = await third.wait(15)
        #expect(status != nil && status != 0, "the third join ran on: \(third.output.suffix(3))")
        #expect(third.errorText.contains("full (2 participants over its processes)"), "\(third.errorText)")
    }

    @Test("a front killed outright (SIGKILL) leaves no media process behind")
    func noOrphans() async throws {
        let (server, _, child) = try await startServer()
        defer { server.stop() }
        #expect(Self.running(child))
        kill(server.pid, SIGKILL)
        #expect(await eventually(5) { !Self.running(child) }, "media process \(child) outlived its front")
    }

    @Test("bad --media-processes combinations are one clear line", arguments: [
        (["--media-processes", "0"], "--media-processes must be 1...64"),
        (["--media-processes", "2", "--media-threads", "2"], "each media process runs one media thread"),
        (["--media-processes", "2", "--redis", "redis://127.0.0.1:1"], "run a node per process"),
        (["--media-processes", "8", "--udp-port", "65530"], "past 65535"),
    ])
    func badFlags(arguments: [String], message: String) throws {
        let result = try cli(["server", "--secret", "s"] + arguments)
        #expect(result.status != 0)
        #expect(result.err.contains(message), "\(result.err)")
    }
}

enum CrossProcessClock {
    /// CLOCK_MONOTONIC in µs: the clock of `rtc-cli join --frame-log`.
    static func microseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1000
    }
}
