import ArgumentParser
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RTCTransport
import Signaling
import ServerCommandLine

#if canImport(Glibc)
import Glibc
#endif

/// `rtc-cli loadtest`: rooms of headless publishers and subscribers against a running server, as
/// LiveKit's `lk load-test` does. Publishers send VP8-shaped video (a keyframe every 2 s, the
/// bitrate of the size) and Opus-sized audio without encoding; subscribers do not decode: they
/// count packets, losses (sequence gaps) and frames (marker bits) from the RTP headers, which
/// SRTP leaves in the clear (``MediaTransport/onProtectedRTP``).
struct LoadTestCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "loadtest",
        abstract: "Rooms of headless publishers and subscribers against a server: per-second totals, join times, loss, forwarded packets/s and server CPU.")

    @Option(help: "Signaling URL, ws://HOST:PORT/rtc.") var server: String
    @Option(help: "The server's token secret.") var secret: String
    @Option(help: "Rooms.") var rooms: Int = 1
    @Option(help: "Publishers per room.") var publishers: Int = 1
    @Option(help: "Subscribers per room.") var subscribers: Int = 10
    @Option(help: "Seconds of traffic after everyone joined.") var duration: Int = 30
    @Option(name: .customLong("video-size"), help: "Video size the publishers' bitrate is chosen for (WxH).") var videoSize: String = "1280x720"
    @Option(help: "Video kbps per publisher (default: by size, 1700 for 720p).") var bitrate: Int?
    @Option(help: "Frames per second.") var fps: Int = 30
    @Option(name: .customLong("join-rate"), help: "Bots joining per second.") var joinRate: Double = 20
    @Option(help: "A server's Prometheus endpoint; repeat it for every node of a cluster, whose figures are added up (default: http://HOST:PORT/metrics of --server).")
    var metrics: [String] = []
    @Option(help: "Address the bots' media sockets bind.") var bind: String = "0.0.0.0"
    @Option(help: "Once every subscriber receives: its socket is read and counted (count), or handed to `rtc-relay hole`, which never reads, so the kernel drops what arrives (discard: receivers elsewhere, costing this machine nothing; needs --bind 127.0.0.1, and the figures are the server's).")
    var receivers: SFUBench.Receivers = .count

    func validate() throws {
        guard server.hasPrefix("ws://") || server.hasPrefix("wss://") else { throw ValidationError("--server must be a ws:// or wss:// URL") }
        guard (1...1000).contains(rooms), (0...100).contains(publishers), (0...10_000).contains(subscribers) else {
            throw ValidationError("--rooms 1...1000, --publishers 0...100 and --subscribers 0...10000")
        }
        guard (1...86_400).contains(duration) else { throw ValidationError("--duration must be 1...86400 s") }
        guard parsedSize != nil else { throw ValidationError("--video-size \(videoSize) is not WIDTHxHEIGHT") }
        guard (1...120).contains(fps) else { throw ValidationError("--fps must be 1...120") }
        guard joinRate > 0, joinRate.isFinite else { throw ValidationError("--join-rate must be positive") }
        if let bitrate, !(10...100_000).contains(bitrate) { throw ValidationError("--bitrate must be 10...100000 kbps") }
        if receivers == .discard && bind != "127.0.0.1" { throw ValidationError("--receivers discard needs --bind 127.0.0.1 (rtc-relay hole binds loopback)") }
    }

    var parsedSize: (width: Int, height: Int)? {
        let parts = videoSize.split(separator: "x").compactMap { Int($0) }
        guard parts.count == 2, parts.allSatisfy({ (16...7680).contains($0) }) else { return nil }
        return (parts[0], parts[1])
    }

    /// About 0.06 bits per pixel at 30 fps: 1700 kbps at 720p, 420 at 360p.
    var videoKbps: Int {
        if let bitrate { return bitrate }
        let size = parsedSize ?? (1280, 720)
        return max(100, Int(Double(size.width * size.height) * 0.06 * Double(fps) / 1000))
    }

    func run() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: System.coreCount)
        let stats = LoadStats()
        let metricsURLs = metrics.isEmpty ? [Self.metricsURL(for: server)].compactMap { $0 } : metrics
        print("loadtest: \(rooms) rooms × (\(publishers) publishers at \(videoKbps) kbps \(videoSize)@\(fps) + audio, \(subscribers) subscribers), "
              + "\(duration) s, against \(server)")
        var bots: [LoadBot] = []
        let startedJoining = LoadStats.now()
        let interval = UInt64(1e9 / joinRate)
        for room in 0..<rooms {
            let channel = "load\(room)"
            for index in 0..<(publishers + subscribers) {
                let isPublisher = index < publishers
                let uid = isPublisher ? "pub\(index)" : "sub\(index - publishers)"
                let bot = LoadBot(uid: uid, channel: channel, publisher: isPublisher, server: server, secret: secret, bind: bind,
                                  group: group, stats: stats)
                bots.append(bot)
                Task { await bot.start(videoKbps: videoKbps, fps: fps, size: parsedSize ?? (1280, 720)) }
                try await Task.sleep(nanoseconds: interval)
            }
        }
        // Wait for everyone to join (or fail), at most 30 s past the last start.
        let joinDeadline = LoadStats.now() + 30
        while stats.settled < bots.count && LoadStats.now() < joinDeadline { try await Task.sleep(nanoseconds: 100_000_000) }
        print(String(format: "joined %d of %d bots in %.1f s (%d failed)", stats.joined, bots.count, LoadStats.now() - startedJoining,
                     stats.failures.count))
        for failure in stats.failures.prefix(5) { print("  failed: \(failure)") }
        // Discarding: once every subscriber receives, its socket goes to a process that never reads it.
        var hole: RelayProcess?
        if receivers == .discard {
            let receiving = LoadStats.now() + 15
            while stats.firstPacketTimes.count < rooms * subscribers && LoadStats.now() < receiving { try await Task.sleep(nanoseconds: 100_000_000) }
            var ports: [Int] = []
            for bot in bots where !bot.isPublisher { ports += await bot.abandonSockets() }
            hole = try RelayProcess(path: RelayProcess.siblingPath, arguments: ["hole"] + ports.map(String.init))
            print("\(ports.count) subscriber sockets handed to rtc-relay hole (never read)")
        }
        defer {
            if let hole {
                hole.terminate()
                _ = try? hole.finish()
            }
        }
        // Traffic, with per-second totals; the server's figures over this window only (not the joins).
        let before = Self.scrapeAll(metricsURLs)
        print("second  packets/s  frames/s  lost/s  subscribers receiving")
        stats.resetWindow()
        let trafficStart = LoadStats.now()
        for second in 1...duration {
            try await Task.sleep(nanoseconds: 1_000_000_000)
            let window = stats.takeWindow()
            print("\(String(second).padding(7)) \(String(window.packets).padding(10)) \(String(window.frames).padding(9)) "
                  + "\(String(window.lost).padding(7)) \(window.receivers)")
        }
        let elapsed = LoadStats.now() - trafficStart
        let after = Self.scrapeAll(metricsURLs)
        for bot in bots { await bot.stop() }
        try? await group.shutdownGracefully()
        // Summary.
        let joins = stats.joinTimes.sorted(), firsts = stats.firstPacketTimes.sorted()
        let totals = stats.totals
        print("summary")
        print("  join (connect to joined): p50 \(Self.ms(joins, 0.5)) p95 \(Self.ms(joins, 0.95)) of \(joins.count)")
        print("  first media at subscribers (from start of join): p50 \(Self.ms(firsts, 0.5)) p95 \(Self.ms(firsts, 0.95)) of \(firsts.count)")
        let expected = totals.received + totals.lost
        print(String(format: "  subscribers: %d packets, %d frames, loss %.3f %% (sequence gaps)", totals.received, totals.frames,
                     expected > 0 ? Double(totals.lost) / Double(expected) * 100 : 0))
        if let before, let after {
            let forwarded = (after["rtc_packets_out_total"] ?? 0) - (before["rtc_packets_out_total"] ?? 0)
            let cpu = (after["process_cpu_seconds_total"] ?? 0) - (before["process_cpu_seconds_total"] ?? 0)
            print(String(format: "  server: %.0f forwarded packets/s, CPU %.2f cores, %.2f µs per forwarded packet", forwarded / elapsed,
                         cpu / elapsed, forwarded > 0 ? cpu * 1e6 / forwarded : 0) + " (from \(metricsURLs.joined(separator: ", ")))")
        } else {
            print("  server: no metrics (\(metricsURLs.isEmpty ? "no URL" : metricsURLs.joined(separator: ", ")))")
        }
        if !stats.failures.isEmpty { throw CLIError("\(stats.failures.count) bots failed") }
    }

    static func ms(_ sorted: [Double], _ quantile: Double) -> String {
        guard !sorted.isEmpty else { return "-" }
        return String(format: "%.0f ms", sorted[min(sorted.count - 1, Int(Double(sorted.count) * quantile))] * 1000)
    }

    /// `ws://host:port/rtc` → `http://host:port/metrics`.
    static func metricsURL(for server: String) -> String? {
        guard server.hasPrefix("ws://") else { return nil }
        let rest = server.dropFirst("ws://".count)
        let authority = rest.split(separator: "/", maxSplits: 1).first.map(String.init) ?? String(rest)
        return "http://\(authority)/metrics"
    }

    /// The metrics of every page added up; nil if any page cannot be read.
    static func scrapeAll(_ urls: [String]) -> [String: Double]? {
        guard !urls.isEmpty else { return nil }
        var total: [String: Double] = [:]
        for url in urls {
            guard let values = try? scrape(url) else { return nil }
            total.merge(values, uniquingKeysWith: +)
        }
        return total
    }

    /// The metric values of a Prometheus text page (samples without labels).
    static func scrape(_ url: String) throws -> [String: Double] {
        let text = try PlainHTTP.get(url)
        var values: [String: Double] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            let parts = line.split(separator: " ")
            if parts.count >= 2, !parts[0].contains("{"), let value = Double(parts[1]) { values[String(parts[0])] = value }
        }
        return values
    }
}

