import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// How a channel's datagrams reach their session.
protocol DatagramRouter: AnyObject {
    func route(_ envelope: AddressedEnvelope<ByteBuffer>)
}

/// Passes datagrams to the router, on the event loop.
final class InboundHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    weak var router: DatagramRouter?

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        router?.route(unwrapInboundIn(data))
    }
}

/// A media UDP socket: NIO's channel reads it (recvmmsg) and writes what is not media; the batch
/// writes media (``DatagramBatch``: one sendmmsg per fan-out).
struct MediaSocket: Sendable {
    let channel: Channel
    let batch: DatagramBatch
}

/// Binds a UDP socket with vectored reads (recvmmsg) for media, and its ``DatagramBatch``. The
/// socket is made and bound here and handed to NIO, so that the batch can write on (a duplicate
/// of) its descriptor.
func bindMediaSocket(host: String, port: Int, group: EventLoopGroup, handler: InboundHandler) async throws -> MediaSocket {
    // An IPv6 address (`::` above all) makes a dual-stack socket: IPv4 peers too, as mapped addresses
    // that the pipeline turns back into IPv4 ones both ways (``DualStack``).
    let address = try SocketAddress.makeAddressResolvingHost(host, port: port)
    let ipv6: Bool
    switch address {
    case .v4: ipv6 = false
    case .v6: ipv6 = true
    case .unixDomainSocket: throw IOError(errnoCode: EAFNOSUPPORT, reason: "media socket on \(host)")
    }
    let family = ipv6 ? AF_INET6 : AF_INET
    let descriptor = socket(family, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
    guard descriptor >= 0 else { throw IOError(errnoCode: errno, reason: "socket") }
    var handedOver = false
    defer { if !handedOver { close(descriptor) } }
    if ipv6 {
        var off: CInt = 0
        guard setsockopt(descriptor, CInt(IPPROTO_IPV6), IPV6_V6ONLY, &off, socklen_t(MemoryLayout<CInt>.size)) == 0 else {
            throw IOError(errnoCode: errno, reason: "setsockopt(IPV6_V6ONLY)")
        }
    }
    // No SO_REUSEADDR: on Linux it lets two UDP sockets that both set it share a port, the kernel
    // then even hands an ephemeral port already in use to a second socket, and datagrams for one
    // peer reach another (seen as ICE checks answered 400 by the wrong agent). UDP has no
    // TIME_WAIT, so a closed socket's port can be bound again at once without it.
    let bound = address.withSockAddr { pointer, size in bind(descriptor, pointer, socklen_t(size)) }
    guard bound == 0 else { throw IOError(errnoCode: errno, reason: "bind(\(host):\(port))") }
    guard let batch = DatagramBatch(duplicating: descriptor, family: family) else {
        throw IOError(errnoCode: errno, reason: "dup")
    }
    handedOver = true
    let channel = try await DatagramBootstrap(group: group)
        // A 720p screen keyframe is 100+ packets sent back to back: the default 208 KiB receive
        // buffer overflows on it. Ask for 4 MiB (the kernel caps it at net.core.rmem_max).
        .channelOption(.socketOption(.so_rcvbuf), value: 4 << 20)
        .channelOption(.socketOption(.so_sndbuf), value: 1 << 20)
        // 32 datagrams a recvmmsg: 8 forwarded 7 % fewer packets a second on a saturated media
        // thread (bench sfu) and cost no less on a light one (bench janus-load), same run.
        .channelOption(.datagramVectorReadMessageCount, value: 32)
        // With vector reads NIO splits one receive buffer across the messages: 2 KiB each.
        .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 32 * 2048))
        .channelInitializer { channel in
            channel.eventLoop.makeCompletedFuture {
                if ipv6 { try channel.pipeline.syncOperations.addHandler(DualStackHandler()) }
                try channel.pipeline.syncOperations.addHandler(handler)
            }
        }
        .withBoundSocket(descriptor).get()
    // The duplicate goes with the socket: the port is free again once the channel has closed.
    channel.closeFuture.whenComplete { _ in batch.close() }
    return MediaSocket(channel: channel, batch: batch)
}

