import ArgumentParser
import NIOConcurrencyHelpers
import RTCCore
import ScreenShareUser
import Signaling

#if canImport(Glibc)
import Glibc
#endif

/// Peak RSS of the sharer process (DESIGN.md §4: standalone ≤ 50 MB, relay ≤ 20 MB, no growth
/// after the first 10 s), over a 1920x1080 source encoded at 1280x720, 15 fps.
struct ShareMemoryBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "share-memory",
        abstract: "Peak RSS of the screen sharer process, standalone and relay, 1920x1080 in, 720p15 out, on loopback.")

    @Option(help: "Seconds per mode.") var seconds: Int = 60
    @Option(help: "Modes to measure.") var modes: [ScreenShareMode] = [.standalone, .relay]

    func validate() throws { guard seconds >= 12 else { throw ValidationError("--seconds must be at least 12 (growth is measured after 10 s)") } }

    func run() async throws {
        let server = try await BenchServer()
        print("screen sharer memory: pattern source 1920x1080 → 1280x720 at 15 fps, \(seconds) s per mode")
        print("mode         sharer        peak RSS   RSS at 10 s   RSS at end   growth after 10 s   frames at the viewer   budget")
        for mode in modes {
            let viewer = RTCEngine(configuration: RTCEngineConfiguration(serverURL: server.url))
            let frames = Counter()
            viewer.setRemoteVideoSink { frame in if frame.uid == "1001_sub" { frames.add() } }
            try await viewer.join(token: server.token("2001", "bench"), channel: "bench", uid: "2001")
            let linkPath = "/tmp/rtc-bench-share-\(getpid()).sock"
            let host = try ScreenShareHost(linkPath: linkPath)
            let sharer = ProcessRunner.sharerCommand(link: linkPath, mode: mode)
            let pid = try host.launchSharer(executable: sharer.executable, arguments: sharer.arguments)
            try await host.start(ScreenShareSetup(
                configuration: ScreenShareConfiguration(serverURL: server.url, channel: "bench", hostUID: "1001",
                                                        token: server.token("1001_sub", "bench")),
                mode: mode, source: "pattern"))
            var samples: [Int] = []
            var peak = 0
            for _ in 0..<seconds {
                try await Task.sleep(for: .seconds(1))
                samples.append(Self.status(pid, "VmRSS"))
                // The high-water mark of the sharer's own memory. Not wait4's ru_maxrss: a spawned
                // child starts that at its parent's peak (the kernel carries it over at exec).
                peak = max(peak, Self.status(pid, "VmHWM"))
            }
            await host.stop()
            var status: Int32 = 0
            waitpid(pid, &status, 0)
            await viewer.leave()
            let atTen = samples[9], atEnd = samples.last ?? 0
            let budget = mode == .standalone ? 50 : 20
            let mb = { (kib: Int) in String(format2: Double(kib) / 1024) + " MB" }
            let name = String(sharer.executable.split(separator: "/").last ?? "")
            print("\(mode.rawValue.padding(12)) \(name.padding(13)) \(mb(peak).padding(10)) \(mb(atTen).padding(13)) \(mb(atEnd).padding(12)) "
                + "\(mb(atEnd - atTen).padding(19)) \(String(frames.value).padding(22)) ≤ \(budget) MB \(peak <= budget * 1024 ? "ok" : "OVER")")
        }
        await server.app.shutdown()
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

extension ScreenShareMode: ExpressibleByArgument {}
