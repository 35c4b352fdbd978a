import ArgumentParser
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RTCServer
import RTCTransport
import Signaling
import ServerCommandLine

#if canImport(Glibc)
import Glibc
#endif

/// A signaling connection in memory for the benchmark's clients.
final class BenchPeer: SignalingPeer, @unchecked Sendable {
    let replies = NIOLockedValueBox<[ServerEnvelope]>([])
    var onOffer: (@Sendable (String) -> Void)?

    func send(_ envelope: ServerEnvelope) {
        if case .offer(let offer) = envelope.message, offer.transport == .subscriber { onOffer?(offer.sdp) }
        replies.withLockedValue { $0.append(envelope) }
    }

    func close() {}

    /// A subscriber's peer: it answers the SFU's subscriber offers with `transport` (started on the first).
    static func subscriber(answeringWith transport: MediaTransport, to sfu: any SignalingSink) -> BenchPeer {
        let peer = BenchPeer()
        let started = NIOLockedValueBox(false)
        peer.onOffer = { sdp in
            guard let offer = try? SessionDescription(parsing: sdp) else { return }
            let answer = SessionDescription.make(sessionID: 1, transport: transport.localParameters, iceLite: false, setup: "active",
                                                 sections: offer.sections.map {
                                                     MediaSectionDescription(mid: $0.mid, kind: $0.kind, direction: $0.reversed)
                                                 })
            sfu.received(ClientEnvelope(.answer(SessionDescriptionMessage(transport: .subscriber, sdp: answer.serialized))).encoded(), from: peer)
            if !started.withLockedValue({ let was = $0; $0 = true; return was }), let remote = try? offer.transportParameters(offererRole: .server) {
                transport.start(remote: remote)
            }
        }
        return peer
    }
}