/// On a dual-stack socket: IPv4-mapped source addresses in as IPv4, IPv4 destinations out mapped.
final class DualStackHandler: ChannelDuplexHandler, @unchecked Sendable {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    typealias InboundOut = AddressedEnvelope<ByteBuffer>
    typealias OutboundIn = AddressedEnvelope<ByteBuffer>
    typealias OutboundOut = AddressedEnvelope<ByteBuffer>

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var envelope = unwrapInboundIn(data)
        envelope.remoteAddress = DualStack.unmapped(envelope.remoteAddress)
        context.fireChannelRead(wrapInboundOut(envelope))
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        var envelope = unwrapOutboundIn(data)
        envelope.remoteAddress = DualStack.mapped(envelope.remoteAddress)
        context.write(wrapOutboundOut(envelope), promise: promise)
    }
}

extension DatagramBootstrap {
    /// Sets `option` only when `condition` holds.
    fileprivate func channelOption<Option: ChannelOption>(_ option: Option, value: Option.Value, if condition: Bool) -> DatagramBootstrap {
        condition ? channelOption(option, value: value) : self
    }
}

/// The host candidates of a socket bound as `configuration` says (``LocalInterfaces/candidates(boundTo:port:announced:includeLoopback:)``),
/// or the socket's own address when that gives none.
func configuredCandidates(_ configuration: MediaTransportConfiguration, channel: Channel) -> [SocketAddress] {
    let candidates = LocalInterfaces.candidates(boundTo: configuration.host, port: channel.localAddress?.port ?? 0,
                                                announced: configuration.announcedHosts,
                                                includeLoopback: configuration.includeLoopbackCandidates)
    return candidates.isEmpty ? channel.localAddress.map { [$0] } ?? [] : candidates
}

/// One peer on its own UDP socket: a client's transport (BUNDLE, rtcp-mux).
public final class MediaTransport: @unchecked Sendable, DatagramRouter {
    public let channel: Channel
    /// The ICE/DTLS/SRTP state of the one peer.
    public let session: MediaSession
    /// The UDP socket and any ICE-TCP connection to the peer.
    private let paths: MediaPaths
    /// Timers of the start (ICE-TCP, relays), cancelled at close.
    private var scheduled: [Scheduled<Void>] = []
    /// Binds the socket again should it close on its own (``SocketKeeper``); set once at bind.
    private var keeper: SocketKeeper?
    /// ICE-TCP connections open now (tests: one not taken is closed).
    var openTCPConnections: EventLoopFuture<Int> { channel.eventLoop.submit { self.paths.tcp.count } }
    /// How many times the socket was bound again, on the event loop.
    public var socketRebinds: EventLoopFuture<Int> { channel.eventLoop.submit { self.keeper?.rebinds ?? 0 } }

    /// Binds a UDP socket and makes a transport on it.
    public static func bind(_ configuration: MediaTransportConfiguration, group: EventLoopGroup) async throws -> MediaTransport {
        let certificate = try DTLSCertificate()
        let handler = InboundHandler()
        var configuration = configuration
        let socket: MediaSocket
        do {
            socket = try await bindMediaSocket(host: configuration.host, port: configuration.port, group: group, handler: handler)
        } catch where configuration.host == "::" {
            // A kernel without IPv6: every IPv4 interface instead.
            configuration.host = "0.0.0.0"
            socket = try await bindMediaSocket(host: configuration.host, port: configuration.port, group: group, handler: handler)
        }
        let channel = socket.channel
        let transport = MediaTransport(configuration: configuration, socket: socket, certificate: certificate)
        handler.router = transport
        transport.keeper = SocketKeeper(host: configuration.host, port: channel.localAddress?.port ?? 0, loop: channel.eventLoop,
                                        paths: transport.paths, router: transport)
        transport.keeper?.watch(channel)
        if !configuration.stunServers.isEmpty {
            let found = await transport.gatherReflexive(from: configuration.stunServers, timeout: configuration.stunTimeout)
            transport.reflexive.withLockedValue { $0 = found }
        }
        return transport
    }

