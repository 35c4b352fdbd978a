import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RTCConventions
import RTCTransport
import LiveKitProtocol
import Signaling

/// The client SDK: joins a channel, publishes external video and audio, receives remote users'
/// decoded frames and PCM, and reports events and statistics.
///
/// Threads: control calls (`join`, `leave`, mutes) are `async` and may come from any task;
/// `pushVideoFrame` and `pushAudioFrame` are synchronous and cheap, for capture threads. Each local
/// track encodes on a thread of its own, each remote video track decodes on one, and remote audio is
/// decoded and mixed on a playout thread that ticks every 20 ms. The network runs on a NIO event
/// loop, which never encodes or decodes. Sinks and the delegate are called on those threads: return quickly.
public final class RTCEngine: @unchecked Sendable {
    public let configuration: RTCEngineConfiguration
    private let group: EventLoopGroup
    private let hub = EngineEventHub()
    private let sinks = NIOLockedValueBox(EngineSinks())
    /// Guards `settings`, `session` and `leftByUser`: held only to read or write them, never
    /// across an `await`, an event or a call into a session (docs/architecture.md, "Threads").
    private let lock = NIOLock()
    private var settings: LocalSettings
    private var session: ChannelSession?
    /// Set by `leave()`: no automatic rejoin after it.
    private var leftByUser = false
    /// The app's data streams, across sessions (a rejoin reopens their channels).
    private let dataStreams: DataStreams
    /// `enableAudioVolumeIndication` (VolumeIndication.swift).
    let volumeIndicator = VolumeIndicator()
    var eventLoopForTimers: EventLoop { group.next() }
    func emitEvent(_ event: RTCEngineEvent) { hub.emit(event) }
    /// The audio levels sent and received since the last call (the current session's).
    func audioLevelSample() -> [(uid: String, window: AudioLevelWindow)] { currentSession?.takeAudioLevels() ?? [] }

    public init(configuration: RTCEngineConfiguration, group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton) {
        self.configuration = configuration
        self.group = group
        settings = LocalSettings(role: configuration.clientRole)
        dataStreams = DataStreams(framing: configuration.signalingProtocol == .livekit ? .liveKit : .envelope,
                                  emit: { [hub] event in hub.emit(event) })
        if configuration.dataChannels { dataStreams.want() }
        hub.attach(self)
    }

    // MARK: Data streams

    /// Creates a data stream (Agora's `createDataStream`): messages sent on it are relayed by the
    /// server to the other users (or the uids named), reliable and ordered, or lossy (unordered,
    /// never retransmitted, as for cursors). Opens the data channels now when joined, else at the join.
    /// Returns the stream's id.
    public func createDataStream(reliable: Bool = true, ordered: Bool = true) async throws(RTCEngineError) -> Int {
        let id = try dataStreams.create(reliable: reliable, ordered: ordered)
        try await openDataChannels()
        return id
    }

    /// Sends `data` on a stream from ``createDataStream(reliable:ordered:)``, under `topic`, to
    /// `destinations` (empty: everyone else in the channel). Queued until the channels are open.
    /// Throws `messageTooLarge` past 60 KiB, `messageRateExceeded` past 200 messages a second on a
    /// stream (or 256 waiting), `invalidArgument` for an unknown stream.
    public func sendStreamMessage(streamId: Int, data: [UInt8], topic: String = "", to destinations: [String] = []) throws(RTCEngineError) {
        guard streamId > 0 else { throw RTCEngineError(.invalidArgument, "stream ids start at 1") }
        try dataStreams.send(streamID: streamId, data, topic: topic, destinations: destinations)
    }

    /// LiveKit's `publishData`: one message, reliable or lossy, with a topic and destinations,
    /// without a stream of its own (it arrives with stream id 0).
    public func publishData(_ data: [UInt8], reliable: Bool = true, topic: String = "", destinations: [String] = []) async throws(RTCEngineError) {
        dataStreams.want()
        try await openDataChannels()
        try dataStreams.send(streamID: 0, reliable: reliable, data, topic: topic, destinations: destinations)
    }

    /// Opens the data channels of the current session, if joined and not yet open.
    private func openDataChannels() async throws(RTCEngineError) {
        guard let session = currentSession else { return }
        do {
            try await session.enableData(dataStreams)
        } catch let error as RTCEngineError {
            throw error
        } catch {
            throw RTCEngineError(.transportFailed, "data channels: \(error)")
        }
    }