/// One publisher (VP8-sized video at 1.5 Mbps plus Opus) to N subscribers through the SFU on
/// loopback, next to a minimal recvmmsg/sendmmsg relay (`rtc-relay`) carrying the same traffic.
struct SFUBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sfu",
        abstract: "SFU fan-out: CPU µs per forwarded packet and the largest N with < 0.5 % loss, next to a C relay.")

    @Option(help: "Seconds of traffic per N.") var seconds: Double = 4
    @Option(help: "Subscriber counts to try, comma-separated.") var subscribers: String = "1,2,4,8,16,32,64"
    @Option(help: "Video bitrate, kbps.") var bitrate: Int = 1500
    @Option(help: "Rooms of one publisher and --subscribers subscribers each (one count), spread over media threads: throughput over cores.")
    var rooms: Int?
    @Option(name: .customLong("media-threads"), help: "With --rooms: media thread counts to compare, comma-separated.")
    var mediaThreads: String = "1,2"
    @Option(help: "With --rooms: the subscribers' ports are read and counted (count), or never read so the kernel drops what arrives, as for receivers on other machines (discard).")
    var receivers: Receivers = .count

    @Option(help: "With --rooms: also run the rooms split over this many bench processes at once, one media thread each (a node per core, as `rtc-cli server --redis` nodes on one machine run), and compare.")
    var processes: Int?
    /// A child of --processes: when (CLOCK_MONOTONIC seconds) to start sending, and print one summary line.
    @Option(name: .customLong("start-at"), help: .hidden) var startAt: Double?

    enum Receivers: String, ExpressibleByArgument, Sendable { case count, discard }
    @Flag(help: "Also send the video as three simulcast layers (full, 30 % and 10 % of the bitrate) with layer selection, and compare.")
    var simulcast = false

    static func threadCPUMicroseconds() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        return Double(time.tv_sec) * 1e6 + Double(time.tv_nsec) / 1e3
    }

    static func now() -> Double { Double(NIODeadline.now().uptimeNanoseconds) / 1e9 }

    struct Result {
        var n: Int
        var loss: Double
        var cpuPerPacketUs: Double
    }

    func run() async throws {
        let counts = subscribers.split(separator: ",").compactMap { Int($0) }.filter { $0 > 0 }
        guard !counts.isEmpty else { throw CLIError("--subscribers needs positive numbers") }
        if let rooms { return try await runRooms(rooms, subscribers: counts[0]) }
        print("One publisher (VP8-sized video at \(bitrate) kbps + Opus 50 pps) to N subscribers, \(seconds) s per N, loopback")
        if simulcast { return try await runLayered(counts) }
        print("N      SFU loss   SFU µs/forwarded packet   relay loss   relay µs/forwarded packet   ratio")
        var best: (sfu: Int, relay: Int) = (0, 0)
        for n in counts {
            let sfu = try await runSFU(n: n)
            let relay = try await runRelay(n: n)
            if sfu.loss < 0.005 { best.sfu = n }
            if relay.loss < 0.005 { best.relay = n }
            print("\(String(n).padding(6)) \((String(format2: sfu.loss * 100) + " %").padding(10)) "
                  + "\(String(format2: sfu.cpuPerPacketUs).padding(25)) \((String(format2: relay.loss * 100) + " %").padding(12)) "
                  + "\(String(format2: relay.cpuPerPacketUs).padding(27)) \(String(format1: sfu.cpuPerPacketUs / max(relay.cpuPerPacketUs, 0.001)))x")
            if sfu.loss >= 0.05 && relay.loss >= 0.05 { break }
        }
        print("largest N with < 0.5 % loss: SFU \(best.sfu), relay \(best.relay) (of the N tried)")
        print("µs per forwarded packet = CPU time of the forwarding thread / packets sent to subscribers")
    }

    /// One stream per publisher track (today's path) against three simulcast layers with per-subscriber
    /// selection and splicing, N by N, in one run: µs of the SFU's thread per forwarded packet.
    func runLayered(_ counts: [Int]) async throws {
        print("N      one stream µs/forwarded   3 layers µs/forwarded   ratio   3 layers loss")
        for n in counts {
            let single = try await runSFU(n: n)
            let layered = try await runSFU(n: n, layered: true)
            print("\(String(n).padding(6)) \(String(format2: single.cpuPerPacketUs).padding(25)) \(String(format2: layered.cpuPerPacketUs).padding(23)) "
                  + "\(String(format2: layered.cpuPerPacketUs / max(single.cpuPerPacketUs, 0.001)).padding(7)) \(String(format2: layered.loss * 100)) %")
        }
        print("3 layers: every layer's packets are taken in (cache, statistics), each subscriber is sent one layer, rewritten")
        print("(SSRC, sequence, timestamp, VP8 picture id); µs = CPU time of the SFU's thread / packets sent to subscribers")
    }

    /// The traffic pattern: (size, isVideo) packets for one 20 ms tick, keeping the bitrate exact over time.
    struct Pacer {
        let videoPerTick: Double
        var carry = 0.0
        init(bitrate: Int) { videoPerTick = Double(bitrate) * 1000 / 8 / 1100 / 50 }
        mutating func tick() -> Int {
            carry += videoPerTick
            let count = Int(carry)
            carry -= Double(count)
            return count
        }
    }

    func runSFU(n: Int, layered: Bool = false) async throws -> Result {
        let serverGroup = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let clientGroup = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let secret = "bench"
        let sfu = try await SFU.start(configuration: ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: secret), group: serverGroup)
        let now = Int64(time(nil))
        func join(_ uid: String, _ peer: BenchPeer) {
            sfu.received(ClientEnvelope(.join(JoinRequest(token: AccessToken(uid: uid, channel: "bench", now: now).signed(secret: secret),
                                                          channel: "bench", uid: uid))).encoded(), from: peer)
        }
        // Subscribers.
        let received = NIOLockedValueBox(0)
        var subscribers: [MediaTransport] = []
        for index in 0..<n {
            let transport = try await MediaTransport.bind(.client(), group: clientGroup)
            transport.onRTP = { _ in received.withLockedValue { $0 += 1 } }
            let peer = BenchPeer.subscriber(answeringWith: transport, to: sfu)
            join("sub\(index)", peer)
            subscribers.append(transport)
        }
        // The publisher: a video and an audio track.
        let publisher = try await MediaTransport.bind(.client(), group: clientGroup)
        let publisherPeer = BenchPeer()
        join("pub", publisherPeer)
        var video = MediaSectionDescription(mid: "0", kind: .video, direction: .sendonly, ssrc: layered ? nil : 1000)
        if layered { video.simulcastRids = ["f", "h", "q"] }
        let offer = SessionDescription.make(sessionID: 2, transport: publisher.localParameters, iceLite: false, setup: "actpass", sections: [
            video, MediaSectionDescription(mid: "1", kind: .audio, direction: .sendonly, ssrc: 2000),
        ])
        sfu.received(ClientEnvelope(.offer(SessionDescriptionMessage(transport: .publisher, sdp: offer.serialized)), requestID: 1).encoded(),
                     from: publisherPeer)
        let deadline = Self.now() + 30 + Double(n) / 4
        var answer: String?
        while answer == nil && Self.now() < deadline {
            answer = publisherPeer.replies.withLockedValue { replies in
                replies.lazy.compactMap { if case .answer(let a) = $0.message { a.sdp } else { nil } }.first
            }
            try await Task.sleep(nanoseconds: 5_000_000)
        }
        guard let answer else { throw CLIError("the SFU did not answer the publisher") }
        publisher.start(remote: try SessionDescription(parsing: answer).transportParameters())
        for transport in subscribers + [publisher] {
            while try await transport.state.get() != .connected {
                guard Self.now() < deadline else { throw CLIError("transports did not connect") }
                try await Task.sleep(nanoseconds: 5_000_000)
            }
        }
        try await Task.sleep(nanoseconds: 300_000_000)
        received.withLockedValue { $0 = 0 }
        // Traffic.
        let before = try await sfu.counterSnapshot.get()
        let cpuBefore = try await serverGroup.next().submit { Self.threadCPUMicroseconds() }.get()
        let sent = try await sendTraffic(group: clientGroup, layered: layered) { packets in publisher.sendRTP(batch: packets) }
        try await Task.sleep(nanoseconds: 500_000_000)
        let cpuAfter = try await serverGroup.next().submit { Self.threadCPUMicroseconds() }.get()
        let after = try await sfu.counterSnapshot.get()
        let forwarded = after.packetsOut - before.packetsOut
        let got = received.withLockedValue { $0 }
        for transport in subscribers + [publisher] { await transport.close() }
        await sfu.shutdown()
        try await clientGroup.shutdownGracefully()
        try await serverGroup.shutdownGracefully()
        // Layered, each subscriber gets one layer: what the SFU sent is what should arrive.
        let expected = layered ? forwarded : sent * n
        return Result(n: n, loss: expected > 0 ? max(0, Double(expected - got) / Double(expected)) : 1,
                      cpuPerPacketUs: forwarded > 0 ? (cpuAfter - cpuBefore) / Double(forwarded) : 0)
    }

    /// Sends the pattern for `seconds`; returns the number of packets sent. `layered`: the video as
    /// three layers (SSRCs 1000...1002, stream ids f, h, q at 100 %, 30 % and 10 % of the bitrate)
    /// with VP8 payload descriptors, a keyframe every 2 s.
    func sendTraffic(group: EventLoopGroup, layered: Bool = false, _ send: @escaping @Sendable ([ByteBuffer]) -> Void) async throws -> Int {
        let loop = group.next()
        let total = NIOLockedValueBox(0)
        let rids = layered ? ["f", "h", "q"] : [""]
        let shares = layered ? [1.0, 0.3, 0.1] : [1.0]
        let state = NIOLockedValueBox((pacers: shares.map { Pacer(bitrate: Int(Double(bitrate) * $0)) },
                                       videoSequences: [UInt16](repeating: 0, count: rids.count), audioSequence: UInt16(0), tick: 0))
        let ticks = Int(seconds * 50)
        let done = loop.makePromise(of: Void.self)
        let task = loop.scheduleRepeatedTask(initialDelay: .zero, delay: .milliseconds(20)) { task in
            let packets: [ByteBuffer] = state.withLockedValue { state in
                state.tick += 1
                var out: [ByteBuffer] = []
                for layer in rids.indices {
                    let video = state.pacers[layer].tick()
                    for index in 0..<video {
                        state.videoSequences[layer] &+= 1
                        var header = RTPHeader(marker: index == video - 1, payloadType: 96, sequenceNumber: state.videoSequences[layer],
                                               timestamp: UInt32(state.tick) * 1800, ssrc: 1000 + UInt32(layer))
                        var payload = [UInt8](repeating: 0x42, count: 1100)
                        if layered {
                            header.extensions = [RTPHeaderExtension(id: RTPExtensionID.mid, bytes: Array("0".utf8)),
                                                 RTPHeaderExtension(id: RTPExtensionID.rtpStreamID, bytes: Array(rids[layer].utf8))]
                            let picture = UInt16(truncatingIfNeeded: state.tick) & 0x7FFF
                            payload[0...3] = [index == 0 ? 0x90 : 0x80, 0x80, 0x80 | UInt8(picture >> 8), UInt8(picture & 0xFF)]
                            // A keyframe (P = 0, with its start code) every 100 ticks, else an interframe.
                            payload[4] = index == 0 && state.tick % 100 == 1 ? 0x10 : 0x11
                            payload[7...9] = [0x9D, 0x01, 0x2A]
                        }
                        out.append(RTPPacket(header: header, payload: ByteBuffer(bytes: payload)).serialized)
                    }
                }
                state.audioSequence &+= 1
                out.append(RTPPacket(header: RTPHeader(payloadType: 111, sequenceNumber: state.audioSequence,
                                                       timestamp: UInt32(state.tick) * 960, ssrc: 2000),
                                     payload: ByteBuffer(bytes: [UInt8](repeating: 0x24, count: 160))).serialized)
                return out
            }
            send(packets)
            total.withLockedValue { $0 += packets.count }
            if state.withLockedValue({ $0.tick }) >= ticks {
                task.cancel()
                done.succeed()
            }
        }
        _ = task
        try await done.futureResult.get()
        return total.withLockedValue { $0 }
    }

    func runRelay(n: Int) async throws -> Result {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let received = NIOLockedValueBox(0)
        final class Count: ChannelInboundHandler, @unchecked Sendable {
            typealias InboundIn = AddressedEnvelope<ByteBuffer>
            let received: NIOLockedValueBox<Int>
            init(_ received: NIOLockedValueBox<Int>) { self.received = received }
            func channelRead(context: ChannelHandlerContext, data: NIOAny) { received.withLockedValue { $0 += 1 } }
        }
        var sinks: [Channel] = []
        for _ in 0..<n {
            sinks.append(try await DatagramBootstrap(group: group)
                .channelOption(.datagramVectorReadMessageCount, value: 32)
                .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 32 * 2048))
                .channelInitializer { channel in channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(Count(received)) } }
                .bind(host: "127.0.0.1", port: 0).get())
        }
        // A free port for the relay.
        let probe = try await DatagramBootstrap(group: group).bind(host: "127.0.0.1", port: 0).get()
        let relayPort = probe.localAddress!.port!
        try await probe.close()
        let relay = try RelayProcess(path: RelayProcess.siblingPath, arguments: [String(relayPort)] + sinks.map { String($0.localAddress!.port!) })
        let sender = try await DatagramBootstrap(group: group).bind(host: "127.0.0.1", port: 0).get()
        let target = try SocketAddress(ipAddress: "127.0.0.1", port: relayPort)
        let sent = try await sendTraffic(group: group) { packets in
            for packet in packets { sender.write(AddressedEnvelope(remoteAddress: target, data: packet), promise: nil) }
            sender.flush()
        }
        try await Task.sleep(nanoseconds: 500_000_000)
        try await sender.writeAndFlush(AddressedEnvelope(remoteAddress: target, data: ByteBuffer(bytes: [0xFF])))
        let (_, forwarded, cpu) = try relay.finish()
        let got = received.withLockedValue { $0 }
        try await sender.close()
        for sink in sinks { try await sink.close() }
        try await group.shutdownGracefully()
        let expected = sent * n
        return Result(n: n, loss: expected > 0 ? max(0, Double(expected - got) / Double(expected)) : 1,
                      cpuPerPacketUs: forwarded > 0 ? cpu / Double(forwarded) : 0)
    }
}