    private init(configuration: MediaTransportConfiguration, socket: MediaSocket, certificate: DTLSCertificate) {
        let channel = socket.channel
        self.channel = channel
        boundAddress = channel.localAddress
        let paths = MediaPaths(udp: socket)
        self.paths = paths
        session = MediaSession(configuration: configuration, certificate: certificate,
                               localCandidates: configuredCandidates(configuration, channel: channel),
                               eventLoop: channel.eventLoop, flusher: paths.flush, writer: paths.write)
        session.transportOf = paths.transport(of:)
        session.peerOf = paths.peer(of:)
        session.canSendTo = paths.canSend(to:)
        session.onSelectedAddress = { [weak self] address in self?.selected(address) }
    }

    func route(_ envelope: AddressedEnvelope<ByteBuffer>) {
        if let relay = paths.relayServers[envelope.remoteAddress], relay.server.transport == .udp {
            return relay.receive(envelope.data)
        }
        if !bindings.isEmpty, PacketDemultiplexer.classify(envelope.data.readableBytesView) == .stun,
           let message = try? STUNMessage(parsing: Array(envelope.data.readableBytesView)), message.messageClass == .successResponse,
           bindings[message.transactionID] != nil {
            return answered(message)
        }
        session.receive(envelope.data, from: envelope.remoteAddress)
    }

    // MARK: Server-reflexive candidates (on the event loop)

    /// Binding requests out to STUN servers, by transaction id; the servers that answered, and what they saw.
    private var bindings: [[UInt8]: SocketAddress] = [:]
    private var answeredServers: [SocketAddress] = []
    private var mapped: [SocketAddress] = []
    let reflexive = NIOLockedValueBox<[ReflexiveCandidate]>([])

    /// Asks each STUN server for this socket's address as it sees it (a Binding request, RFC 8489;
    /// again after 100 and 200 ms while unanswered), for at most `timeout`. A mapping that is one of
    /// the host candidates (no NAT on the way) is left out, as is one of a family no host candidate
    /// has. Never fails: a silent server gives nothing.
    func gatherReflexive(from servers: [SocketAddress], timeout: TimeAmount) async -> [ReflexiveCandidate] {
        let loop = channel.eventLoop
        let sendable = servers.filter { paths.canSend(to: $0) }
        guard !sendable.isEmpty else { return [] }
        let send: @Sendable () -> Void = { [self] in
            for server in sendable where !self.answeredServers.contains(server) {
                let request = STUNMessage(messageClass: .request, transactionID: STUNMessage.randomTransactionID(), attributes: [])
                self.bindings[request.transactionID] = server
                self.paths.write(ByteBuffer(bytes: request.serialized), to: server, flush: true)
            }
        }
        let allAnswered: @Sendable () -> Bool = { [self] in self.answeredServers.count >= sendable.count }
        try? await loop.submit(send).get()
        let start = NIODeadline.now()
        var resends: [Int64] = [100, 200]
        while NIODeadline.now() < start + timeout, (try? await loop.submit(allAnswered).get()) == false {
            try? await Task.sleep(for: .milliseconds(10))
            let elapsedMs = (NIODeadline.now() - start).nanoseconds / 1_000_000
            if let next = resends.first, elapsedMs >= next {
                resends.removeFirst()
                try? await loop.submit(send).get()
            }
        }
        return (try? await loop.submit { () -> [ReflexiveCandidate] in
            self.bindings.removeAll()
            let hosts = self.session.localParameters.candidates
            var found: [ReflexiveCandidate] = []
            for address in self.mapped where !hosts.contains(address) && !found.contains(where: { $0.address == address }) {
                guard let base = hosts.first(where: { Self.family(of: $0) == Self.family(of: address) }) else { continue }
                found.append(ReflexiveCandidate(address: address, base: base))
            }
            return found
        }.get()) ?? []
    }