    deinit {
        hub.finishAll()
    }

    private var context: EngineContext {
        EngineContext(configuration: configuration, group: group, events: hub, sinks: sinks) { [weak self] in
            guard let self else { return LocalSettings(role: .audience) }
            return self.lock.withLock { self.settings }
        }
    }

    private var currentSession: ChannelSession? { lock.withLock { session } }

    private func joinedSession() throws(RTCEngineError) -> ChannelSession {
        guard let session = currentSession else { throw RTCEngineError(.invalidState, "not joined") }
        return session
    }

    // MARK: Settings

    public var delegate: (any RTCEngineDelegate)? {
        get { hub.delegate }
        set { hub.delegate = newValue }
    }

    public var connectionState: ConnectionState { hub.connectionState }

    /// Uids of the remote users in the channel (those this client is shown).
    public var remoteUsers: [String] { currentSession?.remoteUIDs ?? [] }

    /// The state of the transport remote media arrives on (nil before the server offered one).
    public func subscriberTransportState() async -> MediaTransportState? {
        guard let transport = currentSession?.subscriber?.transport else { return nil }
        return try? await transport.state.get()
    }

    /// The state of the transport local media leaves on (nil when not publishing).
    public func publisherTransportState() async -> MediaTransportState? {
        guard let transport = currentSession?.publisher?.transport else { return nil }
        return try? await transport.state.get()
    }

    /// Video frames the local video track has encoded so far (0 when not publishing video).
    public var localVideoFramesEncoded: Int {
        currentSession?.publisher?.videoSender?.state.counters.withLock { $0.framesEncoded } ?? 0
    }

    /// Publish video at the next join (and now, when joined as a broadcaster).
    public func enableVideo() async throws { try await setEnabled(.video, true) }
    public func disableVideo() async throws { try await setEnabled(.video, false) }
    public func enableAudio() async throws { try await setEnabled(.audio, true) }
    public func disableAudio() async throws { try await setEnabled(.audio, false) }

    public func setVideoEncoderConfiguration(_ configuration: VideoEncoderConfiguration) throws(RTCEngineError) {
        try configuration.validate()
        let session = lock.withLock { () -> ChannelSession? in
            settings.video = configuration
            return self.session
        }
        session?.publisher?.reconfigureVideo(configuration)
    }

    /// Echo cancellation, noise suppression and gain control on the local audio track. Nil (the
    /// default) means on for a microphone source and off for screen audio.
    public func setAudioProcessing(enabled: Bool?) {
        let session = lock.withLock { () -> ChannelSession? in
            settings.audioProcessing = enabled
            return self.session
        }
        if let sender = session?.publisher?.audioSender { sender.processingEnabled = enabled ?? (sender.source == .microphone) }
    }

    /// Every decoded remote video frame, on the track's decode thread.
    public func setRemoteVideoSink(_ sink: (@Sendable (RemoteVideoFrame) -> Void)?) { sinks.withLockedValue { $0.video = sink } }
    /// Every remote encoded frame handed to the decoder, in order (recording).
    public func setRemoteEncodedVideoSink(_ sink: (@Sendable (RemoteEncodedVideoFrame) -> Void)?) {
        sinks.withLockedValue { $0.encodedVideo = sink }
    }
    /// Every remote Opus packet as it arrives (before the jitter buffer), on the network event
    /// loop: keep the sink short (recording queues it to a thread of its own).
    public func setRemoteEncodedAudioSink(_ sink: (@Sendable (RemoteEncodedAudioFrame) -> Void)?) {
        sinks.withLockedValue { $0.encodedAudio = sink }
    }
    /// 20 ms of each playing remote audio track, on the playout thread.
    public func setRemoteAudioSink(_ sink: (@Sendable (RemoteAudioFrame) -> Void)?) { sinks.withLockedValue { $0.audio = sink } }
    /// 20 ms of all remote audio mixed (48 kHz stereo), on the playout thread.
    public func setMixedAudioSink(_ sink: (@Sendable (AudioFrame) -> Void)?) { sinks.withLockedValue { $0.mixedAudio = sink } }

