import Foundation
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

/// `bench sfu --rooms R`: R rooms of one publisher and S subscribers on one server with 1, 2, …
/// media threads, in one run. Once connected, the subscribers' ports are handed to `rtc-relay
/// sink`, a C process that only counts RTP datagrams (recvmmsg), so the client side costs little
/// next to the server's; the SFU does its full work (SRTP in and out, rewriting, feedback).
extension SFUBench {
    struct RoomsResult {
        var threads: Int
        var seconds: Double
        var forwarded: Int
        var delivered: Int
        var counted: Bool
        var expected: Int
        /// CPU seconds of each media thread over the window.
        var loopCPU: [Double]
        var perShard: [Int]
        /// CPU seconds of the bench's client thread (publishers) and of the subscribers' sink process.
        var clientCPU: Double
        var sinkCPU: Double
        /// A --processes child whose setup ended after the agreed start.
        var late = false

        var forwardedPerSecond: Double { Double(forwarded) / seconds }
        var deliveredPerSecond: Double { Double(delivered) / seconds }
        /// Of what the publishers sent, what did not reach a subscriber (with `--receivers count`), or
        /// what the SFU did not send (`discard`: nothing is read).
        var loss: Double {
            let reached = counted ? delivered : forwarded
            return expected > 0 ? max(0, Double(expected - reached) / Double(expected)) : 1
        }
        var microsecondsPerPacket: Double { forwarded > 0 ? loopCPU.reduce(0, +) * 1e6 / Double(forwarded) : 0 }
    }

    func runRooms(_ rooms: Int, subscribers: Int) async throws {
        if startAt != nil {
            // A child of --processes: one thread, one summary line.
            let result = try await runSharded(threads: 1, rooms: rooms, subscribers: subscribers)
            print("summary \(result.forwarded) \(result.loopCPU.reduce(0, +)) \(result.seconds) \(result.late ? 1 : 0)")
            return
        }
        let threadCounts = mediaThreads.split(separator: ",").compactMap { Int($0) }.filter { (1...64).contains($0) }
        guard rooms > 0, !threadCounts.isEmpty else { throw CLIError("--rooms needs a positive count and --media-threads positive numbers") }
        print("\(rooms) rooms × (1 publisher at \(bitrate) kbps + Opus → \(subscribers) subscribers), \(seconds) s, loopback, "
              + "\(System.coreCount) cores; subscribers' ports "
              + (receivers == .count ? "counted by rtc-relay sink (recvmmsg, no SRTP)" : "never read (rtc-relay hole: the kernel drops on arrival)"))
        print("threads    forwarded/s   delivered/s   loss      µs/packet  CPU per thread        publishers  sink (all run)  participants per thread")
        var results: [(label: String, result: RoomsResult)] = []
        for threads in threadCounts {
            let result = try await runSharded(threads: threads, rooms: rooms, subscribers: subscribers)
            let label = "\(threads)"
            results.append((label, result))
            print("\(label.padding(10)) \(String(Int(result.forwardedPerSecond)).padding(13)) \(String(Int(result.deliveredPerSecond)).padding(13)) "
                  + "\((String(format2: result.loss * 100) + " %").padding(9)) \(String(format2: result.microsecondsPerPacket).padding(10)) "
                  + "\(result.loopCPU.map { String(format1: $0 / result.seconds * 100) + " %" }.joined(separator: " ").padding(21)) "
                  + "\((String(format1: result.clientCPU / result.seconds * 100) + " %").padding(11)) "
                  + "\((String(format2: result.sinkCPU) + " s").padding(15)) "
                  + result.perShard.map(String.init).joined(separator: " "))
        }
        let one = results.first(where: { $0.result.threads == 1 })?.result
        if let one {
            for (label, result) in results where result.threads > 1 {
                print("\(label) / 1: forwarded/s \(String(format2: result.forwardedPerSecond / max(one.forwardedPerSecond, 1)))x, "
                      + "delivered/s \(String(format2: result.deliveredPerSecond / max(one.deliveredPerSecond, 1)))x")
            }
        }
        print("forwarded = packets the SFU sent (its counters); delivered = packets the subscribers got; µs/packet = CPU of all media threads / forwarded")
        if let processes, processes > 1, let one {
            let split = try runProcesses(processes, rooms: rooms, subscribers: subscribers)
            print("\(processes) processes × 1 thread (\(rooms / processes) room(s) each, at once): forwarded/s \(Int(split.perSecond)) "
                  + "(\(String(format2: split.perSecond / max(one.forwardedPerSecond, 1)))x one thread), µs/packet \(String(format2: split.microseconds))"
                  + (split.late ? "; a process was late to start sending, the windows overlap less" : ""))
        }
        if threadCounts.contains(1), let most = threadCounts.max(), most > 1 {
            // The same kinds of work without the SFU, one thread then `most` at once, in this run.
            let srtpOne = try ScalingControl.srtpProtect(threads: 1, seconds: 2)
            let srtpMany = try ScalingControl.srtpProtect(threads: most, seconds: 2)
            let blastOne = try ScalingControl.blast(relay: RelayProcess.siblingPath, processes: 1, seconds: 2)
            let blastMany = try ScalingControl.blast(relay: RelayProcess.siblingPath, processes: most, seconds: 2)
            print("controls, \(most) at once / 1: SRTP protect (AES-GCM, a context each) \(String(format2: srtpMany / srtpOne))x "
                  + "(\(Int(srtpOne)) → \(Int(srtpMany)) packets/s); rtc-relay blast (kernel UDP sends) \(String(format2: blastMany / blastOne))x "
                  + "(\(Int(blastOne)) → \(Int(blastMany)) datagrams/s)")
        }
    }