/// What every bot adds to, under one lock: a few updates per packet batch, not per forwarded packet.
final class LoadStats: @unchecked Sendable {
    struct Window { var packets = 0, frames = 0, lost = 0, receivers = Set<ObjectIdentifier>() }
    struct Totals { var received = 0, frames = 0, lost = 0 }
    private struct State {
        var joined = 0, settled = 0
        var failures: [String] = []
        var joinTimes: [Double] = [], firstPacketTimes: [Double] = []
        var window = Window(), totals = Totals()
    }
    private let state = NIOLockedValueBox(State())

    static func now() -> Double { Double(NIODeadline.now().uptimeNanoseconds) / 1e9 }

    func joined(after seconds: Double) { state.withLockedValue { $0.joined += 1; $0.settled += 1; $0.joinTimes.append(seconds) } }
    func failed(_ reason: String) { state.withLockedValue { $0.settled += 1; $0.failures.append(reason) } }
    func firstPacket(after seconds: Double) { state.withLockedValue { $0.firstPacketTimes.append(seconds) } }
    func received(by bot: ObjectIdentifier, packets: Int, frames: Int, lost: Int) {
        state.withLockedValue {
            $0.window.packets += packets
            $0.window.frames += frames
            $0.window.lost += lost
            $0.window.receivers.insert(bot)
            $0.totals.received += packets
            $0.totals.frames += frames
            $0.totals.lost += lost
        }
    }