    /// Decoded remote video as an async sequence (the newest 8 frames are kept if the reader lags).
    public func remoteVideoFrames() -> AsyncStream<RemoteVideoFrame> {
        let (stream, continuation) = AsyncStream.makeStream(of: RemoteVideoFrame.self, bufferingPolicy: .bufferingNewest(8))
        setRemoteVideoSink { continuation.yield($0) }
        return stream
    }

    /// A new stream of every event from now on. Each call makes an independent stream.
    public var events: AsyncStream<RTCEngineEvent> { hub.makeStream() }

    /// Emits `.error(error)` on the event stream and to the delegate, for a component attached to
    /// the engine whose failures the app should see where it sees the engine's (a recorder's full
    /// disk). The engine itself does nothing else about it.
    public func report(_ error: RTCEngineError) { hub.emit(.error(error)) }

    // MARK: External sources

    /// Pushes a video frame (I420, NV12 or BGRA) with its capture time (`timestampUs`, any
    /// monotonic microsecond clock) and rotation. Returns false when no video track is sending
    /// (not joined, video disabled, audience, or muted).
    @discardableResult
    public func pushVideoFrame(_ frame: VideoFrame) -> Bool {
        guard let sender = currentSession?.publisher?.videoSender, !sender.muted else { return false }
        sender.push(frame)
        return true
    }

    /// Pushes PCM at any common rate (8 to 192 kHz) and channel count (1 to 8), any block size.
    @discardableResult
    public func pushAudioFrame(_ frame: AudioFrame) -> Bool {
        guard frame.channels > 0, frame.sampleRate > 0, frame.samples.count % frame.channels == 0,
              let sender = currentSession?.publisher?.audioSender, !sender.muted
        else { return false }
        sender.push(frame)
        return true
    }

    // MARK: Join and leave

    /// Joins `channel` as `uid`. Returns once joined and, for a broadcaster, once the publisher
    /// transport is connected; throws with the server's reason otherwise.
    public func join(token: String, channel: String, uid: String, options: JoinOptions = JoinOptions()) async throws {
        try await join(token: token, channel: channel, uid: uid, options: options, rejoining: false)
    }

    /// `rejoining`: an automatic join after the server was lost; the state stays `reconnecting`
    /// until it succeeds (then `connected` with `rejoined`).
    /// The URL for a join: the configured one first, then the alternates in turn on rejoins.
    private func serverURL(attempt: Int) -> String {
        let urls = [configuration.serverURL] + configuration.alternateServerURLs
        return urls[attempt % urls.count]
    }

    private func join(token: String, channel: String, uid: String, options: JoinOptions, rejoining: Bool, attempt: Int = 0) async throws {
        let signaling: any SignalingChannel
        do {
            let url = serverURL(attempt: rejoining ? attempt : 0)
            signaling = switch configuration.signalingProtocol {
            case .native: try SignalingClient(url: url, group: group)
            case .livekit: try LiveKitSignalingClient(url: url, group: group)
            }
        } catch {
            throw RTCEngineError(.invalidArgument, error.reason)
        }
        let session = ChannelSession(context: context, channel: channel, uid: uid, token: token, options: options,
                                     signaling: signaling) { [weak self] session, end in self?.sessionEnded(session, end) }
        let current = lock.withLock { () -> LocalSettings? in
            guard self.session == nil else { return nil }
            leftByUser = false
            self.session = session
            return settings
        }
        guard let current else { throw RTCEngineError(.invalidState, "already joined or joining; leave first") }
        if !rejoining { hub.setConnectionState(.connecting, .joining) }
        let response: JoinResponse
        do {
            try await signaling.connect()
            let request = JoinRequest(
                token: token, channel: channel, uid: uid, role: current.role.participantRole,
                autoSubscribe: options.autoSubscribeAudio || options.autoSubscribeVideo,
                autoSubscribeAudio: options.autoSubscribeAudio, autoSubscribeVideo: options.autoSubscribeVideo,
                ignoreScreenShare: configuration.ignoreScreenShareUsers,
                pinnedUIDs: current.pinned.isEmpty ? nil : current.pinned.sorted())
            let reply = try await signaling.request(.join(request))
            guard case .joined(let joined) = reply else {
                throw RTCEngineError(.unexpectedReply, "the server answered join with \(reply.type)")
            }
            response = joined
        } catch {
            await signaling.close()
            lock.withLock { if self.session === session { self.session = nil } }
            let reason: ConnectionChangedReason
            if let error = error as? SignalingError, (2001...2007).contains(error.code.rawValue) {
                reason = error.code == .tokenExpired ? .tokenExpired : .invalidToken
            } else {
                reason = .joinFailed
            }
            if !rejoining { hub.setConnectionState(.failed, reason) }
            if let error = error as? RTCEngineError { throw error }
            throw RTCEngineError(reason == .joinFailed ? .joinFailed : .tokenRejected, "\(error)",
                                 serverCode: (error as? SignalingError)?.code.rawValue)
        }
        let present = session.start(response)
        if !current.videoPreferences.isEmpty { try? await session.sendVideoPreferences(current.videoPreferences) }
        if let permission = current.subscriptionPermission { try? await session.signaling.send(.setSubscriptionPermission(permission)) }
        let elapsed = Int((MediaClock.monotonicUs() - session.joinStartUs) / 1000)
        hub.setConnectionState(.connected, rejoining ? .rejoined : .joinSuccess)
        hub.emit(.joinedChannel(channel: channel, uid: uid, elapsedMs: elapsed))
        for event in present { hub.emit(event) }
        if lock.withLock({ settings.role }) == .broadcaster {
            do {
                try await session.publishLocalTracks()
            } catch where rejoining {
                // The server went away again between the join and the publish: this attempt is
                // over, not the rejoining (a leave here would read as the user's and end it).
                await session.closeSignaling()
                await tearDown(session)
                throw error
            } catch {
                await leave()
                throw error
            }
        }
        // After the media: the first frame does not wait on the data channels' negotiation.
        if dataStreams.wanted {
            do {
                try await session.enableData(dataStreams)
            } catch {
                hub.emit(.error(RTCEngineError(.transportFailed, "data channels did not open: \(error)")))
            }
        }
    }

