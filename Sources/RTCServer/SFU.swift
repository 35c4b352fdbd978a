import Logging
import NIOCore
import NIOPosix
import RTCTransport
import Signaling

/// The selective forwarding unit. This class runs it: it starts and stops it and its timers,
/// reads each signaling message and hands it to the part that owns the job, and orchestrates
/// joins, resumes and leaves (`SFU+Membership.swift`) and publishing and subscribing
/// (`SFU+Tracks.swift`). The parts:
/// - ``RoomDirectory`` (``LocalRoomDirectory``): rooms and participants, by name, uid, sid and connection;
/// - ``Negotiator``: the SDP of both transports, ICE restarts;
/// - ``Producer``: the publisher side of the packet path (ingest and forwarding);
/// - ``Consumer``: the subscriber side (NACK repairs, keyframe requests, leg feedback);
/// - ``RTCPTerminator``: the RTCP the server sends publishers on its timers;
/// - ``LayerController``: simulcast and temporal layers (each subscriber's layer, leg probes, dynacast);
/// - ``SFUContext``: what they share (configuration, port, counters, the two clocks).
///
/// All of its state lives on one event loop, the media port's: per-packet forwarding runs there
/// synchronously (no hop per packet), and signaling messages hop onto it once per message. Room
/// changes are rare and cheap next to packets, so one loop keeps the core simple and race-free.
public final class SFU: SignalingSink, @unchecked Sendable {
    public var configuration: ServerConfiguration { context.configuration }
    public var port: SharedMediaPort { context.port }
    var loop: EventLoop { context.loop }
    let context: SFUContext
    let directory: RoomDirectory
    let negotiator: Negotiator
    let producer: Producer
    let consumer: Consumer
    let terminator: RTCPTerminator
    let layers: LayerController
    /// When each periodic job is due (on the loop), the timer set for the earliest wanted one and
    /// the time it is set for; nil before ``startTimers()`` and after ``shutdown()``.
    private var periodicJobs = PeriodicJobs(startUs: 0)
    private var jobsTimer: Scheduled<Void>?
    private var jobsTimerDueUs: Int64 = .max
    /// Which arming of the timer is current: NIO may still run a timer cancelled in the same loop
    /// tick (due timers are taken in a batch before they run), and a stale one must not run the
    /// jobs and re-arm beside the current one.
    private var jobsTimerArm = 0
    private var jobsRunning = false
    /// Set by ``shutdown()``: joins and resumes are refused from then on (`shuttingDown`), so a
    /// client rejoining quickly is not taken by a server whose media port is closing.
    private var shuttingDown = false
    /// Housekeeping ticks run (every second), for the jobs that run every few of them.
    private var housekeepingTicks = 0
    private var nextID = 0
    /// RPCs the server made (the API's `PerformRpc`) and waits on, by request id (``performRPC``).
    var pendingRPCs: [String: PendingRPC] = [:]

    /// Seconds since 1970 (tokens, keepalive); replaceable in tests. Resume windows are timed on
    /// ``monotonicClock``.
    var clock: @Sendable () -> Int64 {
        get { context.wallClock }
        set { context.wallClock = newValue }
    }
    /// Monotonic nanoseconds (the packet path, RTCP, estimates, throttles); replaceable in tests.
    var monotonicClock: @Sendable () -> UInt64 {
        get { context.monotonicClock }
        set { context.monotonicClock = newValue }
    }
    public static func start(configuration: ServerConfiguration, group: EventLoopGroup,
                             logger: Logger = Logger(label: "rtc.sfu")) async throws -> SFU {
        var media = MediaTransportConfiguration.server(host: configuration.host, port: configuration.mediaPort)
        media.announcedHosts = configuration.announceAddresses
        media.tcpPort = configuration.tcpMediaPort
        let port = try await SharedMediaPort.bind(media, group: group)
        let sfu = SFU(configuration: configuration, port: port)
        sfu.context.logger = logger
        sfu.startTimers()
        return sfu
    }

    init(configuration: ServerConfiguration, port: SharedMediaPort, directory: RoomDirectory = LocalRoomDirectory()) {
        context = SFUContext(configuration: configuration, port: port)
        self.directory = directory
        negotiator = Negotiator(context: context)
        producer = Producer(context: context)
        terminator = RTCPTerminator(context: context, directory: directory)
        consumer = Consumer(context: context, terminator: terminator)
        layers = LayerController(context: context, directory: directory, consumer: consumer)
        producer.layers = layers
        consumer.layers = layers
    }

