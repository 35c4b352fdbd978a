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

/// One ICE + DTLS-SRTP transport over one UDP socket (BUNDLE, rtcp-mux), on SwiftNIO.
///
/// Everything happens on the socket's event loop: per-packet work (demultiplexing, SRTP, ICE,
/// DTLS) runs there synchronously, and callbacks are called there. Public methods may be called
/// from any thread; they hop to the loop.
public final class MediaTransport: @unchecked Sendable {
    public let configuration: MediaTransportConfiguration
    public let localParameters: TransportParameters
    /// Called with each decrypted RTP packet, on the event loop.
    public var onRTP: (@Sendable (ByteBuffer) -> Void)?
    /// Called with each decrypted RTCP compound packet, on the event loop.
    public var onRTCP: (@Sendable (ByteBuffer) -> Void)?
    /// Called on every state change, on the event loop.
    public var onStateChange: (@Sendable (MediaTransportState) -> Void)?

    public let channel: Channel
    private var eventLoop: EventLoop { channel.eventLoop }
    private let ice: ICEAgent
    private let certificate: DTLSCertificate
    private var dtls: DTLSEndpoint?
    private var srtp: SRTPContext?
    private var remote: TransportParameters?
    private var timer: Scheduled<Void>?
    private var dtlsDeadline: Double?
    private var _state: MediaTransportState = .new
    private var _stats = MediaTransportStats()
    /// Test hook: sees every datagram sent.
    var onDatagramSent: ((ByteBuffer, SocketAddress) -> Void)?

    /// Binds a UDP socket and makes a transport on it.
    public static func bind(_ configuration: MediaTransportConfiguration, group: EventLoopGroup) async throws -> MediaTransport {
        let certificate = try DTLSCertificate()
        let handler = InboundHandler()
        let channel = try await DatagramBootstrap(group: group)
            .channelOption(.socketOption(.so_reuseaddr), value: 1)
            .channelInitializer { channel in channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(handler) } }
            .bind(host: configuration.host, port: configuration.port).get()
        let transport = MediaTransport(configuration: configuration, channel: channel, certificate: certificate)
        handler.transport = transport
        return transport
    }

    private init(configuration: MediaTransportConfiguration, channel: Channel, certificate: DTLSCertificate) {
        self.configuration = configuration
        self.channel = channel
        self.certificate = certificate
        ice = ICEAgent(role: configuration.iceRole, timers: configuration.iceTimers)
        localParameters = TransportParameters(ice: ice.local, fingerprint: certificate.fingerprint,
                                              candidates: channel.localAddress.map { [$0] } ?? [],
                                              dtlsRole: configuration.dtlsRole)
    }

    /// The local UDP address.
    public var localAddress: SocketAddress? { channel.localAddress }

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

    static func now() -> Double { Double(NIODeadline.now().uptimeNanoseconds) / 1e9 }

    /// Starts ICE (and then DTLS) towards the peer described by `remote`.
    public func start(remote: TransportParameters) {
        eventLoop.execute {
            guard self._state == .new else { return }
            self.remote = remote
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

    /// Protects and sends an RTP packet to the selected address. Dropped before the transport connects.
    public func sendRTP(_ packet: ByteBuffer) { send(packet, rtcp: false) }

    /// Protects and sends an RTCP compound packet.
    public func sendRTCP(_ packet: ByteBuffer) { send(packet, rtcp: true) }

    private func send(_ packet: ByteBuffer, rtcp: Bool) {
        if eventLoop.inEventLoop {
            sendOnLoop(packet, rtcp: rtcp)
        } else {
            eventLoop.execute { self.sendOnLoop(packet, rtcp: rtcp) }
        }
    }

    private func sendOnLoop(_ packet: ByteBuffer, rtcp: Bool) {
        guard let srtp, let address = ice.selectedAddress else { return }
        guard let protected = try? (rtcp ? srtp.protectRTCP(packet) : srtp.protectRTP(packet)) else { return }
        _stats.packetsSent += 1
        _stats.bytesSent += protected.readableBytes
        write(protected, to: address)
    }

    private func write(_ bytes: ByteBuffer, to address: SocketAddress) {
        onDatagramSent?(bytes, address)
        channel.writeAndFlush(AddressedEnvelope(remoteAddress: address, data: bytes), promise: nil)
    }

    /// Test hook: sends raw bytes to the selected address, unprotected.
    func sendRaw(_ bytes: ByteBuffer) {
        eventLoop.execute { if let address = self.ice.selectedAddress { self.write(bytes, to: address) } }
    }

    /// Closes DTLS (close_notify), ICE and the socket.
    public func close() async {
        let future: EventLoopFuture<Void> = eventLoop.submit {
            if let dtls = self.dtls, let address = self.ice.selectedAddress {
                for datagram in dtls.close() { self.write(ByteBuffer(bytes: datagram), to: address) }
            }
            self.ice.close()
            self.timer?.cancel()
            self.setState(.closed)
        }
        try? await future.get()
        try? await channel.close()
    }

    private func setState(_ new: MediaTransportState) {
        guard _state != new else { return }
        if case .failed = _state { return }
        if _state == .closed { return }
        _state = new
        onStateChange?(new)
    }

    // MARK: Inbound, on the event loop

    fileprivate func receive(_ envelope: AddressedEnvelope<ByteBuffer>) {
        let datagram = envelope.data
        let source = envelope.remoteAddress
        let now = Self.now()
        switch PacketDemultiplexer.classify(datagram.readableBytesView) {
        case .stun:
            apply(ice.receive(Array(datagram.readableBytesView), from: source, now: now))
        case .dtls:
            guard source == ice.selectedAddress, let dtls else { return drop() }
            let replies = dtls.receive(Array(datagram.readableBytesView))
            for reply in replies { write(ByteBuffer(bytes: reply), to: source) }
            dtlsProgress()
        case .rtp, .rtcp:
            guard source == ice.selectedAddress, let srtp else { return drop() }
            let isRTCP = PacketDemultiplexer.classify(datagram.readableBytesView) == .rtcp
            guard let clear = try? (isRTCP ? srtp.unprotectRTCP(datagram) : srtp.unprotectRTP(datagram)) else { return drop() }
            _stats.packetsReceived += 1
            _stats.bytesReceived += datagram.readableBytes
            if isRTCP { onRTCP?(clear) } else { onRTP?(clear) }
        default:
            drop()
        }
        rearmTimer()
    }

    private func drop() { _stats.datagramsDropped += 1 }

    private func apply(_ output: ICEOutput) {
        for datagram in output.datagrams { write(ByteBuffer(bytes: datagram.bytes), to: datagram.to) }
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
        if case .failed = _state { return }
        rearmTimer()
    }
}

/// Passes datagrams to the transport, on the event loop.
private final class InboundHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    weak var transport: MediaTransport?

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        transport?.receive(unwrapInboundIn(data))
    }
}
