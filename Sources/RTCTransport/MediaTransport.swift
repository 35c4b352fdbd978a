import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// What one side tells the other about its transport, carried in SDP.
public struct TransportParameters: Sendable, Hashable {
    public var ice: ICECredentials
    public var fingerprint: SDPFingerprint
    /// Host candidates (where this side listens).
    public var candidates: [SocketAddress]
    /// The DTLS role this side takes (`a=setup:active` is the client).
    public var dtlsRole: DTLSEndpoint.Role

    public init(ice: ICECredentials, fingerprint: SDPFingerprint, candidates: [SocketAddress], dtlsRole: DTLSEndpoint.Role) {
        self.ice = ice
        self.fingerprint = fingerprint
        self.candidates = candidates
        self.dtlsRole = dtlsRole
    }
}

/// Settings of a ``MediaTransport``.
public struct MediaTransportConfiguration: Sendable {
    /// Controlling (a client) or ICE-lite (the server).
    public var iceRole: ICEAgent.Role
    public var dtlsRole: DTLSEndpoint.Role
    public var host: String
    /// 0 picks a free port.
    public var port: Int
    public var iceTimers: ICETimers
    /// Seconds for the DTLS handshake once ICE has connected.
    public var dtlsTimeout: Double
    public var srtpProfiles: [SRTPProfile]

    public init(iceRole: ICEAgent.Role, dtlsRole: DTLSEndpoint.Role, host: String = "127.0.0.1", port: Int = 0,
                iceTimers: ICETimers = ICETimers(), dtlsTimeout: Double = 10,
                srtpProfiles: [SRTPProfile] = [.aeadAes128Gcm, .aes128CmSha1_80]) {
        self.iceRole = iceRole
        self.dtlsRole = dtlsRole
        self.host = host
        self.port = port
        self.iceTimers = iceTimers
        self.dtlsTimeout = dtlsTimeout
        self.srtpProfiles = srtpProfiles
    }

    /// A client: controlling ICE, DTLS client.
    public static func client(host: String = "127.0.0.1") -> MediaTransportConfiguration {
        MediaTransportConfiguration(iceRole: .controlling, dtlsRole: .client, host: host)
    }

    /// A server: ICE-lite, DTLS server.
    public static func server(host: String = "127.0.0.1", port: Int = 0) -> MediaTransportConfiguration {
        MediaTransportConfiguration(iceRole: .lite, dtlsRole: .server, host: host, port: port)
    }
}

/// The state of a transport as a whole.
public enum MediaTransportState: Sendable, Hashable {
    case new
    case connecting
    /// ICE and DTLS are up; SRTP flows.
    case connected
    /// Consent checks are going unanswered.
    case disconnected(reason: String)
    case failed(reason: String)
    case closed
}

/// Counters of a transport.
public struct MediaTransportStats: Sendable, Hashable {
    public var packetsSent = 0
    public var bytesSent = 0
    public var packetsReceived = 0
    public var bytesReceived = 0
    /// Datagrams that were not STUN, DTLS, RTP or RTCP, came from an unexpected address, or failed to parse.
    public var datagramsDropped = 0
    public var srtpReplaysDropped = 0
    public var srtpAuthenticationFailures = 0
    /// From the latest answered STUN check, seconds.
    public var roundTripTime: Double?
}

/// The protocol state of one peer: ICE, DTLS and SRTP, fed datagrams by whoever owns the socket
/// (a ``MediaTransport`` for one peer, a ``SharedMediaPort`` for many).
///
/// Everything happens on the socket's event loop: per-packet work (demultiplexing, SRTP, ICE,
/// DTLS) runs there synchronously, and callbacks are called there. Public methods may be called
/// from any thread; they hop to the loop.
public final class MediaSession: @unchecked Sendable {
    public let configuration: MediaTransportConfiguration
    public let localParameters: TransportParameters
    /// Called with each decrypted RTP packet, on the event loop.
    public var onRTP: (@Sendable (ByteBuffer) -> Void)?
    /// Called with each decrypted RTCP compound packet, on the event loop.
    public var onRTCP: (@Sendable (ByteBuffer) -> Void)?
    /// Called on every state change, on the event loop.
    public var onStateChange: (@Sendable (MediaTransportState) -> Void)?

