import ArgumentParser
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NetSim
import RTCCore
import RTCServer
import ScreenShareUser
import Signaling
import ServerCommandLine

#if canImport(Glibc)
import Glibc
#endif

/// The figures of the resilience tests (`Tests/ScreenShareUserTests/ResilienceTests.swift`:
/// `ResilienceTests.lossyScreenShare`, `CongestionTests.capacitySteps`, `.cappedDownlink`,
/// `.degradationPreference`), measured on the same scenarios through the impairment proxy: same
/// profiles, seeds, encoder configurations and windows. The tests assert only the function; the
/// timings, which a loaded machine moves, are printed here, per run and as medians, never asserted.
struct ResilienceBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resilience",
        abstract: "The resilience tests' scenarios through the impairment proxy (loss, capacity steps, a capped downlink, "
            + "a capped uplink): figures per run and medians, nothing asserted.")

    enum Scenario: String, CaseIterable, ExpressibleByArgument {
        case lossy, steps, downlink, degrade, camera, all
    }

    @Option(help: "lossy, steps, downlink, degrade, camera (720p30 at 10 % loss, per second; not in all) or all.")
    var scenario: Scenario = .all
    @Option(help: "Runs of each scenario (every run is printed, then the median of each figure).") var runs: Int = 1
    @Option(help: "Seconds of the lossy share's measured window (after 2 s of warm-up).") var seconds: Double = 20
    @Option(help: "Seconds per capacity phase of the steps scenario (2.5, 0.5, then 2.5 Mbps).") var phase: Double = 15
    @Flag(help: "Also print the steps runs' send rate into the bottleneck per 500 ms window.") var windows = false

    func validate() throws {
        guard runs >= 1, seconds >= 1, phase >= 2 else { throw ValidationError("--runs must be >= 1, --seconds >= 1 and --phase >= 2") }
    }

    func run() async throws {
        let chosen: [Scenario] = scenario == .all ? [.lossy, .steps, .downlink, .degrade] : [scenario]
        for (index, scenario) in chosen.enumerated() {
            if index > 0 { print("") }
            switch scenario {
            case .lossy: try await lossy()
            case .steps: try await steps()
            case .downlink: try await downlink()
            case .degrade: try await degrade()
            case .camera: try await lossyCamera()
            case .all: break
            }
        }
    }

    // MARK: - lossy: a screen share through 10 % loss each way on both legs

    struct LossyFigures {
        var decoded: Int
        var encoded: Int
        var longestGapMs: Double
        var up: Int, upDropped: Int, down: Int, downDropped: Int
        var nacksReceived: Int, nacksSent: Int, retransmissions: Int, keyframeRequests: Int

        var deliveredPercent: Double { Double(decoded) / Double(max(1, encoded)) * 100 }
    }

    private func lossy() async throws {
        print("lossy: a 1280x720 screen share (ScreenShareSession 1001_sub, screen pattern at 15 fps) watched by one viewer, "
            + "10 % random loss each way and 15 ms each way on both legs (60 ms RTT end to end); \(fixed0(seconds)) s measured "
            + "after 2 s of warm-up; \(runs) run(s)")
        fflush(nil)
        var results: [LossyFigures] = []
        for run in 1...runs {
            let figures = try await lossyRun()
            results.append(figures)
            print("run \(run): \(figures.decoded) frames decoded of \(figures.encoded) encoded (\(String(format2: figures.deliveredPercent)) %), "
                + "longest gap between decoded frames \(fixed0(figures.longestGapMs)) ms; proxy dropped \(figures.upDropped) of "
                + "\(figures.up) packets up, \(figures.downDropped) of \(figures.down) down; SFU: \(figures.nacksReceived) NACKs in, "
                + "\(figures.nacksSent) sent up, \(figures.retransmissions) retransmitted, \(figures.keyframeRequests) keyframe requests forwarded")
            fflush(nil)
        }
        print("median: frames decoded / frames encoded \(String(format2: median(results.map(\.deliveredPercent)))) %")
        print("median: longest gap between decoded frames \(fixed0(median(results.map(\.longestGapMs)))) ms")
        print("median: proxy drops \(median(results.map(\.upDropped))) packets up, \(median(results.map(\.downDropped))) down")
        fflush(nil)
    }

    private func lossyRun() async throws -> LossyFigures {
        let server = try await BenchServer()
        let channel = "lossy"
        // 10 % loss each way on both legs (publisher ↔ SFU ↔ viewer), 15 ms each way per leg.
        let profile = ImpairmentProfile(loss: 0.10, delayMs: 15)
        let proxy = try await Self.startProxy(server, upstream: profile, downstream: profile, seed: 42)
        let viewer = RTCEngine(configuration: RTCEngineConfiguration(serverURL: server.url))
        let decoded = NIOLockedValueBox<[Int64]>([])
        viewer.setRemoteVideoSink { frame in
            guard frame.uid == "1001_sub" else { return }
            decoded.withLockedValue { $0.append(MediaClock.monotonicUs()) }
        }
        try await viewer.join(token: server.token("2001", channel), channel: channel, uid: "2001")
        let owner = try await presentOwner(url: server.url, token: server.token("1001", channel), uid: "1001", channel: channel)
        let session = ScreenShareSession(configuration: ScreenShareConfiguration(
            serverURL: server.url, channel: channel, hostUID: "1001", token: server.token("1001_sub", channel)))
        try await session.start()
        // As the test: the screen pattern drawn at its default 30 fps scene rate, pushed at 15 fps.
        let source = try startPattern(kind: .screen, size: VideoSize(width: 1280, height: 720), fps: 15, sceneRate: FrameRate(30)) {
            session.pushVideoFrame($0)
        }
        defer { source.stop() }
        _ = await waitUntil(15) { decoded.withLockedValue { $0.count } >= 1 }
        try await Task.sleep(for: .seconds(2))  // warm-up: the start's backlog is played out
        let start = MediaClock.monotonicUs()
        let sentBefore = session.engine.localVideoFramesEncoded
        try await Task.sleep(for: .seconds(seconds))
        source.stop()
        try await Task.sleep(for: .milliseconds(300))  // the encoder's last frame
        try await session.pause()  // no idle re-sends after the count
        let sentAfter = session.engine.localVideoFramesEncoded
        try await Task.sleep(for: .milliseconds(1500))  // the last frames' recovery
        // Frames encoded from `start` on, against frames decoded from `start` on.
        let window = decoded.withLockedValue { $0 }.filter { $0 >= start }
        let end = start + Int64(seconds * 1e6)
        let playing = window.filter { $0 <= end }
        let gaps = zip(playing.dropFirst(), playing).map { Double($0 - $1) / 1000 }
        let counters = try await server.app.sfu.counterSnapshot.get()
        let proxyStats = proxy.statistics
        await session.stop()
        await owner.leave()
        await viewer.leave()
        await proxy.close()
        await server.app.shutdown()
        return LossyFigures(
            decoded: window.count, encoded: sentAfter - sentBefore,
            // Fewer than two frames decoded: the whole window was a gap.
            longestGapMs: gaps.max() ?? seconds * 1000,
            up: proxyStats.up, upDropped: proxyStats.upDropped, down: proxyStats.down, downDropped: proxyStats.downDropped,
            nacksReceived: counters.nacksReceived, nacksSent: counters.nacksSent, retransmissions: counters.retransmissions,
            keyframeRequests: counters.keyframeRequestsForwarded)
    }

    // MARK: - camera: a 720p30 camera through 10 % loss each way, second by second

    /// What the publisher encodes and the viewer decodes each second, with the publisher's send-side
    /// estimate: where a sender's own rate falls under loss (not the network's doing) shows here.
    private func lossyCamera() async throws {
        print("camera: a 1280x720 camera at 30 fps asking 2500 kbps, watched by one viewer, 10 % random loss each way and 15 ms each "
            + "way on both legs; \(fixed0(seconds)) s; per second: frames encoded, frames decoded, the publisher's estimate")
        let server = try await BenchServer()
        let channel = "camera"
        let profile = ImpairmentProfile(loss: 0.10, delayMs: 15)
        let proxy = try await Self.startProxy(server, upstream: profile, downstream: profile, seed: 42)
        let viewer = RTCEngine(configuration: RTCEngineConfiguration(serverURL: server.url))
        let decoded = NIOLockedValueBox<[Int64]>([])
        viewer.setRemoteVideoSink { _ in decoded.withLockedValue { $0.append(MediaClock.monotonicUs()) } }
        try await viewer.join(token: server.token("2001", channel), channel: channel, uid: "2001")
        var configuration = RTCEngineConfiguration(serverURL: server.url)
        configuration.statsIntervalSeconds = 1
        let publisher = RTCEngine(configuration: configuration)
        let estimate = NIOLockedValueBox<Int?>(nil)
        let statsTask = Task {
            for await event in publisher.events {
                if case .rtcStats(let stats) = event { estimate.withLockedValue { $0 = stats.estimatedBandwidthKbps } }
            }
        }
        defer { statsTask.cancel() }
        try publisher.setVideoEncoderConfiguration(VideoEncoderConfiguration(
            dimensions: VideoSize(width: 1280, height: 720), frameRate: 30, bitrateKbps: 2500))
        try await publisher.enableVideo()
        try await publisher.join(token: server.token("1001", channel), channel: channel, uid: "1001")
        let source = try startPattern(kind: .camera, size: VideoSize(width: 1280, height: 720), fps: 30) { _ = publisher.pushVideoFrame($0) }
        defer { source.stop() }
        var encodedBefore = publisher.localVideoFramesEncoded
        var rows: [(encoded: Int, decoded: Int, kbps: Int?)] = []
        let start = MediaClock.monotonicUs()
        for second in 1...Int(seconds) {
            try await Task.sleep(for: .seconds(1))
            let now = publisher.localVideoFramesEncoded
            let from = start + Int64(second - 1) * 1_000_000, to = start + Int64(second) * 1_000_000
            let inSecond = decoded.withLockedValue { $0 }.filter { $0 >= from && $0 < to }.count
            rows.append((now - encodedBefore, inSecond, estimate.withLockedValue { $0 }))
            encodedBefore = now
        }
        source.stop()
        let window = decoded.withLockedValue { $0 }.filter { $0 >= start && $0 <= start + Int64(seconds * 1e6) }
        let gaps = zip(window.dropFirst(), window).map { Double($0 - $1) / 1000 }
        print("s   encoded  decoded  estimate kbps")
        for (index, row) in rows.enumerated() {
            print(String(format: "%-3d %-8d %-8d %@", index + 1, row.encoded, row.decoded, row.kbps.map(String.init) ?? "-"))
        }
        print("encoded: min \(rows.map(\.encoded).min() ?? 0) fps, \(rows.filter { $0.encoded < 10 }.count) s under 10 fps; decoded: "
            + "\(window.count) frames, longest gap \(fixed0(gaps.max() ?? 0)) ms")
        await publisher.leave()
        await viewer.leave()
        await proxy.close()
        await server.app.shutdown()
        fflush(nil)
    }

    // MARK: - steps: uplink capacity 2.5 → 0.5 → 2.5 Mbps

    struct StepsFigures {
        /// Seconds from the drop to the end of the first 500 ms window under 0.5 Mbps (nil: never).
        var underS: Double?
        /// Seconds from the rise to the end of the first 500 ms window at ≥ 85 % of 2.5 Mbps (nil: never).
        var recoveredS: Double?
        var queueingP95Ms: Double
        var dropped: Int
        var packets: Int
        /// The send rate per 500 ms window: "end s, Mbps, worst queueing ms, drops".
        var table: [String]
    }

    private func steps() async throws {
        print("steps: uplink capacity 2.5 → 0.5 → 2.5 Mbps (\(fixed0(phase)) s phases, 1 s queue, 10 ms each way) under a 1280x720 "
            + "camera at 30 fps asking 3000 kbps; send rate into the bottleneck per 500 ms window; \(runs) run(s)")
        fflush(nil)
        var results: [StepsFigures] = []
        for run in 1...runs {
            let figures = try await Self.stepsRun(phase: phase)
            results.append(figures)
            print("run \(run): under 0.5 Mbps \(seconds1(figures.underS)) after the drop, at 85 % of 2.5 Mbps "
                + "\(seconds1(figures.recoveredS)) after the rise; queueing p95 \(fixed0(figures.queueingP95Ms)) ms; "
                + "\(figures.dropped) of \(figures.packets) packets dropped at the queue")
            if windows { print("  Mbps per 500 ms (window end, Mbps, worst queueing ms, drops): \(figures.table.joined(separator: ", "))") }
            fflush(nil)
        }
        print("median: seconds from the drop to the first 500 ms window under 0.5 Mbps: \(medianText(results.map(\.underS), digits: 1, unit: "s"))")
        print("median: seconds from the rise to the first 500 ms window at ≥ 85 % of 2.5 Mbps: "
            + medianText(results.map(\.recoveredS), digits: 1, unit: "s"))
        print("median: queueing p95 \(fixed0(median(results.map(\.queueingP95Ms)))) ms")
        print("median: packets dropped at the queue \(median(results.map(\.dropped))) (of \(median(results.map(\.packets))))")
        fflush(nil)
    }

    /// One run of the steps scenario, `phase` seconds at each capacity: also
    /// `CongestionTests.capacitySteps`, which asserts on what this measures.
    static func stepsRun(phase: Double) async throws -> StepsFigures {
        let server = try await BenchServer()
        let channel = "steps"
        var link = ImpairmentProfile(delayMs: 10)
        link.bandwidthBps = 2_500_000
        link.queueMs = 1000
        let proxy = try await Self.startProxy(server, upstream: link, downstream: ImpairmentProfile(delayMs: 10), seed: 7)
        let sender = RTCEngine(configuration: RTCEngineConfiguration(serverURL: server.url))
        // Asks for more than the path carries: the estimate has to find the cap.
        try sender.setVideoEncoderConfiguration(VideoEncoderConfiguration(
            dimensions: VideoSize(width: 1280, height: 720), frameRate: 30, bitrateKbps: 3000))
        try await sender.enableVideo()
        try await sender.join(token: server.token("1001", channel), channel: channel, uid: "1001")
        let camera = try startPattern(kind: .camera, size: VideoSize(width: 1280, height: 720), fps: 30) { _ = sender.pushVideoFrame($0) }
        defer { camera.stop() }
        proxy.traceUpstream(true)
        let origin = MediaClock.monotonicUs()
        try await Task.sleep(for: .seconds(phase))
        link.bandwidthBps = 500_000
        proxy.setProfiles(upstream: link)
        let dropS = Double(MediaClock.monotonicUs() - origin) / 1e6
        try await Task.sleep(for: .seconds(phase))
        link.bandwidthBps = 2_500_000
        proxy.setProfiles(upstream: link)
        let riseS = Double(MediaClock.monotonicUs() - origin) / 1e6
        try await Task.sleep(for: .seconds(phase))
        let trace = proxy.upstreamTrace
        camera.stop()
        await sender.leave()
        await proxy.close()
        await server.app.shutdown()

        let rates = ImpairmentProxy.TracedPacket.rates(trace, originUs: origin)
        // The first window that ends at least 0.5 s after the step and is under (back at) the new cap.
        let under = rates.first { $0.endS >= dropS + 0.5 && $0.bps <= 500_000 }.map { $0.endS - dropS }
        let recovered = rates.first { $0.endS >= riseS + 0.5 && $0.bps >= 0.85 * 2_500_000 }.map { $0.endS - riseS }
        let queueing = trace.map { $0.queueUs.map { Double($0) / 1000 } ?? .infinity }.sorted()
        let p95 = queueing.isEmpty ? .infinity : queueing[queueing.count * 95 / 100]
        var byWindow: [Int: (worstUs: Int64, lost: Int)] = [:]
        for packet in trace {
            let index = Int((packet.atUs - origin) / 500_000)
            var entry = byWindow[index] ?? (worstUs: 0, lost: 0)
            if let queueUs = packet.queueUs { entry.worstUs = max(entry.worstUs, queueUs) } else { entry.lost += 1 }
            byWindow[index] = entry
        }
        let table = rates.map { window -> String in
            let entry = byWindow[Int((window.endS * 2).rounded()) - 1] ?? (worstUs: 0, lost: 0)
            return "\(String(format1: window.endS))s \(String(format2: window.bps / 1e6)) q\(entry.worstUs / 1000) d\(entry.lost)"
        }
        return StepsFigures(underS: under, recoveredS: recovered, queueingP95Ms: p95, dropped: trace.filter { $0.queueUs == nil }.count,
                            packets: trace.count, table: table)
    }

    // MARK: - downlink: one viewer's downlink capped at 0.8 Mbps, with and without the server's lever

    struct DownlinkFigures {
        /// The SFU's estimate of the viewer's leg (nil: no fresh estimate).
        var estimateKbps: Double?
        var sendKbps: Double
        var queueingP95Ms: Double
        var dropped: Int
        var packets: Int
        var decoded: Int
        var longestGapMs: Double
        var feedback: Int, limitsSent: Int, keyframeRequests: Int
    }

    private func downlink() async throws {
        print("downlink: one viewer's downlink capped at 0.8 Mbps (1 s queue, 10 ms each way), a 1280x720 camera at 30 fps asking "
            + "2000 kbps; 8 s measured after 10 s of settling, with the server's lever (publisherLimitFloorKbps 150: REMB to the "
            + "publisher from the leg's estimate) and without (nil); \(runs) run(s)")
        fflush(nil)
        var results: [Bool: [DownlinkFigures]] = [:]
        for run in 1...runs {
            for lever in [true, false] {
                let figures = try await downlinkRun(lever: lever)
                results[lever, default: []].append(figures)
                print("run \(run), \(leverName(lever)): leg estimate \(figures.estimateKbps.map { fixed0($0) + " kbps" } ?? "none"), "
                    + "publisher sends \(fixed0(figures.sendKbps)) kbps, downstream queueing p95 \(fixed0(figures.queueingP95Ms)) ms, "
                    + "\(figures.dropped) of \(figures.packets) packets dropped at the queue; viewer decoded \(figures.decoded) frames in 8 s, "
                    + "longest gap \(fixed0(figures.longestGapMs)) ms; \(figures.feedback) feedback reports, \(figures.limitsSent) limits sent, "
                    + "\(figures.keyframeRequests) keyframe requests forwarded")
                fflush(nil)
            }
        }
        for lever in [true, false] {
            let all = results[lever] ?? []
            guard !all.isEmpty else { continue }
            print("median: \(leverName(lever)), leg estimate \(medianText(all.map(\.estimateKbps), digits: 0, unit: "kbps", missing: "none")), "
                + "publisher sends \(fixed0(median(all.map(\.sendKbps)))) kbps, downstream queueing p95 \(fixed0(median(all.map(\.queueingP95Ms)))) ms, "
                + "frames decoded in 8 s \(median(all.map(\.decoded))), longest gap \(fixed0(median(all.map(\.longestGapMs)))) ms")
        }
        fflush(nil)
    }

    private func leverName(_ lever: Bool) -> String { lever ? "lever on" : "lever off" }

    private func downlinkRun(lever: Bool) async throws -> DownlinkFigures {
        let server = try await BenchServer(configure: { $0.publisherLimitFloorKbps = lever ? 150 : nil })
        let channel = "downlink"
        var link = ImpairmentProfile(delayMs: 10)
        link.bandwidthBps = 800_000
        link.queueMs = 1000
        let proxy = try await Self.startProxy(server, upstream: ImpairmentProfile(delayMs: 10), downstream: link, seed: 13)
        let host = RTCEngine(configuration: RTCEngineConfiguration(serverURL: server.url))
        let viewer = RTCEngine(configuration: RTCEngineConfiguration(serverURL: server.url))
        try host.setVideoEncoderConfiguration(VideoEncoderConfiguration(
            dimensions: VideoSize(width: 1280, height: 720), frameRate: 30, bitrateKbps: 2000))
        try await host.enableVideo()
        let decoded = NIOLockedValueBox<[Int64]>([])
        viewer.setRemoteVideoSink { _ in decoded.withLockedValue { $0.append(MediaClock.monotonicUs()) } }
        try await viewer.join(token: server.token("2001", channel), channel: channel, uid: "2001")
        try await host.join(token: server.token("1001", channel), channel: channel, uid: "1001")
        let camera = try startPattern(kind: .camera, size: VideoSize(width: 1280, height: 720), fps: 30) { _ = host.pushVideoFrame($0) }
        defer { camera.stop() }
        try await Task.sleep(for: .seconds(10))  // the leg's estimate comes down, the publisher follows
        proxy.traceUpstream(true)
        proxy.traceDownstream(true)
        let start = MediaClock.monotonicUs()
        let measuredS = 8.0
        try await Task.sleep(for: .seconds(measuredS))
        let up = proxy.upstreamTrace, down = proxy.downstreamTrace
        var estimate = try await server.app.sfu.downstreamEstimates(in: channel).get()["2001"]
        // An overflowing leg's feedback can be late (its estimate counts as stale after 2 s): ask
        // again for up to 3 s before calling it missing.
        let asked = MediaClock.monotonicUs()
        while estimate == nil, MediaClock.monotonicUs() - asked < 3_000_000 {
            try await Task.sleep(for: .milliseconds(100))
            estimate = try await server.app.sfu.downstreamEstimates(in: channel).get()["2001"]
        }
        camera.stop()
        let counters = try await server.app.sfu.counterSnapshot.get()
        await host.leave()
        await viewer.leave()
        await proxy.close()
        await server.app.shutdown()

        let window = decoded.withLockedValue { $0 }.filter { $0 >= start }
        let gaps = zip(window.dropFirst(), window).map { Double($0 - $1) / 1000 }
        let queueing = down.map { $0.queueUs.map { Double($0) / 1000 } ?? .infinity }.sorted()
        return DownlinkFigures(
            estimateKbps: estimate.map { $0 / 1000 },
            sendKbps: Double(up.reduce(0) { $0 + $1.bytes }) * 8 / measuredS / 1000,
            queueingP95Ms: queueing.isEmpty ? .infinity : queueing[queueing.count * 95 / 100],
            dropped: down.filter { $0.queueUs == nil }.count, packets: down.count,
            decoded: window.count,
            // Fewer than two frames decoded: the whole window was a gap.
            longestGapMs: gaps.max() ?? measuredS * 1000,
            feedback: counters.downstreamFeedback, limitsSent: counters.publisherLimitsSent,
            keyframeRequests: counters.keyframeRequestsForwarded)
    }

    // MARK: - degrade: the degradation preference under a capped uplink

    struct DegradeFigures {
        var decoded: Int
        /// Sizes of the decoded frames, "WxH", sorted.
        var sizes: [String]
        var sendKbps: Double
    }

    /// What a degrade run sends: screen content with its default temporal layers (two, dropped to
    /// one while the estimate has no headroom), screen content held to one, or camera content.
    enum DegradeCase: CaseIterable {
        case screen, screenOneLayer, camera
        var isScreen: Bool { self != .camera }
        var name: String {
            switch self {
            case .screen: "screen under 1 Mbps"
            case .screenOneLayer: "screen (1 temporal layer) under 1 Mbps"
            case .camera: "camera under 0.3 Mbps"
            }
        }
    }

    private func degrade() async throws {
        print("degrade: a capped uplink (1 s queue, 10 ms each way), 1280x720 asking 2500 kbps: screen content (contentHint .detail, "
            + "15 fps; its default temporal layers, then held to one) under 1 Mbps, camera content (.motion, 30 fps) under 0.3 Mbps; "
            + "6 s measured after 10 s of settling; \(runs) run(s)")
        fflush(nil)
        var results: [DegradeCase: [DegradeFigures]] = [:]
        for run in 1...runs {
            for kind in DegradeCase.allCases {
                let figures = try await degradeRun(kind)
                results[kind, default: []].append(figures)
                print("run \(run), \(kind.name): \(figures.decoded) frames decoded in 6 s, sizes seen "
                    + "\(figures.sizes.joined(separator: " ")), \(fixed0(figures.sendKbps)) kbps sent into a \(kind.isScreen ? 1000 : 300) kbps cap")
                fflush(nil)
            }
        }
        for kind in DegradeCase.allCases {
            let all = results[kind] ?? []
            guard !all.isEmpty else { continue }
            let sizes = Set(all.flatMap(\.sizes)).sorted()
            print("median: \(kind.name), frames decoded in 6 s \(median(all.map(\.decoded))), kbps sent "
                + "\(fixed0(median(all.map(\.sendKbps)))); sizes seen over all runs \(sizes.joined(separator: " "))")
        }
        fflush(nil)
    }

    private func degradeRun(_ kind: DegradeCase) async throws -> DegradeFigures {
        let screen = kind.isScreen
        let server = try await BenchServer()
        let channel = "degrade"
        let capBps = screen ? 1_000_000.0 : 300_000
        var link = ImpairmentProfile(delayMs: 10)
        link.bandwidthBps = capBps
        link.queueMs = 1000
        let proxy = try await Self.startProxy(server, upstream: link, downstream: ImpairmentProfile(delayMs: 10), seed: 11)
        let host = RTCEngine(configuration: RTCEngineConfiguration(serverURL: server.url))
        let viewer = RTCEngine(configuration: RTCEngineConfiguration(serverURL: server.url))
        let fps = screen ? 15 : 30
        try host.setVideoEncoderConfiguration(VideoEncoderConfiguration(
            dimensions: VideoSize(width: 1280, height: 720), frameRate: fps, bitrateKbps: 2500,
            contentHint: screen ? .detail : .motion, temporalLayers: kind == .screenOneLayer ? 1 : nil))
        try await host.enableVideo()
        let decoded = NIOLockedValueBox<[(atUs: Int64, width: Int, height: Int)]>([])
        viewer.setRemoteVideoSink { frame in
            decoded.withLockedValue { $0.append((MediaClock.monotonicUs(), frame.frame.width, frame.frame.height)) }
        }
        try await viewer.join(token: server.token("2001", channel), channel: channel, uid: "2001")
        try await host.join(token: server.token("1001", channel), channel: channel, uid: "1001",
                            options: JoinOptions(videoSource: screen ? .screen : .camera))
        let video = try startPattern(kind: screen ? .screen : .camera, size: VideoSize(width: 1280, height: 720), fps: fps) {
            _ = host.pushVideoFrame($0)
        }
        defer { video.stop() }
        // Settle: the estimate falls from 2.5 Mbps to the cap and the queue drains.
        try await Task.sleep(for: .seconds(10))
        proxy.traceUpstream(true)
        let start = MediaClock.monotonicUs()
        let measuredS = 6.0
        try await Task.sleep(for: .seconds(measuredS))
        let trace = proxy.upstreamTrace
        video.stop()
        await host.leave()
        await viewer.leave()
        await proxy.close()
        await server.app.shutdown()

        let window = decoded.withLockedValue { $0 }.filter { $0.atUs >= start }
        return DegradeFigures(decoded: window.count, sizes: Set(window.map { "\($0.width)x\($0.height)" }).sorted(),
                              sendKbps: Double(trace.reduce(0) { $0 + $1.bytes }) * 8 / measuredS / 1000)
    }

    // MARK: - helpers

    /// An impairment proxy in front of the server's media port, announced in the server's candidates
    /// so that every client's media goes through it.
    private static func startProxy(_ server: BenchServer, upstream: ImpairmentProfile, downstream: ImpairmentProfile,
                                   seed: UInt64) async throws -> ImpairmentProxy {
        guard let media = server.app.mediaAddress else { throw CLIError("the embedded server has no media address") }
        let proxy = try await ImpairmentProxy.start(target: media, upstream: upstream, downstream: downstream, seed: seed,
                                                    group: MultiThreadedEventLoopGroup.singleton)
        server.app.sfu.port.announcedAddress = proxy.address
        return proxy
    }
}