    private func answered(_ message: STUNMessage) {
        guard let server = bindings.removeValue(forKey: message.transactionID),
              let stun = message.xorMappedAddress, let address = try? SocketAddress(stun: stun) else { return }
        if !answeredServers.contains(server) { answeredServers.append(server) }
        mapped.append(DualStack.unmapped(address))
    }

    private static func family(of address: SocketAddress) -> Int {
        switch address {
        case .v4: 4
        case .v6: 6
        default: 0
        }
    }

    /// The socket's address (the same after ``SocketKeeper`` bound it again).
    public var localAddress: SocketAddress? { boundAddress }
    private let boundAddress: SocketAddress?
    public var localParameters: TransportParameters {
        var parameters = session.localParameters
        parameters.reflexiveCandidates = reflexive.withLockedValue { $0 }
        return parameters
    }
    public var state: EventLoopFuture<MediaTransportState> { session.state }
    public var stats: EventLoopFuture<MediaTransportStats> {
        let reflexive = reflexive.withLockedValue { $0 }.map(\.address), hosts = session.localParameters.candidates
        return session.stats.map { stats in
            var stats = stats
            guard let mapped = stats.mappedAddress, stats.transport == "udp" else {
                stats.mappedAddress = nil
                return stats
            }
            // A wildcard socket's host candidates carry its port; a mapping equal to one is no NAT.
            if hosts.contains(mapped) {
                stats.localCandidateType = "host"
                stats.mappedAddress = nil
            } else {
                stats.localCandidateType = reflexive.contains(mapped) ? "srflx" : "prflx"
            }
            return stats
        }
    }
    public var onRTP: (@Sendable (ByteBuffer) -> Void)? {
        get { session.onRTP }
        set { session.onRTP = newValue }
    }
    /// RTP as it arrived, not decrypted (``MediaSession/onProtectedRTP``): `onRTP` is then not called.
    public var onProtectedRTP: (@Sendable (ByteBuffer) -> Void)? {
        get { session.onProtectedRTP }
        set { session.onProtectedRTP = newValue }
    }
    public var onRTCP: (@Sendable (ByteBuffer) -> Void)? {
        get { session.onRTCP }
        set { session.onRTCP = newValue }
    }
    public var onStateChange: (@Sendable (MediaTransportState) -> Void)? {
        get { session.onStateChange }
        set { session.onStateChange = newValue }
    }
    /// Starts ICE towards `remote`: checks to its UDP candidates, and from the start (RFC 8445's
    /// checks on every pair at once, by priority) ICE-TCP connections to its passive candidates
    /// and allocations on the TURN servers, whose paths are checked at a lower priority
    /// (``ICEAgent/addCandidate(_:stopping:preference:now:)``: a direct UDP path that answers is
    /// kept or taken over, and ICE-TCP ranks above a relay). Relayed checks start once a relay is
    /// permitted to reach the peer, and not before `relayAfter`. With `relayOnly`, only through
    /// the TURN servers.
    public func start(remote: TransportParameters) {
        let configuration = session.configuration
        var direct = remote
        if configuration.relayOnly {
            direct.candidates = []
            direct.tcpCandidates = []
        }
        session.start(remote: direct)
        channel.eventLoop.execute {
            if configuration.relayOnly {
                guard !configuration.turnServers.isEmpty else {
                    return self.session.failOnLoop("relay only, and no TURN server to relay through")
                }
                return self.startRelays(remote, notBefore: .now())
            }
            if let delay = configuration.iceTCPAfter, !remote.tcpCandidates.isEmpty {
                if delay <= 0 {
                    self.connectTCP(remote)
                } else {
                    self.scheduled.append(self.channel.eventLoop.scheduleTask(in: .nanoseconds(Int64(delay * 1e9))) { [weak self] in
                        self?.connectTCP(remote)
                    })
                }
            }
            if let delay = configuration.relayAfter, !configuration.turnServers.isEmpty {
                self.startRelays(remote, notBefore: .now() + .nanoseconds(Int64(delay * 1e9)))
            }
        }
    }

