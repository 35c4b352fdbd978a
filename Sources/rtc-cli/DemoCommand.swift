#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import Foundation
import LiveKitProtocol
import Logging
import NIOPosix
import RTCCore
import RTCRecording
import NIOConcurrencyHelpers
import RTCServer
import ScreenShareUser
import Signaling
import ServerCommandLine

/// The product in one command: `rtc-server` (the server operators run, started next to this
/// executable), host `1001`, its screen share `1001_sub` (an `rtc-sharer` process) and viewer `2001`
/// in channel `ScreenShare`, all on loopback; a summary table, what the server says it forwarded
/// (its `/debug/forwarded` and `/metrics`), and the viewer's recordings.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Run server, host 1001, its screen share 1001_sub and viewer 2001; print a summary and where the recordings are.")

    @Option(help: "Seconds the share runs.") var duration: Double = 10
    @Option(help: "Folder for the viewer's recordings.") var out: String = "out/demo"

    func validate() throws {
        guard duration >= 2 else { throw ValidationError("--duration must be at least 2 seconds") }
    }

    func run() async throws {
        try makeDirectories(out)
        let server = try await DemoServer.start()
        defer { server.stop() }
        let url = server.url
        let channel = "ScreenShare"
        func token(_ uid: String) -> String { server.token(uid, channel) }
        print("server: rtc-server pid \(server.pid), \(server.banner)")
        let viewer = try await Bot.start(server: url, channel: channel, uid: "2001", token: token("2001"), role: .broadcaster, video: .none,
                                         audio: .none, settings: VideoEncoderConfiguration(), subscribe: true, record: out, printStats: false,
                                         recordOptions: ChannelRecorder.Options(layout: .both))
        let host = try await Bot.start(server: url, channel: channel, uid: "1001", token: token("1001"), role: .broadcaster,
                                       video: .pattern(.camera), audio: .tone(440),
                                       settings: VideoEncoderConfiguration(dimensions: VideoSize(width: 640, height: 360), frameRate: 15, bitrateKbps: 600),
                                       subscribe: true, record: nil, printStats: false)
        // The screen share: a separate sharer process (rtc-sharer) that the host controls over its
        // link, joining as 1001_sub with the screen-share policy (1280x720, 15 fps, screen content).
        let linkPath = "/tmp/rtc-demo-\(getpid()).sock"
        let shareHost = try ScreenShareHost(linkPath: linkPath)
        let sharer = ProcessRunner.sharerCommand(link: linkPath)
        try shareHost.launchSharer(executable: sharer.executable, arguments: sharer.arguments)
        try await shareHost.start(ScreenShareSetup(
            configuration: ScreenShareConfiguration(serverURL: url, channel: channel, hostUID: "1001", token: token("1001_sub")),
            mode: .standalone, source: "pattern"))
        let shareLog = NIOLockedValueBox<(stats: ScreenShareStats?, finished: ScreenShareFinishReason?)>((nil, nil))
        let shareEvents = Task {
            for await event in shareHost.events {
                if case .stats(let stats) = event { shareLog.withLockedValue { $0.stats = stats } }
                if case .finished(let reason) = event { shareLog.withLockedValue { $0.finished = reason } }
            }
        }
        print("joined: 2001 (viewer, recording), 1001 (camera + tone), 1001_sub (screen share, sharer pid \(shareHost.sharerProcess ?? 0)); running \(duration) s")
        try? await Task.sleep(for: .milliseconds(Int(duration * 1000)))
        let viewerStats = viewer.latestStats.withLockedValue { $0 }
        let hostStats = host.latestStats.withLockedValue { $0 }
        // The server's own word, over HTTP as an operator would ask it.
        let toHost = try await server.forwarded(to: "1001", in: channel)
        let toShare = try await server.forwarded(to: "1001_sub", in: channel)
        let toViewer = try await server.forwarded(to: "2001", in: channel)
        let counters = try await server.metrics()
        await shareHost.stop()
        shareHost.waitForSharer()
        shareEvents.cancel()
        _ = await host.stop()
        let files = await viewer.stop()
        server.stop()

        print("")
        print("participant  track              sent kbps   fps  size")
        for track in hostStats?.local ?? [] {
            print("\("1001".padding(12)) \((track.source.rawValue).padding(18)) \(String(Int(track.bitrateKbps)).padding(11)) "
                + "\(String(Int(track.framesPerSecond.rounded())).padding(4)) \(track.kind == .video ? "\(track.width)x\(track.height)" : "-")")
        }
        let (share, finished) = shareLog.withLockedValue { $0 }
        if let share {
            print("\("1001_sub".padding(12)) \("screen (process)".padding(18)) \(String(Int(share.bitrateKbps)).padding(11)) "
                + "\(String(Int(share.framesPerSecond.rounded())).padding(4)) \(share.width)x\(share.height)")
        }
        print("share finished: \(finished.map { "\($0)" } ?? "?")")
        print("")
        print("viewer 2001 receives   kbps   fps  size       lost  jitter ms")
        for track in viewerStats?.remote ?? [] {
            print("\((track.uid + "/" + track.source.rawValue).padding(22)) \(String(Int(track.bitrateKbps)).padding(6)) "
                + "\(String(Int(track.framesPerSecond.rounded())).padding(4)) \((track.kind == .video ? "\(track.width)x\(track.height)" : "-").padding(10)) "
                + "\(String(track.packetsLost).padding(5)) \(String(format2: track.jitterMs))")
        }
        print("")
        print("packets the server forwarded to 2001: " + toViewer.map { "\($0.from) \($0.kind) \($0.packets)" }.joined(separator: ", "))
        let fromShare = toHost.filter { $0.from == "1001_sub" }.reduce(0) { $0 + $1.packets }
        print("packets the server forwarded to 1001 from its own share 1001_sub: \(fromShare)")
        print("packets the server forwarded to 1001_sub (it subscribes to nothing): \(toShare.reduce(0) { $0 + $1.packets })")
        func count(_ name: String) -> String { counters[name].map { String(Int($0)) } ?? "?" }
        print("server: \(count("rtc_packets_in_total")) packets in, \(count("rtc_packets_out_total")) out, "
            + "\(count("rtc_packets_dropped_total")) dropped, \(count("rtc_nacks_total")) NACKs, \(count("rtc_retransmissions_total")) retransmitted")
        print("")
        for line in viewer.log.withLockedValue({ $0 }) + host.log.withLockedValue({ $0 }) where line.contains("first frame") || line.contains("joined") {
            print("event  \(line)")
        }
        print("")
        print("recordings (viewer 2001):")
        for file in files { print("  " + Bot.describe(file).dropFirst("recorded ".count)) }
        print("try: ffprobe \(files.first?.path ?? out); ffplay \(files.first(where: { $0.path.hasSuffix(".ivf") })?.path ?? out)")
    }
}