    let eventLoop: EventLoop
    private let writer: (ByteBuffer, SocketAddress, Bool) -> Void
    let ice: ICEAgent
    private let certificate: DTLSCertificate
    private var dtls: DTLSEndpoint?
    private var srtp: SRTPContext?
    private var timer: Scheduled<Void>?
    private var dtlsDeadline: Double?
    private var _state: MediaTransportState = .new
    private var _stats = MediaTransportStats()
    /// Told when the peer's address is chosen or moves (the shared port keeps its routes with it).
    var onSelectedAddress: ((SocketAddress) -> Void)?
    /// Told when an ICE restart replaces the local ufrag (old, new).
    var onCredentialsChanged: ((String, String) -> Void)?
    /// Test hook: sees every datagram sent.
    var onDatagramSent: ((ByteBuffer, SocketAddress) -> Void)?

    init(configuration: MediaTransportConfiguration, certificate: DTLSCertificate, localCandidates: [SocketAddress],
         eventLoop: EventLoop, ice credentials: ICECredentials = .random(),
         writer: @escaping (ByteBuffer, SocketAddress, Bool) -> Void) {
        self.configuration = configuration
        self.certificate = certificate
        self.eventLoop = eventLoop
        self.writer = writer
        ice = ICEAgent(role: configuration.iceRole, local: credentials, timers: configuration.iceTimers)
        localParameters = TransportParameters(ice: credentials, fingerprint: certificate.fingerprint,
                                              candidates: localCandidates, dtlsRole: configuration.dtlsRole)
    }

    /// The state, read on the event loop.
    public var state: EventLoopFuture<MediaTransportState> { eventLoop.submit { self._state } }
    /// The counters, read on the event loop.
    public var stats: EventLoopFuture<MediaTransportStats> {
        eventLoop.submit {
            var stats = self._stats
            stats.roundTripTime = self.ice.roundTripTime
            stats.srtpReplaysDropped = self.srtp?.replaysDropped ?? 0
            stats.srtpAuthenticationFailures = self.srtp?.authenticationFailures ?? 0
            return stats
        }
    }

    /// The peer's address media goes to, once ICE chose it.
    public var selectedAddress: EventLoopFuture<SocketAddress?> { eventLoop.submit { self.ice.selectedAddress } }

    static func now() -> Double { Double(NIODeadline.now().uptimeNanoseconds) / 1e9 }

    /// Starts ICE (and then DTLS) towards the peer described by `remote`.
    public func start(remote: TransportParameters) {
        eventLoop.execute {
            guard self._state == .new else { return }
            do {
                self.dtls = try DTLSEndpoint(role: self.configuration.dtlsRole, certificate: self.certificate,
                                             remoteFingerprint: remote.fingerprint, profiles: self.configuration.srtpProfiles)
            } catch {
                self.setState(.failed(reason: "\(error)"))
                return
            }
            self.setState(.connecting)
            self.apply(self.ice.start(remote: remote.ice, candidates: remote.candidates, now: Self.now()))
            self.rearmTimer()
        }
    }

    /// Protects and sends an RTP packet to the selected address. Dropped before the session connects.
    public func sendRTP(_ packet: ByteBuffer) { send(packet, rtcp: false) }

    /// Protects and sends an RTCP compound packet.
    public func sendRTCP(_ packet: ByteBuffer) { send(packet, rtcp: true) }

    /// ICE restart (RFC 8445 §9): new local credentials, which the caller signals to the peer with
    /// an offer or answer, and the peer's new ones. DTLS and SRTP carry on; checks start over.
    /// A session whose ICE failed after DTLS was up (consent expired) goes back to `connecting`.
    /// Returns the new local credentials.
    @discardableResult
    public func restartICE(local credentials: ICECredentials = .random(), remote: TransportParameters) -> ICECredentials {
        eventLoop.execute {
            if case .failed = self._state, self.srtp != nil {
                self._state = .connecting
                self.onStateChange?(.connecting)
            }
            let old = self.ice.local.ufrag
            self.apply(self.ice.restart(local: credentials, remote: remote.ice, candidates: remote.candidates, now: Self.now()))
            self.onCredentialsChanged?(old, credentials.ufrag)
            self.rearmTimer()
        }
        return credentials
    }

    /// The current local ICE credentials (they change on restart).
    public var localCredentials: EventLoopFuture<ICECredentials> { eventLoop.submit { self.ice.local } }

    private func send(_ packet: ByteBuffer, rtcp: Bool) {
        if eventLoop.inEventLoop {
            sendOnLoop(packet, rtcp: rtcp)
        } else {
            eventLoop.execute { self.sendOnLoop(packet, rtcp: rtcp) }
        }
    }

