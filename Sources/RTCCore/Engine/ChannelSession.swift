import NIOConcurrencyHelpers
import NIOCore
import RTCConventions
import RTCTransport
import Signaling

/// What every part of a session needs from the engine: its configuration, event loops, event hub
/// and sinks, and a snapshot of the app's local settings.
struct EngineContext: Sendable {
    let configuration: RTCEngineConfiguration
    let group: EventLoopGroup
    let events: EngineEventHub
    let sinks: NIOLockedValueBox<EngineSinks>
    /// The app's settings now (read, never held).
    let settings: @Sendable () -> LocalSettings
}

/// The app's local settings that a session reads when it publishes.
struct LocalSettings: Sendable {
    var videoEnabled = false
    var audioEnabled = false
    var video = VideoEncoderConfiguration()
    var audioProcessing: Bool?
    var role: ClientRole
    /// Users subscribed to in full by `subscribe(uid:)`.
    var pinned: Set<String> = []
    /// Simulcast layers of the local video (1: one stream, 2: dual stream, 3).
    var simulcastLayers = 1
    /// What this client wants of remote layered video, by uid (nil key: the default); sent again
    /// after every join.
    var videoPreferences: [String?: VideoPreference] = [:]
    /// Who may subscribe to this client's tracks (nil: everyone, never said); sent again after every join.
    var subscriptionPermission: SubscriptionPermission?
}

/// How a session ended without the app asking, for the engine to act on.
enum SessionEnd: Sendable {
    /// The server went away (restart, lost connection past the resume window): join again.
    case rejoin
    /// The server ended the session (token expired, kicked, owner left, ...).
    case left(ConnectionChangedReason)
}

/// One joined session of a channel: the signaling connection and what it says, the remote user
/// directory, the publisher and subscriber transports, media-path recovery, and the RTCP, stats
/// and playout timers. A rejoin makes a new session.
///
/// Ownership: `lock` guards the fields under "State"; it is held only to read or write them,
/// never across an `await`, a thread join, an event or a call into a transport. Signaling
/// messages are handled one at a time on the session's event task.
final class ChannelSession: @unchecked Sendable {
    let channel: String
    let uid: String
    let options: JoinOptions
    let signaling: any SignalingChannel
    let joinStartUs: Int64
    private let context: EngineContext
    private let onEnd: @Sendable (ChannelSession, SessionEnd) -> Void
    /// Our RTCP sender SSRC, also the base of our SDP session ids.
    private let rtcpSSRC = UInt32.random(in: 1...UInt32.max)
    private let stats = EngineStats()
    private let lock = NIOLock()
    // MARK: State (under `lock`)
    private var _token: String
    private var participantSid = ""
    /// The TURN servers transports may relay through (the configuration's, else the server's).
    private var turnServers: [TURNServer] = []
    /// `stun:` servers, asked for server-reflexive candidates when a transport is bound.
    private var stunServers: [SocketAddress] = []
    private var _publisher: PublisherTransport?
    private var _subscriber: SubscriberTransport?
    /// The simulcast layer the server last said it sends of each remote user's video.
    private var receivedLayers: [String: LayerChange] = [:]
    private var directory: RemoteUserDirectory
    /// The signaling connection is down and being resumed.
    private var signalingLost = false
    /// Transports that have been connected, and those whose path is lost now (ICE restarting).
    private var mediaConnected: Set<SessionDescriptionMessage.Transport> = []
    private var mediaLost: Set<SessionDescriptionMessage.Transport> = []
    /// The loudest speaker last reported (under `lock`).
    private var activeSpeaker: String?
    private var leaving = false
    private var tornDown = false
    private var ticks = 0
    private var eventTask: Task<Void, Never>?
    private var connectionTask: Task<Void, Never>?
    private var rtcpTask: RepeatedTask?
    private var playout: MediaThread?

    init(context: EngineContext, channel: String, uid: String, token: String, options: JoinOptions, signaling: any SignalingChannel,
         onEnd: @escaping @Sendable (ChannelSession, SessionEnd) -> Void) {
        self.context = context
        self.channel = channel
        self.uid = uid
        self.options = options
        self.signaling = signaling
        self.onEnd = onEnd
        _token = token
        joinStartUs = MediaClock.monotonicUs()
        directory = RemoteUserDirectory(localUID: uid, profile: context.configuration.channelProfile,
                                        ignoreScreenShare: context.configuration.ignoreScreenShareUsers ?? false)
    }

