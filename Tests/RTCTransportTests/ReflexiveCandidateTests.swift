import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import TestKit
import Testing
@testable import RTCTransport

/// A STUN server for tests: answers Binding requests with `mapped` (a NAT it pretends to be), or
/// with the request's own source when `mapped` is nil; or stays silent.
private final class FakeSTUNServer: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    typealias OutboundOut = AddressedEnvelope<ByteBuffer>
    let mapped: STUNAddress?
    let silent: Bool
    let requests = NIOLockedValueBox(0)

    init(mapped: STUNAddress?, silent: Bool = false) {
        self.mapped = mapped
        self.silent = silent
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let envelope = unwrapInboundIn(data)
        guard let request = try? STUNMessage(parsing: Array(envelope.data.readableBytesView)), request.messageClass == .request else { return }
        requests.withLockedValue { $0 += 1 }
        guard !silent else { return }
        let source = envelope.remoteAddress
        let seen = mapped ?? STUNAddress(ipv4: source.ipAddress ?? "", port: UInt16(source.port ?? 0))!
        let response = STUNMessage(messageClass: .successResponse, transactionID: request.transactionID,
                                   attributes: [.xorMappedAddress(seen, transactionID: request.transactionID)])
        context.writeAndFlush(wrapOutboundOut(AddressedEnvelope(remoteAddress: source, data: ByteBuffer(bytes: response.serialized))),
                              promise: nil)
    }

    func start(group: EventLoopGroup) async throws -> Channel {
        try await DatagramBootstrap(group: group).channelInitializer { channel in
            channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(self) }
        }.bind(host: "127.0.0.1", port: 0).get()
    }
}

@Suite("Server-reflexive candidates")
struct ReflexiveCandidateTests {
    @Test("a STUN server behind a NAT's mapping gives a srflx candidate, offered in SDP with its base, read back the same")
    func gathered() async throws {
        let group = MediaTransportTests.group
        let stun = FakeSTUNServer(mapped: STUNAddress(ipv4: "203.0.113.7", port: 40000))
        let server = try await stun.start(group: group)
        var configuration = MediaTransportConfiguration.client()
        configuration.stunServers = [try #require(server.localAddress)]
        let transport = try await MediaTransport.bind(configuration, group: group)
        let local = transport.localParameters
        let base = try #require(local.candidates.first)
        #expect(local.reflexiveCandidates == [ReflexiveCandidate(address: try SocketAddress(ipAddress: "203.0.113.7", port: 40000), base: base)])
        let description = SessionDescription.make(sessionID: 1, transport: local, iceLite: false, setup: "actpass", sections: [
            MediaSectionDescription(mid: "0", kind: .video, direction: .sendonly)])
        #expect(description.serialized.contains("203.0.113.7 40000 typ srflx raddr \(base.ipAddress!) rport \(base.port!)"), "\(description.serialized)")
        let parsed = try SessionDescription(parsing: description.serialized).transportParameters(offererRole: .client)
        #expect(parsed.reflexiveCandidates == local.reflexiveCandidates)
        #expect(stun.requests.withLockedValue { $0 } == 1)
        await transport.close()
        try await server.close()
    }

    @Test("no NAT (the mapping is the host candidate) gives none; a silent STUN server gives none within the timeout, after three requests")
    func noneAndSilent() async throws {
        let group = MediaTransportTests.group
        let echo = FakeSTUNServer(mapped: nil), silent = FakeSTUNServer(mapped: nil, silent: true)
        let echoServer = try await echo.start(group: group), silentServer = try await silent.start(group: group)
        var configuration = MediaTransportConfiguration.client()
        configuration.stunServers = [try #require(echoServer.localAddress)]
        let direct = try await MediaTransport.bind(configuration, group: group)
        #expect(direct.localParameters.reflexiveCandidates.isEmpty)
        configuration.stunServers = [try #require(silentServer.localAddress)]
        let started = NIODeadline.now()
        let unanswered = try await MediaTransport.bind(configuration, group: group)
        let tookMs = (NIODeadline.now() - started).nanoseconds / 1_000_000
        #expect(unanswered.localParameters.reflexiveCandidates.isEmpty)
        #expect(tookMs < 2000, "bind took \(tookMs) ms")  // bounded by the 300 ms timeout, not a hang
        #expect(silent.requests.withLockedValue { $0 } == 3)
        await direct.close()
        await unanswered.close()
        try await echoServer.close()
        try await silentServer.close()
    }
}
