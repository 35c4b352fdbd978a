import ArgumentParser
import Logging
import NetSim
import NIOConcurrencyHelpers
import NIOPosix
import RTCCore
import RTCServer
import Signaling
import ServerCommandLine

#if canImport(Glibc)
import Glibc
#endif

/// An embedded server for the engine benchmarks and the demo, with a token helper.
struct BenchServer {
    let app: RTCServerApp
    let url: String
    let secret = ServerCommand.randomSecret()

    /// `configure` adjusts the configuration before the server starts (`rtc-cli bench resilience`
    /// turns the publisher limit off with it).
    init(configure: (inout ServerConfiguration) -> Void = { _ in }) async throws {
        var configuration = ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: secret)
        configure(&configuration)
        app = try await RTCServerApp.start(configuration: configuration,
                                           group: MultiThreadedEventLoopGroup.singleton,
                                           logger: Logger(label: "rtc.bench") { _ in SwiftLogNoOpLogHandler() })
        url = "ws://127.0.0.1:\(app.signalingAddress?.port ?? 0)/rtc"
    }

    func token(_ uid: String, _ channel: String) -> String {
        AccessToken(uid: uid, channel: channel, now: Int64(time(nil)), ttl: 3600).signed(secret: secret)
    }
}

/// `uid` in `channel` as an audience member that subscribes to nothing: the owner a screen share
/// (`<uid>_sub`) needs present before the server takes it.
func presentOwner(url: String, token: String, uid: String, channel: String) async throws -> RTCEngine {
    let owner = RTCEngine(configuration: RTCEngineConfiguration(serverURL: url, clientRole: .audience))
    try await owner.join(token: token, channel: channel, uid: uid, options: JoinOptions(autoSubscribeAudio: false, autoSubscribeVideo: false))
    return owner
}

func percentile(_ values: [Double], _ p: Double) -> Double {
    guard !values.isEmpty else { return .nan }
    let sorted = values.sorted()
    return sorted[min(sorted.count - 1, Int((Double(sorted.count - 1) * p).rounded()))]
}

/// Join to first decoded remote frame (DESIGN.md §4: p50 ≤ 150 ms).
struct JoinBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "join", abstract: "Time from join() to the first decoded remote video frame, over many joins, on loopback.")

    @Option(help: "Joins to measure.") var joins: Int = 20
    @Option(help: "Pause between joins, ms: the server throttles keyframe requests per track (500 ms), so back-to-back joins share keyframes.")
    var pause: Int = 600
    @Option(help: "The publisher's size.") var size: VideoSize = VideoSize(width: 640, height: 360)
    @Option(help: "Random loss each way on the media path, percent (through the impairment proxy).") var loss: Double = 0
    @Option(help: "Round trip added on the media path, ms (half each way, through the impairment proxy).") var rtt: Int = 0

    func validate() throws {
        guard joins >= 1 else { throw ValidationError("--joins must be >= 1") }
        guard (0..<100).contains(loss), (0...2000).contains(rtt) else { throw ValidationError("--loss is 0..<100 %, --rtt 0...2000 ms") }
    }

    func run() async throws {
        let server = try await BenchServer()
        // Loss and delay on every media packet both ways (signaling stays clean, as on a network
        // where only the UDP path is poor), from a fixed seed so runs are comparable.
        var proxy: ImpairmentProxy?
        if loss > 0 || rtt > 0, let media = server.app.mediaAddress {
            let profile = ImpairmentProfile(loss: loss / 100, delayMs: Double(rtt) / 2)
            proxy = try await ImpairmentProxy.start(target: media, upstream: profile, downstream: profile, seed: 17,
                                                    group: MultiThreadedEventLoopGroup.singleton)
            server.app.sfu.port.announcedAddress = proxy?.address
        }
        let publisher = try await Bot.start(server: server.url, channel: "bench", uid: "publisher", token: server.token("publisher", "bench"),
                                            role: .broadcaster, video: .pattern(.camera), audio: .none,
                                            settings: VideoEncoderConfiguration(dimensions: size, frameRate: 30, bitrateKbps: 1000),
                                            subscribe: false, record: nil, printStats: false)
        var samples: [Double] = []
        for index in 0..<joins {
            let uid = "viewer\(index)"
            let engine = RTCEngine(configuration: RTCEngineConfiguration(serverURL: server.url))
            let events = engine.events
            let start = MediaClock.monotonicUs()
            try await engine.join(token: server.token(uid, "bench"), channel: "bench", uid: uid)
            for await event in events {
                if case .firstRemoteVideoFrameDecoded = event {
                    samples.append(Double(MediaClock.monotonicUs() - start) / 1000)
                    break
                }
            }
            await engine.leave()
            try await Task.sleep(for: .milliseconds(pause))
        }
        _ = await publisher.stop()
        await proxy?.close()
        await server.app.shutdown()
        let path = loss > 0 || rtt > 0 ? "\(String(format2: loss)) % loss each way and \(rtt) ms RTT on the media path" : "loopback"
        print("join → first decoded remote frame, \(joins) joins \(pause) ms apart, publisher \(size) at 30 fps, \(path)")
        print("p50 \(String(format2: percentile(samples, 0.5))) ms   p95 \(String(format2: percentile(samples, 0.95))) ms   "
            + "min \(String(format2: samples.min() ?? .nan)) ms   max \(String(format2: samples.max() ?? .nan)) ms   (goal: p50 ≤ 150 ms)")
    }
}