    var token: String {
        get { lock.withLock { _token } }
        set { lock.withLock { _token = newValue } }
    }

    var publisher: PublisherTransport? { lock.withLock { _publisher } }
    var subscriber: SubscriberTransport? { lock.withLock { _subscriber } }
    var remoteUIDs: [String] { lock.withLock { directory.uids } }
    /// False once the session is leaving or torn down: late callbacks then do nothing.
    private var isLive: Bool { lock.withLock { !leaving && !tornDown } }

    private func emit(_ event: RTCEngineEvent) { context.events.emit(event) }

    // MARK: Start and end

    /// After the server's `joined`: the users already there (listed before any message is
    /// handled, so the subscriber offer that follows finds their tracks), timers and the
    /// signaling tasks. Returns the events the users already there make, for the engine to emit
    /// after `joinedChannel`.
    /// The layer the server last said it sends of `uid`'s video (a layered track only).
    func receivedLayer(of uid: String) -> LayerChange? { lock.withLock { receivedLayers[uid] } }

    /// Sends what this client wants of remote layered video (after a join: the server starts from defaults).
    func sendVideoPreferences(_ preferences: [String?: VideoPreference]) async throws {
        // The default first, then per user.
        for (_, preference) in preferences.sorted(by: { ($0.key ?? "") < ($1.key ?? "") }) {
            try await signaling.send(.setVideoPreference(preference))
        }
    }

    func start(_ joined: JoinResponse) -> [RTCEngineEvent] {
        let pinned = context.settings().pinned
        var events = lock.withLock { directory.apply(joined.others, pinned: pinned) }
        if let metadata = joined.roomMetadata { events.append(.roomMetadataChanged(metadata)) }
        // The ICE servers are in place before the first signaling event is handled: the server's
        // subscriber offer may come right behind `joined`, and its transport takes them (a
        // relay-only join once failed with "no TURN server" when the offer won that race).
        let relays = ICEServer.turnServers(context.configuration.iceServers ?? joined.iceServers,
                                           trustedCertificates: context.configuration.turnTrustedCertificates)
        // An ICE server that cannot be used is told to the app (an error event), not a failed join:
        // the direct paths may well work.
        for reason in relays.skipped { emit(.error(RTCEngineError(.invalidArgument, "ICE server skipped: \(reason)"))) }
        lock.withLock {
            participantSid = joined.participant.sid
            turnServers = relays.usable
            stunServers = relays.stun
        }
        let playout = MediaThread(name: "audio-playout", tickIntervalUs: 20_000) { [weak self] in self?.playoutTick() }
        let rtcpTask = context.group.next().scheduleRepeatedTask(initialDelay: .milliseconds(500), delay: .seconds(1)) { [weak self] _ in
            self?.rtcpTick()
        }
        let eventTask = Task { [weak self, signaling] in
            for await message in signaling.events {
                guard let self else { return }
                await self.handle(message)
            }
            self?.signalingEnded()
        }
        let connectionTask = Task { [weak self, signaling] in
            for await event in signaling.connectionEvents {
                guard let self else { return }
                await self.signalingConnection(event)
            }
        }
        lock.withLock {
            self.playout = playout
            self.rtcpTask = rtcpTask
            self.eventTask = eventTask
            self.connectionTask = connectionTask
        }
        return events
    }

    /// Marks the session as leaving (no recovery, no rejoin) and closes signaling.
    func closeSignaling() async {
        lock.withLock { leaving = true }
        await signaling.close()
    }

    /// Stops everything the session owns. Idempotent; threads are joined with no lock held.
    func tearDown() async {
        let owned = lock.withLock { () -> (RepeatedTask?, MediaThread?, PublisherTransport?, SubscriberTransport?, [Task<Void, Never>])? in
            guard !tornDown else { return nil }
            tornDown = true
            return (rtcpTask, playout, _publisher, _subscriber, [eventTask, connectionTask].compactMap { $0 })
        }
        guard let (rtcpTask, playout, publisher, subscriber, tasks) = owned else { return }
        rtcpTask?.cancel()
        playout?.stop()
        await publisher?.close()
        await subscriber?.close()
        for task in tasks { task.cancel() }
    }