    /// The rooms split over `processes` children of this bench (`--start-at`), sending in the same
    /// window: their forwarded packets per second added up, and µs of their media threads per packet.
    func runProcesses(_ processes: Int, rooms: Int, subscribers: Int) throws -> (perSecond: Double, microseconds: Double, late: Bool) {
        guard rooms % processes == 0 else { throw CLIError("--rooms must divide evenly over --processes") }
        let startAt = Self.now() + 6 + Double(rooms / processes * subscribers) / 20
        let children = try (0..<processes).map { _ in
            try ChildOutput([ProcessRunner.selfPath, "bench", "sfu", "--rooms", "\(rooms / processes)", "--subscribers", "\(subscribers)",
                             "--bitrate", "\(bitrate)", "--seconds", "\(seconds)", "--receivers", receivers.rawValue, "--start-at", "\(startAt)"])
        }
        var forwarded = 0.0, cpu = 0.0, window = 0.0, late = false
        for child in children {
            let output = child.finish()
            guard let line = output.split(separator: "\n").last(where: { $0.hasPrefix("summary ") }) else {
                throw CLIError("a bench process printed no summary: \(output.suffix(300))")
            }
            let fields = line.split(separator: " ").dropFirst().compactMap { Double($0) }
            guard fields.count == 4 else { throw CLIError("a bench process printed '\(line)'") }
            forwarded += fields[0]
            cpu += fields[1]
            window = max(window, fields[2])
            late = late || fields[3] != 0
        }
        return (forwarded / max(window, 0.001), forwarded > 0 ? cpu * 1e6 / forwarded : 0, late)
    }