/// Push-to-decoded latency (DESIGN.md §4: p50 ≤ 40 ms at 720p). Each frame carries its index as a
/// barcode in the picture, so the receiver knows which push it is without any side channel.
struct LatencyBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "latency", abstract: "Push-to-decoded latency of 720p video through the SFU on loopback (frame ids in the pixels).")

    @Option(help: "Seconds to measure.") var seconds: Int = 10
    @Option(help: "Frame size.") var size: VideoSize = VideoSize(width: 1280, height: 720)
    @Option(help: "Frames per second.") var fps: Int = 30
    @Option(help: "kbps.") var bitrate: Int = 2500

    func validate() throws {
        guard seconds >= 1, (1...60).contains(fps), size.width >= 1024, size.height >= 64 else {
            throw ValidationError("--seconds >= 1, --fps 1...60, and a size at least 1024x64 (room for the barcode)")
        }
    }

    func run() async throws {
        let server = try await BenchServer()
        let sender = RTCEngine(configuration: RTCEngineConfiguration(serverURL: server.url))
        let receiver = RTCEngine(configuration: RTCEngineConfiguration(serverURL: server.url))
        try sender.setVideoEncoderConfiguration(VideoEncoderConfiguration(dimensions: size, frameRate: fps, bitrateKbps: bitrate,
                                                                          degradationPreference: .maintainFramerate))
        try await sender.enableVideo()
        let pushed = NIOLockedValueBox<[Int: Int64]>([:])
        let latencies = NIOLockedValueBox<[Double]>([])
        receiver.setRemoteVideoSink { frame in
            let now = MediaClock.monotonicUs()
            guard let index = FrameStamp.read(frame.frame), let at = pushed.withLockedValue({ $0[index] }) else { return }
            latencies.withLockedValue { $0.append(Double(now - at) / 1000) }
        }
        try await receiver.join(token: server.token("receiver", "latency"), channel: "latency", uid: "receiver")
        try await sender.join(token: server.token("sender", "latency"), channel: "latency", uid: "sender")
        let generator = try PatternGenerator(kind: .camera, size: size, frameRate: FrameRate(fps))
        let total = seconds * fps + fps  // one extra second to warm up, not counted
        // Paced on a thread of its own (absolute deadlines), not by a task sleeping on the pool.
        let source = PacedSource(frames: total, fps: fps, frame: { [fps] index in
            let frame = generator.frame(at: index)
            FrameStamp.write(index, into: frame)
            if index >= fps { pushed.withLockedValue { $0[index] = MediaClock.monotonicUs() } }
            return frame
        }, push: { _ = sender.pushVideoFrame($0) })
        await source.finished()
        try await Task.sleep(for: .milliseconds(500))
        await sender.leave()
        await receiver.leave()
        await server.app.shutdown()
        let samples = latencies.withLockedValue { $0 }
        print("push → decoded latency, \(size) at \(fps) fps, \(bitrate) kbps, through the SFU on loopback")
        print("frames measured \(samples.count) of \(seconds * fps)   p50 \(String(format2: percentile(samples, 0.5))) ms   "
            + "p95 \(String(format2: percentile(samples, 0.95))) ms   max \(String(format2: samples.max() ?? .nan)) ms   (goal: p50 ≤ 40 ms)")
    }
}

/// A 16-bit frame index drawn as black and white blocks along the top of the luma plane.
enum FrameStamp {
    static let bits = 16
    static let blockWidth = 64, blockHeight = 32

    static func write(_ index: Int, into frame: VideoFrame) {
        guard frame.format == .i420 else { return }
        let luma = frame.buffer.planeBase(0), stride = frame.buffer.stride(0)
        for bit in 0..<bits {
            let value: UInt8 = (index >> bit) & 1 == 1 ? 235 : 16
            for row in 0..<blockHeight {
                (luma + row * stride + bit * blockWidth).update(repeating: value, count: blockWidth)
            }
        }
    }

    static func read(_ frame: VideoFrame) -> Int? {
        guard frame.format == .i420, frame.width >= bits * blockWidth, frame.height >= blockHeight else { return nil }
        let luma = frame.buffer.planeBase(0), stride = frame.buffer.stride(0)
        var index = 0
        for bit in 0..<bits {
            var sum = 0
            for row in 8..<(blockHeight - 8) {
                for column in 16..<(blockWidth - 16) { sum += Int(luma[row * stride + bit * blockWidth + column]) }
            }
            if sum / ((blockHeight - 16) * (blockWidth - 32)) > 128 { index |= 1 << bit }
        }
        return index
    }
}
