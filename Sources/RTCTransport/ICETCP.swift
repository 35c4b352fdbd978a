import NIOCore
import NIOPosix

#if canImport(Glibc)
import Glibc
#endif

/// RFC 4571 framing: each packet on a TCP connection is preceded by its length (16 bits, big
/// endian). ICE-TCP (RFC 6544) carries STUN, DTLS, SRTP and SRTCP this way, one datagram a frame.
public enum RFC4571 {
    /// The largest frame the length field can describe.
    public static let maxFrame = 65535

    /// Takes the next whole frame off the front of `buffer` (nil until one has fully arrived).
    /// Empty frames are skipped. Never traps: any bytes are a length and a payload.
    public static func nextFrame(from buffer: inout ByteBuffer) -> ByteBuffer? {
        while let length = buffer.getInteger(at: buffer.readerIndex, as: UInt16.self) {
            guard buffer.readableBytes >= 2 + Int(length) else { return nil }
            buffer.moveReaderIndex(forwardBy: 2)
            guard length > 0 else { continue }
            return buffer.readSlice(length: Int(length))
        }
        return nil
    }

    /// `bytes` with its length in front (nil when it is too large to frame).
    public static func frame(_ bytes: ByteBuffer, allocator: ByteBufferAllocator) -> ByteBuffer? {
        guard bytes.readableBytes <= maxFrame else { return nil }
        var framed = allocator.buffer(capacity: 2 + bytes.readableBytes)
        framed.writeInteger(UInt16(bytes.readableBytes))
        framed.writeImmutableBuffer(bytes)
        return framed
    }

}

/// Splits a TCP byte stream into the messages `next` takes off its front (RFC 4571 frames for
/// ICE-TCP, STUN and ChannelData for TURN over TCP).
final class StreamFrameDecoder: ByteToMessageDecoder {
    typealias InboundOut = ByteBuffer
    private let next: (inout ByteBuffer) -> ByteBuffer?

    init(_ next: @escaping (inout ByteBuffer) -> ByteBuffer?) { self.next = next }

    func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let frame = next(&buffer) else { return .needMoreData }
        context.fireChannelRead(wrapInboundOut(frame))
        return .continue
    }

    func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        while let frame = next(&buffer) { context.fireChannelRead(wrapInboundOut(frame)) }
        return .needMoreData
    }
}

/// Where a session's datagrams go: the UDP socket, or the TCP connection (ICE-TCP) a remote
/// address is reached over. Used on the event loop that owns the UDP channel and the connections.
final class MediaPaths: @unchecked Sendable {
    /// The UDP socket (a new one after ``SocketKeeper`` bound it again), and the batch its media
    /// is written with.
    private(set) var udp: Channel
    private var batch: DatagramBatch
    /// Established ICE-TCP connections by their remote address.
    private(set) var tcp: [SocketAddress: Channel] = [:]
    /// Relayed paths by their key (``relayKey(_:serverIndex:peer:)``): the relay and the peer it reaches;
    /// and the relays by their server's address (UDP ones share the socket: what comes from their
    /// server is theirs).
    private(set) var relayed: [SocketAddress: (relay: TURNRelay, peer: SocketAddress)] = [:]
    var relayServers: [SocketAddress: TURNRelay] = [:]
    /// The key of each (relay, peer) path, and every key ever given (a write to one whose relay is
    /// gone is dropped: it is no address the UDP socket may send to).
    private var relayKeys: [RelayPath: SocketAddress] = [:]
    private var issuedKeys: Set<SocketAddress> = []
    private var nextRelayKey = 0
    private struct RelayPath: Hashable {
        let relay: ObjectIdentifier
        let peer: SocketAddress
    }
    /// Bytes a TCP path may have waiting before media is dropped on it (STUN and DTLS are not).
    /// ICE-TCP connections one port keeps at once; more are closed as they come.
    static let maxConnections = 4096
    /// ICE-TCP connections from one IP address (the signaling port's default per-address bound):
    /// one host cannot take the port's connections from everyone else.
    static let maxConnectionsPerAddress = 256
    /// Connections by remote IP address, for the bound above.
    private var perAddress: [String: Int] = [:]

    init(udp: MediaSocket) {
        self.udp = udp.channel
        batch = udp.batch
    }

    /// The UDP socket was bound again (same address and port): writes go to the new one.
    func replaceUDP(_ socket: MediaSocket) {
        batch.flush()
        lostBefore = (lostBefore.refused + batch.refused, lostBefore.dropped + batch.dropped)
        udp = socket.channel
        batch = socket.batch
        sendable.removeAll()
    }

    /// Hands every UDP datagram written without a flush to the kernel (one sendmmsg).
    func flush() { batch.flush() }

