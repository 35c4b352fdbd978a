import ArgumentParser
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RTCTransport
import ServerCommandLine

#if canImport(Glibc)
import Glibc
#endif

/// Packets per second on loopback for SRTP protect + send and for receive + unprotect, next to
/// plain UDP sends of the same size on the same send path (``UDPBatchSender``: the media sockets'
/// sendmmsg batch) as the floor, a row per SRTP profile; and next to sends through a bare NIO
/// channel, the path media took before. Each side runs on its own event loop thread. (The receive
/// rate is bounded by what the sender sends: both share the machine.)
struct TransportBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "transport",
        abstract: "SRTP protect+send and receive+unprotect packets/s on loopback, next to plain UDP sends.")

    @Option(help: "Packets per round.") var packets: Int = 100_000
    @Option(help: "Rounds; medians are reported.") var rounds: Int = 5
    @Option(help: "RTP payload bytes.") var payload: Int = 1100

    func validate() throws {
        guard packets > 0, rounds > 0, (0...1400).contains(payload) else {
            throw ValidationError("--packets and --rounds must be positive, --payload 0...1400")
        }
    }

    static func now() -> Double { Double(NIODeadline.now().uptimeNanoseconds) / 1e9 }

    /// Nanoseconds per `bytes`-byte operation of `openssl speed -evp NAME` (one second), or nil.
    static func opensslNs(_ name: String, bytes: Int) -> Double? {
        // The last line: "<NAME>  <thousands of bytes a second>k".
        guard let run = try? ProcessRunner.capture(["openssl", "speed", "-evp", name, "-bytes", "\(bytes)", "-seconds", "1"]), run.exitCode == 0,
              let last = run.output.split(separator: "\n").last,
              let field = last.split(separator: " ").last, field.hasSuffix("k"), let kBytes = Double(field.dropLast()), kBytes > 0
        else { return nil }
        return Double(bytes) / (kBytes * 1000) * 1e9
    }

    @Option(help: "SRTP profiles, comma-separated, a row each: cm (AES_CM_128_HMAC_SHA1_80), gcm (AEAD_AES_128_GCM), gcm256.")
    var profiles: String = "cm,gcm"

    func run() async throws {
        var chosen: [SRTPProfile] = []
        for name in profiles.split(separator: ",") {
            switch name {
            case "cm": chosen.append(.aes128CmSha1_80)
            case "gcm": chosen.append(.aeadAes128Gcm)
            case "gcm256": chosen.append(.aeadAes256Gcm)
            default: throw CLIError("--profiles takes cm, gcm and gcm256, not \(name)")
            }
        }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        print("Loopback, \(packets) packets of \(12 + payload) bytes of RTP per round, \(rounds) rounds, medians; "
              + "each SRTP packet serialized afresh into the buffer of a datagram already sent and protected there, as the SFU sends one per leg:")
        print("profile                   protect+send/s   plain UDP send/s   ratio   serialized+send/s   ratio   NIO channel send/s   receive+unprotect/s   delivered")
        print("(plain: one buffer re-sent; serialized: a packet serialized afresh per send the same way, no SRTP; both on the media send path, "
              + "a flush per packet as the SRTP row; ratio: protect+send / that row; NIO channel: the plain sends through a bare NIO channel; "
              + "the send rows take turns in blocks of a tenth of a round; receive: a round of SRTP sends alone)")
        var inMemory: [String] = []
        for profile in chosen { try await measure(profile, group: group, inMemory: &inMemory) }
        print("In memory, \(12 + payload)-byte packets, medians:")
        for line in inMemory { print(line) }
        try await group.shutdownGracefully()
    }

    private func measure(_ profile: SRTPProfile, group: EventLoopGroup, inMemory: inout [String]) async throws {
        var clientConfiguration = MediaTransportConfiguration.client(), serverConfiguration = MediaTransportConfiguration.server()
        clientConfiguration.srtpProfiles = [profile]
        serverConfiguration.srtpProfiles = [profile]
        let client = try await MediaTransport.bind(clientConfiguration, group: group)
        let server = try await MediaTransport.bind(serverConfiguration, group: group)
        let received = NIOLockedValueBox<(count: Int, first: Double, last: Double)>((0, 0, 0))
        server.onRTP = { _ in
            let now = Self.now()
            received.withLockedValue { value in
                if value.count == 0 { value.first = now }
                value.count += 1
                value.last = now
            }
        }
        server.start(remote: TransportParameters(ice: client.localParameters.ice, fingerprint: client.localParameters.fingerprint,
                                                 candidates: [], dtlsRole: .client))
        client.start(remote: server.localParameters)
        let deadline = Self.now() + 10
        while true {
            let clientState = try await client.state.get(), serverState = try await server.state.get()
            if clientState == .connected && serverState == .connected { break }
            guard Self.now() < deadline else { throw CLIError("the transports did not connect") }
            try await Task.sleep(nanoseconds: 5_000_000)
        }
        // The floor: plain UDP datagrams of the protected packet's size on the media send path,
        // one buffer sent again and again (no work per packet but the send); and the same from a
        // bare NIO channel.
        // Sent from the SRTP sender's thread to a socket read on the SRTP receiver's: a sink read
        // on the sending thread itself is never read while it sends, so its datagrams were
        // dropped at a full socket buffer, with no receiver to wake, and the floor was too low.
        let plain = try await UDPBatchSender.bind(host: "127.0.0.1", group: client.channel.eventLoop)
        let nio = try await DatagramBootstrap(group: client.channel.eventLoop).bind(host: "127.0.0.1", port: 0).get()
        let sink = try await DatagramBootstrap(group: server.channel.eventLoop).bind(host: "127.0.0.1", port: 0).get()
        let rtp = RTPPacket(header: RTPHeader(marker: true, payloadType: 96, sequenceNumber: 0, timestamp: 0, ssrc: 0xBEEF),
                            payload: ByteBuffer(bytes: [UInt8](repeating: 0xA5, count: payload)))
        let datagram = ByteBuffer(bytes: [UInt8](repeating: 0x80, count: rtp.serializedSize + profile.rtpTagLength))
        var sendRates: [Double] = [], plainRates: [Double] = [], serializedRates: [Double] = [], nioRates: [Double] = []
        var receiveRates: [Double] = [], delivered: [Double] = []
        let count = packets, session = client.session, target = sink.localAddress!
        // The four send rows, each a block of `n` packets on its sender's loop, timed there.
        func srtpBlock(_ n: Int, first: Int) async throws -> Double {
            try await client.channel.eventLoop.submit { () -> Double in
                var rtp = rtp
                let start = Self.now()
                for index in 0..<n {
                    rtp.header.sequenceNumber = UInt16(truncatingIfNeeded: first + index)
                    var packet = client.bufferOnLoop(minimumCapacity: rtp.serializedSize + SRTPProfile.maxTrailer)
                    rtp.write(to: &packet)
                    session.sendRTPOnLoop(&packet, flush: true)
                }
                return Self.now() - start
            }.get()
        }
        func plainBlock(_ n: Int) async throws -> Double {
            try await plain.channel.eventLoop.submit { () -> Double in
                let start = Self.now()
                for _ in 0..<n { plain.sendOnLoop(datagram, to: target, flush: true) }
                return Self.now() - start
            }.get()
        }
        func nioBlock(_ n: Int) async throws -> Double {
            try await nio.eventLoop.submit { () -> Double in
                let start = Self.now()
                for _ in 0..<n { nio.writeAndFlush(AddressedEnvelope(remoteAddress: target, data: datagram), promise: nil) }
                return Self.now() - start
            }.get()
        }
        // The same sends as the plain row, each of a packet serialized afresh (with the tag's room)
        // into a sent datagram's buffer as the SRTP row makes them: what SRTP adds is the difference between these two rows.
        func serializedBlock(_ n: Int) async throws -> Double {
            try await plain.channel.eventLoop.submit { () -> Double in
                var packet = rtp
                let start = Self.now()
                for index in 0..<n {
                    packet.header.sequenceNumber = UInt16(truncatingIfNeeded: index)
                    var bytes = plain.bufferOnLoop(minimumCapacity: packet.serializedSize + SRTPProfile.maxTrailer)
                    packet.write(to: &bytes)
                    bytes.writeRepeatingByte(0, count: profile.rtpTagLength)
                    plain.sendOnLoop(bytes, to: target, flush: true)
                }
                return Self.now() - start
            }.get()
        }
        // The rows take turns in blocks of a tenth of a round (10k packets, some tens of ms), so
        // each row's figure comes from the same seconds as the others'. Run one after another, a
        // row each half second, the ratio moved between 0.70x and 1.01x in three runs minutes
        // apart (2026-11-28): this machine's speed drifts on that scale.
        let blocks = min(10, count), blockSize = count / blocks
        var sequence = 0
        for _ in 0..<rounds {
            var times = (srtp: 0.0, plain: 0.0, nio: 0.0, serialized: 0.0)
            for _ in 0..<blocks {
                times.srtp += try await srtpBlock(blockSize, first: sequence)
                sequence += blockSize
                times.plain += try await plainBlock(blockSize)
                times.serialized += try await serializedBlock(blockSize)
                times.nio += try await nioBlock(blockSize)
            }
            let sent = Double(blocks * blockSize)
            sendRates.append(sent / times.srtp)
            plainRates.append(sent / times.plain)
            serializedRates.append(sent / times.serialized)
            nioRates.append(sent / times.nio)
            try await Task.sleep(nanoseconds: 300_000_000)
            // Receive + unprotect: a round of SRTP sends alone, so the receiver's rate is timed
            // over packets that came one after another.
            received.withLockedValue { $0 = (0, 0, 0) }
            _ = try await srtpBlock(count, first: sequence)
            sequence += count
            try await Task.sleep(nanoseconds: 300_000_000)
            let (got, first, last) = received.withLockedValue { $0 }
            if got > 1 { receiveRates.append(Double(got - 1) / (last - first)) }
            delivered.append(Double(got) / Double(count))
        }
        // In memory, no socket: a packet serialized afresh, then the same and protected in place
        // (what the send rows pay on top of the send itself), nanoseconds each.
        let keys = SRTPKeyingMaterial(profile: profile, localKeyAndSalt: (0..<(profile.keyLength + profile.saltLength)).map { UInt8($0) },
                                      remoteKeyAndSalt: (0..<(profile.keyLength + profile.saltLength)).map { UInt8(255 - $0) })
        let context = try SRTPContext(keys: keys)
        var serializeNs: [Double] = [], protectNs: [Double] = []
        for _ in 0..<rounds {
            var packet = rtp
            var start = Self.now()
            for index in 0..<count {
                packet.header.sequenceNumber = UInt16(truncatingIfNeeded: index)
                let bytes = packet.serialized
                precondition(bytes.readableBytes > 0)
            }
            serializeNs.append((Self.now() - start) * 1e9 / Double(count))
            start = Self.now()
            for index in 0..<count {
                packet.header.sequenceNumber = UInt16(truncatingIfNeeded: index)
                var bytes = packet.serialized
                try context.protectRTP(&bytes)
            }
            protectNs.append((Self.now() - start) * 1e9 / Double(count))
        }
        // The named peer: OpenSSL's own loop over the same primitives and sizes (`openssl speed
        // -evp`), the floor for any SRTP built on this OpenSSL (GCM over the payload; counter mode
        // over the payload plus HMAC-SHA1 over the whole packet).
        let payloadBytes = payload, packetBytes = 12 + payload
        let floor: Double? = switch profile {
        case .aeadAes128Gcm: Self.opensslNs("aes-128-gcm", bytes: payloadBytes)
        case .aeadAes256Gcm: Self.opensslNs("aes-256-gcm", bytes: payloadBytes)
        case .aes128CmSha1_80, .aes128CmSha1_32:
            Self.opensslNs("aes-128-ctr", bytes: payloadBytes).flatMap { ctr in Self.opensslNs("sha1", bytes: packetBytes + 4).map { ctr + $0 } }
        }
        let ours = median(protectNs) - median(serializeNs)
        inMemory.append("\(profile.openSSLName.padding(25)) serialize \(Int(median(serializeNs))) ns, serialize + protect "
                        + "\(Int(median(protectNs))) ns: SRTP \(Int(ours)) ns a packet; openssl speed \(floor.map { "\(Int($0)) ns" } ?? "?") "
                        + "(\(floor.map { String(format2: ours / $0) + "x" } ?? "?"))")
        func k(_ value: Double) -> String { String(format1: value / 1000) + "k" }
        print("\(profile.openSSLName.padding(25)) \(k(median(sendRates)).padding(16)) \(k(median(plainRates)).padding(18)) "
              + "\((String(format2: median(sendRates) / median(plainRates)) + "x").padding(7)) \(k(median(serializedRates)).padding(19)) "
              + "\((String(format2: median(sendRates) / median(serializedRates)) + "x").padding(7)) \(k(median(nioRates)).padding(20)) "
              + "\(k(median(receiveRates)).padding(21)) "
              + "\(String(format1: median(delivered) * 100)) %")
        let floorDrops = try await plain.channel.eventLoop.submit { plain.countsOnLoop.dropped }.get()
        if floorDrops > 0 { print("  (the plain rows' socket dropped \(floorDrops) datagrams on a full send buffer: their rates are too high)") }
        try await plain.close()
        try await nio.close()
        try await sink.close()
        await client.close()
        await server.close()
    }
}
