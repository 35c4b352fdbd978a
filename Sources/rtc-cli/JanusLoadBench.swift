import ArgumentParser
import Foundation
import ServerCommandLine

#if canImport(Glibc)
import Glibc
#endif

/// One load shape against this server (`rtc-cli server`, a child process) and against Janus 1.1.2's
/// videoroom, one after the other in one run: the same aiortc peers (`Tests/Tools/sfu_load.py`:
/// a publisher per room sending a pre-encoded 720p VP8 clip, viewers that count RTP without
/// decoding) drive both, so the server is the only difference. The figure is the server's CPU
/// time per packet its viewers received.
struct JanusLoadBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "janus-load",
        abstract: "Rooms of 1 publisher + N viewers (aiortc peers) against rtc-cli server and Janus's videoroom: CPU per forwarded packet, side by side.")

    @Option(help: "Shapes to run, ROOMSxVIEWERS (viewers per room), comma-separated.") var shapes: String = "10x10"
    @Option(help: "Seconds measured per shape and server.") var seconds: Double = 20
    @Option(help: "Seconds from the start of a run to its measured window (joins, ICE, first keyframes).") var warmup: Double = 8
    @Option(help: "Processes the aiortc peers are spread over.") var workers: Int = 2
    @Option(help: "The clip's size, WIDTHxHEIGHT.") var size: String = "1280x720"
    @Option(help: "The clip's VP8 bitrate, kbit/s.") var kbps: Int = 1500
    @Option(name: .customLong("media-threads"), help: "rtc-cli server --media-threads (default: the server's own, one per core).") var mediaThreads: Int?
    @Option(help: "The load tool (default: Tests/Tools/sfu_load.py of this repository).") var tool: String?
    @Option(help: "The janus executable.") var janus: String = "janus"
    @Flag(name: .customLong("no-janus"), help: "Measure this server only.") var noJanus = false
    @Option(help: "Rounds per shape: each round runs every server once, in turn; the summary is the median of the rounds (this machine's figures move by 10-15 % between runs minutes apart).") var rounds: Int = 1
    @Flag(help: "Print one JSON object per run instead of the table.") var json = false

    func validate() throws {
        _ = try parsedShapes()
        guard seconds > 0, warmup >= 0, workers >= 1, kbps > 0, rounds >= 1 else {
            throw ValidationError("--seconds and --kbps must be positive, --warmup not negative, --workers and --rounds at least 1")
        }
        guard size.split(separator: "x").compactMap({ Int($0) }).count == 2 else { throw ValidationError("--size is WIDTHxHEIGHT, not \(size)") }
    }

    /// (rooms, viewers per room) of `--shapes`.
    func parsedShapes() throws -> [(rooms: Int, viewers: Int)] {
        try shapes.split(separator: ",").map { shape in
            let parts = shape.split(separator: "x").compactMap { Int($0) }
            guard parts.count == 2, parts[0] >= 1, parts[1] >= 1 else {
                throw ValidationError("--shapes takes ROOMSxVIEWERS items such as 10x10, not \(shape)")
            }
            return (parts[0], parts[1])
        }
    }

    func run() async throws {
        let tool = try RepositoryTool.path("sfu_load.py", override: tool)
        let directory = NSTemporaryDirectory() + "janus-load-\(getpid())"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let clip = try makeClip(in: directory)
        var servers = ["rtc-cli server"]
        if !noJanus { servers.append("Janus \(JanusServer.version(janus))") }
        if !json {
            print("janus-load: \(size) VP8 at \(kbps) kbit/s, aiortc peers in \(workers) processes, \(Int(seconds)) s measured after \(Int(warmup)) s; "
                  + "one server at a time, on this machine")
            fflush(nil)
        }
        for shape in try parsedShapes() {
            var perRound: [[Double]] = []
            for round in 1...rounds {
                var reports: [[String: Any]] = []
                for server in servers {
                    let report = try await measure(server: server, shape: shape, tool: tool, clip: clip)
                    if json {
                        var line = report
                        line["server"] = server
                        if rounds > 1 { line["round"] = round }
                        let data = try JSONSerialization.data(withJSONObject: line, options: [.sortedKeys])
                        print(String(decoding: data, as: UTF8.self))
                    }
                    reports.append(report)
                    fflush(nil)
                }
                if !json {
                    if rounds > 1 { print("\nround \(round) of \(rounds)") }
                    printTable(shape: shape, servers: servers, reports: reports)
                }
                perRound.append(reports.map { ($0["cpuMicrosecondsPerPacket"] as? NSNumber)?.doubleValue ?? .nan })
            }
            if rounds > 1 && !json { printMedians(servers: servers, perRound: perRound) }
        }
    }

    /// Each server's median CPU per packet over the rounds, and Janus's over ours.
    private func printMedians(servers: [String], perRound: [[Double]]) {
        func median(_ values: [Double]) -> Double {
            let sorted = values.filter { !$0.isNaN }.sorted()
            guard !sorted.isEmpty else { return .nan }
            return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
        }
        let medians = servers.indices.map { index in median(perRound.map { $0[index] }) }
        print("")
        for (index, server) in servers.enumerated() {
            let each = perRound.map { String(format: "%.2f", $0[index]) }.joined(separator: ", ")
            print(String(format: "%@: median %.2f µs per forwarded packet over %d rounds (%@)", server, medians[index], perRound.count, each))
        }
        if medians.count == 2, medians[0] > 0 {
            let ratios = perRound.map { String(format: "%.2fx", $0[1] / $0[0]) }.joined(separator: ", ")
            print(String(format: "Janus spends %.2fx this server's CPU per forwarded packet (medians; each round: %@)", medians[1] / medians[0], ratios))
        }
    }

    /// Starts `server`, runs the load tool against it, stops it.
    private func measure(server: String, shape: (rooms: Int, viewers: Int), tool: String, clip: String) async throws -> [String: Any] {
        let pid: pid_t
        let url: String
        let target: String
        var janusServer: JanusServer?
        if server.hasPrefix("Janus") {
            let started = try await JanusServer.startListening(janus: janus, files: 4096)
            (pid, url, target, janusServer) = (started.pid, started.url, "janus", started)
        } else {
            let port = try FreePort.tcp()
            let threads = mediaThreads.map { " --media-threads \($0)" } ?? ""
            // Every interface: aiortc leaves loopback addresses out of its candidates, as Janus's are.
            pid = try ProcessRunner.spawn(["sh", "-c", "ulimit -Sn 4096; exec \(ProcessRunner.selfPath) server --host 0.0.0.0 --port \(port) "
                                           + "--udp-port 0 --tcp-port 0\(threads) --secret \(BenchSecret.value) --log-level error"])
            (url, target) = ("ws://127.0.0.1:\(port)/rtc", "ours")
        }
        defer {
            if let janusServer { janusServer.stop() } else { AbuseBench.stop(pid) }
        }
        if janusServer == nil { try await Self.waitForListener(url: url, pid: pid, name: server) }
        var arguments = ["--target", target, "--url", url, "--clip", clip, "--server-pid", "\(pid)", "--rooms", "\(shape.rooms)",
                         "--viewers", "\(shape.viewers)", "--warmup", "\(warmup)", "--seconds", "\(seconds)", "--workers", "\(workers)"]
        if target == "ours" { arguments += ["--secret", BenchSecret.value] }
        return try await AbuseBench.attack(tool, arguments)
    }

    /// Waits until the signaling port of `url` takes connections (Janus loads its plugins first,
    /// which can take seconds on a cold start).
    static func waitForListener(url: String, pid: pid_t, name: String, seconds: Double = 20) async throws {
        guard let port = URLComponents(string: url)?.port else { throw CLIError("no port in \(url)") }
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            guard ProcessRunner.isRunning(pid) else { throw CLIError("\(name) exited at start") }
            let connected = FreePort.accepts(port)
            if connected {
                try await Task.sleep(for: .milliseconds(500))  // the rest of its start (Janus: its other transports)
                // The port may be someone else's (taken between FreePort and the server's bind).
                guard ProcessRunner.isRunning(pid) else { throw CLIError("\(name) exited at start") }
                return
            }
            try await Task.sleep(for: .milliseconds(200))
        }
        throw CLIError("\(name) did not listen on port \(port) within \(Int(seconds)) s")
    }

    /// A 10 s 720p test pattern encoded once with ffmpeg's libvpx (keyframe every second), which the
    /// publishers loop without encoding.
    private func makeClip(in directory: String) throws -> String {
        let path = directory + "/clip.ivf"
        let cost = try ProcessRunner.run(["ffmpeg", "-hide_banner", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi",
                                          "-i", "testsrc2=size=\(size):rate=30", "-t", "10", "-c:v", "libvpx", "-b:v", "\(kbps)k",
                                          "-g", "30", "-deadline", "realtime", "-cpu-used", "8", "-f", "ivf", path])
        guard cost.exitCode == 0 else { throw CLIError("ffmpeg could not make the clip (exit \(cost.exitCode)); is ffmpeg installed?") }
        return path
    }

    private func printTable(shape: (rooms: Int, viewers: Int), servers: [String], reports: [[String: Any]]) {
        func number(_ report: [String: Any], _ key: String) -> Double? { (report[key] as? NSNumber)?.doubleValue }
        func text(_ value: Double?, _ format: String) -> String { value.map { String(format: format, $0) } ?? "?" }
        let rows: [(String, ([String: Any]) -> String)] = [
            ("viewers receiving", { "\(($0["viewersReceiving"] as? NSNumber)?.intValue ?? 0) of \(shape.rooms * shape.viewers)" }),
            ("packets/s at the viewers", { text(number($0, "packetsPerSecond"), "%.0f") }),
            ("loss before NACK (%)", { text(number($0, "lossPercent"), "%.3f") }),
            ("datagrams dropped at the peers", { text(number($0, "peerSocketDrops"), "%.0f") }),
            ("server CPU (% of one core)", { text(number($0, "serverCpuPercent"), "%.1f") }),
            ("server CPU per packet (µs)", { text(number($0, "cpuMicrosecondsPerPacket"), "%.2f") }),
            ("aiortc peers' CPU (% of a core)", { text(number($0, "peersCpuPercent"), "%.1f") }),
            ("first packet p50 / p95 (s)", { report in
                let setup = report["setupSeconds"] as? [String: Any]
                return "\(text((setup?["p50"] as? NSNumber)?.doubleValue, "%.2f")) / \(text((setup?["p95"] as? NSNumber)?.doubleValue, "%.2f"))"
            }),
            ("errors", { "\(($0["errors"] as? [Any])?.count ?? 0)" }),
        ]
        let widths = [32] + servers.map { max($0.count, 20) }
        func line(_ cells: [String]) -> String { zip(cells, widths).map { $0.padding(toLength: $1, withPad: " ", startingAt: 0) }.joined(separator: "  ") }
        print("")
        print(line(["\(shape.rooms) room(s) x (1 publisher + \(shape.viewers) viewers)"] + servers))
        for (name, cell) in rows { print(line([name] + reports.map(cell))) }
        if reports.count == 2, let ours = number(reports[0], "cpuMicrosecondsPerPacket"), let theirs = number(reports[1], "cpuMicrosecondsPerPacket"), ours > 0 {
            print(String(format: "Janus spends %.2fx this server's CPU per forwarded packet", theirs / ours))
        }
        for report in reports {
            for error in (report["errors"] as? [String] ?? []).prefix(3) { print("  error (\(report["target"] ?? "?")): \(error)") }
        }
    }
}