    /// Leaves the channel: the others see `userOffline(quit)`.
    public func leave() async {
        guard let session = lock.withLock({ () -> ChannelSession? in
            leftByUser = true
            return self.session
        }) else { return }
        await session.closeSignaling()
        await tearDown(session)
        hub.setConnectionState(.disconnected, .leaveChannel)
        hub.emit(.leftChannel)
    }

    /// Detaches `session` if it is the current one and stops it (nothing if it was not).
    private func tearDown(_ session: ChannelSession) async {
        let owned = lock.withLock { () -> Bool in
            guard self.session === session else { return false }
            self.session = nil
            return true
        }
        guard owned else { return }
        dataStreams.detach()
        await session.tearDown()
    }

    /// A session ended without the app asking. Not on the session's own event task: tearing the
    /// session down cancels that task.
    private func sessionEnded(_ session: ChannelSession, _ end: SessionEnd) {
        guard currentSession === session else { return }
        switch end {
        case .rejoin:
            Task { await self.rejoin(after: session) }
        case .left(let reason):
            Task {
                await self.tearDown(session)
                self.hub.setConnectionState(.disconnected, reason)
            }
        }
    }

    /// The signaling connection ended without a leave and could not be resumed (the server
    /// restarted, or the resume window passed): join again as the same uid, with backoff.
    private func rejoin(after session: ChannelSession) async {
        await tearDown(session)
        hub.setConnectionState(.reconnecting, .interrupted)
        var backoff = RejoinBackoff()
        let deadline = MediaClock.monotonicUs() + Int64(configuration.rejoinTimeoutSeconds) * 1_000_000
        while MediaClock.monotonicUs() < deadline {
            guard lock.withLock({ self.session == nil && !self.leftByUser }) else { return }
            do {
                try await join(token: session.token, channel: session.channel, uid: session.uid, options: session.options, rejoining: true,
                               attempt: backoff.unreachable)
                return
            } catch {
                // A server that answered (an error code) is up: try it again soon. One that could
                // not be reached may be gone for good: the next URL, after the growing backoff.
                let wait = backoff.failed(answered: (error as? RTCEngineError)?.serverCode != nil)
                try? await Task.sleep(for: .milliseconds(wait))
            }
        }
        hub.setConnectionState(.failed, .interrupted)
    }

    /// Switches between broadcaster and audience. Going to audience unpublishes the local tracks.
    public func setClientRole(_ newRole: ClientRole) async throws {
        let session = lock.withLock { () -> ChannelSession? in
            settings.role = newRole
            return self.session
        }
        try await session?.setRole(newRole)
    }

