import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RTCTransport
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
    private let lock = NIOLock()
    // MARK: State under `lock`
    private var videoEnabled = false
    private var audioEnabled = false
    private var videoConfiguration = VideoEncoderConfiguration()
    private var audioProcessing: Bool?
    private var role: ClientRole
    private var _connectionState: ConnectionState = .disconnected
    private var session: Session?
    private var continuations: [Int: AsyncStream<RTCEngineEvent>.Continuation] = [:]
    private var nextContinuationID = 0
    private weak var _delegate: (any RTCEngineDelegate)?
    private var sinks = Sinks()
    /// Set by `leave()`: no automatic rejoin after it.
    private var leftByUser = false
    /// Users subscribed to in full by `subscribe(uid:)`, carried into every (re)join.
    private var pinnedUIDs: Set<String> = []

    /// Everything that exists only while joined.
    private final class Session: @unchecked Sendable {
        let channel: String
        let uid: String
        var token: String
        let options: JoinOptions
        let signaling: SignalingClient
        let joinStartUs: Int64
        var participantSid = ""
        var publisher: MediaTransport?
        /// Paces what the publisher transport sends (made with it).
        var pacer: Pacer?
        var subscriber: MediaTransport?
        /// The transports' local ICE credentials after an ICE restart (nil: those they were made with).
        var publisherICE: ICECredentials?
        var subscriberICE: ICECredentials?
        /// The server's ufrag on the subscriber transport: an offer with another restarts ICE.
        var subscriberRemoteUfrag: String?
        var connectionTask: Task<Void, Never>?
        /// The signaling connection is down and being resumed.
        var signalingLost = false
        /// Transports that have been connected, and those whose path is lost now (ICE restarting).
        var mediaConnected: Set<SessionDescriptionMessage.Transport> = []
        var mediaLost: Set<SessionDescriptionMessage.Transport> = []
        var publisherOfferVersion = 0
        /// RFC 4588 streams the server repairs on: RTX SSRC → (media SSRC, its payload type, the RTX payload type).
        var retransmissionStreams: [UInt32: (ssrc: UInt32, payloadType: UInt8, rtxPayloadType: UInt8)] = [:]
        /// Transport-wide CC on the subscriber transport: the extension id the server offered, the
        /// arrivals not yet reported, and the 100 ms task that reports them.
        var subscriberTWCCID: UInt8?
        var subscriberFeedback = TransportFeedbackBuilder()
        var feedbackTask: RepeatedTask?
        var videoSender: LocalVideoSender?
        var audioSender: LocalAudioSender?
        var videoTrackSid: String?
        var audioTrackSid: String?
        let sequencer = TransportSequencer()
        let rtcpSSRC = UInt32.random(in: 1...UInt32.max)
        var videoReceivers: [UInt32: RemoteVideoReceiver] = [:]
        var audioReceivers: [UInt32: RemoteAudioReceiver] = [:]
        var remoteUsers: [String: ParticipantInfo] = [:]
        var muteAllVideo = false
        var muteAllAudio = false
        var rtcpTask: RepeatedTask?
        var playout: MediaThread?
        var eventTask: Task<Void, Never>?
        var ticks = 0
        var previous: [UInt32: (bytes: Int, frames: Int, atUs: Int64)] = [:]
        var leaving = false

        init(channel: String, uid: String, token: String, options: JoinOptions, signaling: SignalingClient) {
            self.channel = channel
            self.uid = uid
            self.token = token
            self.options = options
            self.signaling = signaling
            joinStartUs = MediaClock.monotonicUs()
        }
    }

    private struct Sinks {
        var video: (@Sendable (RemoteVideoFrame) -> Void)?
        var encodedVideo: (@Sendable (RemoteEncodedVideoFrame) -> Void)?
        var audio: (@Sendable (RemoteAudioFrame) -> Void)?
        var mixedAudio: (@Sendable (AudioFrame) -> Void)?
    }

    public init(configuration: RTCEngineConfiguration, group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton) {
        self.configuration = configuration
        self.group = group
        role = configuration.clientRole
    }

    deinit {
        for continuation in continuations.values { continuation.finish() }
    }

    // MARK: Settings

    public var delegate: (any RTCEngineDelegate)? {
        get { lock.withLock { _delegate } }
        set { lock.withLock { _delegate = newValue } }
    }

    public var connectionState: ConnectionState { lock.withLock { _connectionState } }

    /// Uids of the remote users in the channel (those this client is shown).
    public var remoteUsers: [String] {
        lock.withLock { session.map { Array($0.remoteUsers.keys).sorted() } ?? [] }
    }

    /// The state of the transport remote media arrives on (nil before the server offered one).
    public func subscriberTransportState() async -> MediaTransportState? {
        guard let transport = lock.withLock({ session?.subscriber }) else { return nil }
        return try? await transport.state.get()
    }

    /// The state of the transport local media leaves on (nil when not publishing).
    public func publisherTransportState() async -> MediaTransportState? {
        guard let transport = lock.withLock({ session?.publisher }) else { return nil }
        return try? await transport.state.get()
    }

    /// Video frames the local video track has encoded so far (0 when not publishing video).
    public var localVideoFramesEncoded: Int {
        lock.withLock { session?.videoSender?.state }?.counters.withLock { $0.framesEncoded } ?? 0
    }

    /// Publish video at the next join (and now, when joined as a broadcaster).
    public func enableVideo() async throws { try await setEnabled(video: true) }
    public func disableVideo() async throws { try await setEnabled(video: false) }
    public func enableAudio() async throws { try await setEnabled(audio: true) }
    public func disableAudio() async throws { try await setEnabled(audio: false) }

    public func setVideoEncoderConfiguration(_ configuration: VideoEncoderConfiguration) throws(RTCEngineError) {
        try configuration.validate()
        let sender = lock.withLock { () -> LocalVideoSender? in
            videoConfiguration = configuration
            return session?.videoSender
        }
        sender?.reconfigure(configuration)
        lock.withLock { session }?.sequencer.congestion.setMaximumVideo(
            kbps: configuration.bitrateKbps,
            floorKbps: SendSideCongestion.encoderFloorKbps(for: configuration))
    }

    /// Echo cancellation, noise suppression and gain control on the local audio track. Nil (the
    /// default) means on for a microphone source and off for screen audio.
    public func setAudioProcessing(enabled: Bool?) {
        let sender = lock.withLock { () -> LocalAudioSender? in
            audioProcessing = enabled
            return session?.audioSender
        }
        if let sender { sender.processingEnabled = enabled ?? (sender.source == .microphone) }
    }

    /// Every decoded remote video frame, on the track's decode thread.
    public func setRemoteVideoSink(_ sink: (@Sendable (RemoteVideoFrame) -> Void)?) { lock.withLock { sinks.video = sink } }
    /// Every remote encoded frame handed to the decoder, in order (recording).
    public func setRemoteEncodedVideoSink(_ sink: (@Sendable (RemoteEncodedVideoFrame) -> Void)?) {
        lock.withLock { sinks.encodedVideo = sink }
    }
    /// 20 ms of each playing remote audio track, on the playout thread.
    public func setRemoteAudioSink(_ sink: (@Sendable (RemoteAudioFrame) -> Void)?) { lock.withLock { sinks.audio = sink } }
    /// 20 ms of all remote audio mixed (48 kHz stereo), on the playout thread.
    public func setMixedAudioSink(_ sink: (@Sendable (AudioFrame) -> Void)?) { lock.withLock { sinks.mixedAudio = sink } }

    /// Decoded remote video as an async sequence (the newest 8 frames are kept if the reader lags).
    public func remoteVideoFrames() -> AsyncStream<RemoteVideoFrame> {
        let (stream, continuation) = AsyncStream.makeStream(of: RemoteVideoFrame.self, bufferingPolicy: .bufferingNewest(8))
        setRemoteVideoSink { continuation.yield($0) }
        return stream
    }

    /// A new stream of every event from now on. Each call makes an independent stream.
    public var events: AsyncStream<RTCEngineEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: RTCEngineEvent.self)
        let id = lock.withLock { () -> Int in
            nextContinuationID += 1
            continuations[nextContinuationID] = continuation
            return nextContinuationID
        }
        continuation.onTermination = { [weak self] _ in self?.lock.withLock { _ = self?.continuations.removeValue(forKey: id) } }
        return stream
    }

    // MARK: External sources

    /// Pushes a video frame (I420, NV12 or BGRA) with its capture time (`timestampUs`, any
    /// monotonic microsecond clock) and rotation. Returns false when no video track is sending
    /// (not joined, video disabled, audience, or muted).
    @discardableResult
    public func pushVideoFrame(_ frame: VideoFrame) -> Bool {
        guard let sender = lock.withLock({ session?.videoSender }), !sender.muted else { return false }
        sender.push(frame)
        return true
    }

    /// Pushes PCM at any common rate (8 to 192 kHz) and channel count (1 to 8), any block size.
    @discardableResult
    public func pushAudioFrame(_ frame: AudioFrame) -> Bool {
        guard frame.channels > 0, frame.sampleRate > 0, frame.samples.count % frame.channels == 0,
              let sender = lock.withLock({ session?.audioSender }), !sender.muted
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
    private func join(token: String, channel: String, uid: String, options: JoinOptions, rejoining: Bool) async throws {
        let signaling: SignalingClient
        do {
            signaling = try SignalingClient(url: configuration.serverURL, group: group)
        } catch {
            throw RTCEngineError(.invalidArgument, error.reason)
        }
        let session = Session(channel: channel, uid: uid, token: token, options: options, signaling: signaling)
        let ok = lock.withLock { () -> Bool in
            guard self.session == nil else { return false }
            leftByUser = false
            self.session = session
            return true
        }
        guard ok else { throw RTCEngineError(.invalidState, "already joined or joining; leave first") }
        if !rejoining { setConnectionState(.connecting, .joining) }
        let response: JoinResponse
        do {
            try await signaling.connect()
            let request = JoinRequest(
                token: token, channel: channel, uid: uid, role: lock.withLock { role.participantRole },
                autoSubscribe: options.autoSubscribeAudio || options.autoSubscribeVideo,
                autoSubscribeAudio: options.autoSubscribeAudio, autoSubscribeVideo: options.autoSubscribeVideo,
                ignoreScreenShare: configuration.ignoreScreenShareUsers,
                pinnedUIDs: lock.withLock { pinnedUIDs.isEmpty ? nil : pinnedUIDs.sorted() })
            guard case .joined(let joined) = try await signaling.request(.join(request)) else {
                throw RTCEngineError(.joinFailed, "unexpected reply to join")
            }
            response = joined
        } catch {
            await signaling.close()
            lock.withLock { self.session = nil }
            let reason: ConnectionChangedReason
            if let error = error as? SignalingError, (2001...2007).contains(error.code.rawValue) {
                reason = error.code == .tokenExpired ? .tokenExpired : .invalidToken
            } else {
                reason = .joinFailed
            }
            if !rejoining { setConnectionState(.failed, reason) }
            if let error = error as? RTCEngineError { throw error }
            throw RTCEngineError(reason == .joinFailed ? .joinFailed : .tokenRejected, "\(error)")
        }
        session.participantSid = response.participant.sid
        session.playout = MediaThread(name: "audio-playout", tickIntervalUs: 20_000) { [weak self, weak session] in
            guard let self, let session else { return }
            self.playoutTick(session)
        }
        session.eventTask = Task { [weak self] in
            for await message in signaling.events {
                guard let self else { return }
                await self.handle(message, session: session)
            }
            self?.signalingEnded(session)
        }
        session.connectionTask = Task { [weak self] in
            for await event in signaling.connectionEvents {
                guard let self else { return }
                await self.signalingConnection(event, session: session)
            }
        }
        let elapsed = Int((MediaClock.monotonicUs() - session.joinStartUs) / 1000)
        setConnectionState(.connected, rejoining ? .rejoined : .joinSuccess)
        emit(.joinedChannel(channel: channel, uid: uid, elapsedMs: elapsed))
        participantsChanged(response.others, session: session)
        session.rtcpTask = group.next().scheduleRepeatedTask(initialDelay: .milliseconds(500), delay: .seconds(1)) { [weak self, weak session] _ in
            guard let self, let session else { return }
            self.rtcpTick(session)
        }
        if lock.withLock({ role }) == .broadcaster {
            do {
                try await publishLocalTracks(session)
            } catch {
                await leave()
                throw error
            }
        }
    }

    /// Leaves the channel: the others see `userOffline(quit)`.
    public func leave() async {
        guard let session = lock.withLock({ () -> Session? in
            leftByUser = true
            let current = self.session
            current?.leaving = true
            return current
        }) else { return }
        await session.signaling.close()
        await tearDown(session)
        setConnectionState(.disconnected, .leaveChannel)
        emit(.leftChannel)
    }

    private func tearDown(_ session: Session) async {
        let owned = lock.withLock { () -> Bool in
            guard self.session === session else { return false }
            self.session = nil
            return true
        }
        guard owned else { return }
        session.rtcpTask?.cancel()
        session.feedbackTask?.cancel()
        session.playout?.stop()
        session.videoSender?.stop()
        session.audioSender?.stop()
        session.pacer?.stop()
        for receiver in session.videoReceivers.values { receiver.stop() }
        await session.publisher?.close()
        await session.subscriber?.close()
        session.eventTask?.cancel()
        session.connectionTask?.cancel()
    }

    /// Switches between broadcaster and audience. Going to audience unpublishes the local tracks.
    public func setClientRole(_ newRole: ClientRole) async throws {
        let session = lock.withLock { () -> Session? in
            role = newRole
            return self.session
        }
        guard let session else { return }
        try await session.signaling.send(.setRole(newRole.participantRole))
        if newRole == .audience {
            lock.withLock {
                session.videoSender?.stop()
                session.audioSender?.stop()
                session.videoSender = nil
                session.audioSender = nil
                session.videoTrackSid = nil
                session.audioTrackSid = nil
            }
        } else {
            try await publishLocalTracks(session)
        }
    }

    /// Hands the server a fresh token (after `tokenPrivilegeWillExpire`).
    public func renewToken(_ token: String) async throws {
        guard let session = lock.withLock({ self.session }) else { throw RTCEngineError(.invalidState, "not joined") }
        do {
            _ = try await session.signaling.request(.refreshToken(token: token))
            lock.withLock { session.token = token }
        } catch {
            throw RTCEngineError(.tokenRejected, "\(error)")
        }
    }

    // MARK: Mutes

    /// Stops (or resumes) sending local audio; the others get `remoteTrackMuted`.
    public func muteLocalAudioStream(_ muted: Bool) async throws {
        try await muteLocal(kind: .audio, muted: muted)
    }

    public func muteLocalVideoStream(_ muted: Bool) async throws {
        try await muteLocal(kind: .video, muted: muted)
    }

    private func muteLocal(kind: TrackKind, muted: Bool) async throws {
        guard let session = lock.withLock({ self.session }) else { throw RTCEngineError(.invalidState, "not joined") }
        let sid = lock.withLock { () -> String? in
            if kind == .video {
                session.videoSender?.muted = muted
                if !muted { session.videoSender?.requestKeyframe() }
                return session.videoTrackSid
            }
            session.audioSender?.muted = muted
            return session.audioTrackSid
        }
        guard let sid else { throw RTCEngineError(.notPublishing, "no local \(kind.rawValue) track") }
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
        guard let session = lock.withLock({ self.session }) else { throw RTCEngineError(.invalidState, "not joined") }
        let sids = lock.withLock { session.remoteUsers[uid]?.tracks.filter { $0.kind == kind }.map(\.sid) ?? [] }
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
        guard let session = lock.withLock({ self.session }) else { throw RTCEngineError(.invalidState, "not joined") }
        lock.withLock { if kind == .video { session.muteAllVideo = muted } else { session.muteAllAudio = muted } }
        try await session.signaling.send(.updateSubscription(SubscriptionUpdate(trackSids: [], subscribe: !muted, kind: kind)))
    }

    /// Subscribes to (or drops) specific tracks by sid (see `subscribe(uid:)` for a whole user).
    public func subscribe(trackSids: [String], _ subscribe: Bool = true) async throws {
        guard let session = lock.withLock({ self.session }) else { throw RTCEngineError(.invalidState, "not joined") }
        try await session.signaling.send(.updateSubscription(SubscriptionUpdate(trackSids: trackSids, subscribe: subscribe)))
    }

    /// Subscribes to every track of one user, now and later, whatever auto-subscription and the
    /// screen-share filter say; `false` drops them again. This is how a client with
    /// `ignoreScreenShareUsers` (a share's owner, by default) still watches a screen on purpose:
    /// the user is then listed (`userJoined`) and its tracks arrive like any other.
    /// Works before `join` too, and holds across rejoins.
    public func subscribe(uid: String, _ subscribe: Bool = true) async throws {
        guard !uid.isEmpty, uid.utf8.count <= 128 else { throw RTCEngineError(.invalidArgument, "uid must be 1 to 128 bytes") }
        let session = lock.withLock { () -> Session? in
            if subscribe { pinnedUIDs.insert(uid) } else { pinnedUIDs.remove(uid) }
            return self.session
        }
        guard let session else { return }
        try await session.signaling.send(.updateSubscription(SubscriptionUpdate(trackSids: [], subscribe: subscribe, uids: [uid])))
    }

    // MARK: Publishing

    private func setEnabled(video: Bool? = nil, audio: Bool? = nil) async throws {
        let (session, isBroadcaster) = lock.withLock { () -> (Session?, Bool) in
            if let video { videoEnabled = video }
            if let audio { audioEnabled = audio }
            return (self.session, role == .broadcaster)
        }
        guard let session, isBroadcaster else { return }
        if video == false || audio == false {
            let (sender, sid): (AnyObject?, String?) = lock.withLock {
                if video == false {
                    defer { session.videoSender = nil; session.videoTrackSid = nil }
                    return (session.videoSender, session.videoTrackSid)
                }
                defer { session.audioSender = nil; session.audioTrackSid = nil }
                return (session.audioSender, session.audioTrackSid)
            }
            (sender as? LocalVideoSender)?.stop()
            (sender as? LocalAudioSender)?.stop()
            if let sid { try await session.signaling.send(.unpublishTrack(trackSid: sid)) }
        } else {
            try await publishLocalTracks(session)
        }
    }

    /// Creates the senders that are enabled and missing, announces them, and (re)negotiates the
    /// publisher transport.
    private func publishLocalTracks(_ session: Session) async throws {
        let (wantVideo, wantAudio, videoSettings, processing) = lock.withLock {
            (videoEnabled && session.options.publishVideo && session.videoSender == nil,
             audioEnabled && session.options.publishAudio && session.audioSender == nil, videoConfiguration, audioProcessing)
        }
        guard wantVideo || wantAudio else { return }
        let fresh = session.publisher == nil
        let transport: MediaTransport
        let pacer: Pacer
        if let existing = session.publisher, let existingPacer = session.pacer {
            transport = existing
            pacer = existingPacer
        } else {
            transport = try await MediaTransport.bind(clientTransport, group: group)
            transport.onStateChange = { [weak self, weak session] state in
                guard let self, let session else { return }
                self.mediaTransportChanged(.publisher, to: state, session: session)
            }
            transport.onRTCP = { [weak self, weak session] datagram in
                guard let self, let session else { return }
                self.publisherRTCP(datagram, session: session)
            }
            pacer = Pacer(loop: transport.channel.eventLoop, sequencer: session.sequencer) { [weak transport] packets in
                transport?.sendRTP(batch: packets)
            }
            session.publisher = transport
            session.pacer = pacer
        }
        let report: @Sendable (RTCEngineError) -> Void = { [weak self] error in self?.emit(.error(error)) }
        if wantVideo {
            session.sequencer.congestion.setMaximumVideo(
                kbps: videoSettings.bitrateKbps,
                floorKbps: SendSideCongestion.encoderFloorKbps(for: videoSettings))
            let sender = LocalVideoSender(ssrc: UInt32.random(in: 1...UInt32.max), mid: "v\(session.ticks)", source: session.options.videoSource,
                                          configuration: videoSettings, sequencer: session.sequencer, pacer: pacer)
            sender.onError = report
            let reply = try await session.signaling.request(.publishTrack(PublishTrackRequest(
                kind: .video, source: session.options.videoSource, mid: sender.mid, ssrc: sender.state.ssrc)))
            guard case .trackPublished(let info) = reply else { throw RTCEngineError(.joinFailed, "unexpected reply to publishTrack") }
            lock.withLock {
                session.videoSender = sender
                session.videoTrackSid = info.sid
            }
        }
        if wantAudio {
            let source = session.options.audioSource
            let sender = LocalAudioSender(ssrc: UInt32.random(in: 1...UInt32.max), mid: "a\(session.ticks)", source: source,
                                          processing: processing ?? (source == .microphone), pacer: pacer)
            sender.onError = report
            let reply = try await session.signaling.request(.publishTrack(PublishTrackRequest(
                kind: .audio, source: source, mid: sender.mid, ssrc: sender.state.ssrc)))
            guard case .trackPublished(let info) = reply else { throw RTCEngineError(.joinFailed, "unexpected reply to publishTrack") }
            lock.withLock {
                session.audioSender = sender
                session.audioTrackSid = info.sid
            }
        }
        let answer = try await negotiatePublisher(session, transport: transport, ice: lock.withLock { session.publisherICE })
        // RFC 4588 retransmissions (and probes made of them) once the server's answer accepts them.
        if let video = lock.withLock({ session.videoSender }),
           let rtx = (try? SessionDescription(parsing: answer.sdp))?.sections.first(where: { $0.mid == video.mid })?.rtxPayloadType {
            video.enableRTX(payloadType: rtx)
            pacer.setPaddingSource { [weak video] in video?.paddingPacket() }
        }
        if fresh {
            let remote: TransportParameters
            do {
                remote = try SessionDescription(parsing: answer.sdp).transportParameters(offererRole: .client)
            } catch {
                throw RTCEngineError(.transportFailed, "the server's answer: \(error)")
            }
            transport.start(remote: remote)
            let deadline = MediaClock.monotonicUs() + 10_000_000
            while MediaClock.monotonicUs() < deadline {
                let state = try await transport.state.get()
                if state == .connected { break }
                if case .failed(let reason) = state { throw RTCEngineError(.transportFailed, "publisher transport: \(reason)") }
                try await Task.sleep(for: .milliseconds(5))
            }
            guard try await transport.state.get() == .connected else {
                throw RTCEngineError(.transportFailed, "the publisher transport did not connect within 10 s")
            }
        }
    }

    /// Offers the publisher transport's sections with local credentials `ice` (nil: the
    /// transport's own) and returns the server's answer.
    private func negotiatePublisher(_ session: Session, transport: MediaTransport, ice: ICECredentials?) async throws -> SessionDescriptionMessage {
        let sections: [MediaSectionDescription] = lock.withLock {
            var sections: [MediaSectionDescription] = []
            if let video = session.videoSender {
                sections.append(MediaSectionDescription(mid: video.mid, kind: .video, direction: .sendonly, ssrc: video.state.ssrc,
                                                        streamID: session.participantSid, trackID: session.videoTrackSid,
                                                        rtxPayloadType: SDPCodecs.rtxPayloadType, rtxSSRC: video.rtxSSRC))
            }
            if let audio = session.audioSender {
                sections.append(MediaSectionDescription(mid: audio.mid, kind: .audio, direction: .sendonly, ssrc: audio.state.ssrc,
                                                        streamID: session.participantSid, trackID: session.audioTrackSid))
            }
            session.publisherOfferVersion += 1
            return sections
        }
        var parameters = transport.localParameters
        if let ice { parameters.ice = ice }
        let offer = SessionDescription.make(sessionID: UInt64(session.rtcpSSRC), version: lock.withLock { session.publisherOfferVersion },
                                            transport: parameters, iceLite: false, setup: "actpass", sections: sections)
        guard case .answer(let answer) = try await session.signaling.request(.offer(SessionDescriptionMessage(transport: .publisher,
                                                                                                             sdp: offer.serialized)))
        else { throw RTCEngineError(.joinFailed, "unexpected reply to the publisher offer") }
        return answer
    }

    /// Test hook: drops the signaling connection without a leave, as a network change would.
    func dropSignalingConnection() async {
        await lock.withLock { session }?.signaling.dropConnection()
    }

    /// The signaling connection dropped (`reconnecting`) or resumed within the server's window:
    /// then the session is the same (the others saw nothing), and ICE restarts on the publisher
    /// transport (our offer) and the subscriber transport (the server's offer follows the resume),
    /// since a lost connection often means a changed network; `connected` with `resumed`.
    private func signalingConnection(_ event: SignalingConnectionEvent, session: Session) async {
        guard lock.withLock({ self.session === session && !session.leaving }) else { return }
        switch event {
        case .lost:
            lock.withLock { session.signalingLost = true }
            setConnectionState(.reconnecting, .interrupted)
        case .resumed:
            lock.withLock { session.signalingLost = false }
            do {
                try await restartPublisherICE(session)
            } catch {
                emit(.error(RTCEngineError(.transportFailed, "ICE restart of the publisher transport: \(error)")))
            }
            setConnectionState(.connected, .resumed)
        }
    }

    /// Offers the publisher transport again with new ICE credentials and restarts its checks
    /// towards the candidates of the server's answer (RFC 8445 §9).
    private func restartPublisherICE(_ session: Session) async throws {
        guard let transport = lock.withLock({ session.publisher }) else { return }
        let ice = ICECredentials.random()
        let answer = try await negotiatePublisher(session, transport: transport, ice: ice)
        let remote = try SessionDescription(parsing: answer.sdp).transportParameters(offererRole: .client)
        transport.session.restartICE(local: ice, remote: remote)
        lock.withLock { session.publisherICE = ice }
    }

    /// The client transport configuration: consent checks often enough to notice a lost path
    /// within ``RTCEngineConfiguration/mediaTimeoutSeconds``.
    private var clientTransport: MediaTransportConfiguration {
        var transport = MediaTransportConfiguration.client()
        let timeout = max(0.5, configuration.mediaTimeoutSeconds)
        transport.iceTimers.consentInterval = min(2.5, timeout / 2)
        transport.iceTimers.disconnectAfter = timeout
        return transport
    }

    /// On a transport's event loop. A connected transport that stops answering (consent checks
    /// unanswered, or expired) while signaling is up: `reconnecting` with `mediaInterrupted`, and
    /// ICE restarts until the path is back, then `connected` with `resumed`.
    private func mediaTransportChanged(_ transport: SessionDescriptionMessage.Transport, to state: MediaTransportState, session: Session) {
        enum Change { case lost(announce: Bool), recovered(announce: Bool) }
        let change: Change? = lock.withLock {
            guard self.session === session, !session.leaving else { return nil }
            switch state {
            case .connected:
                session.mediaConnected.insert(transport)
                guard session.mediaLost.remove(transport) != nil else { return nil }
                return .recovered(announce: session.mediaLost.isEmpty && !session.signalingLost && _connectionState == .reconnecting)
            case .disconnected, .failed:
                guard session.mediaConnected.contains(transport), session.mediaLost.insert(transport).inserted else { return nil }
                return .lost(announce: _connectionState == .connected)
            default:
                return nil
            }
        }
        switch change {
        case .lost(let announce):
            if announce { setConnectionState(.reconnecting, .mediaInterrupted) }
            Task { await self.recoverMedia(transport, session: session) }
        case .recovered(let announce):
            if announce { setConnectionState(.connected, .resumed) }
        case nil:
            break
        }
    }

    /// Restarts ICE on a transport whose path is lost, again with backoff (1, 2, 4, 8 s) while it
    /// stays lost: the publisher with a new offer, the subscriber by asking the server for one.
    private func recoverMedia(_ transport: SessionDescriptionMessage.Transport, session: Session) async {
        var waitMs = 1000
        while lock.withLock({ self.session === session && !session.leaving && session.mediaLost.contains(transport) }) {
            do {
                switch transport {
                case .publisher: try await restartPublisherICE(session)
                case .subscriber: try await session.signaling.send(.restartICE(transport: .subscriber))
                }
            } catch {
                // Signaling is down too: its own resume restarts ICE; try again after the wait.
            }
            let until = MediaClock.monotonicUs() + Int64(waitMs) * 1000
            while MediaClock.monotonicUs() < until,
                  lock.withLock({ self.session === session && session.mediaLost.contains(transport) }) {
                try? await Task.sleep(for: .milliseconds(50))
            }
            waitMs = min(waitMs * 2, 8000)
        }
    }

    private func publisherRTCP(_ datagram: ByteBuffer, session: Session) {
        guard let packets = try? RTCPPacket.parseCompound(datagram) else { return }
        let (video, audio) = lock.withLock { (session.videoSender, session.audioSender) }
        let now = MediaClock.wallUs()
        for packet in packets {
            switch packet {
            case .pictureLossIndication(let pli) where pli.mediaSSRC == video?.state.ssrc:
                video?.requestKeyframe()
            case .fullIntraRequest(let fir) where fir.entries.contains { $0.ssrc == video?.state.ssrc }:
                video?.requestKeyframe()
            case .nack(let nack) where nack.mediaSSRC == video?.state.ssrc:
                video?.retransmit(nack.lostSequenceNumbers)
            case .transportFeedback(let feedback):
                let rtt = video?.state.counters.withLock { $0.roundTripTimeMs }
                let congestion = session.sequencer.congestion
                let pacer = lock.withLock { session.pacer }
                if let kbps = congestion.received(feedback, rttMs: rtt, probing: pacer?.canProbe ?? false) { video?.setTargetBitrate(kbps: kbps) }
                pacer?.setEstimate(bps: congestion.targetBps)
                if let probe = congestion.takeProbe() { pacer?.probe(probe) }
            case .remb(let remb) where remb.ssrcs.isEmpty || remb.ssrcs.contains { $0 == video?.state.ssrc }:
                // The server's limit for our slowest subscriber's path.
                let limit = Double(min(remb.bitrate, UInt64(Int64.max)))
                if let kbps = session.sequencer.congestion.limit(toBps: limit) { video?.setTargetBitrate(kbps: kbps) }
            case .receiverReport(let report):
                for block in report.reports {
                    if block.ssrc == video?.state.ssrc { video?.state.received(block, arrivalWallUs: now) }
                    if block.ssrc == audio?.state.ssrc {
                        audio?.state.received(block, arrivalWallUs: now)
                        audio?.setExpectedPacketLoss(percent: Int(block.fractionLost) * 100 / 256)
                    }
                }
            default:
                break
            }
        }
    }

    // MARK: Signaling events

    private func handle(_ message: ServerMessage, session: Session) async {
        switch message {
        case .offer(let offer) where offer.transport == .subscriber:
            do {
                try await answerSubscriber(offer.sdp, session: session)
            } catch {
                emit(.error(RTCEngineError(.transportFailed, "subscriber negotiation: \(error)")))
            }
        case .participantUpdate(let participants):
            participantsChanged(participants, session: session)
        case .participantLeft(let uid, let reason):
            let known = lock.withLock { session.remoteUsers.removeValue(forKey: uid) }
            if let known, isVisible(known) { emit(.userOffline(uid: uid, reason: UserOfflineReason(reason))) }
        case .tokenWillExpire(let expiresAt):
            emit(.tokenPrivilegeWillExpire(expiresAt: expiresAt))
        case .leave(.serverShutdown):
            // A server going down for a restart: join the next one.
            lock.withLock { session.leaving = true }
            await session.signaling.close()
            // Not on this task: tearing the session down cancels its event task.
            Task { await self.rejoin(after: session) }
        case .leave(let reason):
            let mapped: ConnectionChangedReason = switch reason {
            case .tokenExpired: .tokenExpired
            case .serverShutdown: .serverShutdown
            case .ownerLeft: .ownerLeft
            case .duplicateIdentity: .duplicateIdentity
            case .kicked: .bannedByServer
            case .clientRequest, .timeout: .interrupted
            }
            lock.withLock { session.leaving = true }
            await session.signaling.close()
            await tearDown(session)
            setConnectionState(.disconnected, mapped)
        default:
            break
        }
    }

    /// The signaling connection ended without a leave and could not be resumed (the server
    /// restarted, or the resume window passed): join again as the same uid, with backoff.
    private func signalingEnded(_ session: Session) {
        let unexpected = lock.withLock { self.session === session && !session.leaving }
        guard unexpected else { return }
        Task { await rejoin(after: session) }
    }

    private func rejoin(after session: Session) async {
        do {
            await tearDown(session)
            setConnectionState(.reconnecting, .interrupted)
            var delayMs = 100
            let deadline = MediaClock.monotonicUs() + Int64(configuration.rejoinTimeoutSeconds) * 1_000_000
            while MediaClock.monotonicUs() < deadline {
                guard lock.withLock({ self.session == nil && !self.leftByUser }) else { return }
                do {
                    try await join(token: session.token, channel: session.channel, uid: session.uid, options: session.options,
                                   rejoining: true)
                    return
                } catch {
                    try? await Task.sleep(for: .milliseconds(delayMs))
                    delayMs = min(delayMs * 2, 2000)
                }
            }
            setConnectionState(.failed, .interrupted)
        }
    }


    /// In a live broadcast the audience is invisible; in communication everyone is a user.
    private func isVisible(_ participant: ParticipantInfo) -> Bool {
        configuration.channelProfile == .communication || participant.role == .broadcaster
    }

    private func participantsChanged(_ participants: [ParticipantInfo], session: Session) {
        var events: [RTCEngineEvent] = []
        lock.withLock {
            // The owner filter, also applied here: the server already hides screen shares from their
            // owner and from clients that ask, and this keeps a filtered share out of the user list.
            let filter = configuration.ignoreScreenShareUsers ?? false
            for info in participants where info.uid != session.uid
                && !(filter && isScreenShareUID(info.uid) && !pinnedUIDs.contains(info.uid)) {
                let previous = session.remoteUsers[info.uid]
                if let previous, previous.version >= info.version { continue }
                session.remoteUsers[info.uid] = info
                let wasVisible = previous.map(isVisible) ?? false
                let visible = isVisible(info)
                if visible && !wasVisible { events.append(.userJoined(uid: info.uid)) }
                let before = Dictionary((previous?.tracks ?? []).map { ($0.sid, $0) }, uniquingKeysWith: { a, _ in a })
                let after = Dictionary(info.tracks.map { ($0.sid, $0) }, uniquingKeysWith: { a, _ in a })
                func remote(_ track: TrackInfo) -> RemoteTrackInfo {
                    RemoteTrackInfo(uid: info.uid, trackSid: track.sid, kind: track.kind, source: track.source)
                }
                for track in info.tracks {
                    if let old = before[track.sid] {
                        if old.muted != track.muted { events.append(.remoteTrackMuted(remote(track), muted: track.muted)) }
                    } else {
                        events.append(.remoteTrackPublished(remote(track)))
                        if track.muted { events.append(.remoteTrackMuted(remote(track), muted: true)) }
                    }
                }
                for track in previous?.tracks ?? [] where after[track.sid] == nil {
                    events.append(.remoteTrackUnpublished(remote(track)))
                }
                if wasVisible && !visible && info.role == .audience { events.append(.userOffline(uid: info.uid, reason: .becameAudience)) }
            }
        }
        for event in events { emit(event) }
    }

    // MARK: Subscriber transport

    private func answerSubscriber(_ sdp: String, session: Session) async throws {
        let offer = try SessionDescription(parsing: sdp)
        let outputs = receiverOutputs(session)
        var stopped: [RemoteVideoReceiver] = []
        lock.withLock {
            var active = Set<UInt32>()
            for section in offer.sections where section.direction == .sendonly {
                guard let ssrc = section.ssrc else { continue }
                active.insert(ssrc)
                if session.videoReceivers[ssrc] != nil || session.audioReceivers[ssrc] != nil { continue }
                let owner = session.remoteUsers.values.first { $0.sid == section.streamID }
                let track = owner?.tracks.first { $0.sid == section.trackID }
                let kind: TrackKind = section.kind == .video ? .video : .audio
                let info = RemoteTrackInfo(uid: owner?.uid ?? section.streamID ?? "?", trackSid: section.trackID ?? "?", kind: kind,
                                           source: track?.source ?? (kind == .video ? .camera : .microphone))
                if kind == .video {
                    session.videoReceivers[ssrc] = RemoteVideoReceiver(info: info, ssrc: ssrc, outputs: outputs)
                } else {
                    session.audioReceivers[ssrc] = RemoteAudioReceiver(info: info, ssrc: ssrc)
                }
            }
            for (ssrc, receiver) in session.videoReceivers where !active.contains(ssrc) {
                stopped.append(receiver)
                session.videoReceivers[ssrc] = nil
            }
            for ssrc in session.audioReceivers.keys where !active.contains(ssrc) { session.audioReceivers[ssrc] = nil }
            session.subscriberTWCCID = offer.media.lazy.flatMap(\.extensionMaps)
                .first { $0.uri == RTPExtensionURI.transportWideSequence }?.id
            session.retransmissionStreams = [:]
            for section in offer.sections where section.direction == .sendonly {
                if let ssrc = section.ssrc, let rtx = section.rtxSSRC, let rtxPayloadType = section.rtxPayloadType {
                    session.retransmissionStreams[rtx] = (ssrc, section.payloadType, rtxPayloadType)
                }
            }
        }
        for receiver in stopped { receiver.stop() }
        let fresh = session.subscriber == nil
        let transport: MediaTransport
        if let existing = session.subscriber {
            transport = existing
        } else {
            transport = try await MediaTransport.bind(clientTransport, group: group)
            transport.onStateChange = { [weak self, weak session] state in
                guard let self, let session else { return }
                self.mediaTransportChanged(.subscriber, to: state, session: session)
            }
            transport.onRTP = { [weak self, weak session] datagram in
                guard let self, let session else { return }
                self.subscriberRTP(datagram, session: session)
            }
            session.subscriber = transport
            session.feedbackTask = transport.channel.eventLoop.scheduleRepeatedTask(initialDelay: .milliseconds(100),
                                                                                    delay: .milliseconds(100)) { [weak self, weak session] _ in
                guard let self, let session else { return }
                self.sendSubscriberFeedback(session)
            }
        }
        let remote = try offer.transportParameters(offererRole: .server)
        // The server's new credentials restart ICE (after a resume): ours change too (RFC 8445 §9).
        let restart = !fresh && remote.ice.ufrag != lock.withLock({ session.subscriberRemoteUfrag })
        let ice: ICECredentials? = restart ? ICECredentials.random() : lock.withLock { session.subscriberICE }
        var parameters = transport.localParameters
        if let ice { parameters.ice = ice }
        let answer = SessionDescription.make(
            sessionID: UInt64(session.rtcpSSRC) &+ 1, transport: parameters, iceLite: false, setup: "active",
            sections: offer.sections.map {
                MediaSectionDescription(mid: $0.mid, kind: $0.kind, direction: $0.reversed, payloadType: $0.payloadType,
                                        rtxPayloadType: $0.rtxPayloadType)
            })
        lock.withLock {
            session.subscriberRemoteUfrag = remote.ice.ufrag
            session.subscriberICE = ice
        }
        // The answer first: the server takes our new credentials from it before our checks arrive.
        try await session.signaling.send(.answer(SessionDescriptionMessage(transport: .subscriber, sdp: answer.serialized)))
        if restart, let ice { transport.session.restartICE(local: ice, remote: remote) }
        if fresh { transport.start(remote: remote) }
    }

    private func receiverOutputs(_ session: Session) -> ReceiverOutputs {
        ReceiverOutputs(
            video: { [weak self] frame in self?.lock.withLock { self?.sinks.video }?(frame) },
            encodedVideo: { [weak self] frame in self?.lock.withLock { self?.sinks.encodedVideo }?(frame) },
            firstFrame: { [weak self, weak session] info, size in
                guard let self, let session else { return }
                let elapsed = Int((MediaClock.monotonicUs() - session.joinStartUs) / 1000)
                self.emit(.firstRemoteVideoFrameDecoded(uid: info.uid, source: info.source, size: size, elapsedMs: elapsed))
            },
            requestKeyframe: { [weak self, weak session] ssrc in
                guard let self, let session else { return }
                self.sendPictureLoss(ssrc: ssrc, session: session)
            },
            sendNack: { [weak self, weak session] ssrc, sequences in
                guard let self, let session, let transport = self.lock.withLock({ session.subscriber }) else { return }
                transport.sendRTCP(RTCPPacket.serializeCompound([
                    .receiverReport(ReceiverReport(ssrc: session.rtcpSSRC)),
                    .nack(GenericNACK(senderSSRC: session.rtcpSSRC, mediaSSRC: ssrc, lost: sequences)),
                ]))
            })
    }

    private func sendPictureLoss(ssrc: UInt32, session: Session) {
        guard let transport = lock.withLock({ session.subscriber }) else { return }
        transport.sendRTCP(RTCPPacket.serializeCompound([
            .receiverReport(ReceiverReport(ssrc: session.rtcpSSRC)),
            .pictureLossIndication(PictureLossIndication(senderSSRC: session.rtcpSSRC, mediaSSRC: ssrc)),
        ]))
    }

    /// On the subscriber transport's event loop, per packet.
    private func subscriberRTP(_ datagram: ByteBuffer, session: Session) {
        guard var packet = try? RTPPacket(parsing: datagram) else { return }
        let now = MediaClock.monotonicUs()
        // One lock: the receiver of the SSRC, or the stream an RFC 4588 repair belongs to.
        let (video, audio) = lock.withLock { () -> (RemoteVideoReceiver?, RemoteAudioReceiver?) in
            // Every packet with the server's transport-wide number counts for feedback, repairs included.
            if let id = session.subscriberTWCCID, let data = packet.header.extensionData(id: id),
               let sequence = try? TransportSequenceNumber(parsing: data) {
                session.subscriberFeedback.record(sequence: sequence.value, arrivalUs: now)
            }
            let ssrc = packet.header.ssrc
            if let stream = session.retransmissionStreams[ssrc] {
                guard packet.header.payloadType == stream.rtxPayloadType,
                      let original = try? RTXPacket.unwrap(packet, ssrc: stream.ssrc, payloadType: stream.payloadType)
                else { return (nil, nil) }  // padding or a bad payload
                packet = original
                return (session.videoReceivers[stream.ssrc], nil)
            }
            return (session.videoReceivers[ssrc], session.audioReceivers[ssrc])
        }
        video?.receive(packet, bytes: datagram.readableBytes, arrivalUs: now)
        audio?.receive(packet, bytes: datagram.readableBytes, arrivalUs: now)
    }

    /// Every 100 ms on the subscriber transport's loop: transport-wide feedback to the server,
    /// which estimates this downstream leg from it.
    private func sendSubscriberFeedback(_ session: Session) {
        let (transport, feedback) = lock.withLock { () -> (MediaTransport?, TransportFeedback?) in
            guard session.subscriberFeedback.hasPending else { return (nil, nil) }
            let media = session.videoReceivers.keys.first ?? session.audioReceivers.keys.first ?? 0
            return (session.subscriber, session.subscriberFeedback.makeFeedback(senderSSRC: session.rtcpSSRC, mediaSSRC: media))
        }
        guard let transport, let feedback else { return }
        transport.sendRTCP(RTCPPacket.serializeCompound([.receiverReport(ReceiverReport(ssrc: session.rtcpSSRC)), .transportFeedback(feedback)]))
    }

    // MARK: Playout, RTCP and stats

    private func playoutTick(_ session: Session) {
        let (receivers, sender, trackSink, mixSink) = lock.withLock {
            (Array(session.audioReceivers.values), session.audioSender, sinks.audio, sinks.mixedAudio)
        }
        guard !receivers.isEmpty else { return }
        var mix = [Int32](repeating: 0, count: LocalAudioSender.samplesPerPacket * LocalAudioSender.channels)
        var any = false
        for receiver in receivers {
            guard let frame = receiver.pull() else { continue }
            let samples = frame.int16Samples
            guard samples.count == mix.count else { continue }
            any = true
            trackSink?(RemoteAudioFrame(uid: receiver.info.uid, trackSid: receiver.info.trackSid, source: receiver.info.source, frame: frame))
            for index in 0..<mix.count { mix[index] += Int32(samples[index]) }
        }
        guard any else { return }
        let mixed = mix.map { Int16(clamping: $0) }
        mixSink?(AudioFrame(samples: .int16(mixed), sampleRate: 48000, channels: 2, timestampUs: MediaClock.monotonicUs()))
        sender?.feedFarEnd(mixed)
    }

    /// Once a second on the event loop: sender reports, receiver reports, and stats at their interval.
    private func rtcpTick(_ session: Session) {
        let (publisher, subscriber, senders, receivers) = lock.withLock { () -> (MediaTransport?, MediaTransport?, [SenderState], [ReceiverState]) in
            session.ticks += 1
            return (session.publisher, session.subscriber,
                    [session.videoSender?.state, session.audioSender?.state].compactMap { $0 },
                    session.videoReceivers.values.map(\.state) + session.audioReceivers.values.map(\.state))
        }
        let mono = MediaClock.monotonicUs(), wall = MediaClock.wallUs()
        let reports = senders.compactMap { $0.senderReport(nowMonoUs: mono, wallUs: wall) }
        if let publisher, !reports.isEmpty {
            publisher.sendRTCP(RTCPPacket.serializeCompound(reports.map { .senderReport($0) } + [
                .sourceDescription(SourceDescription(chunks: [SourceDescription.Chunk(ssrc: reports[0].ssrc, items: [.cname(session.uid)])])),
            ]))
        }
        if let subscriber {
            let videoReceivers = lock.withLock { Array(session.videoReceivers.values) }
            subscriber.stats.whenSuccess { stats in
                guard let rtt = stats.roundTripTime else { return }
                for receiver in videoReceivers { receiver.setRoundTrip(microseconds: Int64(rtt * 1e6)) }
            }
        }
        let blocks = receivers.compactMap { $0.report(nowUs: mono) }
        if let subscriber, !blocks.isEmpty {
            subscriber.sendRTCP(RTCPPacket.serializeCompound([.receiverReport(ReceiverReport(ssrc: session.rtcpSSRC, reports: blocks))]))
        }
        if session.ticks % max(1, configuration.statsIntervalSeconds) == 0 {
            let rtt = subscriber?.stats
            if let rtt {
                rtt.whenSuccess { [weak self] stats in self?.emitStats(session, subscriberRTT: stats.roundTripTime) }
            } else {
                emitStats(session, subscriberRTT: nil)
            }
        }
    }

    private func emitStats(_ session: Session, subscriberRTT: Double?) {
        let now = MediaClock.monotonicUs()
        let stats = lock.withLock { () -> RTCStats in
            func rate(_ ssrc: UInt32, bytes: Int, frames: Int) -> (kbps: Double, fps: Double) {
                defer { session.previous[ssrc] = (bytes, frames, now) }
                guard let last = session.previous[ssrc], now > last.atUs else { return (0, 0) }
                let seconds = Double(now - last.atUs) / 1e6
                return (Double(bytes - last.bytes) * 8 / 1000 / seconds, Double(frames - last.frames) / seconds)
            }
            var local: [LocalTrackStats] = []
            for (sender, kind, source) in [(session.videoSender?.state, TrackKind.video, session.videoSender?.source),
                                           (session.audioSender?.state, TrackKind.audio, session.audioSender?.source)] {
                guard let sender, let source else { continue }
                let counters = sender.counters.withLock { $0 }
                let (kbps, fps) = rate(sender.ssrc, bytes: counters.bytesSent, frames: counters.framesEncoded)
                local.append(LocalTrackStats(kind: kind, source: source, bitrateKbps: kbps, framesPerSecond: fps,
                                             packetsSent: counters.packetsSent, framesEncoded: counters.framesEncoded,
                                             framesDropped: counters.framesDropped, packetsRetransmitted: counters.retransmitted,
                                             lossFraction: counters.lossFraction, roundTripTimeMs: counters.roundTripTimeMs,
                                             width: counters.width, height: counters.height))
            }
            var remote: [RemoteTrackStats] = []
            let receivers: [(ReceiverState, RemoteTrackInfo)] = session.videoReceivers.values.map { ($0.state, $0.info) }
                + session.audioReceivers.values.map { ($0.state, $0.info) }
            for (state, info) in receivers {
                let counters = state.counters.withLock { $0 }
                let (kbps, fps) = rate(state.ssrc, bytes: counters.bytesReceived, frames: counters.framesDecoded)
                let statistics = counters.statistics
                let expected = Double(statistics.expected)
                remote.append(RemoteTrackStats(
                    uid: info.uid, kind: info.kind, source: info.source, bitrateKbps: kbps, framesPerSecond: fps,
                    packetsReceived: Int(statistics.packetsReceived), packetsLost: Int(max(0, statistics.cumulativeLost)),
                    lossFraction: expected > 0 ? Double(max(0, statistics.cumulativeLost)) / expected : 0,
                    jitterMs: Double(statistics.jitter) * 1000 / Double(statistics.clockRate), roundTripTimeMs: subscriberRTT.map { $0 * 1000 },
                    framesDecoded: counters.framesDecoded, width: counters.width, height: counters.height))
            }
            remote.sort { ($0.uid, $0.kind.rawValue) < ($1.uid, $1.kind.rawValue) }
            let estimate = session.publisher == nil ? nil : Int(session.sequencer.congestion.targetBps / 1000)
            return RTCStats(durationMs: Int((now - session.joinStartUs) / 1000), local: local, remote: remote,
                            estimatedBandwidthKbps: estimate)
        }
        emit(.rtcStats(stats))
    }

    // MARK: Events

    private func setConnectionState(_ state: ConnectionState, _ reason: ConnectionChangedReason) {
        lock.withLock { _connectionState = state }
        emit(.connectionStateChanged(state, reason: reason))
    }

    private func emit(_ event: RTCEngineEvent) {
        let (targets, delegate) = lock.withLock { (Array(continuations.values), _delegate) }
        for continuation in targets { continuation.yield(event) }
        guard let delegate else { return }
        switch event {
        case .joinedChannel(let channel, let uid, let elapsed): delegate.rtcEngine(self, didJoinChannel: channel, uid: uid, elapsedMs: elapsed)
        case .userJoined(let uid): delegate.rtcEngine(self, didJoinedOfUid: uid)
        case .userOffline(let uid, let reason): delegate.rtcEngine(self, didOfflineOfUid: uid, reason: reason)
        case .firstRemoteVideoFrameDecoded(let uid, _, let size, let elapsed):
            delegate.rtcEngine(self, firstRemoteVideoFrameOfUid: uid, size: size, elapsedMs: elapsed)
        case .connectionStateChanged(let state, let reason): delegate.rtcEngine(self, connectionChangedTo: state, reason: reason)
        case .tokenPrivilegeWillExpire(let expiresAt): delegate.rtcEngine(self, tokenPrivilegeWillExpire: expiresAt)
        case .rtcStats(let stats): delegate.rtcEngine(self, reportRtcStats: stats)
        default: break
        }
        delegate.rtcEngine(self, didEmit: event)
    }
}