    /// A buffer to write a datagram into (``DatagramBatch/buffer(minimumCapacity:)``).
    func buffer(minimumCapacity: Int) -> ByteBuffer { batch.buffer(minimumCapacity: minimumCapacity) }

    /// UDP datagrams the kernel refused (each skipped: EPERM, no route, too big) and dropped on a
    /// full send buffer, on this transport's sockets so far.
    var udpLosses: (refused: Int, dropped: Int) { (batch.refused + lostBefore.refused, batch.dropped + lostBefore.dropped) }
    private var lostBefore = (refused: 0, dropped: 0)

    /// Registers a connection's path, unless the port or its address has all it may have.
    func add(_ connection: Channel, for remote: SocketAddress) -> Bool {
        let ip = remote.ipAddress ?? ""
        guard tcp.count < Self.maxConnections, perAddress[ip, default: 0] < Self.maxConnectionsPerAddress else { return false }
        perAddress[ip, default: 0] += 1
        tcp[remote] = connection
        return true
    }

    func remove(_ remote: SocketAddress) {
        guard tcp.removeValue(forKey: remote) != nil else { return }
        let ip = remote.ipAddress ?? ""
        perAddress[ip] = perAddress[ip].flatMap { $0 > 1 ? $0 - 1 : nil }
    }

    /// The key ICE knows the path to `peer` through `relay` by: an address of RFC 6666's
    /// discard-only prefix (100::/64), which is no peer's, so that the relayed path and the direct
    /// one to the same peer are two candidates, checked side by side. The port is the peer's.
    func relayKey(_ relay: TURNRelay, serverIndex: Int, peer: SocketAddress) -> SocketAddress? {
        let path = RelayPath(relay: ObjectIdentifier(relay), peer: peer)
        if let key = relayKeys[path] { return key }
        nextRelayKey += 1
        let index = nextRelayKey
        guard let key = try? SocketAddress(ipAddress: "100::\(serverIndex + 1):\(String(index, radix: 16))", port: peer.port ?? 0) else {
            return nil
        }
        relayKeys[path] = key
        issuedKeys.insert(key)
        relayed[key] = (relay, peer)
        return key
    }

    /// The key of the path through `relay` to `peer`, if it has one: what the relay delivers from
    /// the peer comes from there.
    func relayKey(_ relay: TURNRelay, peer: SocketAddress) -> SocketAddress? {
        relayKeys.isEmpty ? nil : relayKeys[RelayPath(relay: ObjectIdentifier(relay), peer: peer)]
    }

    /// Forgets the paths through `relay` (closed).
    func removeRelayed(_ relay: TURNRelay) {
        for (key, path) in relayed where path.relay === relay { relayed[key] = nil }
        relayKeys = relayKeys.filter { $0.key.relay != ObjectIdentifier(relay) }
    }

    /// The peer behind `address`: the relayed peer for a relay key, else the address itself.
    func peer(of address: SocketAddress) -> SocketAddress { relayed.isEmpty ? address : relayed[address]?.peer ?? address }

    /// "tcp" for an address reached over ICE-TCP, "relay/udp" or "relay/tcp" through TURN, else "udp".
    func transport(of address: SocketAddress) -> String {
        if !tcp.isEmpty, tcp[address] != nil { return "tcp" }
        return relayed[address]?.relay.pathName ?? "udp"
    }

    /// Writes `bytes` to `address` over its path; unflushed UDP writes go out together at the next
    /// flush (sendmmsg). A TCP path that does not drain drops media rather than queue it without bound.
    func write(_ bytes: ByteBuffer, to address: SocketAddress, flush: Bool) {
        // Every packet the server forwards comes here: the lookups only when there are such paths.
        if !tcp.isEmpty, let connection = tcp[address] {
            guard connection.isWritable || !PacketDemultiplexer.isMedia(bytes.readableBytesView),
                  let framed = RFC4571.frame(bytes, allocator: connection.allocator)
            else { return }
            connection.writeAndFlush(framed, promise: nil)
            return
        }
        if !issuedKeys.isEmpty, issuedKeys.contains(address) {
            if let path = relayed[address] { path.relay.send(bytes, to: path.peer) }
            return
        }
        // Not through NIO's pipeline: the batch, flushed once per fan-out (``DatagramBatch``).
        batch.enqueue(bytes, to: address)
        if flush { batch.flush() }
    }