    /// Hands the server a fresh token (after `tokenPrivilegeWillExpire`).
    public func renewToken(_ token: String) async throws {
        let session = try joinedSession()
        do {
            _ = try await session.signaling.request(.refreshToken(token: token))
            session.token = token
        } catch {
            throw RTCEngineError(.tokenRejected, "\(error)")
        }
    }

    /// Test hook: drops the signaling connection without a leave, as a network change would.
    func dropSignalingConnection() async {
        await currentSession?.signaling.dropConnection()
    }

    /// Test hook: the session's publisher transport, if any.
    var publisherForTesting: PublisherTransport? { currentSession?.publisher }

    // MARK: Mutes

    /// Stops (or resumes) sending local audio; the others get `remoteTrackMuted`.
    /// Sets this client's own display name, metadata or attributes (nil: unchanged; an empty
    /// attribute value removes the key) for everyone in the channel, when its token grants
    /// `updateMetadata`. Returns itself as the server now shows it; throws the server's refusal.
    @discardableResult
    public func updateLocalMetadata(name: String? = nil, metadata: String? = nil, attributes: [String: String]? = nil) async throws -> ParticipantInfo {
        let session = try joinedSession()
        let reply = try await session.signaling.request(.updateMetadata(MetadataUpdate(name: name, metadata: metadata, attributes: attributes)))
        guard case .participantUpdate(let infos) = reply, let own = infos.first else {
            if case .error(let error) = reply { throw RTCEngineError(.invalidArgument, error.reason) }
            throw RTCEngineError(.unexpectedReply, "the server answered updateMetadata with \(reply.type)")
        }
        return own
    }

    public func muteLocalAudioStream(_ muted: Bool) async throws {
        try await muteLocal(kind: .audio, muted: muted)
    }

    public func muteLocalVideoStream(_ muted: Bool) async throws {
        try await muteLocal(kind: .video, muted: muted)
    }

    private func muteLocal(kind: TrackKind, muted: Bool) async throws {
        let session = try joinedSession()
        guard let sid = session.setLocalMuted(kind, muted) else { throw RTCEngineError(.notPublishing, "no local \(kind.rawValue) track") }
        try await session.signaling.send(.mute(MuteRequest(trackSid: sid, muted: muted)))
    }

    /// Stops (or resumes) receiving one user's audio: the server stops forwarding it.
    public func muteRemoteAudioStream(uid: String, muted: Bool) async throws {
        try await muteRemote(uid: uid, kind: .audio, muted: muted)
    }

    public func muteRemoteVideoStream(uid: String, muted: Bool) async throws {
        try await muteRemote(uid: uid, kind: .video, muted: muted)
    }

    private func muteRemote(uid: String, kind: TrackKind, muted: Bool) async throws {
        let session = try joinedSession()
        let sids = session.remoteTrackSids(of: uid, kind: kind)
        guard !sids.isEmpty else { throw RTCEngineError(.invalidArgument, "\(uid) publishes no \(kind.rawValue)") }
        try await session.signaling.send(.updateSubscription(SubscriptionUpdate(trackSids: sids, subscribe: !muted)))
    }

    /// Stops (or resumes) receiving all remote audio, now and for users who join later.
    public func muteAllRemoteAudioStreams(_ muted: Bool) async throws {
        try await muteAllRemote(kind: .audio, muted: muted)
    }

    public func muteAllRemoteVideoStreams(_ muted: Bool) async throws {
        try await muteAllRemote(kind: .video, muted: muted)
    }

    private func muteAllRemote(kind: TrackKind, muted: Bool) async throws {
        let session = try joinedSession()
        try await session.signaling.send(.updateSubscription(SubscriptionUpdate(trackSids: [], subscribe: !muted, kind: kind)))
    }

    /// Subscribes to (or drops) specific tracks by sid (see `subscribe(uid:)` for a whole user).
    public func subscribe(trackSids: [String], _ subscribe: Bool = true) async throws {
        let session = try joinedSession()
        try await session.signaling.send(.updateSubscription(SubscriptionUpdate(trackSids: trackSids, subscribe: subscribe)))
    }