    var joined: Int { state.withLockedValue { $0.joined } }
    var settled: Int { state.withLockedValue { $0.settled } }
    var failures: [String] { state.withLockedValue { $0.failures } }
    var joinTimes: [Double] { state.withLockedValue { $0.joinTimes } }
    var firstPacketTimes: [Double] { state.withLockedValue { $0.firstPacketTimes } }
    var totals: Totals { state.withLockedValue { $0.totals } }
    func resetWindow() { state.withLockedValue { $0.window = Window(); $0.totals = Totals() } }

    func takeWindow() -> (packets: Int, frames: Int, lost: Int, receivers: Int) {
        state.withLockedValue { state in
            defer { state.window = Window() }
            return (state.window.packets, state.window.frames, state.window.lost, state.window.receivers.count)
        }
    }
}

/// One headless participant of a load test: a publisher that sends shaped RTP, or a subscriber
/// that counts what arrives.
final class LoadBot: @unchecked Sendable {
    let uid: String, channel: String, isPublisher: Bool
    private let server: String, secret: String, bind: String
    private let group: EventLoopGroup
    private let stats: LoadStats
    private let state = NIOLockedValueBox<(client: SignalingClient?, transports: [MediaTransport], tasks: [RepeatedTask], events: Task<Void, Never>?)>(
        (nil, [], [], nil))

    init(uid: String, channel: String, publisher: Bool, server: String, secret: String, bind: String, group: EventLoopGroup, stats: LoadStats) {
        self.uid = uid
        self.channel = channel
        isPublisher = publisher
        self.server = server
        self.secret = secret
        self.bind = bind
        self.group = group
        self.stats = stats
    }