    private func sendOnLoop(_ packet: ByteBuffer, rtcp: Bool, flush: Bool = true) {
        guard let srtp, let address = ice.selectedAddress else { return }
        guard let protected = try? (rtcp ? srtp.protectRTCP(packet) : srtp.protectRTP(packet)) else { return }
        _stats.packetsSent += 1
        _stats.bytesSent += protected.readableBytes
        write(protected, to: address, flush: flush)
    }

    /// On the event loop: protects and writes one RTP packet, flushing only when asked, so that a
    /// caller fanning a packet out to many sessions of one port can flush once for all of them.
    public func sendRTPOnLoop(_ packet: ByteBuffer, flush: Bool) {
        eventLoop.preconditionInEventLoop()
        sendOnLoop(packet, rtcp: false, flush: flush)
    }

    /// Protects and sends several RTP packets (a video frame's), flushing once: NIO hands the
    /// pending datagrams to the kernel together (sendmmsg).
    public func sendRTP(batch packets: [ByteBuffer]) {
        let work: @Sendable () -> Void = {
            for (index, packet) in packets.enumerated() { self.sendOnLoop(packet, rtcp: false, flush: index == packets.count - 1) }
        }
        if eventLoop.inEventLoop { work() } else { eventLoop.execute(work) }
    }

    private func write(_ bytes: ByteBuffer, to address: SocketAddress, flush: Bool = true) {
        onDatagramSent?(bytes, address)
        writer(bytes, address, flush)
    }

    /// Test hook: sends raw bytes to the selected address, unprotected.
    func sendRaw(_ bytes: ByteBuffer) {
        eventLoop.execute { if let address = self.ice.selectedAddress { self.write(bytes, to: address) } }
    }

    /// Sends close_notify and stops ICE. On the event loop.
    func closeOnLoop() {
        if let dtls = self.dtls, let address = self.ice.selectedAddress {
            for datagram in dtls.close() { self.write(ByteBuffer(bytes: datagram), to: address) }
        }
        ice.close()
        timer?.cancel()
        setState(.closed)
    }

    /// Closes the session (close_notify to the peer).
    public func close() async {
        try? await eventLoop.submit { self.closeOnLoop() }.get()
    }

    private func setState(_ new: MediaTransportState) {
        guard _state != new else { return }
        if case .failed = _state { return }
        if _state == .closed { return }
        _state = new
        onStateChange?(new)
    }

    // MARK: Inbound, on the event loop

    func receive(_ datagram: ByteBuffer, from source: SocketAddress) {
        let now = Self.now()
        let kind = PacketDemultiplexer.classify(datagram.readableBytesView)
        switch kind {
        case .stun:
            apply(ice.receive(Array(datagram.readableBytesView), from: source, now: now))
        case .dtls:
            guard source == ice.selectedAddress, let dtls else { return drop() }
            let replies = dtls.receive(Array(datagram.readableBytesView))
            for reply in replies { write(ByteBuffer(bytes: reply), to: source) }
            dtlsProgress()
        case .rtp, .rtcp:
            guard source == ice.selectedAddress, let srtp else { return drop() }
            let isRTCP = kind == .rtcp
            guard let clear = try? (isRTCP ? srtp.unprotectRTCP(datagram) : srtp.unprotectRTP(datagram)) else { return drop() }
            _stats.packetsReceived += 1
            _stats.bytesReceived += datagram.readableBytes
            if isRTCP { onRTCP?(clear) } else { onRTP?(clear) }
        default:
            drop()
        }
        rearmTimer()
    }

    func drop() { _stats.datagramsDropped += 1 }

    private func apply(_ output: ICEOutput) {
        for datagram in output.datagrams { write(ByteBuffer(bytes: datagram.bytes), to: datagram.to) }
        if let address = output.selectedAddress { onSelectedAddress?(address) }
        if let state = output.state {
            switch state {
            case .connected:
                if srtp != nil { setState(.connected) } else { startDTLS() }
            case .disconnected(let reason): setState(.disconnected(reason: reason))
            case .failed(let reason): setState(.failed(reason: "ICE: \(reason)"))
            default: break
            }
        }
    }

    private func startDTLS() {
        guard let dtls, dtls.state == .new, let address = ice.selectedAddress else { return }
        dtlsDeadline = Self.now() + configuration.dtlsTimeout
        for datagram in dtls.start() { write(ByteBuffer(bytes: datagram), to: address) }
    }

