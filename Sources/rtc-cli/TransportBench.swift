import ArgumentParser
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RTCTransport

#if canImport(Glibc)
import Glibc
import ServerCommandLine
#endif

/// Packets per second on loopback for SRTP protect + send and for receive + unprotect, next to
/// plain UDP sends of the same size as the floor. Each side runs on its own event loop thread.
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

    func run() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let client = try await MediaTransport.bind(.client(), group: group)
        let server = try await MediaTransport.bind(.server(), group: group)
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
        // The floor: plain UDP datagrams of the protected packet's size, from a bare NIO channel.
        let plain = try await DatagramBootstrap(group: group).bind(host: "127.0.0.1", port: 0).get()
        let sink = try await DatagramBootstrap(group: group).bind(host: "127.0.0.1", port: 0).get()
        let rtp = RTPPacket(header: RTPHeader(marker: true, payloadType: 96, sequenceNumber: 0, timestamp: 0, ssrc: 0xBEEF),
                            payload: ByteBuffer(bytes: [UInt8](repeating: 0xA5, count: payload))).serialized
        let datagram = ByteBuffer(bytes: [UInt8](repeating: 0x80, count: rtp.readableBytes + 16))
        var sendRates: [Double] = [], plainRates: [Double] = [], receiveRates: [Double] = [], delivered: [Double] = []
        let count = packets
        for round in 0..<rounds {
            received.withLockedValue { $0 = (0, 0, 0) }
            let sent = try await client.channel.eventLoop.submit { () -> Double in
                var packet = rtp
                let start = Self.now()
                for index in 0..<count {
                    packet.setInteger(UInt16(truncatingIfNeeded: round * count + index), at: packet.readerIndex + 2)
                    client.sendRTP(packet)
                }
                return Self.now() - start
            }.get()
            sendRates.append(Double(count) / sent)
            try await Task.sleep(nanoseconds: 300_000_000)
            let (got, first, last) = received.withLockedValue { $0 }
            if got > 1 { receiveRates.append(Double(got - 1) / (last - first)) }
            delivered.append(Double(got) / Double(count))
            let target = sink.localAddress!
            let floor = try await plain.eventLoop.submit { () -> Double in
                let start = Self.now()
                for _ in 0..<count { plain.writeAndFlush(AddressedEnvelope(remoteAddress: target, data: datagram), promise: nil) }
                return Self.now() - start
            }.get()
            plainRates.append(Double(count) / floor)
            try await Task.sleep(nanoseconds: 200_000_000)
        }
        func k(_ value: Double) -> String { String(format1: value / 1000) + "k" }
        print("Loopback, \(count) packets of \(rtp.readableBytes) bytes of RTP per round, \(rounds) rounds, medians:")
        print("  SRTP protect + send:      \(k(median(sendRates))) packets/s on one event loop")
        print("  plain UDP send (floor):   \(k(median(plainRates))) packets/s on one event loop")
        print("  ratio:                    \(String(format2: median(sendRates) / median(plainRates)))x the floor")
        print("  receive + unprotect:      \(k(median(receiveRates))) packets/s on one event loop "
              + "(\(String(format1: median(delivered) * 100)) % delivered; the kernel drops what the receiver cannot keep up with)")
        try await plain.close()
        try await sink.close()
        await client.close()
        await server.close()
        try await group.shutdownGracefully()
    }
}