    // MARK: Publishing

    /// Creates the senders that are enabled and missing, announces them, and (re)negotiates the
    /// publisher transport, binding and connecting it the first time.
    func publishLocalTracks() async throws {
        let settings = context.settings()
        let existing = publisher
        let wantVideo = settings.videoEnabled && options.publishVideo && existing?.videoSender == nil
        let wantAudio = settings.audioEnabled && options.publishAudio && existing?.audioSender == nil
        guard wantVideo || wantAudio else { return }
        let publisher: PublisherTransport
        if let existing {
            publisher = existing
        } else {
            publisher = try await PublisherTransport.bind(clientTransport, group: context.group, rtcpSSRC: rtcpSSRC) { [weak self] state in
                self?.mediaTransportChanged(.publisher, to: state)
            }
            lock.withLock { _publisher = publisher }
        }
        let report: @Sendable (RTCEngineError) -> Void = { [events = context.events] error in events.emit(.error(error)) }
        // Both tracks are announced at once (the requests carry ids; their replies come in one
        // round trip, not one each): on a lossy or long path each serial round trip costs.
        var announcements: [(PublisherTransport.NewSender, PublishTrackRequest)] = []
        // End to end: every frame is encrypted before it is packetized, and the tracks say so (a
        // room that requires it refuses them otherwise). Our own setting decides, never the server.
        let e2ee = context.configuration.encryption.map { FrameEncryption(keys: $0, uid: uid) }
        let encryption: TrackEncryption? = e2ee == nil ? nil : .gcm
        if wantVideo {
            let sender = publisher.makeVideoSender(source: options.videoSource, configuration: settings.video,
                                                   simulcastLayers: settings.simulcastLayers, encryption: e2ee)
            sender.onError = report
            // A layered track's streams are bound by their stream ids, not an SSRC announced here.
            var request = PublishTrackRequest(kind: .video, source: options.videoSource, mid: sender.mid,
                                              ssrc: sender.simulcastRids.isEmpty ? sender.state.ssrc : nil, encryption: encryption)
            if context.configuration.signalingProtocol == .livekit {
                // LiveKit's AddTrack announces the size and the layers before the offer.
                request.width = settings.video.dimensions.width
                request.height = settings.video.dimensions.height
                request.simulcastLayers = sender.simulcastRids.isEmpty ? nil : sender.simulcastRids
                request.bitrateBps = settings.video.bitrateKbps * 1000
            }
            announcements.append((.video(sender), request))
        }
        if wantAudio {
            let source = options.audioSource
            let sender = publisher.makeAudioSender(source: source, processing: settings.audioProcessing ?? (source == .microphone),
                                                   encryption: e2ee)
            sender.onError = report
            announcements.append((.audio(sender), PublishTrackRequest(kind: .audio, source: source, mid: sender.mid, ssrc: sender.state.ssrc,
                                                                      encryption: encryption)))
        }
        // The announcements and the offer that sends the tracks go back to back without waiting
        // for a reply (the server reads them in order: it makes the tracks, then answers the
        // offer by their mids), so the whole publish is one round trip; on a lossy or long path
        // each serial round trip costs.
        for (sender, _) in announcements { publisher.install(sender, trackSid: nil) }
        let offer = publisher.makeOffer(streamID: lock.withLock { participantSid }, sessionID: UInt64(rtcpSSRC))
        let replies = try await signaling.requests(announcements.map { .publishTrack($0.1) } + [.offer(offer)])
        var refused: (any Error)?
        for ((sender, _), reply) in zip(announcements, replies) {
            do {
                guard case .trackPublished(let info) = try reply.get() else {
                    throw RTCEngineError(.unexpectedReply, "the server answered publishTrack with \((try? reply.get())?.type ?? "?")")
                }
                publisher.install(sender, trackSid: info.sid)
            } catch {
                // Refused: the sender stops (its thread joined) and leaves the transport.
                switch sender {
                case .video: publisher.removeSender(.video)
                case .audio: publisher.removeSender(.audio)
                }
                refused = refused ?? error
            }
        }
        if let refused { throw refused }
        let answer = try publisher.accept(reply: try replies[announcements.count].get())
        if existing == nil { try await publisher.connect(answer: answer) }
    }

