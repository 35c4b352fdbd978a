import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import TestKit
import Testing
@testable import RTCTransport

/// Collects what a transport hands up, thread-safely.
final class Received: Sendable {
    let rtp = NIOLockedValueBox<[ByteBuffer]>([])
    let states = NIOLockedValueBox<[MediaTransportState]>([])
}

func rtpPacket(ssrc: UInt32, sequence: UInt16, payload: [UInt8]) -> ByteBuffer {
    RTPPacket(header: RTPHeader(payloadType: 96, sequenceNumber: sequence, timestamp: UInt32(sequence) * 3000, ssrc: ssrc),
              payload: ByteBuffer(bytes: payload)).serialized
}

@Suite("MediaTransport on loopback (ICE + DTLS-SRTP over SwiftNIO UDP)", .serialized)
struct MediaTransportTests {
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)

    struct Pair {
        let client: MediaTransport, server: MediaTransport
        let clientReceived = Received(), serverReceived = Received()
    }

    func makePair(client clientConfiguration: MediaTransportConfiguration = .client(),
                  server serverConfiguration: MediaTransportConfiguration = .server(),
                  tamperServerFingerprint: Bool = false, startClientAt: ((TransportParameters) -> TransportParameters)? = nil)
        async throws -> Pair
    {
        let client = try await MediaTransport.bind(clientConfiguration, group: Self.group)
        let server = try await MediaTransport.bind(serverConfiguration, group: Self.group)
        let pair = Pair(client: client, server: server)
        for (transport, received) in [(client, pair.clientReceived), (server, pair.serverReceived)] {
            transport.onRTP = { packet in received.rtp.withLockedValue { $0.append(packet) } }
            transport.onStateChange = { state in received.states.withLockedValue { $0.append(state) } }
        }
        var serverParameters = server.localParameters
        if tamperServerFingerprint { serverParameters.fingerprint = try DTLSCertificate().fingerprint }
        server.start(remote: TransportParameters(ice: client.localParameters.ice, fingerprint: client.localParameters.fingerprint,
                                                 candidates: [], dtlsRole: .client))
        client.start(remote: startClientAt?(serverParameters) ?? serverParameters)
        return pair
    }

    func bothConnected(_ pair: Pair) async throws -> Bool {
        let client = try await pair.client.state.get()
        let server = try await pair.server.state.get()
        return client == .connected && server == .connected
    }

    @Test("two transports complete ICE and DTLS, then exchange SRTP both ways, in order")
    func exchange() async throws {
        let pair = try await makePair()
        defer { Task { await pair.client.close(); await pair.server.close() } }
        #expect(await eventually { try await bothConnected(pair) })
        for sequence in UInt16(0)..<100 {
            pair.server.sendRTP(rtpPacket(ssrc: 2, sequence: sequence, payload: Array("from server \(sequence)".utf8)))
        }
        // The client sends in batches of ten, flushed once each.
        for batch in 0..<10 {
            pair.client.sendRTP(batch: (0..<10).map { index in
                let sequence = UInt16(batch * 10 + index)
                return rtpPacket(ssrc: 1, sequence: sequence, payload: Array("from client \(sequence)".utf8))
            })
        }
        #expect(await eventually { pair.clientReceived.rtp.withLockedValue { $0.count } == 100
            && pair.serverReceived.rtp.withLockedValue { $0.count } == 100 })
        let atServer = try pair.serverReceived.rtp.withLockedValue { $0 }.map { try RTPPacket(parsing: $0) }
        #expect(atServer.map(\.header.sequenceNumber) == Array(0..<100) && atServer.allSatisfy { $0.header.ssrc == 1 })
        #expect(String(buffer: atServer[42].payload) == "from client 42")
        let atClient = try pair.clientReceived.rtp.withLockedValue { $0 }.map { try RTPPacket(parsing: $0) }
        #expect(atClient.map(\.header.sequenceNumber) == Array(0..<100) && String(buffer: atClient[7].payload) == "from server 7")
        let stats = try await pair.client.stats.get()
        #expect(stats.packetsSent == 100 && stats.packetsReceived == 100 && stats.roundTripTime != nil)
    }

    @Test("onProtectedRTP hands RTP over as it arrived: header in the clear, payload still encrypted, onRTP not called")
    func protectedRTP() async throws {
        let pair = try await makePair()
        defer { Task { await pair.client.close(); await pair.server.close() } }
        let protected = NIOLockedValueBox<[ByteBuffer]>([])
        pair.client.onProtectedRTP = { packet in protected.withLockedValue { $0.append(packet) } }
        #expect(await eventually { try await bothConnected(pair) })
        let clear = Array("a payload of forty bytes, plain to read!".utf8)
        for sequence in UInt16(0)..<20 { pair.server.sendRTP(rtpPacket(ssrc: 9, sequence: sequence, payload: clear)) }
        #expect(await eventually { protected.withLockedValue { $0.count } == 20 })
        let packets = try protected.withLockedValue { $0 }.map { try RTPPacket(parsing: $0) }
        #expect(packets.map(\.header.sequenceNumber) == Array(0..<20) && packets.allSatisfy { $0.header.ssrc == 9 })
        // The payload is ciphertext followed by the authentication tag (10 bytes or more, by profile).
        #expect(packets.allSatisfy { Array($0.payload.readableBytesView) != clear && $0.payload.readableBytes >= clear.count + 10 })
        #expect(pair.clientReceived.rtp.withLockedValue { $0.isEmpty })
        #expect(try await pair.client.stats.get().packetsReceived == 20)
    }

    @Test("media sockets never share a port: a taken port is refused, and 300 ephemeral binds get 300 ports")
    func portsAreNotShared() async throws {
        let first = try await MediaTransport.bind(.server(), group: Self.group)
        defer { Task { await first.close() } }
        let port = try #require(first.localAddress?.port)
        await #expect(throws: (any Error).self) {
            let second = try await MediaTransport.bind(.server(port: port), group: Self.group)
            await second.close()
        }
        var transports: [MediaTransport] = []
        for _ in 0..<300 { transports.append(try await MediaTransport.bind(.client(), group: Self.group)) }
        let ports = transports.compactMap { $0.localAddress?.port }
        #expect(Set(ports).count == 300 && !ports.contains(port))
        for transport in transports { await transport.close() }
    }

    @Test("a wrong fingerprint in the remote description fails with that reason, and nothing hangs")
    func wrongFingerprint() async throws {
        let pair = try await makePair(tamperServerFingerprint: true)
        defer { Task { await pair.client.close(); await pair.server.close() } }
        #expect(await eventually {
            if case .failed = try await pair.client.state.get() { return true }
            return false
        })
        guard case .failed(let reason) = try await pair.client.state.get() else { return }
        #expect(reason.contains("fingerprint mismatch"), "\(reason)")
    }

    @Test("no STUN answer fails after the configured timeout")
    func noAnswer() async throws {
        var configuration = MediaTransportConfiguration.client()
        configuration.iceTimers.connectTimeout = 1
        let client = try await MediaTransport.bind(configuration, group: Self.group)
        defer { Task { await client.close() } }
        // A bound UDP socket that never answers.
        let silent = try await DatagramBootstrap(group: Self.group).bind(host: "127.0.0.1", port: 0).get()
        defer { silent.close(promise: nil) }
        let start = Date()
        client.start(remote: TransportParameters(ice: .random(), fingerprint: try DTLSCertificate().fingerprint,
                                                 candidates: [silent.localAddress!], dtlsRole: .server))
        #expect(await eventually(5) {
            if case .failed = try await client.state.get() { return true }
            return false
        })
        #expect(try await client.state.get() == .failed(reason: "ICE: no STUN answer within 1.0 s"))
        #expect(Date().timeIntervalSince(start) < 3)
    }

    @Test("garbage datagrams mixed into a live session are dropped and counted; media keeps flowing")
    func garbage() async throws {
        let pair = try await makePair()
        defer { Task { await pair.client.close(); await pair.server.close() } }
        #expect(await eventually { try await bothConnected(pair) })
        let noise = try await DatagramBootstrap(group: Self.group).bind(host: "127.0.0.1", port: 0).get()
        defer { noise.close(promise: nil) }
        let serverAddress = try #require(pair.server.localAddress)
        var generator = SystemRandomNumberGenerator()
        for sequence in UInt16(0)..<50 {
            // Random bytes from a stranger, and fake RTP and DTLS from the client's own socket.
            let junk = (0..<Int.random(in: 1...300, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            try await noise.writeAndFlush(AddressedEnvelope(remoteAddress: serverAddress, data: ByteBuffer(bytes: junk)))
            pair.client.sendRaw(ByteBuffer(bytes: [0x80, 0x60] + junk))
            pair.client.sendRaw(ByteBuffer(bytes: [0x17, 0xFE, 0xFD] + junk))
            pair.client.sendRTP(rtpPacket(ssrc: 1, sequence: sequence, payload: [1, 2, 3]))
        }
        #expect(await eventually { pair.serverReceived.rtp.withLockedValue { $0.count } == 50 })
        let stats = try await pair.server.stats.get()
        #expect(stats.datagramsDropped >= 50 && stats.srtpAuthenticationFailures >= 40, "\(stats)")
        #expect(try await pair.server.state.get() == .connected)
    }

    @Test("a replayed SRTP packet is dropped and counted")
    func replay() async throws {
        let pair = try await makePair()
        defer { Task { await pair.client.close(); await pair.server.close() } }
        #expect(await eventually { try await bothConnected(pair) })
        let captured = NIOLockedValueBox<ByteBuffer?>(nil)
        try await pair.client.channel.eventLoop.submit {
            pair.client.onDatagramSent = { bytes, _ in captured.withLockedValue { if $0 == nil { $0 = bytes } } }
        }.get()
        pair.client.sendRTP(rtpPacket(ssrc: 1, sequence: 1, payload: [9, 9, 9]))
        #expect(await eventually { pair.serverReceived.rtp.withLockedValue { $0.count } == 1 })
        let protected = try #require(captured.withLockedValue { $0 })
        for _ in 0..<3 { pair.client.sendRaw(protected) }
        #expect(await eventually { try await pair.server.stats.get().srtpReplaysDropped == 3 })
        #expect(pair.serverReceived.rtp.withLockedValue { $0.count } == 1)
    }

    @Test("close sends close_notify and the peer closes")
    func closing() async throws {
        let pair = try await makePair()
        #expect(await eventually { try await bothConnected(pair) })
        await pair.client.close()
        #expect(await eventually { try await pair.server.state.get() == .closed })
        await pair.server.close()
    }
}

@Suite("SharedMediaPort: many peers on one server socket", .serialized)
struct SharedMediaPortTests {
    @Test("three clients on one port each get their own session, routed by ufrag then address")
    func threeClients() async throws {
        let group = MediaTransportTests.group
        let port = try await SharedMediaPort.bind(.server(), group: group)
        var clients: [MediaTransport] = []
        var sessions: [MediaSession] = []
        let received = (0..<3).map { _ in Received() }
        for index in 0..<3 {
            let client = try await MediaTransport.bind(.client(), group: group)
            let session = try await port.makeSession(remote: TransportParameters(
                ice: client.localParameters.ice, fingerprint: client.localParameters.fingerprint, candidates: [],
                dtlsRole: .client)).get()
            session.onRTP = { packet in received[index].rtp.withLockedValue { $0.append(packet) } }
            client.start(remote: session.localParameters)
            clients.append(client)
            sessions.append(session)
        }
        for (client, session) in zip(clients, sessions) {
            #expect(await eventually { try await client.state.get() == .connected })
            #expect(await eventually { try await session.state.get() == .connected })
        }
        #expect(Set(sessions.map(\.localParameters.ice.ufrag)).count == 3)
        #expect(Set(sessions.map(\.localParameters.fingerprint)).count == 1)  // one certificate per port
        for (index, client) in clients.enumerated() {
            for sequence in UInt16(0)..<20 { client.sendRTP(rtpPacket(ssrc: UInt32(100 + index), sequence: sequence, payload: [UInt8(index)])) }
        }
        let stranger = try await DatagramBootstrap(group: group).bind(host: "127.0.0.1", port: 0).get()
        for _ in 0..<10 {
            try await stranger.writeAndFlush(AddressedEnvelope(remoteAddress: port.localAddress!, data: ByteBuffer(bytes: [0x80, 0x60, 1, 2])))
        }
        for index in 0..<3 {
            #expect(await eventually { received[index].rtp.withLockedValue { $0.count } == 20 })
            let ssrcs = try Set(received[index].rtp.withLockedValue { $0 }.map { try RTPPacket(parsing: $0).header.ssrc })
            #expect(ssrcs == [UInt32(100 + index)])
        }
        #expect(await eventually { try await port.unroutableDatagrams.get() == 10 })
        // Removing one session leaves the others working.
        await port.remove(sessions[0])
        clients[1].sendRTP(rtpPacket(ssrc: 101, sequence: 20, payload: [1]))
        #expect(await eventually { received[1].rtp.withLockedValue { $0.count } == 21 })
        try await stranger.close()
        for client in clients { await client.close() }
        await port.close()
    }
}

@Suite("Mobility and ICE restart", .serialized)
struct MobilityTests {
    @Test("a client whose UDP port changes keeps its session: the server follows it and keeps routing")
    func portChange() async throws {
        let group = MediaTransportTests.group
        let port = try await SharedMediaPort.bind(.server(), group: group)
        let serverAddress = try #require(port.localAddress)
        // The client's session writes through whichever socket is current: first A, then B.
        let current = NIOLockedValueBox<Channel?>(nil)
        let loop = group.next()
        let certificate = try DTLSCertificate()
        let client = MediaSession(configuration: .client(), certificate: certificate, localCandidates: [], eventLoop: loop) { bytes, address, _ in
            current.withLockedValue { $0 }?.writeAndFlush(AddressedEnvelope(remoteAddress: address, data: bytes), promise: nil)
        }
        final class Forward: ChannelInboundHandler, @unchecked Sendable {
            typealias InboundIn = AddressedEnvelope<ByteBuffer>
            let session: MediaSession
            init(_ session: MediaSession) { self.session = session }
            func channelRead(context: ChannelHandlerContext, data: NIOAny) {
                let envelope = unwrapInboundIn(data)
                session.receive(envelope.data, from: envelope.remoteAddress)
            }
        }
        func socket() async throws -> Channel {
            try await DatagramBootstrap(group: loop).channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(Forward(client)) }
            }.bind(host: "127.0.0.1", port: 0).get()
        }
        let a = try await socket(), b = try await socket()
        current.withLockedValue { $0 = a }
        let received = Received()
        let server = try await port.makeSession(remote: TransportParameters(ice: client.localParameters.ice,
                                                                            fingerprint: certificate.fingerprint,
                                                                            candidates: [], dtlsRole: .client)).get()
        server.onRTP = { packet in received.rtp.withLockedValue { $0.append(packet) } }
        var remote = server.localParameters
        remote.candidates = [serverAddress]
        client.start(remote: remote)
        #expect(await eventually { try await client.state.get() == .connected })
        #expect(await eventually { try await server.selectedAddress.get() == a.localAddress })
        client.sendRTP(rtpPacket(ssrc: 9, sequence: 1, payload: [1]))
        #expect(await eventually { received.rtp.withLockedValue { $0.count } == 1 })
        // Move to socket B. Media from B is not routed until a valid check comes from B ...
        current.withLockedValue { $0 = b }
        client.sendRTP(rtpPacket(ssrc: 9, sequence: 2, payload: [2]))
        try await Task.sleep(nanoseconds: 100_000_000)
        #expect(received.rtp.withLockedValue { $0.count } == 1)
        // ... which an ICE restart (or the next consent check) sends; the server follows and routes again.
        let newCredentials = client.restartICE(remote: remote)
        try await port.channel.eventLoop.submit {
            _ = server.ice.restart(local: server.ice.local, remote: newCredentials, candidates: [], now: MediaSession.now())
        }.get()
        #expect(await eventually { try await server.selectedAddress.get() == b.localAddress })
        client.sendRTP(rtpPacket(ssrc: 9, sequence: 3, payload: [3]))
        #expect(await eventually { received.rtp.withLockedValue { $0.count } == 2 })
        #expect(try await server.state.get() == .connected)
        await client.close()
        try await a.close()
        try await b.close()
        await port.close()
    }

    @Test("an ICE restart between two transports keeps DTLS and SRTP and media flowing")
    func restart() async throws {
        let group = MediaTransportTests.group
        let client = try await MediaTransport.bind(.client(), group: group)
        let server = try await MediaTransport.bind(.server(), group: group)
        let received = Received()
        server.onRTP = { packet in received.rtp.withLockedValue { $0.append(packet) } }
        server.start(remote: TransportParameters(ice: client.localParameters.ice, fingerprint: client.localParameters.fingerprint,
                                                 candidates: [], dtlsRole: .client))
        client.start(remote: server.localParameters)
        #expect(await eventually { try await client.state.get() == .connected })
        // Both sides take new credentials, as after an offer/answer with new ice-ufrag/ice-pwd.
        let serverNew = ICECredentials.random()
        let clientNew = ICECredentials.random()
        var serverParameters = server.localParameters
        serverParameters.ice = serverNew
        // The answerer takes the new credentials first (it does on receiving the offer), then the
        // offerer starts checking with them.
        server.session.restartICE(local: serverNew, remote: TransportParameters(ice: clientNew, fingerprint: client.localParameters.fingerprint,
                                                                                candidates: [], dtlsRole: .client))
        #expect(await eventually { try await server.session.localCredentials.get() == serverNew })
        client.session.restartICE(local: clientNew, remote: serverParameters)
        #expect(await eventually { try await client.session.localCredentials.get() == clientNew })
        #expect(await eventually { try await client.state.get() == .connected })
        client.sendRTP(rtpPacket(ssrc: 5, sequence: 1, payload: [7]))
        #expect(await eventually { received.rtp.withLockedValue { $0.count } == 1 })
        await client.close()
        await server.close()
    }

    @Test("consent that expires fails the session; an ICE restart brings it back with DTLS and SRTP kept")
    func restartAfterConsentExpired() async throws {
        let group = MediaTransportTests.group
        var configuration = MediaTransportConfiguration.client()
        configuration.iceTimers.consentInterval = 0.2
        configuration.iceTimers.disconnectAfter = 0.5
        configuration.iceTimers.consentTimeout = 1
        let client = try await MediaTransport.bind(configuration, group: group)
        let server = try await MediaTransport.bind(.server(), group: group)
        let states = NIOLockedValueBox<[MediaTransportState]>([])
        client.onStateChange = { state in states.withLockedValue { $0.append(state) } }
        let received = Received()
        server.onRTP = { packet in received.rtp.withLockedValue { $0.append(packet) } }
        let clientFirst = client.localParameters
        server.start(remote: TransportParameters(ice: clientFirst.ice, fingerprint: clientFirst.fingerprint, candidates: [], dtlsRole: .client))
        client.start(remote: server.localParameters)
        #expect(await eventually { try await client.state.get() == .connected })
        // The server takes new credentials the client does not know: its consent checks go unanswered.
        let serverNew = ICECredentials.random(), clientNew = ICECredentials.random()
        server.session.restartICE(local: serverNew, remote: TransportParameters(ice: clientNew, fingerprint: clientFirst.fingerprint,
                                                                                candidates: [], dtlsRole: .client))
        #expect(await eventually(5) {
            if case .failed = try await client.state.get() { return true }
            return false
        })
        var serverParameters = server.localParameters
        serverParameters.ice = serverNew
        client.session.restartICE(local: clientNew, remote: serverParameters)
        #expect(await eventually { try await client.state.get() == .connected })
        client.sendRTP(rtpPacket(ssrc: 5, sequence: 1, payload: [7]))
        #expect(await eventually { received.rtp.withLockedValue { $0.count } == 1 })
        let seen = states.withLockedValue { $0 }
        #expect(seen.contains { if case .disconnected = $0 { true } else { false } })
        #expect(seen.suffix(2) == [.connecting, .connected], "\(seen)")
        await client.close()
        await server.close()
    }
}