    /// ICE restart (RFC 8445 §9) with new local `credentials` towards `remote`'s, and the paths the
    /// start opened beside direct UDP brought back where they were closed once another path won:
    /// ICE-TCP connections to the peer's passive candidates and allocations on the TURN servers
    /// (a restart often follows a changed network, and the path that won may be gone with it).
    /// Relay only: through the TURN servers only, as at the start.
    public func restartICE(local credentials: ICECredentials, remote: TransportParameters) {
        let configuration = session.configuration
        var direct = remote
        if configuration.relayOnly {
            direct.candidates = []
            direct.tcpCandidates = []
        }
        session.restartICE(local: credentials, remote: direct)
        // After the restart's own step on the loop: ICE is looking for a path again.
        channel.eventLoop.execute {
            if configuration.relayOnly {
                guard !configuration.turnServers.isEmpty else { return }
                return self.startRelays(remote, notBefore: .now())
            }
            if configuration.iceTCPAfter != nil, !remote.tcpCandidates.isEmpty, self.paths.tcp.isEmpty { self.connectTCP(remote) }
            if configuration.relayAfter != nil, !configuration.turnServers.isEmpty { self.startRelays(remote, notBefore: .now()) }
        }
    }

    /// On the loop: a path was selected. ICE-TCP connections and relays that do not carry it are
    /// closed (a relay releases its allocation), unless it is a lower-priority path a direct one
    /// may still replace: then only the relays go, which would not be taken any more.
    private func selected(_ address: SocketAddress) {
        for (server, relay) in paths.relayServers where paths.relayed[address]?.relay !== relay {
            relay.close()
            paths.relayServers[server] = nil
            paths.removeRelayed(relay)
        }
        guard !session.mayStillMoveOnLoop else { return }
        for (remote, connection) in paths.tcp where remote != address { connection.close(promise: nil) }
    }

    /// On the loop: allocates on each TURN server (two at most); once one is permitted to reach
    /// the peer, and not before `notBefore`, the peer's UDP candidates are checked through it too,
    /// each as a path of its own beside the direct one (``MediaPaths/relayKey(_:serverIndex:peer:)``),
    /// at the lowest priority: a relayed path is taken while no other answers.
    private func startRelays(_ remote: TransportParameters, notBefore: NIODeadline) {
        let session = self.session, paths = self.paths, loop = channel.eventLoop
        var failures: [String] = []
        let servers = session.configuration.turnServers.prefix(2)
        for (index, server) in servers.enumerated() where paths.relayServers[server.address] == nil {
            // The relay delivers what a peer sent as coming from that path's key.
            let relayBox = NIOLoopBoundBox<TURNRelay?>(nil, eventLoop: loop)
            let relay = TURNRelay(server: server, udp: { [paths] in paths.udp }, loop: loop) { bytes, from in
                let key = relayBox.value.flatMap { paths.relayKey($0, peer: from) }
                guard let key else { return }
                session.receive(bytes, from: key)
            }
            relayBox.value = relay
            paths.relayServers[server.address] = relay
            @Sendable func take() {
                guard paths.relayServers[server.address] === relay else { return }
                guard session.isSearchingOnLoop else {
                    // Another path answered first (a relay ranks last): the allocation is not needed.
                    relay.close()
                    paths.relayServers[server.address] = nil
                    return
                }
                for candidate in remote.candidates {
                    guard let key = paths.relayKey(relay, serverIndex: index, peer: candidate) else { continue }
                    session.addRemoteCandidateOnLoop(key, stopping: [], preference: .relayed)
                }
            }
            relay.onPermitted = { [weak self] in
                let wait = notBefore - .now()
                guard wait > .zero, let self else { return take() }
                self.scheduled.append(loop.scheduleTask(in: wait) { take() })
            }
            relay.onFailure = { reason in
                failures.append(reason)
                if session.configuration.relayOnly, failures.count == servers.count, session.isSearchingOnLoop {
                    session.failOnLoop("TURN: " + failures.joined(separator: "; "))
                }
            }
            relay.start(peers: remote.candidates)
        }
    }