    /// Housekeeping once a second, simulcast layers every 250 ms, transport-wide feedback to
    /// publishers and active speakers every 100 ms, upstream NACKs every 20 ms: one timer for all
    /// (``PeriodicJobs``), on the loop's own clock, not ``monotonicClock`` (which tests replace).
    /// The timer keeps the SFU alive until ``shutdown()``.
    /// The timer is set for the next wanted job only (``PeriodicJobs``): an idle shard wakes once a
    /// second, a shard with participants every 100 ms, every 20 ms only while a gap is open.
    private func startTimers() {
        loop.execute {
            self.periodicJobs = PeriodicJobs(startUs: Self.loopClockUs())
            self.jobsRunning = true
            self.setJobsTimer()
            // A gap opened on the packet path: the NACK job is wanted within its period.
            self.context.onUpstreamGapOpened = { [unowned self] in
                self.periodicJobs.resume(.upstreamNacks, nowUs: Self.loopClockUs())
                self.setJobsTimer()
            }
            self.context.onTrackSizeLearned = { [unowned self] track in
                guard self.directory.contains(track.owner) else { return }
                self.participantChanged(track.owner)
            }
        }
    }

    /// The jobs wanted now: housekeeping always; transport feedback, speakers and layers while the
    /// shard has rooms (participants); upstream NACKs while a gap is open (``SFUContext/upstreamGapsOpen``).
    private var activeJobs: PeriodicJobs.Due {
        var jobs: PeriodicJobs.Due = [.housekeeping]
        if directory.roomCount > 0 { jobs.formUnion([.transportFeedback, .speakers, .layers]) }
        if context.upstreamGapsOpen { jobs.insert(.upstreamNacks) }
        return jobs
    }

    /// Sets the timer for the earliest wanted job, unless it is already set no later than that.
    /// Called after the jobs ran, when a gap opens and when a participant joins.
    func setJobsTimer() {
        guard jobsRunning, let dueUs = periodicJobs.nextDueUs(active: activeJobs) else { return }
        if jobsTimer != nil, jobsTimerDueUs <= dueUs { return }
        jobsTimer?.cancel()
        jobsTimerDueUs = dueUs
        jobsTimerArm &+= 1
        let arm = jobsTimerArm
        // The timer keeps the SFU alive until ``shutdown()``.
        jobsTimer = loop.scheduleTask(deadline: NIODeadline.uptimeNanoseconds(UInt64(max(0, dueUs)) * 1000)) { self.runJobs(arm: arm) }
    }

    private func runJobs(arm: Int) {
        guard arm == jobsTimerArm else { return }  // replaced, though already taken to run
        jobsTimer = nil
        jobsTimerDueUs = .max
        guard jobsRunning else { return }
        let due = periodicJobs.due(nowUs: Self.loopClockUs(), active: activeJobs)
        if due.contains(.housekeeping) {
            tick()
            housekeepingTicks &+= 1
            if housekeepingTicks % Self.connectionQualityPeriodTicks == 0 { reportConnectionQuality() }
        }
        if due.contains(.transportFeedback) { terminator.sendTransportFeedback() }
        if due.contains(.upstreamNacks) { terminator.sendUpstreamNacks(nowUs: context.nowUs) }
        if due.contains(.layers) { layers.tick(nowUs: context.nowUs) }
        if due.contains(.speakers) { detectSpeakers(nowUs: context.nowUs) }
        setJobsTimer()
    }

    /// The clock NIO's timers run on, µs.
    private static func loopClockUs() -> Int64 { Int64(NIODeadline.now().uptimeNanoseconds / 1000) }

    /// The UDP media address.
    public var mediaAddress: SocketAddress? { port.localAddress }

    /// A consistent copy of the counters, with room/participant/track gauges.
    public var counterSnapshot: EventLoopFuture<ServerCounters> {
        loop.submit {
            var snapshot = self.context.counters
            (snapshot.udpSendRefused, snapshot.udpSendDropped) = self.port.udpSendLossesOnLoop
            snapshot.rooms = self.directory.roomCount
            snapshot.participants = self.directory.participantCount
            snapshot.tracks = self.directory.allParticipants.reduce(0) { $0 + $1.tracks.count }
            return snapshot
        }
    }