/// Runs rtc-relay and reads its "ready" and final lines.
final class RelayProcess {
    /// `rtc-relay` next to this executable (both products of the package).
    static var siblingPath: String { "/" + ProcessRunner.selfPath.split(separator: "/").dropLast().joined(separator: "/") + "/rtc-relay" }

    private let pid: pid_t
    private let output: UnsafeMutablePointer<FILE>

    init(path: String, arguments: [String]) throws {
        var pipeFDs: [Int32] = [0, 0]
        guard pipe(&pipeFDs) == 0 else { throw CLIError("pipe failed") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 1)
        posix_spawn_file_actions_addclose(&actions, pipeFDs[0])
        var argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) }
        argv.append(nil)
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        guard posix_spawn(&pid, path, &actions, nil, argv, environ) == 0 else {
            throw CLIError("cannot start \(path): build it with `swift build --product rtc-relay`")
        }
        close(pipeFDs[1])
        self.pid = pid
        output = fdopen(pipeFDs[0], "r")
        guard readLine() == "ready" else { throw CLIError("rtc-relay did not start") }
    }

    /// Asks it to stop (SIGTERM), for the modes that stop on a signal.
    func terminate() { kill(pid, SIGTERM) }

    private func readLine() -> String? {
        var line: UnsafeMutablePointer<CChar>?
        var capacity = 0
        defer { free(line) }
        guard getline(&line, &capacity, output) > 0, let line else { return nil }
        return String(cString: line).trimmingTrailingNewline
    }

    /// Waits for the summary after the stop datagram: packets in, packets out, CPU µs.
    func finish() throws -> (Int, Int, Double) {
        defer {
            var status: Int32 = 0
            waitpid(pid, &status, 0)
            fclose(output)
        }
        guard let line = readLine() else { throw CLIError("rtc-relay printed no summary") }
        let fields = line.split(separator: " ").compactMap { Double($0) }
        guard fields.count == 3 else { throw CLIError("rtc-relay printed '\(line)'") }
        return (Int(fields[0]), Int(fields[1]), fields[2])
    }
}

extension String {
    var trimmingTrailingNewline: String { hasSuffix("\n") ? String(dropLast()) : self }
}