    /// Whether the UDP socket can send to `address` at all: the same address family, and a route
    /// (a throwaway UDP socket's `connect` finds one). NIO closes a datagram channel on any send
    /// error but EMSGSIZE and EHOSTUNREACH, so one candidate of the wrong family (an IPv6 address
    /// to an IPv4 socket) or without a route would take the whole transport down.
    func canSend(to address: SocketAddress) -> Bool {
        if let known = sendable[address] { return known }
        let family: Int32
        switch (udp.localAddress, address) {
        // A `::` socket is dual-stack (bindMediaSocket turns IPV6_V6ONLY off): IPv4 goes out mapped.
        case (.v4?, .v4), (.v6?, .v4): family = AF_INET
        case (.v6?, .v6): family = AF_INET6
        default:
            sendable[address] = false
            return false
        }
        let probe = socket(family, Int32(SOCK_DGRAM.rawValue), 0)
        guard probe >= 0 else { return true }
        defer { close(probe) }
        let routed = address.withSockAddr { pointer, size in connect(probe, pointer, socklen_t(size)) == 0 }
        sendable[address] = routed
        return routed
    }
    private var sendable: [SocketAddress: Bool] = [:]

    func closeAll() {
        // The batch's duplicate descriptor goes now, not when NIO fulfils closeFuture a task after
        // the close: whoever closes the transport and binds its port again at once finds it free.
        batch.flush()
        batch.close()
        for connection in tcp.values { connection.close(promise: nil) }
        tcp.removeAll()
        perAddress.removeAll()
        for relay in relayServers.values { relay.close() }
        relayed.removeAll()
        relayKeys.removeAll()
        relayServers.removeAll()
    }
}

/// One ICE-TCP connection: registers its path while open and hands each frame on with the
/// connection's remote address, as if it were a datagram from there.
final class TCPPathHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer

    private let paths: MediaPaths
    private let deliver: (ByteBuffer, SocketAddress) -> Void
    private var remote: SocketAddress?
    private var idle: Scheduled<Void>?
    /// A connection that has carried no frame for this long is closed (a port scan, a stray peer).
    static let idleSeconds: Int64 = 30
    /// A new connection's first frame (an ICE check) is due this soon: one opened and left
    /// silent holds a place for seconds, not half a minute.
    static let firstFrameSeconds: Int64 = 5

    init(paths: MediaPaths, deliver: @escaping (ByteBuffer, SocketAddress) -> Void) {
        self.paths = paths
        self.deliver = deliver
    }

    func channelActive(context: ChannelHandlerContext) {
        // A `::` listener sees IPv4 peers as IPv4-mapped: they are plain IPv4 above the socket.
        guard let address = context.remoteAddress.map(DualStack.unmapped), paths.add(context.channel, for: address) else {
            context.close(promise: nil)
            return
        }
        remote = address
        armIdle(context, seconds: Self.firstFrameSeconds)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard let remote else { return }
        armIdle(context)
        deliver(unwrapInboundIn(data), remote)
    }

    func channelInactive(context: ChannelHandlerContext) {
        idle?.cancel()
        if let remote { paths.remove(remote) }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    private func armIdle(_ context: ChannelHandlerContext, seconds: Int64 = idleSeconds) {
        idle?.cancel()
        let channel = context.channel
        idle = context.eventLoop.scheduleTask(in: .seconds(seconds)) { channel.close(promise: nil) }
    }
}

enum ICETCP {
    /// The pipeline of an ICE-TCP connection: framing, then the path.
    static func configure(_ channel: Channel, paths: MediaPaths, deliver: @escaping (ByteBuffer, SocketAddress) -> Void) -> EventLoopFuture<Void> {
        channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(StreamFrameDecoder(RFC4571.nextFrame)))
            try channel.pipeline.syncOperations.addHandler(TCPPathHandler(paths: paths, deliver: deliver))
        }
    }

    /// A passive ICE-TCP listener (the server's `tcptype passive` candidate) on `loop`, the loop of
    /// the UDP port it shares sessions with.
    static func listen(host: String, port: Int, loop: EventLoop, paths: MediaPaths,
                       deliver: @escaping @Sendable (ByteBuffer, SocketAddress) -> Void) async throws -> Channel {
        try await ServerBootstrap(group: loop)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: 1024)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in configure(channel, paths: paths, deliver: deliver) }
            .bind(host: host, port: port).get()
    }

    /// An active ICE-TCP connection to a remote passive candidate, on `loop`.
    static func connect(to remote: SocketAddress, loop: EventLoop, paths: MediaPaths,
                        deliver: @escaping @Sendable (ByteBuffer, SocketAddress) -> Void) -> EventLoopFuture<Channel> {
        ClientBootstrap(group: loop)
            .connectTimeout(.seconds(3))
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in configure(channel, paths: paths, deliver: deliver) }
            .connect(to: remote)
    }
}