    /// Data channels on the publisher transport (binding and connecting it the first time, a
    /// data-only offer), attached to `streams`. Nothing when they are already on.
    func enableData(_ streams: DataStreams) async throws {
        let existing = publisher
        if let existing, existing.offersDataChannel { return }
        let publisher: PublisherTransport
        if let existing {
            publisher = existing
        } else {
            publisher = try await PublisherTransport.bind(clientTransport, group: context.group, rtcpSSRC: rtcpSSRC) { [weak self] state in
                self?.mediaTransportChanged(.publisher, to: state)
            }
            lock.withLock { _publisher = publisher }
        }
        publisher.enableDataChannels()
        let answer = try await publisher.negotiate(signaling: signaling, streamID: lock.withLock { participantSid },
                                                   sessionID: UInt64(rtcpSSRC))
        guard let port = (try? SessionDescription(parsing: answer.sdp))?.dataChannelPort else {
            throw RTCEngineError(.unexpectedReply, "the server's answer rejected the data channel section")
        }
        let session = publisher.transport.session
        let endpoint = try await session.eventLoop.submit { try session.enableDataChannelsOnLoop(remotePort: port) }.get()
        streams.attach(endpoint, loop: session.eventLoop)
        if existing == nil { try await publisher.connect(answer: answer) }
    }

    /// Stops the local track of a kind and tells the server.
    func unpublish(_ kind: TrackKind) async throws {
        guard let sid = publisher?.removeSender(kind) else { return }
        try await signaling.send(.unpublishTrack(trackSid: sid))
    }

    /// Switches role: going to audience stops the local tracks (the server unpublishes them).
    /// Senders are stopped with no lock held, so an encode thread that reports an error meanwhile
    /// cannot deadlock with this.
    func setRole(_ role: ClientRole) async throws {
        try await signaling.send(.setRole(role.participantRole))
        if role == .audience {
            publisher?.removeSender(.video)
            publisher?.removeSender(.audio)
        } else {
            try await publishLocalTracks()
        }
    }

    /// Mutes or unmutes the local track of a kind; returns its track sid (nil: no such track).
    func setLocalMuted(_ kind: TrackKind, _ muted: Bool) -> String? {
        guard let publisher else { return nil }
        let (video, audio) = publisher.senders
        if kind == .video {
            video?.muted = muted
            if !muted { video?.requestKeyframe() }
        } else {
            audio?.muted = muted
        }
        return publisher.trackSid(kind)
    }

    func remoteTrackSids(of uid: String, kind: TrackKind) -> [String] {
        lock.withLock { directory.trackSids(of: uid, kind: kind) }
    }

    // MARK: Media paths

    /// The client transport configuration: consent checks often enough to notice a lost path
    /// within ``RTCEngineConfiguration/mediaTimeoutSeconds``.
    private var clientTransport: MediaTransportConfiguration {
        let configuration = context.configuration
        var transport = MediaTransportConfiguration.client(host: configuration.bindAddress)
        transport.includeLoopbackCandidates = LocalInterfaces.isLoopback(signaling.host)
        let timeout = max(0.5, context.configuration.mediaTimeoutSeconds)
        transport.iceTimers.consentInterval = min(2.5, timeout / 2)
        transport.iceTimers.disconnectAfter = timeout
        (transport.turnServers, transport.stunServers) = lock.withLock { (turnServers, stunServers) }
        transport.relayOnly = configuration.iceTransportPolicy == .relay
        if !configuration.iceTCP { transport.iceTCPAfter = nil }
        return transport
    }