    func start(videoKbps: Int, fps: Int, size: (width: Int, height: Int)) async {
        let started = LoadStats.now()
        do {
            let client = try SignalingClient(url: server, group: group)
            state.withLockedValue { $0.client = client }
            try await client.connect()
            let token = AccessToken(uid: uid, channel: channel, now: Int64(time(nil))).signed(secret: secret)
            if !isPublisher { listen(client, started: started) }
            guard case .joined = try await client.request(.join(JoinRequest(token: token, channel: channel, uid: uid,
                                                                             role: isPublisher ? .broadcaster : .audience,
                                                                             autoSubscribe: !isPublisher))) else {
                return stats.failed("\(channel)/\(uid): no joined reply")
            }
            stats.joined(after: LoadStats.now() - started)
            if isPublisher { try await publish(client, videoKbps: videoKbps, fps: fps, size: size) }
        } catch {
            stats.failed("\(channel)/\(uid): \(error)")
        }
    }

    /// Offers a video and an audio section, then sends on the transport's loop: a frame every
    /// 1/fps s (a keyframe every 2 s, four times a frame's size) and 160 audio bytes every 20 ms.
    private func publish(_ client: SignalingClient, videoKbps: Int, fps: Int, size: (width: Int, height: Int)) async throws {
        let transport = try await MediaTransport.bind(.client(host: bind), group: group)
        state.withLockedValue { $0.transports.append(transport) }
        let videoSSRC = UInt32.random(in: 1...UInt32.max), audioSSRC = UInt32.random(in: 1...UInt32.max)
        let offer = SessionDescription.make(sessionID: 1, transport: transport.localParameters, iceLite: false, setup: "actpass", sections: [
            MediaSectionDescription(mid: "0", kind: .video, direction: .sendonly, payloadType: 96, ssrc: videoSSRC, trackID: "\(uid)-video"),
            MediaSectionDescription(mid: "1", kind: .audio, direction: .sendonly, payloadType: 111, ssrc: audioSSRC, trackID: "\(uid)-audio"),
        ])
        guard case .answer(let answer) = try await client.request(.offer(SessionDescriptionMessage(transport: .publisher, sdp: offer.serialized))) else {
            throw CLIError("no answer to the publisher's offer")
        }
        transport.start(remote: try SessionDescription(parsing: answer.sdp).transportParameters(offererRole: .client))
        let loop = transport.channel.eventLoop
        let sender = ShapedSender(transport: transport, videoSSRC: videoSSRC, audioSSRC: audioSSRC, videoKbps: videoKbps, fps: fps, size: size)
        let video = loop.scheduleRepeatedTask(initialDelay: .zero, delay: .nanoseconds(Int64(1e9) / Int64(fps))) { _ in sender.sendFrame() }
        let audio = loop.scheduleRepeatedTask(initialDelay: .zero, delay: .milliseconds(20)) { _ in sender.sendAudio() }
        state.withLockedValue { $0.tasks += [video, audio] }
    }

    /// Answers the server's subscriber offers and counts what arrives, per SSRC.
    private func listen(_ client: SignalingClient, started: Double) {
        let events = Task { [weak self] in
            var transport: MediaTransport?
            for await message in client.events {
                guard let self, case .offer(let offer) = message, offer.transport == .subscriber,
                      let description = try? SessionDescription(parsing: offer.sdp) else { continue }
                let fresh = transport == nil
                if transport == nil {
                    guard let made = try? await MediaTransport.bind(.client(host: self.bind), group: self.group) else {
                        self.stats.failed("\(self.channel)/\(self.uid): cannot bind a media socket")
                        return
                    }
                    made.onProtectedRTP = self.counter(started: started)
                    self.state.withLockedValue { $0.transports.append(made) }
                    transport = made
                }
                guard let transport else { continue }
                let answer = SessionDescription.make(sessionID: 2, transport: transport.localParameters, iceLite: false, setup: "active",
                                                     sections: description.sections.map {
                                                         MediaSectionDescription(mid: $0.mid, kind: $0.kind, direction: $0.reversed,
                                                                                 payloadType: $0.payloadType, rtxPayloadType: $0.rtxPayloadType)
                                                     })
                try? await client.send(.answer(SessionDescriptionMessage(transport: .subscriber, sdp: answer.serialized)))
                if fresh, let remote = try? description.transportParameters(offererRole: .server) { transport.start(remote: remote) }
            }
        }
        state.withLockedValue { $0.events = events }
    }

