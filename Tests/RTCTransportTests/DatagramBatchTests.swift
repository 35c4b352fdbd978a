import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import TestKit
import Testing
@testable import RTCTransport

/// A UDP socket that keeps what it receives.
private final class Sink: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    let received = NIOLockedValueBox<[[UInt8]]>([])
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let bytes = Array(unwrapInboundIn(data).data.readableBytesView)
        received.withLockedValue { $0.append(bytes) }
    }

    static func bind(host: String = "127.0.0.1", group: EventLoopGroup) async throws -> (Channel, Sink) {
        let sink = Sink()
        let channel = try await DatagramBootstrap(group: group)
            .channelInitializer { channel in channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(sink) } }
            .bind(host: host, port: 0).get()
        return (channel, sink)
    }
}

@Suite("Media datagrams go out in batches (sendmmsg) on the socket's own descriptor", .serialized)
struct DatagramBatchTests {
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)

    @Test("one flush sends every queued datagram, each to its own address; a datagram the kernel refuses is skipped and counted and the socket stays open")
    func batch() async throws {
        let socket = try await bindMediaSocket(host: "127.0.0.1", port: 0, group: Self.group, handler: InboundHandler())
        let sinks = try await [Sink.bind(group: Self.group), Sink.bind(group: Self.group), Sink.bind(group: Self.group)]
        // The broadcast address without SO_BROADCAST: EACCES, as a host firewall's EPERM.
        let refused = try SocketAddress(ipAddress: "255.255.255.255", port: 9)
        let result = try await socket.channel.eventLoop.submit { () -> (queuedBefore: Int, sent: Int, refused: Int, error: CInt) in
            let batch = socket.batch
            for round in 0..<3 {
                for (index, sink) in sinks.enumerated() {
                    batch.enqueue(ByteBuffer(bytes: [UInt8(round), UInt8(index)]), to: sink.0.localAddress!)
                }
                if round == 1 { batch.enqueue(ByteBuffer(bytes: [0xFF]), to: refused) }
            }
            let before = batch.sent
            batch.flush()
            return (before, batch.sent, batch.refused, batch.lastError)
        }.get()
        #expect(result.queuedBefore == 0, "nothing leaves before the flush")
        #expect(result.sent == 9 && result.refused == 1 && result.error == EACCES)
        for (index, sink) in sinks.enumerated() {
            let expected = (0..<3).map { [UInt8($0), UInt8(index)] }
            #expect(await eventually { sink.1.received.withLockedValue { $0 } == expected }, "sink \(index): in order, once each")
        }
        // NIO closed a datagram channel on such an error; the batch only skips the datagram.
        #expect(socket.channel.isActive && socket.batch.isOpen)
        for sink in sinks { try await sink.0.close() }
        try await socket.channel.close()
    }

    @Test("more datagrams than a batch holds go out in several calls, none lost")
    func overflow() async throws {
        let socket = try await bindMediaSocket(host: "127.0.0.1", port: 0, group: Self.group, handler: InboundHandler())
        let (channel, sink) = try await Sink.bind(group: Self.group)
        let count = DatagramBatch.capacity * 2 + 5
        let sent = try await socket.channel.eventLoop.submit {
            for index in 0..<count { socket.batch.enqueue(ByteBuffer(bytes: [UInt8(index & 0xFF), UInt8(index >> 8)]), to: channel.localAddress!) }
            socket.batch.flush()
            return socket.batch.sent
        }.get()
        #expect(sent == count)
        #expect(await eventually { sink.received.withLockedValue { $0.count } == count })
        try await channel.close()
        try await socket.channel.close()
    }

    @Test("a dual-stack socket sends to IPv4 peers (as ::ffff:a.b.c.d) and to IPv6 ones")
    func dualStack() async throws {
        guard let socket = try? await bindMediaSocket(host: "::", port: 0, group: Self.group, handler: InboundHandler()) else {
            Issue.record("no IPv6 on this machine: the dual-stack path is untested")
            return
        }
        let v4 = try await Sink.bind(host: "127.0.0.1", group: Self.group)
        let v6 = try await Sink.bind(host: "::1", group: Self.group)
        try await socket.channel.eventLoop.submit {
            socket.batch.enqueue(ByteBuffer(bytes: [4]), to: v4.0.localAddress!)
            socket.batch.enqueue(ByteBuffer(bytes: [6]), to: v6.0.localAddress!)
            socket.batch.flush()
        }.get()
        #expect(await eventually { v4.1.received.withLockedValue { $0 } == [[4]] && v6.1.received.withLockedValue { $0 } == [[6]] })
        // An IPv6 destination from an IPv4 socket is not queued at all.
        let v4Only = try await bindMediaSocket(host: "127.0.0.1", port: 0, group: Self.group, handler: InboundHandler())
        let queued = try await v4Only.channel.eventLoop.submit { v4Only.batch.enqueue(ByteBuffer(bytes: [6]), to: v6.0.localAddress!) }.get()
        #expect(!queued)
        for channel in [v4.0, v6.0, socket.channel, v4Only.channel] { try await channel.close() }
    }

    @Test("the buffers of sent datagrams are written again (no allocation per datagram), and the port is free once the channel closes")
    func reuseAndClose() async throws {
        let socket = try await bindMediaSocket(host: "127.0.0.1", port: 0, group: Self.group, handler: InboundHandler())
        let (channel, sink) = try await Sink.bind(group: Self.group)
        let reused = try await socket.channel.eventLoop.submit { () -> Bool in
            var first = socket.batch.buffer(minimumCapacity: 1500)
            first.writeBytes([1, 2, 3])
            let storage = first.withVeryUnsafeBytes { UInt(bitPattern: $0.baseAddress) }
            socket.batch.enqueue(first, to: channel.localAddress!)
            first = ByteBuffer()  // the caller lets go of it, as the fan-out does
            socket.batch.flush()
            let again = socket.batch.buffer(minimumCapacity: 1500)
            return again.readableBytes == 0 && again.withVeryUnsafeBytes { UInt(bitPattern: $0.baseAddress) } == storage
        }.get()
        #expect(reused)
        #expect(await eventually { sink.received.withLockedValue { $0 } == [[1, 2, 3]] })
        let port = socket.channel.localAddress!.port!
        try await socket.channel.close()
        // The duplicate is closed by the channel's closeFuture (an unexpected close; the
        // transports close it themselves first): a callback registered at bind, so before ours.
        try await socket.channel.closeFuture.get()
        #expect(try await socket.channel.eventLoop.submit { socket.batch.isOpen }.get() == false)
        // The batch's duplicate descriptor is closed with the channel: the same port binds again.
        let again = try await bindMediaSocket(host: "127.0.0.1", port: port, group: Self.group, handler: InboundHandler())
        #expect(again.channel.localAddress?.port == port)
        try await again.channel.close()
        try await channel.close()
    }
}