    /// On a transport's event loop. A connected transport that stops answering (consent checks
    /// unanswered, or expired) while signaling is up: `reconnecting` with `mediaInterrupted`, and
    /// ICE restarts until the path is back, then `connected` with `resumed`.
    private func mediaTransportChanged(_ transport: SessionDescriptionMessage.Transport, to state: MediaTransportState) {
        enum Change { case lost(announce: Bool), recovered(announce: Bool), neverConnected(String) }
        let connection = context.events.connectionState
        let change: Change? = lock.withLock {
            guard !leaving, !tornDown else { return nil }
            switch state {
            case .connected:
                mediaConnected.insert(transport)
                guard mediaLost.remove(transport) != nil else { return nil }
                return .recovered(announce: mediaLost.isEmpty && !signalingLost && connection == .reconnecting)
            case .failed(let reason) where transport == .subscriber && !mediaConnected.contains(transport):
                // No path at all (every candidate pair failed; relay-only and the TURN server refused
                // or is silent): the join cannot give media, and says why instead of waiting. (The
                // publisher transport's first connect fails the publish itself, naming the candidates.)
                guard mediaLost.insert(transport).inserted else { return nil }
                return .neverConnected(reason)
            case .disconnected, .failed:
                guard mediaConnected.contains(transport), mediaLost.insert(transport).inserted else { return nil }
                return .lost(announce: connection == .connected)
            default:
                return nil
            }
        }
        switch change {
        case .lost(let announce):
            if announce { context.events.setConnectionState(.reconnecting, .mediaInterrupted) }
            Task { await self.recoverMedia(transport) }
        case .recovered(let announce):
            if announce { context.events.setConnectionState(.connected, .resumed) }
        case .neverConnected(let reason):
            emit(.error(RTCEngineError(.transportFailed, "the \(transport.rawValue) transport could not connect: \(reason)")))
            context.events.setConnectionState(.failed, .joinFailed)
        case nil:
            break
        }
    }

    private func isLost(_ transport: SessionDescriptionMessage.Transport) -> Bool {
        lock.withLock { !leaving && !tornDown && mediaLost.contains(transport) }
    }

    /// Restarts ICE on a transport whose path is lost, again with backoff (1, 2, 4, 8 s) while it
    /// stays lost: the publisher with a new offer, the subscriber by asking the server for one.
    private func recoverMedia(_ transport: SessionDescriptionMessage.Transport) async {
        var waitMs = 1000
        while isLost(transport) {
            do {
                switch transport {
                case .publisher: try await restartPublisherICE()
                case .subscriber: try await signaling.send(.restartICE(transport: .subscriber))
                }
            } catch {
                // Signaling is down too: its own resume restarts ICE; try again after the wait.
            }
            let until = MediaClock.monotonicUs() + Int64(waitMs) * 1000
            while MediaClock.monotonicUs() < until, isLost(transport) {
                try? await Task.sleep(for: .milliseconds(50))
            }
            waitMs = min(waitMs * 2, 8000)
        }
    }

    private func restartPublisherICE() async throws {
        guard let publisher else { return }
        try await publisher.restartICE(signaling: signaling, streamID: lock.withLock { participantSid }, sessionID: UInt64(rtcpSSRC))
    }

    // MARK: Signaling

    /// The signaling connection dropped (`reconnecting`) or resumed within the server's window:
    /// then the session is the same (the others saw nothing), and ICE restarts on the publisher
    /// transport (our offer) and the subscriber transport (the server's offer follows the resume),
    /// since a lost connection often means a changed network; `connected` with `resumed`.
    private func signalingConnection(_ event: SignalingConnectionEvent) async {
        guard isLive else { return }
        switch event {
        case .lost:
            lock.withLock { signalingLost = true }
            context.events.setConnectionState(.reconnecting, .interrupted)
        case .resumed:
            lock.withLock { signalingLost = false }
            do {
                try await restartPublisherICE()
            } catch {
                emit(.error(RTCEngineError(.transportFailed, "ICE restart of the publisher transport: \(error)")))
            }
            context.events.setConnectionState(.connected, .resumed)
        }
    }

    /// The signaling connection ended without a leave and could not be resumed.
    private func signalingEnded() {
        guard isLive else { return }
        onEnd(self, .rejoin)
    }

