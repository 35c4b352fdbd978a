import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import TestKit
@testable import RTCTransport
import Testing

@Suite("RFC 4571 framing (ICE-TCP)")
struct RFC4571Tests {
    /// Bytes as they may arrive on a TCP stream, and the frames they hold.
    @Test("frames come off the stream whole, whatever the split; empty frames are skipped; a partial frame waits", arguments: [
        ([0, 3, 1, 2, 3], [[1, 2, 3]], 0),
        ([0, 3, 1, 2], [], 4),
        ([0], [], 1),
        ([0, 1, 9, 0, 2, 7, 8], [[9], [7, 8]], 0),
        ([0, 0, 0, 1, 5], [[5]], 0),
        ([0, 0], [], 0),
        ([0xFF, 0xFF, 1, 2, 3], [], 5),
    ] as [([UInt8], [[UInt8]], Int)])
    func splitting(stream: [UInt8], frames: [[UInt8]], left: Int) {
        var buffer = ByteBuffer(bytes: stream)
        var found: [[UInt8]] = []
        while let frame = RFC4571.nextFrame(from: &buffer) { found.append(Array(frame.readableBytesView)) }
        #expect(found == frames)
        #expect(buffer.readableBytes == left)
    }

    @Test("a frame round trips; a datagram too large for the length field is refused")
    func framing() throws {
        let allocator = ByteBufferAllocator()
        var framed = try #require(RFC4571.frame(ByteBuffer(bytes: [1, 2, 3, 4]), allocator: allocator))
        #expect(Array(framed.readableBytesView) == [0, 4, 1, 2, 3, 4])
        #expect(RFC4571.nextFrame(from: &framed).map { Array($0.readableBytesView) } == [1, 2, 3, 4])
        #expect(RFC4571.frame(ByteBuffer(repeating: 0, count: 65536), allocator: allocator) == nil)
        #expect(RFC4571.frame(ByteBuffer(repeating: 0, count: 65535), allocator: allocator)?.readableBytes == 65537)
    }
}

@Suite("ICE-TCP: a client whose UDP gets no answer connects over TCP", .serialized)
struct ICETCPTests {
    /// A shared port with a passive ICE-TCP listener.
    func tcpPort() async throws -> SharedMediaPort {
        var server = MediaTransportConfiguration.server()
        server.tcpPort = 0
        return try await SharedMediaPort.bind(server, group: MediaTransportTests.group)
    }

    /// A client that checks ICE-TCP beside UDP from the start, and its session on `port`.
    func client(of port: SharedMediaPort) async throws -> (client: MediaTransport, session: MediaSession) {
        var configuration = MediaTransportConfiguration.client()
        configuration.iceTCPAfter = 0
        let client = try await MediaTransport.bind(configuration, group: MediaTransportTests.group)
        let session = try await port.makeSession(remote: TransportParameters(
            ice: client.localParameters.ice, fingerprint: client.localParameters.fingerprint, candidates: [], dtlsRole: .client)).get()
        return (client, session)
    }

    @Test("the server offers passive TCP candidates; with its UDP candidate silent the client's TCP check (made from the start) is taken, and DTLS and SRTP run over it both ways")
    func fallback() async throws {
        let group = MediaTransportTests.group
        let port = try await tcpPort()
        let tcp = try #require(port.tcpAddress)
        let (client, session) = try await client(of: port)
        let atServer = NIOLockedValueBox<[UInt16]>([]), atClient = NIOLockedValueBox<[UInt16]>([])
        session.onRTP = { packet in atServer.withLockedValue { $0.append(packet.getInteger(at: 2, as: UInt16.self) ?? 0) } }
        client.onRTP = { packet in atClient.withLockedValue { $0.append(packet.getInteger(at: 2, as: UInt16.self) ?? 0) } }
        // What the server offers: its UDP candidate and the passive TCP one on the same address.
        var offered = port.localParameters(credentials: session.localParameters.ice)
        #expect(offered.tcpCandidates.map(\.port) == [tcp.port])
        // ... and in SDP, read back the same.
        let description = SessionDescription.make(sessionID: 1, transport: offered, iceLite: true, setup: "actpass", sections: [
            MediaSectionDescription(mid: "0", kind: .video, direction: .recvonly)])
        #expect(description.serialized.contains(" tcp ") && description.serialized.contains("tcptype passive"), "\(description.serialized)")
        let parsed = try SessionDescription(parsing: description.serialized).transportParameters(offererRole: .server)
        #expect(parsed.tcpCandidates == offered.tcpCandidates && parsed.candidates == offered.candidates)
        // Blocked UDP: the only UDP candidate is a port nobody answers on.
        let silent = try await DatagramBootstrap(group: group).bind(host: "127.0.0.1", port: 0).get()
        offered.candidates = [silent.localAddress!]
        client.start(remote: offered)
        #expect(await eventually(10) { try await client.state.get() == .connected })
        #expect(await eventually { try await session.state.get() == .connected })
        let stats = try await client.stats.get()
        #expect(stats.transport == "tcp", "\(stats)")
        #expect(try await session.stats.get().transport == "tcp")
        for sequence in UInt16(0)..<50 {
            client.sendRTP(rtpPacket(ssrc: 7, sequence: sequence, payload: [1, 2, 3]))
            session.sendRTP(rtpPacket(ssrc: 8, sequence: sequence, payload: [4, 5, 6]))
        }
        #expect(await eventually { atServer.withLockedValue { $0 } == Array(0..<50) })
        #expect(await eventually { atClient.withLockedValue { $0 } == Array(0..<50) })
        try await silent.close()
        await client.close()
        await port.close()
    }