    /// Counts packets, gaps and frames (marker bits on video, payload type 96) from RTP headers.
    private func counter(started: Double) -> @Sendable (ByteBuffer) -> Void {
        let id = ObjectIdentifier(self)
        let stats = self.stats
        let last = NIOLockedValueBox<(sequences: [UInt32: UInt16], first: Bool)>(([:], true))
        return { packet in
            guard packet.readableBytes >= 12, let bytes = packet.getBytes(at: packet.readerIndex, length: 12) else { return }
            let sequence = UInt16(bytes[2]) << 8 | UInt16(bytes[3])
            let ssrc = UInt32(bytes[8]) << 24 | UInt32(bytes[9]) << 16 | UInt32(bytes[10]) << 8 | UInt32(bytes[11])
            let frame = bytes[1] & 0x80 != 0 && bytes[1] & 0x7F == 96 ? 1 : 0
            let (lost, first) = last.withLockedValue { state -> (Int, Bool) in
                defer { state.sequences[ssrc] = sequence; state.first = false }
                let first = state.first
                guard let previous = state.sequences[ssrc] else { return (0, first) }
                let gap = Int(sequence &- previous)
                // Forward gaps only; a late or repeated packet (a repair) counts as received.
                return (gap > 1 && gap < 3000 ? gap - 1 : 0, first)
            }
            if first { stats.firstPacket(after: LoadStats.now() - started) }
            stats.received(by: id, packets: 1, frames: frame, lost: lost)
        }
    }

    /// Closes the media sockets without a word to the server (which keeps sending) and returns their
    /// ports, for `rtc-relay hole` to bind.
    func abandonSockets() async -> [Int] {
        let transports = state.withLockedValue { state -> [MediaTransport] in
            defer { state.transports = [] }
            return state.transports
        }
        var ports: [Int] = []
        for transport in transports { if let port = await transport.abandonSocket() { ports.append(port) } }
        return ports
    }

    func stop() async {
        let (client, transports, tasks, events) = state.withLockedValue { ($0.client, $0.transports, $0.tasks, $0.events) }
        for task in tasks { task.cancel() }
        events?.cancel()
        try? await client?.send(.leave(reason: .clientRequest))
        for transport in transports { await transport.close() }
        await client?.close()
    }
}

/// A load-test publisher's RTP: VP8-shaped frames and Opus-sized audio, no encoder. Confined to
/// its transport's event loop (the repeated tasks that call it run there).
final class ShapedSender: @unchecked Sendable {
    private let transport: MediaTransport
    private let videoSSRC: UInt32, audioSSRC: UInt32
    private let fps: Int, frameBytes: Int
    private let size: (width: Int, height: Int)
    private var packetizer = VP8Packetizer(maxPayloadSize: 1100)
    private var videoSequence = UInt16.random(in: 0...UInt16.max), audioSequence = UInt16.random(in: 0...UInt16.max)
    private var frame = 0
    private var audioTimestamp: UInt32 = 0

    init(transport: MediaTransport, videoSSRC: UInt32, audioSSRC: UInt32, videoKbps: Int, fps: Int, size: (width: Int, height: Int)) {
        self.transport = transport
        self.videoSSRC = videoSSRC
        self.audioSSRC = audioSSRC
        self.fps = fps
        self.size = size
        frameBytes = max(100, videoKbps * 1000 / 8 / fps)
    }

    /// One frame: a keyframe every 2 s (four times a frame's size), else an interframe.
    func sendFrame() {
        let key = frame % (2 * fps) == 0
        var bytes = [UInt8](repeating: 0x42, count: key ? frameBytes * 4 : frameBytes)
        if key {
            // A VP8 keyframe header (RFC 6386 §9.1): tag with P = 0, start code, 14-bit sizes.
            bytes[0] = 0x10
            bytes[3...5] = [0x9D, 0x01, 0x2A]
            bytes[6...9] = [UInt8(size.width & 0xFF), UInt8(size.width >> 8 & 0x3F), UInt8(size.height & 0xFF), UInt8(size.height >> 8 & 0x3F)]
        } else {
            bytes[0] = 0x11
        }
        let payloads = packetizer.packetize(ByteBuffer(bytes: bytes))
        let timestamp = UInt32(truncatingIfNeeded: frame * 90_000 / fps)
        var packets: [ByteBuffer] = []
        for (index, payload) in payloads.enumerated() {
            videoSequence &+= 1
            packets.append(RTPPacket(header: RTPHeader(marker: index == payloads.count - 1, payloadType: 96, sequenceNumber: videoSequence,
                                                       timestamp: timestamp, ssrc: videoSSRC), payload: payload).serialized)
        }
        transport.sendRTP(batch: packets)
        frame += 1
    }

    func sendAudio() {
        audioSequence &+= 1
        audioTimestamp &+= 960
        transport.sendRTP(RTPPacket(header: RTPHeader(payloadType: 111, sequenceNumber: audioSequence, timestamp: audioTimestamp, ssrc: audioSSRC),
                                    payload: ByteBuffer(bytes: [UInt8](repeating: 0x24, count: 160))).serialized)
    }
}