    private func handle(_ message: ServerMessage) async {
        switch message {
        case .offer(let offer) where offer.transport == .subscriber:
            do {
                try await answerSubscriber(offer.sdp)
            } catch {
                emit(.error(RTCEngineError(.transportFailed, "subscriber negotiation: \(error)")))
            }
        case .participantUpdate(let participants):
            participantsChanged(participants)
        case .participantLeft(let uid, let reason):
            for event in lock.withLock({ directory.remove(uid: uid, reason: reason) }) { emit(event) }
        case .tokenWillExpire(let expiresAt):
            emit(.tokenPrivilegeWillExpire(expiresAt: expiresAt))
        case .videoLayers(let request):
            // Dynacast: encode only the layers some subscriber wants.
            if let publisher, publisher.trackSid(.video) == request.trackSid {
                publisher.videoSender?.setActiveLayers(request.activeLayers)
            }
        case .layerChanged(let change):
            lock.withLock { receivedLayers[change.uid] = change }
            emit(.remoteVideoLayerChanged(change))
        case .roomUpdate(let update):
            emit(.roomMetadataChanged(update.metadata))
        case .trackMuted(let request):
            emit(.localTrackMutedByServer(trackSid: request.trackSid, muted: request.muted))
        case .activeSpeakers(let update):
            emit(.activeSpeakersChanged(update.speakers))
            let loudest = update.speakers.first?.uid
            let changed = lock.withLock { () -> Bool in
                defer { activeSpeaker = loudest }
                return activeSpeaker != loudest
            }
            if changed { emit(.activeSpeaker(uid: loudest)) }
        case .subscriptionPermission(let update):
            emit(.subscriptionPermissionChanged(uid: update.uid, trackSid: update.trackSid, allowed: update.allowed))
        case .connectionQuality(let quality):
            // Its own: the server sees no round trip on its legs, this client does (its sender
            // reports answered): a long one makes both of its directions no better than it allows.
            let ownRTT = [publisher?.videoSender?.state, publisher?.audioSender?.state].compactMap { $0?.counters.withLock { $0.roundTripTimeMs } }.max()
            for entry in quality.participants {
                var (up, down) = (entry.up, entry.down)
                if entry.uid == uid, let ownRTT {
                    let byRoundTrip = NetworkQuality.level(lossFraction: 0, roundTripMs: ownRTT)
                    if up != NetworkQuality.unknown { up = max(up, byRoundTrip) }
                    if down != NetworkQuality.unknown { down = max(down, byRoundTrip) }
                }
                emit(.networkQuality(uid: entry.uid, up: up, down: down))
            }
        case .leave(.serverShutdown):
            // A server going down for a restart: join the next one.
            await closeSignaling()
            onEnd(self, .rejoin)
        case .leave(let reason):
            let mapped: ConnectionChangedReason = switch reason {
            case .tokenExpired: .tokenExpired
            case .serverShutdown: .serverShutdown
            case .ownerLeft: .ownerLeft
            case .duplicateIdentity: .duplicateIdentity
            case .kicked: .bannedByServer
            case .roomDeleted: .roomDeleted
            case .clientRequest, .timeout: .interrupted
            }
            await closeSignaling()
            onEnd(self, .left(mapped))
        default:
            break
        }
    }

    /// The levels of this client's audio and of each remote audio track since the last call.
    func takeAudioLevels() -> [(uid: String, window: AudioLevelWindow)] {
        var sample: [(uid: String, window: AudioLevelWindow)] = []
        if let sender = publisher?.audioSender { sample.append((uid, sender.takeLevels())) }
        for receiver in subscriber?.receivers.audio ?? [] { sample.append((receiver.info.uid, receiver.takeLevels())) }
        return sample
    }

    private func participantsChanged(_ participants: [ParticipantInfo]) {
        let pinned = context.settings().pinned
        let events = lock.withLock { directory.apply(participants, pinned: pinned) }
        for event in events { emit(event) }
    }

    // MARK: Subscriber transport