    /// The participants of a room as a server-side view (for tests and operators).
    public func participants(in channel: String) -> EventLoopFuture<[ParticipantInfo]> {
        loop.submit { self.directory.room(named: channel)?.participants.values.map(\.info).sorted { $0.uid < $1.uid } ?? [] }
    }

    /// RTP packets forwarded to `uid` in `channel`, by publisher uid and kind (empty for an unknown
    /// uid). The server-side proof that a muted or filtered stream never reaches a participant.
    public func packetsForwarded(to uid: String, in channel: String) -> EventLoopFuture<[ForwardedStream: Int]> {
        loop.submit {
            guard let participant = self.directory.participant(uid: uid, in: channel) else { return [:] }
            var counts = participant.forwardedHistory
            for subscription in participant.subscriptions {
                counts[ForwardedStream(uid: subscription.track.owner.uid, kind: subscription.track.info.kind), default: 0]
                    += subscription.packetsForwarded
            }
            return counts
        }
    }

    /// Each subscriber's downstream estimate in `channel` (bits per second), where its feedback is
    /// fresh: for tests and operators.
    public func downstreamEstimates(in channel: String) -> EventLoopFuture<[String: Double]> {
        loop.submit {
            let now = self.context.nowUs
            var estimates: [String: Double] = [:]
            for participant in self.directory.room(named: channel)?.participants.values.map({ $0 }) ?? [] {
                estimates[participant.uid] = participant.downstream.estimateBps(nowUs: now)
            }
            return estimates
        }
    }

    /// Leaves everyone with `serverShutdown` and closes the media port.
    public func shutdown() async {
        try? await loop.submit {
            self.shuttingDown = true
            self.jobsRunning = false
            self.jobsTimer?.cancel()
            self.jobsTimer = nil
            self.context.onUpstreamGapOpened = nil
            self.context.onTrackSizeLearned = nil
            for participant in self.directory.allParticipants {
                // A screen share leaves with its owner: it may be gone by its turn in this list.
                guard self.directory.contains(participant) else { continue }
                participant.send(.leave(reason: .serverShutdown))
                let peer = participant.peer
                self.remove(participant, reason: .serverShutdown)
                peer?.close()
            }
        }.get()
        await port.close()
    }

    func makeID(_ prefix: String) -> String {
        nextID += 1
        return "\(prefix)_\(context.idTag)\(nextID)"
    }

    // MARK: Signaling input

    /// Handles one message from `peer`: bytes that may be anything. They are parsed where they
    /// arrive (the connection's event loop), so a flood of bad or large messages costs that loop
    /// and not the media loop; only a decoded, size-checked envelope hops to the SFU.
    public func received(_ bytes: [UInt8], from peer: SignalingPeer) {
        deliver(InboundMessage(bytes, secret: configuration.secret), from: peer)
    }

    /// Hands a message decoded where it arrived to the SFU's loop; `then` runs there after it,
    /// told whether a room named `channel` exists on this SFU then (the shard router's bookkeeping).
    func deliver(_ message: InboundMessage, from peer: SignalingPeer, then: (@Sendable (Bool) -> Void)? = nil) {
        loop.execute {
            self.handle(message.decoded, token: message.token, from: peer)
            if let then { then(message.channel.map { self.directory.room(named: $0) != nil } ?? false) }
        }
    }

    /// The peer's connection is gone: the participant may `resume` within the window.
    public func disconnected(_ peer: SignalingPeer) {
        loop.execute {
            guard let participant = self.directory.unbind(peer) else { return }
            participant.peer = nil
            participant.disconnectedAtNs = self.monotonicClock()
        }
    }

    /// Whether `peer`'s connection has joined (or resumed) a participant.
    public func hasJoined(_ peer: SignalingPeer) -> EventLoopFuture<Bool> {
        loop.submit { self.directory.participant(peer: peer) != nil }
    }

    /// Counts a connection refused at a limit outside the SFU (message rate, outbound queue).
    func countLimitRefusal() {
        loop.execute { self.context.counters.limitRefusals += 1 }
    }