    private func dtlsProgress() {
        guard let dtls else { return }
        switch dtls.state {
        case .connected where srtp == nil:
            guard let keys = dtls.keyingMaterial else { return }
            do {
                srtp = try SRTPContext(keys: keys)
                dtlsDeadline = nil
                setState(.connected)
            } catch {
                setState(.failed(reason: "SRTP: \(error)"))
            }
        case .failed(let error):
            setState(.failed(reason: "\(error)"))
        case .closed where srtp != nil:
            setState(.closed)
        default:
            break
        }
    }

    private func rearmTimer() {
        timer?.cancel()
        var next = ice.nextTimer
        if let delay = dtls?.retransmitDelay { next = min(next ?? .infinity, Self.now() + delay) }
        if let dtlsDeadline { next = min(next ?? .infinity, dtlsDeadline) }
        guard let next, next.isFinite else { return }
        let delay = max(0, next - Self.now())
        timer = eventLoop.scheduleTask(in: .nanoseconds(Int64(delay * 1e9) + 1_000_000)) { [self] in
            onTimer()
        }
    }

    private func onTimer() {
        let now = Self.now()
        apply(ice.handleTimers(now: now))
        if let dtls, let address = ice.selectedAddress, dtls.state == .handshaking {
            if let delay = dtls.retransmitDelay, delay <= 0.001 {
                for datagram in dtls.handleTimeout() { write(ByteBuffer(bytes: datagram), to: address) }
            }
            dtlsProgress()
        }
        if let dtlsDeadline, now >= dtlsDeadline, srtp == nil {
            setState(.failed(reason: "DTLS handshake did not finish within \(configuration.dtlsTimeout) s"))
            self.dtlsDeadline = nil
        }
        switch _state {
        case .failed, .closed: return
        default: rearmTimer()
        }
    }
}

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

/// Binds a UDP socket with vectored reads (recvmmsg) for media.
func bindMediaSocket(host: String, port: Int, group: EventLoopGroup, handler: InboundHandler) async throws -> Channel {
    try await DatagramBootstrap(group: group)
        .channelOption(.socketOption(.so_reuseaddr), value: 1)
        // A 720p screen keyframe is 100+ packets sent back to back: the default 208 KiB receive
        // buffer overflows on it. Ask for 4 MiB (the kernel caps it at net.core.rmem_max).
        .channelOption(.socketOption(.so_rcvbuf), value: 4 << 20)
        .channelOption(.socketOption(.so_sndbuf), value: 1 << 20)
        .channelOption(.datagramVectorReadMessageCount, value: 32)
        // With vector reads NIO splits one receive buffer across the messages: 2 KiB each.
        .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 32 * 2048))
        .channelInitializer { channel in
            channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(handler) }
        }
        .bind(host: host, port: port).get()
}

/// Writes datagrams on `channel`; unflushed writes go out together at the next flush (NIO uses
/// sendmmsg for a batch of pending datagrams).
func datagramWriter(_ channel: Channel) -> (ByteBuffer, SocketAddress, Bool) -> Void {
    { bytes, address, flush in
        let envelope = AddressedEnvelope(remoteAddress: address, data: bytes)
        if flush { channel.writeAndFlush(envelope, promise: nil) } else { channel.write(envelope, promise: nil) }
    }
}

/// One peer on its own UDP socket: a client's transport (BUNDLE, rtcp-mux).
public final class MediaTransport: @unchecked Sendable, DatagramRouter {
    public let channel: Channel
    /// The ICE/DTLS/SRTP state of the one peer.
    public let session: MediaSession

    /// Binds a UDP socket and makes a transport on it.
    public static func bind(_ configuration: MediaTransportConfiguration, group: EventLoopGroup) async throws -> MediaTransport {
        let certificate = try DTLSCertificate()
        let handler = InboundHandler()
        let channel = try await bindMediaSocket(host: configuration.host, port: configuration.port, group: group, handler: handler)
        let transport = MediaTransport(configuration: configuration, channel: channel, certificate: certificate)
        handler.router = transport
        return transport
    }

    private init(configuration: MediaTransportConfiguration, channel: Channel, certificate: DTLSCertificate) {
        self.channel = channel
        session = MediaSession(configuration: configuration, certificate: certificate,
                               localCandidates: channel.localAddress.map { [$0] } ?? [], eventLoop: channel.eventLoop,
                               writer: datagramWriter(channel))
    }

    func route(_ envelope: AddressedEnvelope<ByteBuffer>) { session.receive(envelope.data, from: envelope.remoteAddress) }