    private func answerSubscriber(_ sdp: String) async throws {
        let offer = try SessionDescription(parsing: sdp)
        let subscriber: SubscriberTransport
        let fresh: Bool
        if let existing = self.subscriber {
            subscriber = existing
            fresh = false
        } else {
            subscriber = try await SubscriberTransport.bind(clientTransport, group: context.group, rtcpSSRC: rtcpSSRC,
                                                            outputs: receiverOutputs()) { [weak self] state in
                self?.mediaTransportChanged(.subscriber, to: state)
            }
            lock.withLock { _subscriber = subscriber }
            fresh = true
        }
        try await subscriber.answer(offer, signaling: signaling, sessionID: UInt64(rtcpSSRC) &+ 1, fresh: fresh) { [weak self] section, kind in
            guard let self else { return RemoteUserDirectory.unknownTrack(section, kind) }
            return self.lock.withLock { self.directory.track(streamID: section.streamID, trackID: section.trackID, kind: kind) }
        }
    }

    private func receiverOutputs() -> ReceiverOutputs {
        let sinks = context.sinks, events = context.events, joinStartUs = joinStartUs
        var outputs = ReceiverOutputs(
            video: { frame in sinks.withLockedValue { $0.video }?(frame) },
            encodedVideo: { frame in sinks.withLockedValue { $0.encodedVideo }?(frame) },
            encodedAudio: { frame in sinks.withLockedValue { $0.encodedAudio }?(frame) },
            firstFrame: { info, size in
                let elapsed = Int((MediaClock.monotonicUs() - joinStartUs) / 1000)
                events.emit(.firstRemoteVideoFrameDecoded(uid: info.uid, source: info.source, size: size, elapsedMs: elapsed))
            })
        outputs.keys = context.configuration.encryption
        outputs.encryptionState = { info, state, error in
            events.emit(.encryptionStateChanged(info, state: state))
            if let error, state == .missingKey || state == .decryptionFailed {
                events.emit(.decryptionFailed(uid: info.uid, trackSid: info.trackSid, reason: error.description))
            }
        }
        return outputs
    }

    // MARK: Playout, RTCP and stats

    /// Every 20 ms on the playout thread: 20 ms of each remote audio track, mixed; the mix is the
    /// echo canceller's far end.
    private func playoutTick() {
        guard let receivers = subscriber?.receivers.audio, !receivers.isEmpty else { return }
        let sinks = context.sinks.withLockedValue { $0 }
        var mix = [Int32](repeating: 0, count: LocalAudioSender.samplesPerPacket * LocalAudioSender.channels)
        var any = false
        for receiver in receivers {
            guard let frame = receiver.pull() else { continue }
            let samples = frame.int16Samples
            guard samples.count == mix.count else { continue }
            any = true
            sinks.audio?(RemoteAudioFrame(uid: receiver.info.uid, trackSid: receiver.info.trackSid, source: receiver.info.source, frame: frame))
            for index in 0..<mix.count { mix[index] += Int32(samples[index]) }
        }
        guard any else { return }
        let mixed = mix.map { Int16(clamping: $0) }
        sinks.mixedAudio?(AudioFrame(samples: .int16(mixed), sampleRate: 48000, channels: 2, timestampUs: MediaClock.monotonicUs()))
        publisher?.audioSender?.feedFarEnd(mixed)
    }

    /// Once a second on an event loop: sender reports, receiver reports, and stats at their interval.
    private func rtcpTick() {
        let (publisher, subscriber, tick) = lock.withLock { () -> (PublisherTransport?, SubscriberTransport?, Int) in
            ticks += 1
            return (_publisher, _subscriber, ticks)
        }
        let mono = MediaClock.monotonicUs()
        publisher?.sendReports(cname: uid, nowMonoUs: mono, wallUs: MediaClock.wallUs())
        subscriber?.sendReports(nowUs: mono)
        guard tick % max(1, context.configuration.statsIntervalSeconds) == 0 else { return }
        // Both transports' counters (each on its loop), then one report.
        let publisherStats = publisher?.transport.stats, subscriberStats = subscriber?.transport.stats
        let emit: @Sendable (MediaTransportStats?, MediaTransportStats?) -> Void = { [weak self] published, subscribed in
            self?.emitStats(publisher: published, subscriber: subscribed)
        }
        let second: @Sendable (MediaTransportStats?) -> Void = { published in
            guard let subscriberStats else { return emit(published, nil) }
            subscriberStats.whenComplete { emit(published, try? $0.get()) }
        }
        if let publisherStats { publisherStats.whenComplete { second(try? $0.get()) } } else { second(nil) }
    }