    /// Counts a connection closed for not joining in time.
    func countClosedUnjoined() {
        loop.execute { self.context.counters.connectionsClosedUnjoined += 1 }
    }

    /// Answers an error to the client (counted).
    typealias Fail = (SignalingError.Code, String) -> Void

    private func handle(_ decoded: Result<ClientEnvelope, SignalingError>, token: TokenCheck?, from peer: SignalingPeer) {
        let token = token ?? TokenCheck(.failure(TokenError(.malformed, "no token")))
        let envelope: ClientEnvelope
        switch decoded {
        case .success(let decoded): envelope = decoded
        case .failure(let error):
            context.counters.signalingErrors += 1
            peer.send(ServerEnvelope(.error(SignalingError(error.code, bounded(error.reason), requestID: error.requestID)),
                                     requestID: error.requestID))
            return
        }
        let id = envelope.requestID
        func fail(_ code: SignalingError.Code, _ reason: String) {
            context.counters.signalingErrors += 1
            if code == .limitExceeded { context.counters.limitRefusals += 1 }
            if code == .permissionDenied { context.counters.permissionRefusals += 1 }
            peer.send(ServerEnvelope(.error(SignalingError(code, bounded(reason), requestID: id)), requestID: id))
        }
        guard let participant = directory.participant(peer: peer) else {
            switch envelope.message {
            // A refused join or resume ends the connection (after the error): a client that is
            // refused starts again on a new one, and a connection that cannot join holds nothing.
            case .join where shuttingDown, .resume where shuttingDown:
                fail(.shuttingDown, "the server is shutting down: join again (another node, or this one once it is back)")
                peer.close()
            case .join(let request): join(request, token: token, peer: peer, requestID: id) { fail($0, $1); peer.close() }
            case .resume(let request): resume(request, token: token, peer: peer, requestID: id) { fail($0, $1); peer.close() }
            case .ping(let timestamp): peer.send(ServerEnvelope(.pong(timestamp: timestamp), requestID: id))
            default: fail(.notJoined, "join first")
            }
            return
        }
        participant.lastSeen = clock()
        switch envelope.message {
        case .join, .resume: fail(.alreadyJoined, "this connection has already joined as \(participant.uid)")
        case .ping(let timestamp): participant.send(.pong(timestamp: timestamp), requestID: id)
        case .publishTrack(let request): publishTrack(request, participant: participant, requestID: id, fail: fail)
        case .offer(let description): publisherOffer(description, participant: participant, requestID: id, fail: fail)
        case .answer(let description): subscriberAnswer(description, participant: participant, fail: fail)
        case .unpublishTrack(let sid):
            guard let track = participant.tracks.first(where: { $0.info.sid == sid }) else { return fail(.trackNotFound, "no track \(sid)") }
            unpublish(track)
            participantChanged(participant)
        case .mute(let request):
            guard let track = participant.tracks.first(where: { $0.info.sid == request.trackSid }) else {
                return fail(.trackNotFound, "no track \(request.trackSid)")
            }
            track.info.muted = request.muted
            participantChanged(participant)
        case .updateSubscription(let update): updateSubscription(update, participant: participant, fail: fail)
        case .updateMetadata(let update): updateOwnMetadata(update, participant: participant, requestID: id, fail: fail)
        case .setVideoPreference(let preference): setVideoPreference(preference, participant: participant, fail: fail)
        case .setSubscriptionPermission(let permission): setSubscriptionPermission(permission, participant: participant, fail: fail)
        case .setRole(let role):
            guard role != participant.role else { return }
            if role == .broadcaster {
                let grants = participant.grants
                guard grants.publishAudio || grants.publishVideo || grants.publishScreen else {
                    return fail(.permissionDenied, "the token grants no publishing, so \(participant.uid) cannot become a broadcaster")
                }
            }
            participant.role = role
            if role == .audience { for track in participant.tracks { unpublish(track) } }
            participantChanged(participant)
        case .restartICE(let transport):
            // The client lost its media path while signaling stayed up (RFC 8445 §9): new
            // credentials in a new subscriber offer. A publisher transport restarts with an offer.
            guard transport == .subscriber else {
                return fail(.negotiationFailed, "the publisher transport restarts ICE with an offer carrying new credentials")
            }
            guard participant.subscriber != nil else { return fail(.negotiationFailed, "no subscriber transport to restart") }
            participant.subscriberCredentials = .random()
            offerSubscriber(participant)
        case .leave:
            remove(participant, reason: .clientRequest)
            peer.close()
        case .refreshToken:
            do {
                let claims = try verify(token, channel: participant.room.name, uid: participant.uid)
                participant.tokenExpiresAt = claims.expiresAt
                participant.grants = claims.grants
                participant.tokenWarned = false
                participant.send(.tokenRefreshed(expiresAt: claims.expiresAt), requestID: id)
            } catch { fail(error.code, error.reason) }
        }
    }

