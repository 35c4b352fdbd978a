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
        print("sharer: \(ProcessRunner.sharerCommand(link: "").executable)")
        print("mode         peak RSS   RSS at 10 s   RSS at end   growth after 10 s   frames at the viewer   budget")
        for mode in modes {
            let viewer = RTCEngine(configuration: RTCEngineConfiguration(serverURL: server.url))
            let frames = Counter()
            viewer.setRemoteVideoSink { frame in if frame.uid == "1001_sub" { frames.add() } }
            try await viewer.join(token: server.token("2001", "bench"), channel: "bench", uid: "2001")
            let linkPath = "/tmp/rtc-bench-share-\(getpid()).sock"
            let host = try ScreenShareHost(linkPath: linkPath)
            let sharer = ProcessRunner.sharerCommand(link: linkPath)
            let pid = try host.launchSharer(executable: sharer.executable, arguments: sharer.arguments)
            try await host.start(ScreenShareSetup(
                configuration: ScreenShareConfiguration(serverURL: server.url, channel: "bench", hostUID: "1001",
                                                        token: server.token("1001_sub", "bench")),
                mode: mode, source: "pattern"))
            var samples: [Int] = []
            for _ in 0..<seconds {
                try await Task.sleep(for: .seconds(1))
                samples.append(Self.residentKiB(pid))
            }
            await host.stop()
            var usage = rusage()
            var status: Int32 = 0
            wait4(pid, &status, 0, &usage)
            await viewer.leave()
            let peak = Int(usage.ru_maxrss)
            let atTen = samples[9], atEnd = samples.last ?? 0
            let budget = mode == .standalone ? 50 : 20
            let mb = { (kib: Int) in String(format2: Double(kib) / 1024) + " MB" }
            print("\(mode.rawValue.padding(12)) \(mb(peak).padding(10)) \(mb(atTen).padding(13)) \(mb(atEnd).padding(12)) "
                + "\(mb(atEnd - atTen).padding(19)) \(String(frames.value).padding(22)) ≤ \(budget) MB \(peak <= budget * 1024 ? "ok" : "OVER")")
        }
        await server.app.shutdown()
    }

    /// VmRSS of a running process, KiB.
    static func residentKiB(_ pid: pid_t) -> Int {
        guard let file = fopen("/proc/\(pid)/status", "r") else { return 0 }
        defer { fclose(file) }
        var line = [CChar](repeating: 0, count: 256)
        while fgets(&line, 256, file) != nil {
            let text = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if text.hasPrefix("VmRSS:") { return Int(text.split(separator: " ").dropFirst().first ?? "0") ?? 0 }
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