    /// On the loop: connects to the peer's passive candidates while ICE has found no path; each
    /// connection is checked at a lower priority than UDP.
    private func connectTCP(_ remote: TransportParameters) {
        guard session.isSearchingOnLoop else { return }
        let session = self.session, paths = self.paths
        for candidate in remote.tcpCandidates.prefix(4) {
            ICETCP.connect(to: candidate, loop: channel.eventLoop, paths: paths) { bytes, from in
                session.receive(bytes, from: from)
            }.whenSuccess { connection in
                guard let address = connection.remoteAddress, session.isSearchingOnLoop else {
                    connection.close(promise: nil)
                    return
                }
                session.addRemoteCandidateOnLoop(address, stopping: [], preference: .tcp)
            }
        }
    }
    public func sendRTP(_ packet: ByteBuffer) { session.sendRTP(packet) }
    public func sendRTCP(_ packet: ByteBuffer) { session.sendRTCP(packet) }
    public func sendRTP(batch packets: [ByteBuffer]) { session.sendRTP(batch: packets) }

    /// An empty buffer for a datagram of up to `minimumCapacity` bytes, on the event loop: one of a
    /// datagram already sent when there is one (as ``SharedMediaPort/buffer(minimumCapacity:)``).
    public func bufferOnLoop(minimumCapacity: Int) -> ByteBuffer {
        channel.eventLoop.preconditionInEventLoop()
        return paths.buffer(minimumCapacity: minimumCapacity)
    }
    func sendRaw(_ bytes: ByteBuffer) { session.sendRaw(bytes) }
    var onDatagramSent: ((ByteBuffer, SocketAddress) -> Void)? {
        get { session.onDatagramSent }
        set { session.onDatagramSent = newValue }
    }

    /// Closes the socket without a word to the peer (no close_notify, no more checks) and returns
    /// the UDP port it was bound to, for a benchmark's sink that binds it next: the peer's media
    /// keeps coming there, to be counted without NIO or SRTP (`rtc-cli bench sfu --rooms`).
    public func abandonSocket() async -> Int? {
        let port = boundAddress?.port
        await closeSockets { self.session.abandonOnLoop() }
        return port
    }

    /// Closes DTLS (close_notify), ICE, any ICE-TCP connection and the socket.
    public func close() async {
        await session.close()
        await closeSockets {}
    }

    /// Stops the keeper and the start's timers, closes every path and then the UDP socket; `first` runs on the loop before.
    private func closeSockets(_ first: @escaping @Sendable () -> Void) async {
        let udp = try? await channel.eventLoop.submit { () -> Channel in
            first()
            self.keeper?.stop()
            for timer in self.scheduled { timer.cancel() }
            self.paths.closeAll()
            return self.paths.udp
        }.get()
        try? await (udp ?? channel).close()
    }
}

/// The server's single media port: one UDP socket serving many peers. A datagram is routed by the
/// STUN USERNAME's local ufrag first, then by the peer's latched address (which follows the peer
/// when a valid check comes from a new port).
public final class SharedMediaPort: @unchecked Sendable, DatagramRouter {
    public let channel: Channel
    public let configuration: MediaTransportConfiguration
    private let certificate: DTLSCertificate
    private var byUfrag: [String: MediaSession] = [:]
    private var byAddress: [SocketAddress: MediaSession] = [:]
    private var _unroutable = 0
    /// Checks that came before their session (``EarlyChecks``).
    private var earlyChecks = EarlyChecks()
    /// The UDP socket and the ICE-TCP connections.
    private let paths: MediaPaths
    /// The passive ICE-TCP listener (`tcpPort`), and its candidates.
    private var tcpListener: Channel?
    private var configuredTCP: [SocketAddress] = []

