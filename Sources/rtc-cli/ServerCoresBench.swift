import ArgumentParser
import Foundation
import NIOCore
import ServerCommandLine

#if canImport(Glibc)
import Glibc
#endif

/// `rtc-cli server` itself under one load, laid out over cores in turn, in one run: 1 media
/// thread, 2 media threads, 2 media processes. The load is `rtc-cli loadtest`'s
/// bots over WebSocket, with the subscribers' sockets handed to `rtc-relay hole` once they receive
/// (`--receivers discard`), so the server's work is what the machine does; its figures come from
/// the front's `/metrics`, which adds up its media processes' pages.
struct ServerCoresBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "server-cores",
        abstract: "rtc-cli server with 1 media thread, 2 media threads and 2 media processes under the same loadtest (receivers discarded): forwarded packets/s and CPU per packet.")

    @Option(help: "Rooms.") var rooms: Int = 2
    @Option(help: "Subscribers per room (one publisher each).") var subscribers: Int = 64
    @Option(help: "The publishers' video kbps.") var bitrate: Int = 24000
    @Option(help: "Seconds of traffic per layout.") var duration: Int = 6
    @Option(help: "Layouts, comma-separated: threads:N or processes:N.")
    var layouts: String = "threads:1,threads:2,processes:2"

    func validate() throws {
        _ = try parsedLayouts()
        guard rooms >= 1, subscribers >= 1, (1...100_000).contains(bitrate), duration >= 1 else {
            throw ValidationError("--rooms, --subscribers and --duration must be at least 1, --bitrate 1...100000")
        }
        guard rooms * (subscribers + 1) < 256 else { throw ValidationError("at most 255 bots: the server's per-address limit") }
    }

    func parsedLayouts() throws -> [(kind: String, count: Int)] {
        try layouts.split(separator: ",").map { item in
            let parts = item.split(separator: ":")
            guard parts.count == 2, ["threads", "processes"].contains(String(parts[0])), let count = Int(parts[1]), (1...64).contains(count) else {
                throw ValidationError("--layouts takes threads:N or processes:N items, not \(item)")
            }
            return (String(parts[0]), count)
        }
    }

    func run() async throws {
        print("server-cores: \(rooms) rooms × (1 publisher at \(bitrate) kbps → \(subscribers) subscribers), \(duration) s per layout, "
              + "loopback, \(System.coreCount) cores; subscribers' sockets never read (rtc-relay hole)")
        print("layout        forwarded/s   server CPU (cores)   µs/packet   ratio")
        var first: Double?
        for layout in try parsedLayouts() {
            let (forwarded, cores, microseconds) = try await measure(layout)
            first = first ?? forwarded
            print("\("\(layout.kind) \(layout.count)".padding(13)) \(String(Int(forwarded)).padding(13)) \(String(format2: cores).padding(20)) "
                  + "\(String(format2: microseconds).padding(11)) \(String(format2: forwarded / max(first ?? 1, 1)))x")
            fflush(nil)
        }
        print("forwarded = rtc_packets_out_total of every server process over the traffic window; CPU = their process_cpu_seconds_total")
    }

    private func measure(_ layout: (kind: String, count: Int)) async throws -> (Double, Double, Double) {
        let port = try FreePort.tcp()
        let output = NSTemporaryDirectory() + "server-cores-\(getpid())-\(port).txt"
        guard FileManager.default.createFile(atPath: output, contents: nil) else { throw CLIError("cannot create \(output)") }
        defer { try? FileManager.default.removeItem(atPath: output) }
        let server = Process()
        server.executableURL = URL(fileURLWithPath: ProcessRunner.selfPath)
        server.arguments = ["server", "--port", "\(port)", "--udp-port", "0", "--secret", BenchSecret.value, "--log-level", "error",
                            layout.kind == "processes" ? "--media-processes" : "--media-threads", "\(layout.count)"]
        server.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: output))
        server.standardError = FileHandle.nullDevice
        try server.run()
        defer { AbuseBench.stop(server.processIdentifier) }
        // Ready: its lines are out (with processes, the children's signaling URLs).
        let ready = layout.kind == "processes" ? "media processes:" : "media candidates:"
        var text = ""
        for _ in 0..<300 where !text.contains(ready) {
            try await Task.sleep(for: .milliseconds(100))
            text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        }
        guard text.contains(ready) else { throw CLIError("the server did not start: \(text.suffix(300))") }
        // With processes too, the front's /metrics adds up every process's.
        let metrics = ["http://127.0.0.1:\(port)/metrics"]
        let arguments = [ProcessRunner.selfPath, "loadtest", "--server", "ws://127.0.0.1:\(port)/rtc", "--secret", BenchSecret.value,
                                                "--rooms", "\(rooms)", "--publishers", "1", "--subscribers", "\(subscribers)", "--duration", "\(duration)",
                                                "--bitrate", "\(bitrate)", "--join-rate", "50", "--bind", "127.0.0.1", "--receivers", "discard"]
                                               + metrics.flatMap { ["--metrics", $0] }
        // Waiting blocks a thread: not one of the cooperative pool's.
        let result = try await Task.detached { try ChildOutput(arguments).finish() }.value
        // "  server: 123456 forwarded packets/s, CPU 1.23 cores, 4.56 µs per forwarded packet (from ...)"
        guard let line = result.split(separator: "\n").first(where: { $0.contains("server:") && $0.contains("forwarded packets/s") }) else {
            throw CLIError("loadtest printed no server figures: \(result.suffix(400))")
        }
        let numbers = line.replacingOccurrences(of: ",", with: " ").split(separator: " ").compactMap { Double($0) }
        guard numbers.count >= 3 else { throw CLIError("loadtest printed '\(line)'") }
        return (numbers[0], numbers[1], numbers[2])
    }
}