    @Test("with UDP answering too, both are checked and UDP is kept: the server never takes the TCP path, and the client closes its TCP connection")
    func udpPreferred() async throws {
        let port = try await tcpPort()
        let (client, session) = try await client(of: port)
        let serverPaths = NIOLockedValueBox<[String]>([])
        client.start(remote: port.localParameters(credentials: session.localParameters.ice))
        #expect(await eventually { try await client.state.get() == .connected })
        // Sampled while the TCP check may still be on its way and after: the server's path never moves.
        for _ in 0..<12 {
            let path = try await session.stats.get().transport ?? "none"
            serverPaths.withLockedValue { $0.append(path) }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(serverPaths.withLockedValue { $0 }.allSatisfy { $0 == "udp" }, "\(serverPaths.withLockedValue { $0 })")
        #expect(try await client.stats.get().transport == "udp")
        #expect(await eventually { try await client.openTCPConnections.get() == 0 })
        await client.close()
        await port.close()
    }

    @Test("bytes that are not a session's are dropped: a stray TCP client sending garbage does not disturb the port")
    func strayConnection() async throws {
        let port = try await tcpPort()
        let stray = try await ClientBootstrap(group: MediaTransportTests.group).connect(to: port.tcpAddress!).get()
        try await stray.writeAndFlush(ByteBuffer(bytes: [0, 4, 0x80, 0x60, 1, 2, 0xFF, 0xFF, 9])).get()
        #expect(await eventually { try await port.unroutableDatagrams.get() == 1 })
        try await stray.close()
        await port.close()
    }

    @Test("one address holds at most 256 ICE-TCP connections (more are closed as they open), and a connection that sends no frame is closed after 5 s")
    func connectionBounds() async throws {
        let port = try await tcpPort()
        var connections: [Channel] = []
        for _ in 0..<300 {
            connections.append(try await ClientBootstrap(group: MediaTransportTests.group).connect(to: port.tcpAddress!).get())
        }
        #expect(await eventually(5) { connections.filter(\.isActive).count == 256 }, "\(connections.filter(\.isActive).count) open")
        // None sends a frame: all are closed after the first-frame deadline, and the port takes new ones.
        #expect(await eventually(10) { connections.allSatisfy { !$0.isActive } })
        let later = try await ClientBootstrap(group: MediaTransportTests.group).connect(to: port.tcpAddress!).get()
        try await Task.sleep(for: .milliseconds(300))
        #expect(later.isActive)
        try await later.close()
        await port.close()
    }
}

@Suite("TURN stream framing (RFC 8656 §12.5)")
struct TURNStreamTests {
    @Test("STUN messages and padded ChannelData come off a TCP stream whole; a partial message waits; other bytes end the stream", arguments: [
        // A 20-byte STUN header with no attributes.
        ([0, 1, 0, 0, 0x21, 0x12, 0xA4, 0x42] + [UInt8](repeating: 7, count: 12), [20], 0),
        // ChannelData of 5 bytes, padded to 8 on the stream; the message handed on has no padding.
        ([0x40, 0x00, 0, 5, 1, 2, 3, 4, 5, 0, 0, 0], [9], 0),
        // ChannelData whose padding has not all arrived yet.
        ([0x40, 0x01, 0, 5, 1, 2, 3, 4, 5, 0], [], 10),
        // Two ChannelData back to back.
        ([0x40, 0x00, 0, 4, 1, 2, 3, 4, 0x40, 0x00, 0, 1, 9, 0, 0, 0], [8, 5], 0),
        // A header only.
        ([0x40, 0x00], [], 2),
        // Neither STUN nor ChannelData: dropped.
        ([0xC0, 0, 0, 1, 2], [], 0),
    ] as [([UInt8], [Int], Int)])
    func splitting(stream: [UInt8], sizes: [Int], left: Int) {
        var buffer = ByteBuffer(bytes: stream)
        var found: [Int] = []
        while let message = TURNStream.nextMessage(from: &buffer) { found.append(message.readableBytes) }
        #expect(found == sizes)
        #expect(buffer.readableBytes == left)
    }
}

@Suite("Candidates the client cannot send to", .serialized)
struct UnsendableCandidateTests {
    @Test("a server candidate of another address family (IPv6 to an IPv4 socket) is skipped: one unsendable address does not take the transport down")
    func otherFamilySkipped() async throws {
        let port = try await SharedMediaPort.bind(.server(), group: MediaTransportTests.group)
        let client = try await MediaTransport.bind(.client(), group: MediaTransportTests.group)
        let session = try await port.makeSession(remote: TransportParameters(
            ice: client.localParameters.ice, fingerprint: client.localParameters.fingerprint, candidates: [], dtlsRole: .client)).get()
        var offered = port.localParameters(credentials: session.localParameters.ice)
        offered.candidates = [try SocketAddress(ipAddress: "2001:db8::1", port: 7882)] + offered.candidates
        client.start(remote: offered)
        #expect(await eventually(10) { try await client.state.get() == .connected })
        #expect(client.channel.isActive)
        await client.close()
        await port.close()
    }
}