    public static func bind(_ configuration: MediaTransportConfiguration, group: EventLoopGroup) async throws -> SharedMediaPort {
        let certificate = try DTLSCertificate()
        let handler = InboundHandler()
        let socket = try await bindMediaSocket(host: configuration.host, port: configuration.port, group: group, handler: handler)
        let channel = socket.channel
        let port = SharedMediaPort(configuration: configuration, socket: socket, certificate: certificate)
        handler.router = port
        // One rejected datagram must not end every session on the port (``SocketKeeper``).
        port.keeper = SocketKeeper(host: configuration.host, port: channel.localAddress?.port ?? configuration.port, loop: channel.eventLoop,
                                   paths: port.paths, router: port)
        port.keeper?.watch(channel)
        if let tcpPort = configuration.tcpPort {
            do {
                let listener = try await ICETCP.listen(host: configuration.host, port: tcpPort, loop: channel.eventLoop, paths: port.paths) {
                    [weak port] bytes, from in port?.route(AddressedEnvelope(remoteAddress: from, data: bytes))
                }
                let boundPort = listener.localAddress?.port ?? tcpPort
                try await channel.eventLoop.submit {
                    port.tcpListener = listener
                    port.configuredTCP = port.configured.compactMap { try? SocketAddress(ipAddress: $0.ipAddress ?? "", port: boundPort) }
                }.get()
            } catch {
                try? await channel.close()
                throw error
            }
        }
        return port
    }

    private init(configuration: MediaTransportConfiguration, socket: MediaSocket, certificate: DTLSCertificate) {
        let channel = socket.channel
        self.configuration = configuration
        self.channel = channel
        boundAddress = channel.localAddress
        self.certificate = certificate
        paths = MediaPaths(udp: socket)
        configured = configuredCandidates(configuration, channel: channel)
    }

    /// The candidates the configuration gives, listed once at bind (not per session).
    private let configured: [SocketAddress]

    /// The socket's address (the same after ``SocketKeeper`` bound it again).
    public var localAddress: SocketAddress? { boundAddress }
    private let boundAddress: SocketAddress?

    /// The passive ICE-TCP listener's address, when there is one.
    public var tcpAddress: SocketAddress? { tcpListener?.localAddress }

    /// Hands every pending datagram to the kernel together (sendmmsg). On the event loop.
    public func flush() {
        channel.eventLoop.preconditionInEventLoop()
        paths.flush()
    }

    /// UDP datagrams the kernel refused and dropped on this port's sockets so far, on the event loop.
    public var udpSendLossesOnLoop: (refused: Int, dropped: Int) { paths.udpLosses }

    /// An empty buffer for a datagram of up to `minimumCapacity` bytes, on the event loop: one of a
    /// datagram already sent when there is one, so a fan-out serializes without allocating.
    /// Checked in debug builds only: it runs once per leg.
    public func buffer(minimumCapacity: Int) -> ByteBuffer {
        assert(channel.eventLoop.inEventLoop)
        return paths.buffer(minimumCapacity: minimumCapacity)
    }

    /// How many times the socket was bound again (``SocketKeeper``), on the event loop.
    public var socketRebinds: EventLoopFuture<Int> { channel.eventLoop.submit { self.keeper?.rebinds ?? 0 } }
    private var keeper: SocketKeeper?

    /// Datagrams that matched no session.
    public var unroutableDatagrams: EventLoopFuture<Int> { channel.eventLoop.submit { self._unroutable } }

    /// The address put in candidates instead of the configured ones (an impairment proxy in front
    /// of the port, in tests). Nil: the configuration's (``MediaTransportConfiguration/announcedHosts``,
    /// or the interfaces of a wildcard bind, or the socket's address).
    public var announcedAddress: SocketAddress? {
        get { announced.withLockedValue { $0 } }
        set { announced.withLockedValue { $0 = newValue } }
    }
    private let announced = NIOLockedValueBox<SocketAddress?>(nil)

    private var candidateAddresses: [SocketAddress] { announcedAddress.map { [$0] } ?? configured }

    /// The parameters a session of this port will offer with `credentials` (before the peer's are known).
    public func localParameters(credentials: ICECredentials) -> TransportParameters {
        TransportParameters(ice: credentials, fingerprint: certificate.fingerprint,
                            candidates: candidateAddresses, tcpCandidates: configuredTCP, dtlsRole: configuration.dtlsRole)
    }

