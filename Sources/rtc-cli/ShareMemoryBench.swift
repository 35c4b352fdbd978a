import ArgumentParser
import NIOConcurrencyHelpers
import RTCCore
import ScreenShareUser
import Signaling
import ServerCommandLine

#if canImport(Glibc)
import Glibc
#endif

/// Peak RSS of the sharer process (DESIGN.md §4: standalone ≤ 50 MB, relay ≤ 20 MB, no growth
/// after the first 10 s), over a 1920x1080 source encoded at 1280x720, 15 fps: the sharer a host
/// launches (`rtc-sharer`, `rtc-capture`), and the `_sub` joined from the command line, which holds
/// the standalone budget too.
struct ShareMemoryBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "share-memory",
        abstract: "Peak RSS of the screen sharer process (standalone, relay, and `rtc-cli join --uid X_sub`), 1920x1080 in, 720p15 out, on loopback.")

    /// A row: the host's sharer in either link mode, or `rtc-cli join --uid 1001_sub --source FILE.y4m`.
    enum Mode: String, CaseIterable, ExpressibleByArgument {
        case standalone, relay, cli
    }

    @Option(help: "Seconds per mode.") var seconds: Int = 60
    @Option(help: "Modes to measure (cli: `rtc-cli join --uid 1001_sub --source` a 1920x1080 Y4M, as a child process).")
    var modes: [Mode] = Mode.allCases
    @Option(help: "The 1920x1080 Y4M of the cli row (default: the screen pattern, written to --dir once).") var clip: String?
    @Option(help: "Where the cli row's clip is written.") var dir: String = "/tmp/rtc-bench"

    func validate() throws { guard seconds >= 12 else { throw ValidationError("--seconds must be at least 12 (growth is measured after 10 s)") } }

    func run() async throws {
        let clipPath = modes.contains(.cli) ? try clipForCLI() : ""
        let server = try await BenchServer()
        print("screen sharer memory: pattern source 1920x1080 → 1280x720 at 15 fps, \(seconds) s per mode"
            + (modes.contains(.cli) ? "; cli reads \(clipPath)" : ""))
        print("mode         sharer        peak RSS   RSS at 10 s   RSS at end   growth after 10 s   frames at the viewer   budget")
        for mode in modes {
            let viewer = RTCEngine(configuration: RTCEngineConfiguration(serverURL: server.url))
            let frames = Counter()
            viewer.setRemoteVideoSink { frame in if frame.uid == "1001_sub" { frames.add() } }
            try await viewer.join(token: server.token("2001", "bench"), channel: "bench", uid: "2001")
            // The share's owner, present as the server requires (it publishes nothing here).
            let owner = try await presentOwner(url: server.url, token: server.token("1001", "bench"), uid: "1001", channel: "bench")
            let pid: pid_t, name: String
            var host: ScreenShareHost?
            switch mode {
            case .standalone, .relay:
                let linkMode: ScreenShareMode = mode == .relay ? .relay : .standalone
                let linkPath = "/tmp/rtc-bench-share-\(getpid()).sock"
                let made = try ScreenShareHost(linkPath: linkPath)
                let sharer = ProcessRunner.sharerCommand(link: linkPath, mode: linkMode)
                pid = try made.launchSharer(executable: sharer.executable, arguments: sharer.arguments)
                try await made.start(ScreenShareSetup(
                    configuration: ScreenShareConfiguration(serverURL: server.url, channel: "bench", hostUID: "1001",
                                                            token: server.token("1001_sub", "bench")),
                    mode: linkMode, source: "pattern"))
                host = made
                name = String(sharer.executable.split(separator: "/").last ?? "")
            case .cli:
                // What a user types (docs/screen-share.md), until SIGINT.
                pid = try ProcessRunner.spawn([ProcessRunner.selfPath, "join", "--server", server.url, "--channel", "bench",
                                               "--uid", "1001_sub", "--token", server.token("1001_sub", "bench"),
                                               "--source", clipPath, "--quiet"])
                name = "rtc-cli join"
            }
            var samples: [Int] = []
            var peak = 0
            for _ in 0..<seconds {
                try await Task.sleep(for: .seconds(1))
                samples.append(Self.status(pid, "VmRSS"))
                // The high-water mark of the sharer's own memory. Not wait4's ru_maxrss: a spawned
                // child starts that at its parent's peak (the kernel carries it over at exec).
                peak = max(peak, Self.status(pid, "VmHWM"))
            }
            if let host {
                await host.stop()
            } else {
                kill(pid, SIGINT)
                // Leaving is part of the command's run: its high-water mark until it exits (a
                // zombie has no VmHWM line), or SIGKILL after 10 s.
                var hwm = Self.status(pid, "VmHWM"), polls = 0
                while hwm > 0 {
                    peak = max(peak, hwm)
                    polls += 1
                    if polls == 500 { kill(pid, SIGKILL) }
                    try await Task.sleep(for: .milliseconds(20))
                    hwm = Self.status(pid, "VmHWM")
                }
            }
            var status: Int32 = 0
            waitpid(pid, &status, 0)
            await viewer.leave()
            await owner.leave()
            let atTen = samples[9], atEnd = samples.last ?? 0
            let budget = mode == .relay ? 20 : 50
            let mb = { (kib: Int) in String(format2: Double(kib) / 1024) + " MB" }
            print("\(mode.rawValue.padding(12)) \(name.padding(13)) \(mb(peak).padding(10)) \(mb(atTen).padding(13)) \(mb(atEnd).padding(12)) "
                + "\(mb(atEnd - atTen).padding(19)) \(String(frames.value).padding(22)) ≤ \(budget) MB \(peak <= budget * 1024 ? "ok" : "OVER")")
        }
        await server.app.shutdown()
    }

    /// The cli row's source: `--clip`, or 75 frames (5 s, looped by the source) of the 1920x1080
    /// screen pattern at 15 fps, written once to `--dir` and reused while its header still fits.
    private func clipForCLI() throws -> String {
        if let clip { return clip }
        let path = dir + "/share-1920x1080-screen-15fps.y4m"
        if let header = try? Y4MReader(path: path).header, header.width == 1920, header.height == 1080 { return path }
        try makeDirectories(dir)
        try reporting {
            let size = VideoSize(width: 1920, height: 1080)
            let generator = try PatternGenerator(kind: .screen, size: size, frameRate: FrameRate(15))
            let writer = try Y4MWriter(path: path + ".part", header: Y4MHeader(width: size.width, height: size.height, frameRate: FrameRate(15)))
            for index in 0..<75 { try writer.write(generator.frame(at: index)) }
            try writer.finish()
        }
        // Only a whole clip gets the name that is reused.
        guard rename(path + ".part", path) == 0 else { throw CLIError("cannot write \(path)") }
        return path
    }

    /// A `KEY:   N kB` line of a running process's /proc status, KiB (0 when absent).
    static func status(_ pid: pid_t, _ key: String) -> Int {
        guard let file = fopen("/proc/\(pid)/status", "r") else { return 0 }
        defer { fclose(file) }
        var line = [CChar](repeating: 0, count: 256)
        while fgets(&line, 256, file) != nil {
            let text = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if text.hasPrefix(key + ":") { return Int(text.split(separator: " ").dropFirst().first ?? "0") ?? 0 }
        }
        return 0
    }
}

/// A thread-safe counter.
final class Counter: Sendable {
    private let count = NIOLockedValueBox(0)
    func add() { count.withLockedValue { $0 += 1 } }
    var value: Int { count.withLockedValue { $0 } }
}

