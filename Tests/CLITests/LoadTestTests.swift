import Foundation
import RTCTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `rtc-cli loadtest` against `rtc-cli server` with two media threads: every bot joins, the
/// subscribers count every frame, the summary reads the server's own metrics.
@Suite("rtc-cli loadtest", .serialized)
struct LoadTestTests {
    /// `rtc-cli server` on free ports with `extra`; returns the process and its signaling URL.
    func startServer(_ extra: [String] = []) async throws -> (ChildProcess, String, String) {
        let server = try ChildProcess([cliPath, "server", "--port", "0", "--udp-port", "0", "--secret", "s", "--log-level", "error"] + extra,
                                      errors: .discarded)
        _ = await eventually(15) { server.outputText.contains("web client") || server.outputText.contains("media threads") || !server.isRunning }
        let text = server.outputText
        let url = text.split(whereSeparator: { $0 == " " || $0 == "\n" }).first { $0.hasPrefix("ws://") }.map(String.init) ?? ""
        return (server, url, text)
    }

    @Test("2 rooms × (1 publisher + 2 subscribers) on a 2-thread server: all join, ≥ 80 % of frames counted, loss < 1 %, server figures from /metrics")
    func twoRooms() async throws {
        let (server, url, text) = try await startServer(["--media-threads", "2"])
        defer { server.stop() }
        #expect(text.contains("media threads: 2"), "\(text)")
        let result = try cli(["loadtest", "--server", url, "--secret", "s", "--rooms", "2", "--publishers", "1", "--subscribers", "2",
                              "--duration", "3", "--video-size", "640x360", "--fps", "15"])
        #expect(result.status == 0, "\(result.out)\n\(result.err)")
        #expect(result.out.contains("joined 6 of 6 bots"), "\(result.out)")
        let summary = try #require(result.out.split(separator: "\n").first { $0.contains("subscribers:") && $0.contains("frames") })
        let numbers = summary.split(separator: " ").compactMap { Double($0.trimmingCharacters(in: CharacterSet(charactersIn: ","))) }
        // "subscribers: P packets, F frames, loss L %": 4 subscribers × 15 fps × 3 s = 180 frames.
        #expect(numbers.count >= 3 && numbers[1] >= 144 && numbers[2] < 1, "\(summary)")
        let serverLine = try #require(result.out.split(separator: "\n").first { $0.contains("server:") })
        let forwarded = serverLine.split(separator: " ").compactMap { Double($0) }.first ?? 0
        #expect(forwarded > 100 && serverLine.contains("CPU") && serverLine.contains("µs per forwarded packet"), "\(serverLine)")
        #expect(result.out.contains("join (connect to joined): p50 "), "\(result.out)")
    }

    @Test("--receivers discard: once every subscriber receives, its socket goes to rtc-relay hole; the server keeps forwarding and its figures are reported")
    func discardingReceivers() async throws {
        let (server, url, _) = try await startServer(["--media-threads", "1"])
        defer { server.stop() }
        let result = try cli(["loadtest", "--server", url, "--secret", "s", "--rooms", "1", "--publishers", "1", "--subscribers", "3",
                              "--duration", "2", "--video-size", "640x360", "--fps", "15", "--bind", "127.0.0.1", "--receivers", "discard"])
        #expect(result.status == 0, "\(result.out)\n\(result.err)")
        #expect(result.out.contains("3 subscriber sockets handed to rtc-relay hole"), "\(result.out)")
        let serverLine = try #require(result.out.split(separator: "\n").first { $0.contains("server:") })
        // 3 subscribers of a 640x360 15 fps publisher: well over 50 packets/s forwarded.
        let forwarded = serverLine.split(separator: " ").compactMap { Double($0) }.first ?? 0
        #expect(forwarded > 50, "\(serverLine)")
    }

    @Test("bench server-cores: one thread and two media processes under a small load both forward, with a row each")
    func serverCores() throws {
        let result = try cli(["bench", "server-cores", "--rooms", "2", "--subscribers", "2", "--bitrate", "500", "--duration", "2",
                              "--layouts", "threads:1,processes:2"])
        #expect(result.status == 0, "\(result.out)\n\(result.err)")
        for layout in ["threads 1", "processes 2"] {
            let row = try #require(result.out.split(separator: "\n").first { $0.hasPrefix(layout) }, "\(result.out)")
            let forwarded = row.dropFirst(layout.count).split(separator: " ").compactMap { Double($0) }.first ?? 0
            #expect(forwarded > 50, "\(row)")
        }
    }

    @Test("bad input: a wrong URL, size or count is a clear error; an unreachable server fails the bots with a reason",
          arguments: [
              (["--server", "http://127.0.0.1:1/rtc", "--secret", "s"], "ws://"),
              (["--server", "ws://127.0.0.1:1/rtc", "--secret", "s", "--video-size", "12"], "--video-size"),
              (["--server", "ws://127.0.0.1:1/rtc", "--secret", "s", "--rooms", "0"], "--rooms"),
              (["--server", "ws://127.0.0.1:1/rtc", "--secret", "s", "--duration", "1", "--subscribers", "1"], "bots failed"),
              (["--server", "ws://127.0.0.1:1/rtc", "--secret", "s", "--receivers", "discard"], "--bind 127.0.0.1"),
          ])
    func badInput(arguments: [String], message: String) throws {
        let result = try cli(["loadtest"] + arguments)
        #expect(result.status != 0)
        #expect((result.err + result.out).contains(message), "\(result.out)\n\(result.err)")
    }

    @Test("rtc-relay, in each mode that waits (hole, sink, relay), ends by itself when the process that started it is killed", arguments: [
        ["hole", "0"], ["sink", "0"], ["0", "9"],
    ])
    func relayEndsWithItsStarter(mode: [String]) async throws {
        let relay = URL(fileURLWithPath: cliPath).deletingLastPathComponent().appendingPathComponent("rtc-relay").path
        let starter = try ChildProcess(["sh", "-c", "\(relay) \(mode.joined(separator: " ")) & echo relay $!; wait"])
        defer { starter.stop() }
        var pid: Int32 = 0
        #expect(await eventually(5) {
            pid = starter.output.first { $0.hasPrefix("relay ") }.flatMap { Int32($0.dropFirst("relay ".count)) } ?? 0
            return pid > 0 && MediaProcessesTests.running(pid)
        }, "\(starter.output) \(starter.errorText)")
        try await Task.sleep(for: .milliseconds(300))
        #expect(MediaProcessesTests.running(pid), "rtc-relay \(mode) ended before its starter did: \(starter.output)")
        kill(starter.pid, SIGKILL)
        #expect(await eventually(3) { !MediaProcessesTests.running(pid) }, "rtc-relay \(mode) (pid \(pid)) outlived the process that started it")
    }
}