    /// Makes a session for a new peer and starts it with the peer's parameters.
    public func makeSession(remote: TransportParameters, local credentials: ICECredentials = .random()) -> EventLoopFuture<MediaSession> {
        channel.eventLoop.submit { self.makeSessionOnLoop(remote: remote, local: credentials) }
    }

    /// ``makeSession(remote:local:)`` for callers already on the port's event loop.
    public func makeSessionOnLoop(remote: TransportParameters, local credentials: ICECredentials = .random()) -> MediaSession {
        channel.eventLoop.preconditionInEventLoop()
        let session = MediaSession(configuration: configuration, certificate: certificate,
                                   localCandidates: candidateAddresses,
                                   eventLoop: channel.eventLoop, ice: credentials, flusher: paths.flush, writer: paths.write)
        session.transportOf = paths.transport(of:)
        session.onSelectedAddress = { [weak self, weak session] address in
            guard let self, let session else { return }
            for (old, owner) in self.byAddress where owner === session { self.byAddress[old] = nil }
            self.byAddress[address] = session
        }
        session.onCredentialsChanged = { [weak self, weak session] old, new in
            guard let self, let session else { return }
            self.byUfrag[old] = nil
            self.byUfrag[new] = session
            self.deliverEarlyChecks(to: session, ufrag: new)
        }
        byUfrag[session.localParameters.ice.ufrag] = session
        session.start(remote: remote)
        deliverEarlyChecks(to: session, ufrag: session.localParameters.ice.ufrag)
        return session
    }

    private func deliverEarlyChecks(to session: MediaSession, ufrag: String) {
        for check in earlyChecks.take(ufrag: ufrag, nowUs: Self.nowUs()) { session.receive(check.datagram, from: check.from) }
    }

    private static func nowUs() -> Int64 { Int64(NIODeadline.now().uptimeNanoseconds / 1000) }

    /// Closes a session and forgets its routes, on the port's event loop.
    public func removeOnLoop(_ session: MediaSession) {
        channel.eventLoop.preconditionInEventLoop()
        session.closeOnLoop()
        for (ufrag, owner) in byUfrag where owner === session { byUfrag[ufrag] = nil }
        for (address, owner) in byAddress where owner === session { byAddress[address] = nil }
    }

    /// Closes a session and forgets its routes.
    public func remove(_ session: MediaSession) async {
        try? await channel.eventLoop.submit { self.removeOnLoop(session) }.get()
    }

    func route(_ envelope: AddressedEnvelope<ByteBuffer>) {
        let datagram = envelope.data
        if PacketDemultiplexer.classify(datagram.readableBytesView) == .stun, let ufrag = Self.localUfrag(datagram) {
            if let session = byUfrag[ufrag] {
                session.receive(datagram, from: envelope.remoteAddress)
                return
            }
            // Its session may be made in a moment (the signaling message is on its way).
            earlyChecks.keep(datagram, ufrag: ufrag, from: envelope.remoteAddress, nowUs: Self.nowUs())
        }
        guard let session = byAddress[envelope.remoteAddress] else {
            _unroutable += 1
            return
        }
        session.receive(datagram, from: envelope.remoteAddress)
    }

    /// The part of a STUN request's USERNAME before the colon (the receiver's ufrag), if any.
    static func localUfrag(_ datagram: ByteBuffer) -> String? {
        guard let message = try? STUNMessage(parsing: Array(datagram.readableBytesView)), message.messageClass == .request,
              let username = message.username, let colon = username.firstIndex(of: ":")
        else { return nil }
        return String(username[..<colon])
    }

    public func close() async {
        let udp = try? await channel.eventLoop.submit { () -> Channel in
            self.keeper?.stop()
            for session in self.byUfrag.values { session.closeOnLoop() }
            self.byUfrag.removeAll()
            self.byAddress.removeAll()
            self.paths.closeAll()
            return self.paths.udp
        }.get()
        try? await tcpListener?.close()
        try? await (udp ?? channel).close()
    }
}