    /// `reason` cut to the configured length: reasons may quote what the client sent.
    func bounded(_ reason: String) -> String {
        let limit = configuration.limits.maxReasonLength
        guard reason.count > limit else { return reason }
        return String(reason.prefix(limit)) + "… (\(reason.utf8.count) bytes)"
    }

    /// A token's signature (checked where it arrived) and time window: its claims, or why not.
    func verifySignature(_ token: TokenCheck) throws(SignalingError) -> AccessToken {
        guard !token.isEmpty else { throw SignalingError(.tokenMissing, "no token") }
        do {
            let claims = try token.signed.get()
            try claims.checkTime(now: clock())
            return claims
        } catch {
            switch error.kind {
            case .expired: throw SignalingError(.tokenExpired, error.reason)
            case .notYetValid: throw SignalingError(.tokenNotYetValid, error.reason)
            case .malformed, .badSignature: throw SignalingError(.tokenInvalid, error.reason)
            }
        }
    }

    /// The rest of a token's check, on the loop: its signature was checked where it arrived.
    func verify(_ token: TokenCheck, channel: String, uid: String) throws(SignalingError) -> AccessToken {
        let claims = try verifySignature(token)
        let lifetime = claims.expiresAt - max(claims.issuedAt, claims.notBefore)
        guard lifetime <= configuration.limits.maxTokenLifetimeSeconds else {
            throw SignalingError(.tokenInvalid, "the token lives \(lifetime) s; this server takes tokens of at most "
                                 + "\(configuration.limits.maxTokenLifetimeSeconds) s")
        }
        guard claims.channel == channel else { throw SignalingError(.tokenWrongChannel, "the token is for channel \(claims.channel)") }
        guard claims.uid == uid else { throw SignalingError(.tokenWrongUID, "the token is for uid \(claims.uid)") }
        return claims
    }
}

/// A signaling message decoded where it arrived (the connection's loop), with its token's
/// signature checked there too (an HMAC over up to 8 KiB): the media loop gets the claims and
/// checks only what needs its state (time, channel, uid, lifetime).
struct InboundMessage: Sendable {
    let decoded: Result<ClientEnvelope, SignalingError>
    let token: TokenCheck?

    init(_ bytes: [UInt8], secret: String) {
        do { decoded = .success(try ClientEnvelope.decode(bytes)) } catch { decoded = .failure(error) }
        token = switch (try? decoded.get())?.message {
        case .join(let request): TokenCheck(request.token, secret: secret)
        case .resume(let request): TokenCheck(request.token, secret: secret)
        case .refreshToken(let token): TokenCheck(token, secret: secret)
        default: nil
        }
    }

    /// The channel a join names, or a resume's token names (nil for anything else).
    var channel: String? {
        switch (try? decoded.get())?.message {
        case .join(let request): request.channel
        case .resume: try? token?.signed.get().channel
        default: nil
        }
    }

    var isJoinOrResume: Bool {
        switch (try? decoded.get())?.message {
        case .join, .resume: true
        default: false
        }
    }
}

/// A token whose form and signature were checked where its message arrived (the connection's
/// loop): the claims, or why they are refused.
struct TokenCheck: Sendable {
    let isEmpty: Bool
    let signed: Result<AccessToken, TokenError>

    init(_ token: String, secret: String) {
        isEmpty = token.isEmpty
        do { signed = .success(try AccessToken.verifySignature(token, secret: secret)) } catch { signed = .failure(error) }
    }

    init(_ signed: Result<AccessToken, TokenError>) {
        isEmpty = false
        self.signed = signed
    }
}