/// `rtc-server` next to this executable, on free ports, with a random secret and an API key: the
/// demo's server, run as an operator runs it. Stopped (SIGTERM, then SIGKILL) by ``stop()``.
struct DemoServer: Sendable {
    let pid: pid_t
    /// The signaling URL, and the line the server printed it in.
    let url: String, banner: String
    let secret: String, apiKey = "demo", apiSecret: String

    static func start() async throws -> DemoServer {
        guard let executable = ProcessRunner.sibling("rtc-server") else {
            throw CLIError("rtc-server is not next to rtc-cli: build it (swift build --product rtc-server, or make build)")
        }
        let secret = ServerCommand.randomSecret(), apiSecret = ServerCommand.randomSecret()
        let log = NSTemporaryDirectory() + "rtc-demo-server-\(getpid()).txt"
        defer { unlink(log) }
        let pid = try ProcessRunner.spawn([executable, "--host", "127.0.0.1", "--port", "0", "--udp-port", "0", "--secret", secret,
                                           "--api-key", "demo", "--api-secret", apiSecret, "--log-level", "warning"],
                                          keepErrors: true, output: log)
        // Its first line names the ports it took: "signaling: ws://127.0.0.1:P/rtc  media: udp 127.0.0.1:Q".
        for _ in 0..<200 {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            if let line = text.split(separator: "\n").first(where: { $0.hasPrefix("signaling: ") }),
               let url = line.split(separator: " ").first(where: { $0.hasPrefix("ws://") }) {
                return DemoServer(pid: pid, url: String(url), banner: String(line), secret: secret, apiSecret: apiSecret)
            }
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid { throw CLIError("rtc-server exited at its start: \(text.suffix(400))") }
            try await Task.sleep(for: .milliseconds(50))
        }
        kill(pid, SIGKILL)
        throw CLIError("rtc-server did not print its signaling URL within 10 s")
    }

    func token(_ uid: String, _ channel: String) -> String {
        AccessToken(uid: uid, channel: channel, now: Int64(time(nil)), ttl: 3600).signed(secret: secret)
    }

    /// What the server forwarded to `uid` in `channel`, by sender and kind (its `/debug/forwarded`).
    func forwarded(to uid: String, in channel: String) async throws -> [(from: String, kind: String, packets: Int)] {
        let admin = LiveKitClaims(apiKey: apiKey, identity: "demo-admin", video: LiveKitVideoGrant(room: channel, roomAdmin: true),
                                  now: Int64(time(nil)), ttl: 600).signed(secret: apiSecret)
        let query = "?room=\(channel.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed) ?? channel)"
            + "&identity=\(uid.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed) ?? uid)"
        let (status, body) = try await get("/debug/forwarded" + query, headers: [("Authorization", "Bearer " + admin)])
        guard status == 200, let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
              let rows = object["forwarded"] as? [[String: Any]] else {
            throw CLIError("the server's /debug/forwarded answered \(status): \(String(decoding: body.prefix(300), as: UTF8.self))")
        }
        return rows.map { (($0["from"] as? String) ?? "?", ($0["kind"] as? String) ?? "?", ($0["packets"] as? Int) ?? 0) }
    }

    /// The server's counters and gauges (its `/metrics`, Prometheus text), by name.
    func metrics() async throws -> [String: Double] {
        let (status, body) = try await get("/metrics", headers: [])
        guard status == 200 else { throw CLIError("the server's /metrics answered \(status)") }
        var values: [String: Double] = [:]
        for line in String(decoding: body, as: UTF8.self).split(separator: "\n") where !line.hasPrefix("#") {
            let parts = line.split(separator: " ")
            if parts.count == 2, let value = Double(parts[1]) { values[String(parts[0])] = value }
        }
        return values
    }

    private func get(_ path: String, headers: [(String, String)]) async throws -> (Int, [UInt8]) {
        let target = try HTTPPost.target(server: url, path: path)
        let response = try await HTTPPost.send(target, method: .GET, headers: headers, body: [], on: MultiThreadedEventLoopGroup.singleton.next(),
                                               tls: nil, timeout: .seconds(5)).get()
        return (response.status, response.body)
    }

    /// SIGTERM, then SIGKILL after 5 s; reaped. Idempotent.
    func stop() {
        guard kill(pid, 0) == 0 else { return }
        ProcessRunner.stop(pid)
    }
}

func makeDirectories(_ path: String) throws {
    var prefix = path.hasPrefix("/") ? "/" : ""
    for part in path.split(separator: "/") {
        prefix += part + "/"
        mkdir(prefix, 0o755)
    }
}