    func runSharded(threads: Int, rooms: Int, subscribers: Int) async throws -> RoomsResult {
        let serverGroup = MultiThreadedEventLoopGroup(numberOfThreads: threads)
        let clientGroup = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let secret = "bench"
        var configuration = ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: secret)
        configuration.mediaThreads = threads
        let sfu = try await ShardedSFU.start(configuration: configuration, group: serverGroup)
        let now = Int64(time(nil))
        func join(_ uid: String, _ channel: String, _ peer: BenchPeer) {
            sfu.received(ClientEnvelope(.join(JoinRequest(token: AccessToken(uid: uid, channel: channel, now: now).signed(secret: secret),
                                                          channel: channel, uid: uid))).encoded(), from: peer)
        }
        var transports: [MediaTransport] = []
        var subscriberTransports: [MediaTransport] = []
        var publishers: [MediaTransport] = []
        let deadline = Self.now() + 30 + Double(rooms * subscribers) / 4
        for room in 0..<rooms {
            let channel = "bench\(room)"
            for index in 0..<subscribers {
                let transport = try await MediaTransport.bind(.client(), group: clientGroup)
                let peer = BenchPeer.subscriber(answeringWith: transport, to: sfu)
                join("sub\(index)", channel, peer)
                transports.append(transport)
                subscriberTransports.append(transport)
            }
            let publisher = try await MediaTransport.bind(.client(), group: clientGroup)
            let publisherPeer = BenchPeer()
            join("pub", channel, publisherPeer)
            let offer = SessionDescription.make(sessionID: 2, transport: publisher.localParameters, iceLite: false, setup: "actpass", sections: [
                MediaSectionDescription(mid: "0", kind: .video, direction: .sendonly, ssrc: 1000),
                MediaSectionDescription(mid: "1", kind: .audio, direction: .sendonly, ssrc: 2000),
            ])
            sfu.received(ClientEnvelope(.offer(SessionDescriptionMessage(transport: .publisher, sdp: offer.serialized)), requestID: 1).encoded(),
                         from: publisherPeer)
            var answer: String?
            while answer == nil && Self.now() < deadline {
                answer = publisherPeer.replies.withLockedValue { replies in
                    replies.lazy.compactMap { if case .answer(let a) = $0.message { a.sdp } else { nil } }.first
                }
                try await Task.sleep(nanoseconds: 5_000_000)
            }
            guard let answer else { throw CLIError("the SFU did not answer publisher \(room)") }
            publisher.start(remote: try SessionDescription(parsing: answer).transportParameters())
            publishers.append(publisher)
            transports.append(publisher)
        }
        for transport in transports {
            while try await transport.state.get() != .connected {
                guard Self.now() < deadline else {
                    var states: [String: Int] = [:]
                    for transport in transports { states["\(try await transport.state.get())", default: 0] += 1 }
                    throw CLIError("transports did not connect: \(states)")
                }
                try await Task.sleep(nanoseconds: 5_000_000)
            }
        }
        let perShard = sfu.participantsPerShard
        // The subscribers' ports go to one counting thread (no NIO, no SRTP on the client side).
        var sinkPorts: [Int] = []
        for transport in subscriberTransports { if let port = await transport.abandonSocket() { sinkPorts.append(port) } }
        let sink = try RelayProcess(path: RelayProcess.siblingPath,
                                    arguments: [receivers == .count ? "sink" : "hole"] + sinkPorts.map(String.init))
        try await Task.sleep(nanoseconds: 300_000_000)
        var late = false
        if let startAt {
            late = Self.now() > startAt
            if !late { try await Task.sleep(nanoseconds: UInt64((startAt - Self.now()) * 1e9)) }
        }
        let before = try await sfu.counterSnapshot.get()
        func loopCPU() async throws -> [Double] {
            var times: [Double] = []
            for shard in sfu.shards { times.append(try await shard.port.channel.eventLoop.submit { Self.threadCPUMicroseconds() / 1e6 }.get()) }
            return times
        }
        let cpuBefore = try await loopCPU()
        let clientLoop = clientGroup.next()
        let clientBefore = try await clientLoop.submit { Self.threadCPUMicroseconds() / 1e6 }.get()
        let started = Self.now()
        let senders = publishers
        let sent = try await sendTraffic(group: clientGroup) { packets in for publisher in senders { publisher.sendRTP(batch: packets) } }
        // CPU, forwarding and rates over the sending window; deliveries also count what arrives in
        // the next half second.
        let elapsed = Self.now() - started
        let cpuAfter = try await loopCPU()
        let clientAfter = try await clientLoop.submit { Self.threadCPUMicroseconds() / 1e6 }.get()
        let after = try await sfu.counterSnapshot.get()
        try await Task.sleep(nanoseconds: 500_000_000)
        if receivers == .count {
            let stopper = try await DatagramBootstrap(group: clientGroup).bind(host: "127.0.0.1", port: 0).get()
            try await stopper.writeAndFlush(AddressedEnvelope(remoteAddress: try SocketAddress(ipAddress: "127.0.0.1", port: sinkPorts[0]),
                                                              data: ByteBuffer(bytes: [0xFF])))
            try await stopper.close()
        } else {
            sink.terminate()
        }
        let (got, _, sinkCPU) = try sink.finish()
        for transport in publishers { await transport.close() }
        await sfu.shutdown()
        try await clientGroup.shutdownGracefully()
        try await serverGroup.shutdownGracefully()
        return RoomsResult(threads: threads, seconds: elapsed, forwarded: after.packetsOut - before.packetsOut, delivered: got,
                           counted: receivers == .count,
                           expected: sent * rooms * subscribers, loopCPU: zip(cpuAfter, cpuBefore).map { $0 - $1 }, perShard: perShard,
                           clientCPU: clientAfter - clientBefore, sinkCPU: sinkCPU / 1e6, late: late)
    }
}
