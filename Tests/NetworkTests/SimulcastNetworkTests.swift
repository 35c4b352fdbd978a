import Foundation
import RTCTestSupport
import Testing

/// Simulcast across hosts with a capped path (`tc tbf` on the router, in network namespaces): one
/// publisher sends three layers of 720p30; one viewer's downlink is capped at 400 kbit/s. The slow
/// viewer gets a lower layer without holding the publisher or the other viewer down, and comes
/// back to the full layer once the cap is lifted (its leg is probed past what it was being sent).
@Suite("Simulcast across hosts", .serialized)
struct SimulcastNetworkTests {
    /// One decoded frame from a `--frame-log` line: monotonic µs, uid, width, height.
    struct Frame {
        var us: Int64
        var width: Int
        var height: Int
    }

    /// CLOCK_MONOTONIC in µs: the clock `--frame-log` lines are stamped with (one kernel, every namespace).
    static func monotonicUs() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1000
    }

    static func frames(_ path: String) -> [Frame] {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let parts = line.split(separator: " ")
            guard parts.count == 4, let us = Int64(parts[0]), let width = Int(parts[2]), let height = Int(parts[3]) else { return nil }
            return Frame(us: us, width: width, height: height)
        }
    }

    /// The longest time without a decoded frame between `from` and `to` (µs), counting the edges.
    static func longestGap(_ frames: [Frame], from: Int64, to: Int64) -> Int64 {
        let times = [from] + frames.map(\.us).filter { $0 > from && $0 < to } + [to]
        return zip(times, times.dropFirst()).map { $1 - $0 }.max() ?? (to - from)
    }

    /// The first frame of `size` after `after` in a frame log, waiting up to `seconds` for it.
    static func firstFrame(in path: String, width: Int, after: Int64, within seconds: Double) async throws -> Frame? {
        let deadline = monotonicUs() + Int64(seconds * 1e6)
        while monotonicUs() < deadline {
            if let frame = frames(path).first(where: { $0.us > after && $0.width == width }) { return frame }
            try await Task.sleep(for: .milliseconds(200))
        }
        return nil
    }

    /// How many times the capped viewer's downlink collapses in ``cappedViewer`` (`RTC_COLLAPSE_RUNS`, 2 by default
    /// to keep `make test` short; the figures in docs/simulcast.md are over 5 and more).
    static var collapseRuns: Int { ProcessInfo.processInfo.environment["RTC_COLLAPSE_RUNS"].flatMap(Int.init) ?? 2 }

    @Test("three layers of 720p30, two viewers, one capped at 400 kbit/s: the clean one gets 1280x720 at full rate, the capped one a lower layer without freezing, the publisher keeps its full layer; the cap lifted, the capped viewer is back on 1280x720; then its downlink collapses to 400 kbit/s at once while it watches 1280x720, several times: its first smaller frame within a second of its last 1280x720 one and no gap of a second (measured: 299-423 ms over 24), and it is back on 1280x720 after each lift")
    func cappedViewer() async throws {
        guard NetworkLab.availableOrKnownIssue() else { return }
        let lab = try NetworkLab()
        defer { lab.close() }
        let serverHost = try lab.addHost("s"), publisherHost = try lab.addHost("p")
        let cleanHost = try lab.addHost("a"), cappedHost = try lab.addHost("b")
        let dir = temporaryDirectory("simulcast-lab")
        let cross = CrossHostTests()
        let server = try await cross.startServer(lab, on: serverHost, ["--log-level", "debug"])
        defer { server.stop() }
        try lab.capDownlink(of: cappedHost, kbit: 400)
        let runs = Self.collapseRuns
        // The clients run until they are stopped (SIGTERM) once the collapses are done.
        let publisher = try cross.join(lab, on: publisherHost, server: serverHost, uid: "1001", quiet: false,
                                       ["--size", "1280x720", "--fps", "30", "--bitrate", "1700", "--simulcast", "3",
                                        "--no-subscribe"])
        defer { publisher.stop() }
        try await Task.sleep(for: .milliseconds(1000))
        let start = Self.monotonicUs()
        let clean = try cross.join(lab, on: cleanHost, server: serverHost, uid: "2001", quiet: false,
                                   ["--video", "none", "--audio", "none", "--frame-log", "\(dir)/clean.log"])
        defer { clean.stop() }
        let cappedLog = "\(dir)/capped.log"
        let capped = try cross.join(lab, on: cappedHost, server: serverHost, uid: "2002", quiet: false,
                                    ["--video", "none", "--audio", "none", "--frame-log", cappedLog])
        defer { capped.stop() }
        // Joined under the cap: 14 s capped, then free.
        try await Task.sleep(for: .seconds(14))
        let lift = Self.monotonicUs()
        try lab.capDownlink(of: cappedHost, kbit: nil)
        let back = try await Self.firstFrame(in: cappedLog, width: 1280, after: lift, within: 10)
        let backAfter = back.map { Double($0.us - lift) / 1e6 }
        // Collapses: watching 1280x720, the downlink falls to 400 kbit/s at once (tbf, 300 ms of queue).
        var collapses: [(cutMs: Int64, gapMs: Int64, switchMs: Int64?, sizes: [String], backAfter: Double?)] = []
        for _ in 0..<runs where back != nil {
            guard try await Self.firstFrame(in: cappedLog, width: 1280, after: Self.monotonicUs(), within: 10) != nil else { break }
            // Watching 1280x720 for 3 s: long enough for the server to pause the layers nobody gets (2 s).
            try await Task.sleep(for: .seconds(3))
            let cut = Self.monotonicUs()
            try lab.capDownlink(of: cappedHost, kbit: 400)
            try await Task.sleep(for: .seconds(5))
            let up = Self.monotonicUs()
            try lab.capDownlink(of: cappedHost, kbit: nil)
            let frames = Self.frames(cappedLog)
            let gap = Self.longestGap(frames, from: cut, to: up)
            let settledSizes = Set(frames.filter { $0.us > up - 2_000_000 && $0.us < up }.map { "\($0.width)x\($0.height)" }).sorted()
            let again = try await Self.firstFrame(in: cappedLog, width: 1280, after: up, within: 10)
            // The switch as the viewer sees it: from its last 1280x720 frame to its first smaller one.
            let firstSmall = frames.first { $0.us > cut && $0.width < 1280 }
            let lastFull = firstSmall.flatMap { small in frames.last { $0.us < small.us && $0.width == 1280 } }
            let switchMs = firstSmall.flatMap { small in lastFull.map { (small.us - $0.us) / 1000 } }
            collapses.append((cut / 1000, gap / 1000, switchMs, settledSizes, again.map { Double($0.us - up) / 1e6 }))
        }
        for process in [clean, capped, publisher] { kill(process.pid, SIGTERM) }
        #expect(await clean.wait(15) == 0, "clean: \(clean.errorText)")
        #expect(await capped.wait(15) == 0, "capped: \(capped.errorText)")
        #expect(await publisher.wait(15) == 0, "publisher: \(publisher.errorText)")

        let cleanFrames = Self.frames("\(dir)/clean.log"), cappedFrames = Self.frames(cappedLog)
        // The settled capped phase: from 8 s after joining to the lift.
        let settled = start + 8_000_000
        let cleanWindow = cleanFrames.filter { $0.us > settled && $0.us < lift }
        let cleanFPS = Double(cleanWindow.count) / (Double(lift - settled) / 1e6)
        let cleanFull = cleanFrames.filter { $0.us > settled }.allSatisfy { $0.width == 1280 && $0.height == 720 }
        let cappedWindow = cappedFrames.filter { $0.us > settled && $0.us < lift }
        let cappedSizes = Set(cappedWindow.map { "\($0.width)x\($0.height)" }).sorted()
        let cappedGap = Self.longestGap(cappedFrames, from: settled, to: lift)
        let cappedFPS = Double(cappedWindow.count) / (Double(lift - settled) / 1e6)
        // The publisher's own line: "send video N kbps F fps 1280x720" for its full layer, second by second.
        let sendLines = publisher.output.filter { $0.contains("send video") }
        let publisherFull = sendLines.dropFirst(10).dropLast(2).allSatisfy { $0.contains("1280x720") }
        let publisherFPS = sendLines.dropFirst(10).dropLast(2).compactMap { line -> Int? in
            guard let part = line.components(separatedBy: " | ").first(where: { $0.hasPrefix("send video") }) else { return nil }
            let words = part.split(separator: " ")
            return words.firstIndex(of: "fps").flatMap { Int(words[$0 - 1]) }
        }
        print("simulcast across hosts: clean viewer \(String(format: "%.1f", cleanFPS)) fps, all 1280x720: \(cleanFull); "
            + "capped (400 kbit/s) viewer \(cappedSizes) at \(String(format: "%.1f", cappedFPS)) fps, longest gap \(cappedGap / 1000) ms; "
            + "publisher full layer fps \(publisherFPS); cap lifted: 1280x720 again after \(backAfter.map { String(format: "%.1f", $0) } ?? "never") s")
        for (index, collapse) in collapses.enumerated() {
            print("simulcast across hosts: collapse \(index + 1) at \(collapse.cutMs) to 400 kbit/s while on 1280x720: "
                + "last 1280x720 frame to the first smaller one \(collapse.switchMs.map { "\($0) ms" } ?? "never"), longest gap \(collapse.gapMs) ms, "
                + "settled on \(collapse.sizes), 1280x720 again \(collapse.backAfter.map { String(format: "%.1f", $0) } ?? "never") s after the lift")
        }
        try? (server.output + [server.errorText]).joined(separator: "\n").write(toFile: "\(dir)/server.out", atomically: true, encoding: .utf8)
        try? capped.output.joined(separator: "\n").write(toFile: "\(dir)/capped.out", atomically: true, encoding: .utf8)
        print("simulcast across hosts: logs in \(dir)")
        #expect(cleanFull && cleanFPS >= 27, "clean viewer: \(cleanFPS) fps, sizes \(Set(cleanWindow.map { "\($0.width)x\($0.height)" }))")
        #expect(!cappedWindow.isEmpty && cappedWindow.allSatisfy { $0.width < 1280 }, "capped viewer sizes \(cappedSizes)")
        #expect(cappedGap <= 500_000, "the capped viewer froze for \(cappedGap / 1000) ms")
        // The publisher keeps its full layer at full rate: a capped viewer must not slow it. A
        // second or three of a CPU-starved encoder (a debug client encoding three 720p30 layers
        // beside the server and two viewers on 2 cores; 24, 24, 15 fps seen under double load)
        // is not what this checks; a rate held down for the capped phase (14 s) still fails.
        let publisherMean = Double(publisherFPS.reduce(0, +)) / Double(max(publisherFPS.count, 1))
        let publisherSlow = publisherFPS.filter { $0 < 27 }.count
        #expect(publisherFull && publisherFPS.count >= 5 && publisherMean >= 28 && publisherSlow * 10 <= publisherFPS.count,
                "publisher: mean \(publisherMean) fps, \(publisherSlow) seconds under 27 of \(publisherFPS.count): \(sendLines.suffix(20))")
        #expect(backAfter.map { $0 <= 10 } == true, "back on the full layer after \(String(describing: backAfter)) s")
        #expect(collapses.count == runs, "\(collapses.count) of \(runs) collapses ran (each needs the viewer on 1280x720 first)")
        for (index, collapse) in collapses.enumerated() {
            // The longest gap is the switch itself (last 1280x720 frame to the first smaller one):
            // 299-423 ms over 24 collapses on 2026-11-27, with no second freeze. Before that day one
            // collapse in four to eight had a second freeze of 560-2180 ms after the switch (a
            // pace that kept the link's queue full, repairs starved or sent once per NACK through
            // 600 ms of queue, probe padding a viewer took for lost packets); 1038-2479 ms before
            // the fast down-switch. The bound has slack for a loaded 2-core machine (the goal is
            // 500 ms; the figures are in docs/simulcast.md) and still catches a second freeze.
            #expect(collapse.switchMs.map { $0 < 1000 } == true, "collapse \(index + 1): \(String(describing: collapse.switchMs)) ms without a frame at the switch")
            #expect(collapse.gapMs < 1000, "collapse \(index + 1): no frame for \(collapse.gapMs) ms")
            #expect(!collapse.sizes.isEmpty && !collapse.sizes.contains("1280x720"), "collapse \(index + 1): settled on \(collapse.sizes)")
            #expect(collapse.backAfter.map { $0 <= 10 } == true, "collapse \(index + 1): back on 1280x720 after \(String(describing: collapse.backAfter)) s")
        }
    }
}