    /// Subscribes to every track of one user, now and later, whatever auto-subscription and the
    /// screen-share filter say; `false` drops them again. This is how a client with
    /// `ignoreScreenShareUsers` (a share's owner, by default) still watches a screen on purpose:
    /// the user is then listed (`userJoined`) and its tracks arrive like any other.
    /// Works before `join` too, and holds across rejoins.
    public func subscribe(uid: String, _ subscribe: Bool = true) async throws {
        guard !uid.isEmpty, uid.utf8.count <= 128 else { throw RTCEngineError(.invalidArgument, "uid must be 1 to 128 bytes") }
        let session = lock.withLock { () -> ChannelSession? in
            if subscribe { settings.pinned.insert(uid) } else { settings.pinned.remove(uid) }
            return self.session
        }
        guard let session else { return }
        try await session.signaling.send(.updateSubscription(SubscriptionUpdate(trackSids: [], subscribe: subscribe, uids: [uid])))
    }

    // MARK: End-to-end encryption

    /// Sets the end-to-end key (a passphrase, as LiveKit's SDKs take it) at `index` of the shared
    /// ring, or of `uid`'s ring in per-participant mode; it becomes the index this client sends
    /// with when it is the ring this client sends with. A frame sealed with an older index still
    /// opens while its key is in the ring, so a rotation loses nothing. Needs
    /// ``RTCEngineConfiguration/encryption``. Derives the key (PBKDF2): tens of milliseconds.
    /// `makeCurrent: false` only adds the key: for a rotation without a gap, every participant
    /// learns the new key first, then each sender moves to it (``setEncryptionKeyIndex(_:uid:)``).
    public func setEncryptionKey(_ passphrase: String, index: Int = 0, uid: String? = nil, makeCurrent: Bool = true) throws(RTCEngineError) {
        try setEncryptionKey(Array(passphrase.utf8), index: index, uid: uid, makeCurrent: makeCurrent)
    }

    /// The same with raw key material.
    public func setEncryptionKey(_ material: [UInt8], index: Int = 0, uid: String? = nil, makeCurrent: Bool = true) throws(RTCEngineError) {
        let keys = try encryptionKeys()
        do {
            if keys.options.sharedKey || uid == nil { try keys.setSharedKey(material, index: index, makeCurrent: makeCurrent) }
            else { try keys.setKey(material, participant: uid!, index: index, makeCurrent: makeCurrent) }
        } catch {
            throw RTCEngineError(.invalidArgument, "end-to-end key: \(error)")
        }
    }

    /// The key index this client sends with from the next frame on (its key must be set).
    public func setEncryptionKeyIndex(_ index: Int, uid: String? = nil) throws(RTCEngineError) {
        let keys = try encryptionKeys()
        do { try keys.setCurrentIndex(index, participant: uid) } catch { throw RTCEngineError(.invalidArgument, "end-to-end key: \(error)") }
    }

    /// Moves the key at `index` one ratchet step on (LiveKit's `ratchetKey`): receivers follow
    /// within their ratchet window.
    public func ratchetEncryptionKey(index: Int = 0, uid: String? = nil) throws(RTCEngineError) {
        let keys = try encryptionKeys()
        do {
            guard try keys.ratchet(index: index, participant: uid) != nil else {
                throw RTCEngineError(.invalidState, "no end-to-end key at index \(index) to ratchet")
            }
        } catch let error as RTCEngineError {
            throw error
        } catch {
            throw RTCEngineError(.invalidArgument, "end-to-end key: \(error)")
        }
    }

    private func encryptionKeys() throws(RTCEngineError) -> E2EEKeyProvider {
        guard let keys = configuration.encryption else {
            throw RTCEngineError(.invalidState, "end-to-end encryption is off: set RTCEngineConfiguration.encryption before creating the engine")
        }
        return keys
    }

    // MARK: Layered video

    /// Dual stream (Agora's `enableDualStreamMode`, TRTC's `enableEncSmallVideoStream`): the camera
    /// is also sent as a small stream (a quarter of the size) that viewers on a narrow path, or
    /// asking for `.low`, receive instead. Off by default, and for a screen share.
    public func enableDualStreamMode(_ enabled: Bool) async throws {
        try await setSimulcast(layers: enabled ? 2 : 1)
    }