@Suite("Dual-stack sockets (`::`)", .serialized)
struct DualStackTests {
    /// (server bind, client bind, the server candidate the client checks).
    static let cases: [(String, String, String)] = [
        ("::", "0.0.0.0", "127.0.0.1"),  // an IPv4 client on a dual-stack server
        ("0.0.0.0", "::", "127.0.0.1"),  // a dual-stack client to an IPv4 server
        ("::", "::", "::1"),             // IPv6 both ways
    ]

    @Test("ICE, DTLS and SRTP over a dual-stack socket; the session sees plain IPv4 addresses for IPv4 peers", arguments: cases)
    func connects(serverHost: String, clientHost: String, candidate: String) async throws {
        let group = MediaTransportTests.group
        let port = try await SharedMediaPort.bind(.server(host: serverHost), group: group)
        let client = try await MediaTransport.bind(.client(host: clientHost), group: group)
        let received = Received()
        let session = try await port.makeSession(remote: TransportParameters(
            ice: client.localParameters.ice, fingerprint: client.localParameters.fingerprint, candidates: [], dtlsRole: .client)).get()
        session.onRTP = { packet in received.rtp.withLockedValue { $0.append(packet) } }
        var remote = session.localParameters
        remote.candidates = [try SocketAddress(ipAddress: candidate, port: try #require(port.localAddress?.port))]
        client.start(remote: remote)
        #expect(await eventually { try await client.state.get() == .connected })
        #expect(await eventually { try await session.state.get() == .connected })
        for sequence in UInt16(0)..<10 { client.sendRTP(rtpPacket(ssrc: 7, sequence: sequence, payload: [1])) }
        #expect(await eventually { received.rtp.withLockedValue { $0.count } == 10 })
        // What the server's session calls its peer: no `::ffff:` for an IPv4 one.
        let peer = try await session.stats.get().remoteAddress ?? ""
        #expect(candidate.contains(":") ? peer.hasPrefix("[::1]:") : peer.hasPrefix("127.0.0.1:"), "\(peer)")
        let path = try await client.stats.get().remoteAddress ?? ""
        #expect(candidate.contains(":") ? path.hasPrefix("[::1]:") : path.hasPrefix("127.0.0.1:"), "\(path)")
        await client.close()
        await port.close()
    }

    @Test("IPv4-mapped addresses map and unmap; others pass through")
    func mapping() throws {
        let v4 = try SocketAddress(ipAddress: "10.77.0.1", port: 7882)
        let mapped = DualStack.mapped(v4)
        #expect(mapped.ipAddress == "::ffff:10.77.0.1" && mapped.port == 7882, "\(mapped)")
        #expect(DualStack.unmapped(mapped) == v4)
        let v6 = try SocketAddress(ipAddress: "fd77::1", port: 7882)
        #expect(DualStack.mapped(v6) == v6 && DualStack.unmapped(v6) == v6)
        #expect(DualStack.unmapped(v4) == v4)
    }
}

@Suite("A media socket that a send error closes is bound again", .serialized)
struct SocketKeeperTests {
    /// A datagram to the broadcast address without SO_BROADCAST fails with EACCES, which NIO does
    /// not forgive (as EPERM from a host firewall): the socket closes.
    static func sendRejected(on channel: Channel) async {
        let broadcast = try! SocketAddress(ipAddress: "255.255.255.255", port: 9)
        try? await channel.writeAndFlush(AddressedEnvelope(remoteAddress: broadcast, data: ByteBuffer(bytes: [1, 2, 3])))
        try? await channel.closeFuture.get()
    }

    @Test("the client's socket and the server's port each close on a rejected send and come back on the same port; media goes on both ways")
    func rebinds() async throws {
        let group = MediaTransportTests.group
        let port = try await SharedMediaPort.bind(.server(), group: group)
        let client = try await MediaTransport.bind(.client(), group: group)
        let atServer = NIOLockedValueBox<Int>(0), atClient = NIOLockedValueBox<Int>(0)
        let session = try await port.makeSession(remote: TransportParameters(
            ice: client.localParameters.ice, fingerprint: client.localParameters.fingerprint, candidates: [], dtlsRole: .client)).get()
        session.onRTP = { _ in atServer.withLockedValue { $0 += 1 } }
        client.onRTP = { _ in atClient.withLockedValue { $0 += 1 } }
        client.start(remote: session.localParameters)
        #expect(await eventually { try await session.state.get() == .connected })
        let next = NIOLockedValueBox<UInt16>(0)
        func exchange(_ count: Int) async -> Bool {
            let (server0, client0) = (atServer.withLockedValue { $0 }, atClient.withLockedValue { $0 })
            // New sequence numbers each time: SRTP drops a replay.
            let first = next.withLockedValue { value in defer { value &+= UInt16(count) }; return value }
            for sequence in first..<first + UInt16(count) {
                client.sendRTP(rtpPacket(ssrc: 7, sequence: sequence, payload: [1]))
                session.sendRTP(rtpPacket(ssrc: 8, sequence: sequence, payload: [2]))
            }
            return await eventually {
                atServer.withLockedValue { $0 } - server0 == count && atClient.withLockedValue { $0 } - client0 == count
            }
        }
        #expect(await exchange(10))
        let clientPort = client.localAddress?.port, serverPort = port.localAddress?.port
        await Self.sendRejected(on: client.channel)
        #expect(await eventually { try await client.socketRebinds.get() == 1 })
        #expect(await exchange(10), "after the client's socket was bound again")
        await Self.sendRejected(on: port.channel)
        #expect(await eventually { try await port.socketRebinds.get() == 1 })
        #expect(await exchange(10), "after the server's port was bound again")
        #expect(client.localAddress?.port == clientPort && port.localAddress?.port == serverPort)
        let states = (try await session.state.get(), try await client.state.get())
        #expect(states.0 == .connected && states.1 == .connected)
        await client.close()
        await port.close()
    }
}
