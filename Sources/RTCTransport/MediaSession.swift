import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

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
    /// When set, each SRTP packet is handed over as it arrived (its RTP header is in the clear,
    /// its payload not decrypted nor authenticated) and `onRTP` is not called: for load-test bots
    /// that count packets, losses and frames from headers without paying for SRTP.
    public var onProtectedRTP: (@Sendable (ByteBuffer) -> Void)?
    /// Called with each decrypted RTCP compound packet, on the event loop.
    public var onRTCP: (@Sendable (ByteBuffer) -> Void)?
    /// Called on every state change, on the event loop.
    public var onStateChange: (@Sendable (MediaTransportState) -> Void)?

    public let eventLoop: EventLoop
    private let writer: (ByteBuffer, SocketAddress, Bool) -> Void
    /// Sends what the writer holds unflushed (the socket's batch).
    private let flusher: () -> Void
    let ice: ICEAgent
    private let certificate: DTLSCertificate
    private var dtls: DTLSEndpoint?
    private var srtp: SRTPContext?
    /// Data channels over this session's DTLS (SCTP, RFC 8261), once enabled.
    public private(set) var dataChannels: DataChannelEndpoint?
    private var timer: Scheduled<Void>?
    /// When `timer` fires (monotonic seconds).
    private var timerDue: Double?
    private var dtlsDeadline: Double?
    private var _state: MediaTransportState = .new
    private var _stats = MediaTransportStats()
    /// Told when the peer's address is chosen or moves (the shared port keeps its routes with it).
    var onSelectedAddress: ((SocketAddress) -> Void)?
    /// Told when an ICE restart replaces the local ufrag (old, new).
    var onCredentialsChanged: ((String, String) -> Void)?
    /// Test hook: sees every datagram sent.
    var onDatagramSent: ((ByteBuffer, SocketAddress) -> Void)?
    /// The transport ("udp"/"tcp") an address is reached over (its owner's paths).
    var transportOf: ((SocketAddress) -> String)?
    /// The peer a selected address reaches (a relayed path's key is not the peer's address).
    var peerOf: ((SocketAddress) -> SocketAddress)?
    /// Whether the owner's socket can send to an address at all (family, route); remote candidates
    /// it cannot are left out of the checks.
    var canSendTo: ((SocketAddress) -> Bool)?
    /// Candidates found after the start (ICE-TCP connections), kept through ICE restarts.
    private var addedCandidates: [SocketAddress] = []

    init(configuration: MediaTransportConfiguration, certificate: DTLSCertificate, localCandidates: [SocketAddress],
         eventLoop: EventLoop, ice credentials: ICECredentials = .random(),
         flusher: @escaping () -> Void = {}, writer: @escaping (ByteBuffer, SocketAddress, Bool) -> Void) {
        self.configuration = configuration
        self.certificate = certificate
        self.eventLoop = eventLoop
        self.flusher = flusher
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
            stats.srtpMalformedDropped = self.srtp?.malformedDropped ?? 0
            if let selected = self.ice.selectedAddress {
                stats.transport = self.transportOf?(selected) ?? "udp"
                stats.mappedAddress = self.ice.mappedAddress
                let peer = self.peerOf?(selected) ?? selected
                let ip = peer.ipAddress ?? "?"
                stats.remoteAddress = ip.contains(":") ? "[\(ip)]:\(peer.port ?? 0)" : "\(ip):\(peer.port ?? 0)"
            }
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
            self.apply(self.ice.start(remote: remote.ice, candidates: self.sendableCandidates(remote), now: Self.now()))
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
            let candidates = self.sendableCandidates(remote) + self.addedCandidates.filter { !remote.candidates.contains($0) }
            self.apply(self.ice.restart(local: credentials, remote: remote.ice, candidates: candidates, now: Self.now()))
            self.onCredentialsChanged?(old, credentials.ufrag)
            self.rearmTimer()
        }
        return credentials
    }

    /// The peer's UDP candidates this side's socket can send to.
    private func sendableCandidates(_ remote: TransportParameters) -> [SocketAddress] {
        guard let canSendTo else { return remote.candidates }
        return remote.candidates.filter(canSendTo)
    }

    /// Checks a candidate found after the start (an ICE-TCP connection, a relayed path), on the
    /// event loop; the checks to `stopping` end (``ICEAgent/addCandidate(_:stopping:preference:now:)``).
    func addRemoteCandidateOnLoop(_ address: SocketAddress, stopping: [SocketAddress], preference: CandidatePreference = .direct) {
        if !addedCandidates.contains(address) { addedCandidates.append(address) }
        apply(ice.addCandidate(address, stopping: stopping, preference: preference, now: Self.now()))
        rearmTimer()
    }

    /// Fails the session with `reason` (a relay-only transport whose relays all failed), on the loop.
    func failOnLoop(_ reason: String) { setState(.failed(reason: reason)) }

    /// Whether ICE has not found a path yet, on the event loop.
    var isSearchingOnLoop: Bool { ice.isSearching }

    /// Whether ICE has found no path yet, or only a lower-priority one that a direct path may still
    /// replace, on the event loop.
    var mayStillMoveOnLoop: Bool { ice.isSearching || ice.onLowerPriorityPath }

    /// The selected address, on the event loop.
    var selectedAddressOnLoop: SocketAddress? { ice.selectedAddress }

    /// The current local ICE credentials (they change on restart).
    public var localCredentials: EventLoopFuture<ICECredentials> { eventLoop.submit { self.ice.local } }

    private func send(_ packet: ByteBuffer, rtcp: Bool) {
        if eventLoop.inEventLoop {
            var packet = packet
            sendOnLoop(&packet, rtcp: rtcp)
        } else {
            eventLoop.execute {
                var packet = packet
                self.sendOnLoop(&packet, rtcp: rtcp)
            }
        }
    }

    /// Protects `packet` in its own buffer (no copy when the caller holds the only reference and
    /// left ``SRTPProfile/maxTrailer`` bytes of room) and writes it.
    private func sendOnLoop(_ packet: inout ByteBuffer, rtcp: Bool, flush: Bool = true) {
        guard let srtp, let address = ice.selectedAddress else { return }
        do {
            if rtcp { try srtp.protectRTCP(&packet) } else { try srtp.protectRTP(&packet) }
        } catch {
            return
        }
        _stats.packetsSent += 1
        _stats.bytesSent += packet.readableBytes
        write(packet, to: address, flush: flush)
    }

    /// On the event loop: protects and writes one RTP packet, flushing only when asked, so that a
    /// caller fanning a packet out to many sessions of one port can flush once for all of them.
    /// The packet is protected in its own buffer: give it room for the tag (``RTPPacket/serialized``
    /// does) and keep no other reference to it, and nothing is copied.
    public func sendRTPOnLoop(_ packet: inout ByteBuffer, flush: Bool) {
        eventLoop.preconditionInEventLoop()
        sendOnLoop(&packet, rtcp: false, flush: flush)
    }

    /// Protects and sends several RTP packets (a video frame's), flushing once: NIO hands the
    /// pending datagrams to the kernel together (sendmmsg).
    public func sendRTP(batch packets: [ByteBuffer]) {
        let work: @Sendable () -> Void = {
            for packet in packets {
                var packet = packet
                self.sendOnLoop(&packet, rtcp: false, flush: false)
            }
            // After the loop: a last packet that failed to protect must not leave the rest queued.
            self.flusher()
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

    /// Turns data channels on (an offer or answer with an `m=application` section): an SCTP
    /// association over this session's DTLS, started as soon as DTLS is up. On the event loop;
    /// a second call keeps the first endpoint.
    @discardableResult
    public func enableDataChannelsOnLoop(localPort: UInt16 = 5000, remotePort: UInt16 = 5000,
                                         maxMessageSize: Int = 262_144) throws -> DataChannelEndpoint {
        eventLoop.preconditionInEventLoop()
        if let dataChannels { return dataChannels }
        let association = try SCTPAssociation(localPort: localPort, remotePort: remotePort, maxMessageSize: maxMessageSize)
        let loop = eventLoop
        association.onOutput = { [weak self] packet in
            guard let session = self else { return }
            if loop.inEventLoop {
                session.sendSCTP(packet)
            } else {
                loop.execute { session.sendSCTP(packet) }
            }
        }
        let endpoint = DataChannelEndpoint(association: association, dtlsClient: configuration.dtlsRole == .client) { work in
            loop.execute(work)
        }
        dataChannels = endpoint
        if srtp != nil { association.connect() }
        return endpoint
    }

    /// One SCTP packet to the peer, in a DTLS record.
    private func sendSCTP(_ packet: [UInt8]) {
        guard let dtls, let address = ice.selectedAddress else { return }
        for datagram in dtls.send(applicationData: packet) { write(ByteBuffer(bytes: datagram), to: address) }
    }

    /// Stops ICE and the timers without a word to the peer (no close_notify). On the event loop.
    func abandonOnLoop() {
        dataChannels?.association.close()
        ice.close()
        timer?.cancel()
        timer = nil
        setState(.closed)
    }

    /// Sends close_notify and stops ICE. On the event loop.
    func closeOnLoop() {
        dataChannels?.association.close()
        if let dtls = self.dtls, let address = self.ice.selectedAddress {
            for datagram in dtls.close() { self.write(ByteBuffer(bytes: datagram), to: address) }
        }
        ice.close()
        timer?.cancel()
        timer = nil
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
            // From the selected path, or from one ICE saw answer and left for a better one while
            // the handshake was under way (the peer's flight was already on its way there; the
            // records are authenticated by the handshake itself). Replies go to the selected path.
            guard let dtls, let selected = ice.selectedAddress, source == selected || ice.hasAnswered(source) else { return drop() }
            let replies = dtls.receive(Array(datagram.readableBytesView))
            for reply in replies { write(ByteBuffer(bytes: reply), to: selected) }
            dtlsProgress()
            let records = dtls.takeApplicationData()
            if let association = dataChannels?.association {
                for record in records { association.input(record) }
            } else if !records.isEmpty {
                _stats.datagramsDropped += records.count
            }
        case .rtp, .rtcp:
            guard source == ice.selectedAddress, let srtp else { return drop() }
            let isRTCP = kind == .rtcp
            if !isRTCP, let onProtectedRTP {
                _stats.packetsReceived += 1
                _stats.bytesReceived += datagram.readableBytes
                onProtectedRTP(datagram)
            } else {
                let size = datagram.readableBytes
                // In place: a datagram sliced from the socket's read buffer is copied out of it
                // once here (copy on write), so what is kept of it (caches) holds no read buffer.
                var clear = datagram
                do {
                    if isRTCP { try srtp.unprotectRTCP(&clear) } else { try srtp.unprotectRTP(&clear) }
                } catch {
                    return drop()
                }
                _stats.packetsReceived += 1
                _stats.bytesReceived += size
                if isRTCP { onRTCP?(clear) } else { onRTP?(clear) }
            }
            // Media moves no ICE or DTLS deadline: the timer stays as it is (this ran per packet).
            return
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
                dataChannels?.association.connect()
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

    /// Arms the timer for the next ICE or DTLS deadline. Called after every datagram, so a timer
    /// already due no later than that deadline is kept (firing early only re-arms): a packet
    /// costs no cancel and schedule.
    private func rearmTimer() {
        var next = ice.nextTimer
        if let delay = dtls?.retransmitDelay { next = min(next ?? .infinity, Self.now() + delay) }
        if let dtlsDeadline { next = min(next ?? .infinity, dtlsDeadline) }
        guard let next, next.isFinite else {
            timer?.cancel()
            timer = nil
            return
        }
        if timer != nil, let timerDue, timerDue <= next + 0.0005 { return }
        timer?.cancel()
        let delay = max(0, next - Self.now())
        timerDue = next
        timer = eventLoop.scheduleTask(in: .nanoseconds(Int64(delay * 1e9) + 1_000_000)) { [self] in
            onTimer()
        }
    }

    private func onTimer() {
        timer = nil
        timerDue = nil
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
