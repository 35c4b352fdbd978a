#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import Logging
import NIOPosix
import RTCCore
import RTCRecording
import NIOConcurrencyHelpers
import RTCServer
import ScreenShareUser
import Signaling
import ServerCommandLine

/// The product in one command: an embedded server, host `1001`, its screen share `1001_sub` and
/// viewer `2001` in channel `ScreenShare`, all on loopback; a summary table and the viewer's recordings.
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
        let server = try await BenchServer()
        let app = server.app, url = server.url
        let channel = "ScreenShare"
        func token(_ uid: String) -> String { server.token(uid, channel) }
        print("server: \(url), media udp \(app.mediaAddress?.port ?? 0)")
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
        let toHost = try await app.sfu.packetsForwarded(to: "1001", in: channel).get()
        let toShare = try await app.sfu.packetsForwarded(to: "1001_sub", in: channel).get()
        let counters = try await app.sfu.counterSnapshot.get()
        await shareHost.stop()
        shareHost.waitForSharer()
        shareEvents.cancel()
        _ = await host.stop()
        let files = await viewer.stop()
        await app.shutdown()

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
        let fromShare = toHost.filter { $0.key.uid == "1001_sub" }.values.reduce(0, +)
        print("packets the server forwarded to 1001 from its own share 1001_sub: \(fromShare)")
        print("packets the server forwarded to 1001_sub (it subscribes to nothing): \(toShare.values.reduce(0, +))")
        print("server: \(counters.packetsIn) packets in, \(counters.packetsOut) out, \(counters.packetsDropped) dropped, "
            + "\(counters.nacksReceived) NACKs, \(counters.retransmissions) retransmitted")
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

func makeDirectories(_ path: String) throws {
    var prefix = path.hasPrefix("/") ? "/" : ""
    for part in path.split(separator: "/") {
        prefix += part + "/"
        mkdir(prefix, 0o755)
    }
}