    /// Simulcast of the local video: 1 (one stream), 2 (full and quarter size) or 3 layers (full,
    /// half and quarter size). A track being published is published again with the new layers.
    public func setSimulcast(layers: Int) async throws {
        guard (1...3).contains(layers) else { throw RTCEngineError(.invalidArgument, "simulcast layers must be 1, 2 or 3 (got \(layers))") }
        let session = lock.withLock { () -> ChannelSession? in
            settings.simulcastLayers = layers
            return self.session
        }
        guard let session, let sender = session.publisher?.videoSender, sender.layers.count != layers else { return }
        try await session.unpublish(.video)
        try await session.publishLocalTracks()
    }

    /// Which of `uid`'s streams to receive when it sends layers (Agora's `setRemoteVideoStreamType`):
    /// `.high` (the full one, as far as the path carries it) or `.low` (the smallest). Holds across rejoins.
    public func setRemoteVideoStreamType(uid: String, _ type: VideoStreamType) async throws {
        try await setVideoPreference(VideoPreference(uid: uid, streamType: type), for: uid)
    }

    /// The stream type for every user without one of its own (`setRemoteDefaultVideoStreamType`).
    public func setRemoteDefaultVideoStreamType(_ type: VideoStreamType) async throws {
        try await setVideoPreference(VideoPreference(streamType: type), for: nil)
    }

    /// Adaptive stream: the size `uid`'s video is rendered at; the server sends the smallest layer
    /// that covers it (nil: back to the stream type, `.high` by default).
    public func setRemoteRenderSize(uid: String, size: VideoSize?) async throws {
        if let size, !(1...16384).contains(size.width) || !(1...16384).contains(size.height) {
            throw RTCEngineError(.invalidArgument, "a render size is 1...16384 on each side (got \(size.width)x\(size.height))")
        }
        try await setVideoPreference(VideoPreference(uid: uid, renderWidth: size?.width, renderHeight: size?.height), for: uid)
    }

    /// The local video's layers now (tests stop one as a publisher's uplink would).
    var localVideoLayers: [VideoLayer] { currentSession?.publisher?.videoSender?.layers ?? [] }

    /// The layer the server last said it sends of `uid`'s video; nil for a single stream or before it said.
    public func remoteVideoLayer(uid: String) -> LayerChange? { currentSession?.receivedLayer(of: uid) }

    /// Who may subscribe to this client's tracks (LiveKit's `setTrackSubscriptionPermissions`):
    /// everyone (`allowAll`, the default), or only the uids in `allowed`, each to all its tracks
    /// (nil) or to the track sids listed. The server holds everyone to it: a user who loses a track
    /// is unsubscribed at once and told (`subscriptionPermissionChanged`); one who gains it gets it.
    /// Kept and sent again after a rejoin.
    public func setSubscriptionPermission(allowAll: Bool, allowed: [String: [String]?] = [:]) async throws {
        guard allowed.keys.allSatisfy({ !$0.isEmpty && $0.utf8.count <= 128 }) else { throw RTCEngineError(.invalidArgument, "uids must be 1 to 128 bytes") }
        let permission = SubscriptionPermission(allowAll: allowAll, allowed: allowed.sorted { $0.key < $1.key }.map {
            SubscriptionPermission.Grant(uid: $0.key, trackSids: $0.value)
        })
        let session = lock.withLock { () -> ChannelSession? in
            settings.subscriptionPermission = permission
            return self.session
        }
        try await session?.signaling.send(.setSubscriptionPermission(permission))
    }

    private func setVideoPreference(_ preference: VideoPreference, for uid: String?) async throws {
        if let uid, uid.isEmpty || uid.utf8.count > 128 { throw RTCEngineError(.invalidArgument, "uid must be 1 to 128 bytes") }
        let session = lock.withLock { () -> ChannelSession? in
            settings.videoPreferences[uid] = preference
            return self.session
        }
        try await session?.signaling.send(.setVideoPreference(preference))
    }

    // MARK: Publishing

    private func setEnabled(_ kind: TrackKind, _ enabled: Bool) async throws {
        let (session, isBroadcaster) = lock.withLock { () -> (ChannelSession?, Bool) in
            if kind == .video { settings.videoEnabled = enabled } else { settings.audioEnabled = enabled }
            return (self.session, settings.role == .broadcaster)
        }
        guard let session, isBroadcaster else { return }
        if enabled {
            try await session.publishLocalTracks()
        } else {
            try await session.unpublish(kind)
        }
    }
}