    public var localAddress: SocketAddress? { channel.localAddress }
    public var localParameters: TransportParameters { session.localParameters }
    public var state: EventLoopFuture<MediaTransportState> { session.state }
    public var stats: EventLoopFuture<MediaTransportStats> { session.stats }
    public var onRTP: (@Sendable (ByteBuffer) -> Void)? {
        get { session.onRTP }
        set { session.onRTP = newValue }
    }
    public var onRTCP: (@Sendable (ByteBuffer) -> Void)? {
        get { session.onRTCP }
        set { session.onRTCP = newValue }
    }
    public var onStateChange: (@Sendable (MediaTransportState) -> Void)? {
        get { session.onStateChange }
        set { session.onStateChange = newValue }
    }
    public func start(remote: TransportParameters) { session.start(remote: remote) }
    public func sendRTP(_ packet: ByteBuffer) { session.sendRTP(packet) }
    public func sendRTCP(_ packet: ByteBuffer) { session.sendRTCP(packet) }
    public func sendRTP(batch packets: [ByteBuffer]) { session.sendRTP(batch: packets) }
    func sendRaw(_ bytes: ByteBuffer) { session.sendRaw(bytes) }
    var onDatagramSent: ((ByteBuffer, SocketAddress) -> Void)? {
        get { session.onDatagramSent }
        set { session.onDatagramSent = newValue }
    }

    /// Closes DTLS (close_notify), ICE and the socket.
    public func close() async {
        await session.close()
        try? await channel.close()
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

    public static func bind(_ configuration: MediaTransportConfiguration, group: EventLoopGroup) async throws -> SharedMediaPort {
        let certificate = try DTLSCertificate()
        let handler = InboundHandler()
        let channel = try await bindMediaSocket(host: configuration.host, port: configuration.port, group: group, handler: handler)
        let port = SharedMediaPort(configuration: configuration, channel: channel, certificate: certificate)
        handler.router = port
        return port
    }

    private init(configuration: MediaTransportConfiguration, channel: Channel, certificate: DTLSCertificate) {
        self.configuration = configuration
        self.channel = channel
        self.certificate = certificate
    }

    public var localAddress: SocketAddress? { channel.localAddress }

    /// Hands every pending datagram to the kernel together (sendmmsg). On the event loop.
    public func flush() { channel.flush() }

    /// Datagrams that matched no session.
    public var unroutableDatagrams: EventLoopFuture<Int> { channel.eventLoop.submit { self._unroutable } }

    /// The address put in candidates instead of the socket's own (a NAT's public address, or an
    /// impairment proxy in front of the port). Nil: the socket's address.
    public var announcedAddress: SocketAddress? {
        get { announced.withLockedValue { $0 } }
        set { announced.withLockedValue { $0 = newValue } }
    }
    private let announced = NIOLockedValueBox<SocketAddress?>(nil)

    private var candidateAddresses: [SocketAddress] { (announcedAddress ?? channel.localAddress).map { [$0] } ?? [] }

    /// The parameters a session of this port will offer with `credentials` (before the peer's are known).
    public func localParameters(credentials: ICECredentials) -> TransportParameters {
        TransportParameters(ice: credentials, fingerprint: certificate.fingerprint,
                            candidates: candidateAddresses, dtlsRole: configuration.dtlsRole)
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
                                   eventLoop: channel.eventLoop, ice: credentials, writer: datagramWriter(channel))
        session.onSelectedAddress = { [weak self, weak session] address in
            guard let self, let session else { return }
            for (old, owner) in self.byAddress where owner === session { self.byAddress[old] = nil }
            self.byAddress[address] = session
        }
        session.onCredentialsChanged = { [weak self, weak session] old, new in
            guard let self, let session else { return }
            self.byUfrag[old] = nil
            self.byUfrag[new] = session
        }
        byUfrag[session.localParameters.ice.ufrag] = session
        session.start(remote: remote)
        return session
    }

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
        if PacketDemultiplexer.classify(datagram.readableBytesView) == .stun,
           let ufrag = Self.localUfrag(datagram), let session = byUfrag[ufrag] {
            session.receive(datagram, from: envelope.remoteAddress)
            return
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
        try? await channel.eventLoop.submit {
            for session in self.byUfrag.values { session.closeOnLoop() }
            self.byUfrag.removeAll()
            self.byAddress.removeAll()
        }.get()
        try? await channel.close()
    }
}