/// A synthetic pattern pushed at `fps` until the returned source is stopped: the tests' source
/// (``PacedSource``). `sceneRate`: the generator's frame rate (default `fps`).
private func startPattern(kind: PatternKind, size: VideoSize, fps: Int, sceneRate: FrameRate? = nil,
                          push: @escaping (VideoFrame) -> Void) throws -> PacedSource {
    try PacedSource(pattern: kind, size: size, fps: fps, sceneRate: sceneRate, push: push)
}

/// Polls `condition` every 20 ms until it holds or `seconds` pass, and says whether it held.
private func waitUntil(_ seconds: Double, _ condition: () -> Bool) async -> Bool {
    let deadline = MediaClock.monotonicUs() + Int64(seconds * 1e6)
    while MediaClock.monotonicUs() < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return condition()
}

private func fixed0(_ value: Double) -> String { String.fixed(value, digits: 0) }

/// "1.2 s", or "never".
private func seconds1(_ value: Double?) -> String { value.map { String(format1: $0) + " s" } ?? "never" }

/// The median of the runs that have the figure, and how many runs did not.
private func medianText(_ values: [Double?], digits: Int, unit: String, missing: String = "never") -> String {
    let found = values.compactMap { $0 }
    guard !found.isEmpty else { return missing }
    let text = String.fixed(median(found), digits: digits) + " " + unit
    return found.count == values.count ? text : text + " (\(missing) in \(values.count - found.count) of \(values.count) runs)"
}