    private func emitStats(publisher publisherStats: MediaTransportStats?, subscriber subscriberStats: MediaTransportStats?) {
        let (publisher, subscriber) = lock.withLock { (_publisher, _subscriber) }
        var report = stats.report(nowUs: MediaClock.monotonicUs(), sinceUs: joinStartUs, senders: publisher?.senders ?? (nil, nil),
                                  receivers: subscriber?.receivers ?? SubscriberTransport.Receivers(),
                                  subscriberRTT: subscriberStats?.roundTripTime, estimatedBandwidthKbps: publisher?.estimatedBandwidthKbps)
        func path(_ stats: MediaTransportStats?) -> String? {
            guard let stats, let transport = stats.transport else { return nil }
            let local = stats.mappedAddress.map { mapped in
                let ip = mapped.ipAddress ?? "?"
                return " from \(stats.localCandidateType ?? "prflx") " + (ip.contains(":") ? "[\(ip)]:\(mapped.port ?? 0)" : "\(ip):\(mapped.port ?? 0)")
            } ?? ""
            return "\(transport) \(stats.remoteAddress ?? "?")\(local)"
        }
        report.publisherPath = path(publisherStats)
        report.subscriberPath = path(subscriberStats)
        if let video = publisher?.videoSender {
            for index in report.local.indices where report.local[index].kind == .video { report.local[index].temporalLayers = video.temporalLayers }
        }
        if let video = publisher?.videoSender, !video.simulcastRids.isEmpty {
            let sending = video.layers.filter(\.isSending).compactMap(\.rid)
            for index in report.local.indices where report.local[index].kind == .video { report.local[index].layers = sending }
        }
        let layers = lock.withLock { receivedLayers }
        for index in report.remote.indices where report.remote[index].kind == .video {
            guard let change = layers[report.remote[index].uid] else { continue }
            report.remote[index].layer = change.layer
            report.remote[index].layerReason = change.reason
        }
        emit(.rtcStats(report))
    }
}

extension ICEServer {
    /// The TURN servers among these URLs that a client transport can relay through: `turn:` over
    /// UDP or TCP with a username and credential; numeric hosts, `localhost` or names resolved
    /// here. Each skipped URL comes back with why.
    static func turnServers(_ servers: [ICEServer], trustedCertificates: String? = nil)
        -> (usable: [TURNServer], stun: [SocketAddress], skipped: [String])
    {
        var usable: [TURNServer] = [], stun: [SocketAddress] = [], skipped: [String] = []
        for server in servers {
            for text in server.urls {
                guard let url = try? ICEServerURL(parsing: text) else { skipped.append("\(text): not an ICE server URL"); continue }
                if url.scheme == .stun {
                    // For server-reflexive candidates: no credentials.
                    let address = (try? SocketAddress(ipAddress: url.host, port: url.port))
                        ?? (try? SocketAddress.makeAddressResolvingHost(url.host, port: url.port))
                    if let address { stun.append(address) } else { skipped.append("\(text): \(url.host) does not resolve") }
                    continue
                }
                guard url.scheme == .turn || url.scheme == .turns else { skipped.append("\(text): only stun:, turn: and turns: URLs are used"); continue }
                guard let username = server.username, let credential = server.credential else {
                    skipped.append("\(text): no username and credential")
                    continue
                }
                let address = (try? SocketAddress(ipAddress: url.host, port: url.port))
                    ?? (try? SocketAddress.makeAddressResolvingHost(url.host, port: url.port))
                guard let address else { skipped.append("\(text): \(url.host) does not resolve"); continue }
                let transport: TURNServer.Transport = url.scheme == .turns ? .tls : url.transport == .tcp ? .tcp : .udp
                usable.append(TURNServer(address: address, transport: transport, username: username, password: credential,
                                         hostname: url.host, trustedCertificates: trustedCertificates))
            }
        }
        return (usable, stun, skipped)
    }
}
