import ArgumentParser
import Foundation
import ServerCommandLine

#if canImport(Glibc)
import Glibc
#endif

/// The idle-socket and join-flood attacks of the abuse suite (`Tests/Tools/abuse.py`) against this
/// server (`rtc-cli server`, a child process) and against Janus 1.1.2 from Debian (its WebSocket
/// transport, videoroom plugin), one after the other on loopback, in one table.
struct AbuseBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "abuse",
        abstract: "Idle sockets and a join flood against rtc-cli server and Janus (WebSocket transport), side by side.")

    @Option(help: "Idle WebSockets (and a fifth as many bare TCP connections) per server.") var idle: Int = 1000
    @Option(help: "Seconds to watch the idle connections.") var watch: Int = 40
    @Option(help: "Participants in the join flood.") var joins: Int = 300
    @Option(help: "The attack tool (default: Tests/Tools/abuse.py of this repository).") var tool: String?
    @Option(help: "The janus executable.") var janus: String = "janus"
    @Flag(name: .customLong("no-janus"), help: "Measure this server only.") var noJanus = false

    /// One server under test: its process and how to reach it.
    struct Target {
        let name: String
        let pid: pid_t
        let url: String
        let kind: String  // abuse.py's --target
    }

    func run() async throws {
        let tool = try RepositoryTool.path("abuse.py", override: tool)
        var targets: [Target] = [try startOurs()]
        var janusDirectory: String?
        if !noJanus {
            let (target, directory) = try await startJanus()
            targets.append(target)
            janusDirectory = directory
        }
        defer {
            for target in targets { Self.stop(target.pid) }
            if let janusDirectory { try? FileManager.default.removeItem(atPath: janusDirectory) }
        }
        try await Task.sleep(for: .seconds(2))
        let bare = max(1, idle / 5)
        print("abuse bench: \(idle) idle WebSockets + \(bare) bare TCP connections (from 127.0.0.2-9), watched \(watch) s; "
              + "then \(joins) joins held 3 s and dropped (RST); loopback, one server at a time")
        fflush(nil)
        var rows: [String: [String]] = [:]
        let order = ["idle WebSockets closed after (s)", "idle WebSockets still open at the end", "bare TCP closed after (s)",
                     "bare TCP still open at the end", "a real user joins beside them", "RSS with the idle connections (MB over start)",
                     "\(joins) joins: all joined in (s)", "join p50 / p95 (ms)", "RSS per joined participant (KB)"]
        for target in targets {
            let start = Self.rss(target.pid)
            // Eight source addresses: under the per-address connection limit (256) for this server.
            let sources = ["--sources", (2...9).map { "127.0.0.\($0)" }.joined(separator: ",")]
            let probe = target.kind == "janus" ? ["--probe-join", "janus", "--room", "4242"]
                : ["--probe-join", "yes", "--secret", BenchSecret.value, "--probe-uid", "probe", "--probe-channel", "bench"]
            let peak = SampledPeak(pid: target.pid)
            async let ws = Self.attack(tool, ["idle", "--target", target.kind, "--url", target.url, "--mode", "ws", "--count", "\(idle)",
                                              "--seconds", "\(watch)"] + sources + probe)
            async let tcp = Self.attack(tool, ["idle", "--target", target.kind, "--url", target.url, "--mode", "tcp", "--count", "\(bare)",
                                               "--seconds", "\(watch)"] + sources)
            let (websockets, connections) = try await (ws, tcp)
            let idlePeak = peak.stop()
            func closed(_ report: [String: Any]) -> String {
                let after = report["closed_after_s"] as? [String: Any]
                guard let low = (after?["min"] as? NSNumber)?.doubleValue, let high = (after?["max"] as? NSNumber)?.doubleValue else { return "never" }
                return String(format: "%.1f-%.1f", low, high)
            }
            func value(_ report: [String: Any], _ key: String) -> String { (report[key] as? NSNumber).map { "\($0)" } ?? "?" }
            rows[order[0], default: []].append(closed(websockets))
            rows[order[1], default: []].append("\(value(websockets, "still_open")) of \(value(websockets, "opened"))")
            rows[order[2], default: []].append(closed(connections))
            rows[order[3], default: []].append("\(value(connections, "still_open")) of \(value(connections, "opened"))")
            rows[order[4], default: []].append((websockets["probe_joined"] as? Bool == true) ? "yes, \(value(websockets, "probe_ms")) ms" : "no")
            rows[order[5], default: []].append(String(format: "%.1f", Double(idlePeak - start) / 1e6))
            try await Task.sleep(for: .seconds(2))
            let before = Self.rss(target.pid)
            let joinPeak = SampledPeak(pid: target.pid)
            let flood = try await Self.attack(tool, ["joins", "--target", target.kind, "--url", target.url, "--count", "\(joins)", "--hold", "3",
                                                     "--secret", BenchSecret.value, "--channel", "crowd", "--room", "4242"] + sources)
            let crowdPeak = joinPeak.stop()
            let joined = (flood["joined"] as? NSNumber)?.intValue ?? 0
            rows[order[6], default: []].append("\(value(flood, "join_seconds")) (\(joined) of \(joins))")
            rows[order[7], default: []].append("\(value(flood, "p50_join_ms")) / \(value(flood, "p95_join_ms"))")
            rows[order[8], default: []].append(joined > 0 ? "\((crowdPeak - before) / 1024 / joined)" : "?")
        }
        let widths = [order.map(\.count).max() ?? 40] + targets.map { max($0.name.count, 24) }
        func line(_ cells: [String]) -> String {
            zip(cells, widths).map { $0.padding(toLength: $1, withPad: " ", startingAt: 0) }.joined(separator: "  ")
        }
        print(line([""] + targets.map(\.name)))
        for row in order { print(line([row] + (rows[row] ?? []))) }
    }

    // MARK: Servers

    private func startOurs() throws -> Target {
        let port = try FreePort.tcp()
        let pid = try ProcessRunner.spawn(["sh", "-c", "ulimit -Sn 1024; exec \(ProcessRunner.selfPath) server --port \(port) --udp-port 0 "
                                           + "--secret \(BenchSecret.value) --log-level error"])
        return Target(name: "rtc-cli server", pid: pid, url: "ws://127.0.0.1:\(port)/rtc", kind: "ours")
    }

    /// Janus with a videoroom room big enough for the join flood.
    private func startJanus() async throws -> (Target, String) {
        let server = try await JanusServer.startListening(janus: janus,
                                           videoroomRooms: "room-4242: {\n\tdescription = \"abuse bench\"\n\tpublishers = \(joins + 10)\n}")
        return (Target(name: server.name, pid: server.pid, url: server.url, kind: "janus"), server.directory)
    }

    // MARK: Measuring

    /// Runs a Python tool (an attack of abuse.py, a run of sfu_load.py) and returns its JSON (its last line).
    static func attack(_ tool: String, _ arguments: [String]) async throws -> [String: Any] {
        let output = try await Task.detached { try ChildOutput(["/usr/bin/env", "python3", tool] + arguments).finish() }.value
        let line = output.split(separator: "\n").last.map(String.init) ?? ""
        guard let json = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] else {
            throw CLIError("\((tool as NSString).lastPathComponent) \(arguments.first ?? "") printed no JSON: \(output.suffix(300))")
        }
        return json
    }

    /// SIGTERM, then SIGKILL if it has not exited within 5 s (Janus can hang in its shutdown).
    static func stop(_ pid: pid_t) { ProcessRunner.stop(pid) }

    /// Resident memory of a process, bytes (0 when it is gone).
    static func rss(_ pid: pid_t) -> Int { ShareMemoryBench.status(pid, "VmRSS") * 1024 }
}

/// The secret both servers' tokens are signed with (Janus takes none).
enum BenchSecret {
    static let value = "abuse-bench-secret"
}

/// The peak RSS of a process, sampled every 100 ms on a thread of its own until `stop()`.
final class SampledPeak: @unchecked Sendable {
    private let lock = NSLock()
    private var peak = 0
    private var running = true

    init(pid: pid_t) {
        let sampler = Thread { [weak self] in
            while let self, self.isRunning {
                let now = AbuseBench.rss(pid)
                self.lock.lock()
                self.peak = max(self.peak, now)
                self.lock.unlock()
                usleep(100_000)
            }
        }
        sampler.start()
    }

    private var isRunning: Bool {
        lock.lock()
        defer { lock.unlock() }
        return running
    }

    /// Stops sampling and returns the peak.
    func stop() -> Int {
        lock.lock()
        defer { lock.unlock() }
        running = false
        return peak
    }
}
