import NIOCore
import NIOPosix
import RTCTransport
import Signaling

#if canImport(Glibc)
import Glibc
#endif

/// The selective forwarding unit: rooms, participants, tracks and subscriptions, and the packet
/// path between them.
///
/// All of its state lives on one event loop, the media port's: per-packet forwarding runs there
/// synchronously (no hop per packet), and signaling messages hop onto it once per message. Room
/// changes are rare and cheap next to packets, so one loop keeps the core simple and race-free.
public final class SFU: @unchecked Sendable {
    public let configuration: ServerConfiguration
    public let port: SharedMediaPort
    let loop: EventLoop
    /// The most users one participant may pin (`SubscriptionUpdate.uids`).
    static let maxPinned = 64
    private var rooms: [String: Room] = [:]
    private var byPeer: [ObjectIdentifier: Participant] = [:]
    private var counters = ServerCounters()
    private var housekeeping: RepeatedTask?
    private var feedbackTask: RepeatedTask?
    private var nackTask: RepeatedTask?
    private var nextID = 0
    private let serverSSRC: UInt32
    /// Seconds since 1970; replaceable in tests.
    var clock: @Sendable () -> Int64 = { Int64(time(nil)) }
    /// Told the forwarding time of each packet, in nanoseconds (the metrics histogram).
    var onForwardLatency: (@Sendable (Int64) -> Void)?

    public static func start(configuration: ServerConfiguration, group: EventLoopGroup) async throws -> SFU {
        let port = try await SharedMediaPort.bind(.server(host: configuration.host, port: configuration.mediaPort), group: group)
        let sfu = SFU(configuration: configuration, port: port)
        sfu.housekeeping = sfu.loop.scheduleRepeatedTask(initialDelay: .seconds(1), delay: .seconds(1)) { _ in sfu.tick() }
        sfu.feedbackTask = sfu.loop.scheduleRepeatedTask(initialDelay: .milliseconds(100), delay: .milliseconds(100)) { _ in
            sfu.sendTransportFeedback()
        }
        sfu.nackTask = sfu.loop.scheduleRepeatedTask(initialDelay: .milliseconds(20), delay: .milliseconds(20)) { _ in
            sfu.sendUpstreamNacks()
        }
        return sfu
    }

    init(configuration: ServerConfiguration, port: SharedMediaPort) {
        self.configuration = configuration
        self.port = port
        loop = port.channel.eventLoop
        var random = SystemRandomNumberGenerator()
        serverSSRC = UInt32.random(in: 1...UInt32.max, using: &random)
    }

    /// The UDP media address.
    public var mediaAddress: SocketAddress? { port.localAddress }

    /// A consistent copy of the counters, with room/participant/track gauges.
    public var counterSnapshot: EventLoopFuture<ServerCounters> {
        loop.submit {
            var snapshot = self.counters
            snapshot.rooms = self.rooms.count
            snapshot.participants = self.rooms.values.reduce(0) { $0 + $1.participants.count }
            snapshot.tracks = self.rooms.values.flatMap(\.participants.values).reduce(0) { $0 + $1.tracks.count }
            return snapshot
        }
    }

    /// The participants of a room as a server-side view (for tests and operators).
    public func participants(in channel: String) -> EventLoopFuture<[ParticipantInfo]> {
        loop.submit { self.rooms[channel]?.participants.values.map(\.info).sorted { $0.uid < $1.uid } ?? [] }
    }

    /// RTP packets forwarded to `uid` in `channel`, by publisher uid and kind (empty for an unknown
    /// uid). The server-side proof that a muted or filtered stream never reaches a participant.
    public func packetsForwarded(to uid: String, in channel: String) -> EventLoopFuture<[ForwardedStream: Int]> {
        loop.submit {
            guard let participant = self.rooms[channel]?.participants[uid] else { return [:] }
            var counts = participant.forwardedHistory
            for subscription in participant.subscriptions {
                counts[ForwardedStream(uid: subscription.track.owner.uid, kind: subscription.track.info.kind), default: 0]
                    += subscription.packetsForwarded
            }
            return counts
        }
    }

    private func makeID(_ prefix: String) -> String {
        nextID += 1
        return "\(prefix)_\(nextID)"
    }

    // MARK: Signaling input

    /// Handles one message from `peer`: bytes that may be anything.
    public func received(_ bytes: [UInt8], from peer: SignalingPeer) {
        loop.execute { self.handle(bytes, from: peer) }
    }

    /// The peer's connection is gone: the participant may `resume` within the window.
    public func disconnected(_ peer: SignalingPeer) {
        loop.execute {
            guard let participant = self.byPeer.removeValue(forKey: ObjectIdentifier(peer)) else { return }
            participant.peer = nil
            participant.disconnectedAt = self.clock()
        }
    }

    private func handle(_ bytes: [UInt8], from peer: SignalingPeer) {
        let envelope: ClientEnvelope
        do {
            envelope = try ClientEnvelope.decode(bytes)
        } catch {
            counters.signalingErrors += 1
            peer.send(ServerEnvelope(.error(error), requestID: error.requestID))
            return
        }
        let id = envelope.requestID
        func fail(_ code: SignalingError.Code, _ reason: String) {
            counters.signalingErrors += 1
            peer.send(ServerEnvelope(.error(SignalingError(code, reason, requestID: id)), requestID: id))
        }
        guard let participant = byPeer[ObjectIdentifier(peer)] else {
            switch envelope.message {
            case .join(let request): join(request, peer: peer, requestID: id, fail: fail)
            case .resume(let request): resume(request, peer: peer, requestID: id, fail: fail)
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
        case .setRole(let role):
            guard role != participant.role else { return }
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
        case .refreshToken(let token):
            do {
                let claims = try verify(token, channel: participant.room.name, uid: participant.uid)
                participant.tokenExpiresAt = claims.expiresAt
                participant.grants = claims.grants
                participant.tokenWarned = false
                participant.send(.tokenRefreshed(expiresAt: claims.expiresAt), requestID: id)
            } catch { fail(error.code, error.reason) }
        }
    }

    private func verify(_ token: String, channel: String, uid: String) throws(SignalingError) -> AccessToken {
        guard !token.isEmpty else { throw SignalingError(.tokenMissing, "no token") }
        let claims: AccessToken
        do {
            claims = try AccessToken.verify(token, secret: configuration.secret, now: clock())
        } catch {
            switch error.kind {
            case .expired: throw SignalingError(.tokenExpired, error.reason)
            case .notYetValid: throw SignalingError(.tokenNotYetValid, error.reason)
            case .malformed, .badSignature: throw SignalingError(.tokenInvalid, error.reason)
            }
        }
        guard claims.channel == channel else { throw SignalingError(.tokenWrongChannel, "the token is for channel \(claims.channel)") }
        guard claims.uid == uid else { throw SignalingError(.tokenWrongUID, "the token is for uid \(claims.uid)") }
        return claims
    }

    // MARK: Join, resume, leave

    private func join(_ request: JoinRequest, peer: SignalingPeer, requestID: UInt32?,
                      fail: (SignalingError.Code, String) -> Void) {
        guard !request.uid.isEmpty, request.uid.utf8.count <= 128, !request.channel.isEmpty, request.channel.utf8.count <= 128 else {
            return fail(.invalidUID, "uid and channel must be 1 to 128 bytes")
        }
        let claims: AccessToken
        do { claims = try verify(request.token, channel: request.channel, uid: request.uid) } catch { return fail(error.code, error.reason) }
        guard claims.grants.join else { return fail(.permissionDenied, "the token does not grant join") }
        let room = rooms[request.channel] ?? Room(name: request.channel)
        guard room.participants[request.uid] == nil else { return fail(.uidInUse, "\(request.uid) is already in \(request.channel)") }
        rooms[request.channel] = room
        let participant = Participant(uid: request.uid, sid: makeID("PA"), role: request.role, room: room, peer: peer,
                                      grants: claims.grants, tokenExpiresAt: claims.expiresAt,
                                      autoSubscribe: Set([request.autoSubscribeAudio ?? request.autoSubscribe ? TrackKind.audio : nil,
                                                          request.autoSubscribeVideo ?? request.autoSubscribe ? TrackKind.video : nil]
                                                         .compactMap { $0 }),
                                      ignoreScreenShare: request.ignoreScreenShare, now: clock())
        let pinned = Set((request.pinnedUIDs ?? []).prefix(Self.maxPinned))
        participant.pinned = pinned
        participant.revealed = pinned
        room.participants[request.uid] = participant
        byPeer[ObjectIdentifier(peer)] = participant
        participant.send(.joined(joinResponse(for: participant)), requestID: requestID)
        for other in room.participants.values where other.sees(participant) { other.send(.participantUpdate([participant.info])) }
        if !participant.autoSubscribe.isEmpty && participant.grants.subscribe {
            let tracks = room.participants.values.filter { participant.sees($0) }.flatMap(\.tracks)
                .filter { participant.subscribesAutomatically(to: $0) }
            subscribe(participant, to: tracks)
        }
    }

    private func joinResponse(for participant: Participant) -> JoinResponse {
        JoinResponse(participant: participant.info,
                     others: participant.room.participants.values.filter { participant.sees($0) }.map(\.info).sorted { $0.uid < $1.uid },
                     pingInterval: configuration.pingInterval, pingTimeout: configuration.pingTimeout,
                     resumeWindow: configuration.resumeWindow, serverVersion: configuration.protocolVersion)
    }

    private func resume(_ request: ResumeRequest, peer: SignalingPeer, requestID: UInt32?, fail: (SignalingError.Code, String) -> Void) {
        guard let participant = rooms.values.lazy.compactMap({ $0.participants.values.first { $0.sid == request.participantSid } }).first,
              participant.disconnectedAt != nil
        else { return fail(.resumeFailed, "no session \(request.participantSid) to resume") }
        do { _ = try verify(request.token, channel: participant.room.name, uid: participant.uid) } catch { return fail(error.code, error.reason) }
        participant.peer = peer
        participant.disconnectedAt = nil
        participant.lastSeen = clock()
        byPeer[ObjectIdentifier(peer)] = participant
        participant.send(.resumed(joinResponse(for: participant)), requestID: requestID)
        // A client that lost its signaling connection may have lost its media path too (a new
        // network): restart ICE on the subscriber transport, which we offer. The client restarts
        // its publisher transport with an offer of its own.
        if participant.subscriber != nil {
            participant.subscriberCredentials = .random()
            offerSubscriber(participant)
        }
    }

    /// Removes a participant: its tracks, subscriptions, transports; tells the room; and takes its
    /// screen share (`<uid>_sub`) with it.
    private func remove(_ participant: Participant, reason: LeaveReason) {
        let room = participant.room
        guard room.participants[participant.uid] === participant else { return }
        for track in participant.tracks { unpublish(track) }
        for subscription in participant.subscriptions {
            subscription.track.subscriptions.removeAll { $0 === subscription }
        }
        participant.subscriptions.removeAll()
        if let publisher = participant.publisher { port.removeOnLoop(publisher) }
        if let subscriber = participant.subscriber { port.removeOnLoop(subscriber) }
        room.participants[participant.uid] = nil
        if let peer = participant.peer { byPeer[ObjectIdentifier(peer)] = nil }
        for other in room.participants.values where other.sees(participant) {
            other.send(.participantLeft(uid: participant.uid, reason: reason))
        }
        if let share = room.participants[participant.uid + "_sub"] {
            share.send(.leave(reason: .ownerLeft))
            let peer = share.peer
            remove(share, reason: .ownerLeft)
            peer?.close()
        }
        if room.participants.isEmpty { rooms[room.name] = nil }
    }

    /// Tells everyone who can see `participant` about its new state.
    private func participantChanged(_ participant: Participant) {
        participant.version += 1
        let info = participant.info
        for other in participant.room.participants.values where other.sees(participant) { other.send(.participantUpdate([info])) }
    }

    /// Once a second: keepalive, resume windows and token expiry.
    private func tick() {
        let now = clock()
        for participant in rooms.values.flatMap(\.participants.values) {
            if let gone = participant.disconnectedAt {
                if now - gone >= Int64(configuration.resumeWindow) { remove(participant, reason: .timeout) }
                continue
            }
            if now >= participant.tokenExpiresAt {
                participant.send(.leave(reason: .tokenExpired))
                let peer = participant.peer
                remove(participant, reason: .tokenExpired)
                peer?.close()
                continue
            }
            if !participant.tokenWarned, now >= participant.tokenExpiresAt - Int64(configuration.tokenWarning) {
                participant.tokenWarned = true
                participant.send(.tokenWillExpire(expiresAt: participant.tokenExpiresAt))
            }
            if now - participant.lastSeen > Int64(configuration.pingTimeout), let peer = participant.peer {
                byPeer[ObjectIdentifier(peer)] = nil
                participant.peer = nil
                participant.disconnectedAt = now
                peer.close()
            }
        }
        sendReceiverReports()
        sendPublisherLimits()
    }

    /// Holds each publisher's video to what its slowest subscriber's downstream leg carries, with
    /// REMB once a second (never below `publisherLimitFloorKbps`). A leg's estimate is shared
    /// among the video it receives, after what its audio needs. Without simulcast layers this is
    /// the only lever the server has on a leg that cannot carry a track.
    private func sendPublisherLimits() {
        guard let floorKbps = configuration.publisherLimitFloorKbps else { return }
        let now = Int64(NIODeadline.now().uptimeNanoseconds / 1000)
        for participant in rooms.values.flatMap(\.participants.values) {
            participant.downstream.reportedBps = participant.downstream.estimateBps(nowUs: now)
        }
        for participant in rooms.values.flatMap(\.participants.values) {
            guard let session = participant.publisher else { continue }
            for track in participant.tracks where track.info.kind == .video {
                guard let ssrc = track.info.ssrc,
                      let limit = track.subscriptions.compactMap({ Self.videoShare(of: $0.subscriber, nowUs: now) }).min()
                else { continue }
                counters.publisherLimitsSent += 1
                let bitrate = UInt64(max(limit, Double(floorKbps) * 1000))
                session.sendRTCP(RTCPPacket.serializeCompound([
                    .receiverReport(ReceiverReport(ssrc: serverSSRC)),
                    .remb(ReceiverEstimatedMaximumBitrate(senderSSRC: serverSSRC, bitrate: bitrate, ssrcs: [ssrc])),
                ]))
            }
        }
    }

    /// What one video track may take of a subscriber's downstream estimate: the estimate less
    /// 48 kbps per audio track it receives, split evenly among its video tracks.
    static func videoShare(of subscriber: Participant, nowUs: Int64) -> Double? {
        guard let estimate = subscriber.downstream.estimateBps(nowUs: nowUs) else { return nil }
        let videos = subscriber.subscriptions.filter { $0.track.info.kind == .video }.count
        let audios = subscriber.subscriptions.count - videos
        return (estimate - 48_000 * Double(audios)) / Double(max(1, videos))
    }

    /// Each subscriber's downstream estimate in `channel` (bits per second), where its feedback is
    /// fresh: for tests and operators.
    public func downstreamEstimates(in channel: String) -> EventLoopFuture<[String: Double]> {
        loop.submit {
            let now = Int64(NIODeadline.now().uptimeNanoseconds / 1000)
            var estimates: [String: Double] = [:]
            for participant in self.rooms[channel]?.participants.values.map({ $0 }) ?? [] {
                estimates[participant.uid] = participant.downstream.estimateBps(nowUs: now)
            }
            return estimates
        }
    }

    /// Leaves everyone with `serverShutdown` and closes the media port.
    public func shutdown() async {
        try? await loop.submit {
            self.housekeeping?.cancel()
            self.feedbackTask?.cancel()
            self.nackTask?.cancel()
            for participant in self.rooms.values.flatMap(\.participants.values) {
                participant.send(.leave(reason: .serverShutdown))
                let peer = participant.peer
                self.remove(participant, reason: .serverShutdown)
                peer?.close()
            }
        }.get()
        await port.close()
    }

    // MARK: Publishing

    private func mayPublish(_ participant: Participant, kind: TrackKind, source: TrackSource) -> String? {
        guard participant.role == .broadcaster else { return "an audience member cannot publish" }
        switch source {
        case .screen, .screenAudio: return participant.grants.publishScreen ? nil : "the token does not grant publishScreen"
        case .microphone: return participant.grants.publishAudio ? nil : "the token does not grant publishAudio"
        case .camera: return participant.grants.publishVideo ? nil : "the token does not grant publishVideo"
        }
    }

    private func publishTrack(_ request: PublishTrackRequest, participant: Participant, requestID: UInt32?,
                              fail: (SignalingError.Code, String) -> Void) {
        if let reason = mayPublish(participant, kind: request.kind, source: request.source) { return fail(.permissionDenied, reason) }
        let track = addTrack(to: participant, kind: request.kind, source: request.source, mid: request.mid, ssrc: request.ssrc)
        participant.send(.trackPublished(track.info), requestID: requestID)
    }

    private func addTrack(to participant: Participant, kind: TrackKind, source: TrackSource, mid: String?, ssrc: UInt32?) -> PublishedTrack {
        let track = PublishedTrack(info: TrackInfo(sid: makeID("TR"), kind: kind, source: source, ssrc: ssrc, mid: mid),
                                   owner: participant, keyframeIntervalMs: configuration.keyframeRequestInterval)
        participant.tracks.append(track)
        participantChanged(participant)
        for other in participant.room.participants.values
        where other.grants.subscribe && other.sees(participant) && other.subscribesAutomatically(to: track) {
            subscribe(other, to: [track])
        }
        return track
    }

    private func unpublish(_ track: PublishedTrack) {
        let owner = track.owner
        owner.tracks.removeAll { $0 === track }
        let affected = track.subscriptions.map(\.subscriber)
        for subscription in track.subscriptions { unsubscribe(subscription) }
        for subscriber in Set(affected.map(ObjectIdentifier.init)).compactMap({ id in affected.first { ObjectIdentifier($0) == id } }) {
            offerSubscriber(subscriber)
        }
    }

    private func publisherOffer(_ description: SessionDescriptionMessage, participant: Participant, requestID: UInt32?,
                                fail: (SignalingError.Code, String) -> Void) {
        guard description.transport == .publisher else { return fail(.negotiationFailed, "the client offers only for its publisher transport") }
        let offer: SessionDescription, remote: TransportParameters
        do {
            offer = try SessionDescription(parsing: description.sdp)
            remote = try offer.transportParameters(offererRole: .client)
        } catch { return fail(.negotiationFailed, "bad offer: \(error)") }
        let sending = offer.sections.filter { $0.direction == .sendonly || $0.direction == .sendrecv }
        participant.transportWideSequenceID = offer.media.lazy.flatMap(\.extensionMaps)
            .first { $0.uri == RTPExtensionURI.transportWideSequence }?.id
        if !sending.isEmpty, let reason = mayPublish(participant, kind: .video, source: .camera),
           participant.role == .audience {
            return fail(.permissionDenied, reason)
        }
        let session: MediaSession
        if let existing = participant.publisher, let ice = participant.publisherICE {
            session = existing
            if remote.ice.ufrag != ice.remoteUfrag {
                // The client restarts ICE (RFC 8445 §9): new credentials on both sides, checks start over.
                let local = ICECredentials.random()
                session.restartICE(local: local, remote: remote)
                participant.publisherICE = (local, remote.ice.ufrag)
                counters.iceRestarts += 1
            }
        } else {
            session = port.makeSessionOnLoop(remote: remote)
            participant.publisherICE = (session.localParameters.ice, remote.ice.ufrag)
            session.onRTP = { [weak self, weak participant] packet in
                guard let self, let participant else { return }
                self.forward(packet, from: participant)
            }
            session.onRTCP = { [weak self, weak participant] packet in
                guard let self, let participant else { return }
                self.publisherRTCP(packet, from: participant)
            }
            participant.publisher = session
        }
        for section in sending {
            let kind: TrackKind = section.kind == .video ? .video : .audio
            if let track = participant.tracks.first(where: { $0.info.mid == section.mid })
                ?? participant.tracks.first(where: { $0.info.mid == nil && $0.info.kind == kind }) {
                track.info.mid = section.mid
                if track.info.ssrc == nil { track.info.ssrc = section.ssrc }
                track.payloadType = section.payloadType
                track.rtxPayloadType = section.rtxPayloadType
                track.rtxSSRC = section.rtxSSRC
            } else {
                let screen: Bool = if case .screenShare = participant.kind { true } else { false }
                let source: TrackSource = kind == .video ? (screen ? .screen : .camera) : (screen ? .screenAudio : .microphone)
                if let reason = mayPublish(participant, kind: kind, source: source) { return fail(.permissionDenied, reason) }
                let track = addTrack(to: participant, kind: kind, source: source, mid: section.mid, ssrc: section.ssrc)
                track.payloadType = section.payloadType
                track.rtxPayloadType = section.rtxPayloadType
                track.rtxSSRC = section.rtxSSRC
                participant.send(.trackPublished(track.info))
            }
        }
        let answer = SessionDescription.make(
            sessionID: UInt64(truncatingIfNeeded: participant.sid.hashValue),
            transport: port.localParameters(credentials: participant.publisherICE?.local ?? session.localParameters.ice),
            iceLite: true, setup: "passive",
            // RFC 4588 accepted for a sending section with its FID SSRC: repairs and probes on their own stream.
            sections: offer.sections.map {
                MediaSectionDescription(mid: $0.mid, kind: $0.kind, direction: $0.reversed, payloadType: $0.payloadType,
                                        rtxPayloadType: $0.rtxSSRC == nil ? nil : $0.rtxPayloadType)
            })
        participant.send(.answer(SessionDescriptionMessage(transport: .publisher, sdp: answer.serialized)), requestID: requestID)
    }

    // MARK: Subscribing

    private func updateSubscription(_ update: SubscriptionUpdate, participant: Participant, fail: (SignalingError.Code, String) -> Void) {
        guard participant.grants.subscribe else { return fail(.permissionDenied, "the token does not grant subscribe") }
        let all = participant.room.participants.values.flatMap(\.tracks)
        var tracks: [PublishedTrack] = []
        if let kind = update.kind {
            // Every track of the kind, now and later.
            if update.subscribe { participant.autoSubscribe.insert(kind) } else { participant.autoSubscribe.remove(kind) }
            tracks = participant.room.participants.values.filter { participant.sees($0) }.flatMap(\.tracks)
                .filter { $0.info.kind == kind }
        }
        if let uids = update.uids {
            guard participant.pinned.count + uids.count <= Self.maxPinned || !update.subscribe else {
                return fail(.invalidUID, "at most \(Self.maxPinned) pinned users")
            }
            for uid in uids where uid != participant.uid {
                let other = participant.room.participants[uid]
                if update.subscribe {
                    let wasSeen = other.map(participant.sees) ?? false
                    participant.pinned.insert(uid)
                    participant.revealed.insert(uid)
                    // A user the filter hid until now: list it first, then subscribe.
                    if let other, !wasSeen { participant.send(.participantUpdate([other.info])) }
                } else {
                    participant.pinned.remove(uid)
                }
                tracks += other?.tracks ?? []
            }
        }
        for sid in update.trackSids {
            guard let track = all.first(where: { $0.info.sid == sid }), track.owner !== participant else {
                return fail(.trackNotFound, "no track \(sid)")
            }
            tracks.append(track)
        }
        if update.subscribe {
            subscribe(participant, to: tracks)
        } else {
            for subscription in participant.subscriptions where tracks.contains(where: { $0 === subscription.track }) {
                unsubscribe(subscription)
            }
            offerSubscriber(participant)
        }
    }

    private func subscribe(_ participant: Participant, to tracks: [PublishedTrack]) {
        var added = false
        for track in tracks where !participant.subscriptions.contains(where: { $0.track === track }) {
            let mid = String(participant.subscriberSections.count)
            let subscription = Subscription(track: track, subscriber: participant, mid: mid)
            participant.subscriptions.append(subscription)
            track.subscriptions.append(subscription)
            participant.subscriberSections.append(section(for: subscription))
            added = true
        }
        if added { offerSubscriber(participant) }
    }

    private func section(for subscription: Subscription) -> MediaSectionDescription {
        let track = subscription.track
        return MediaSectionDescription(mid: subscription.mid, kind: track.info.kind == .video ? .video : .audio, direction: .sendonly,
                                       payloadType: track.payloadType, ssrc: subscription.rewriter.outputSSRC,
                                       streamID: track.owner.sid, trackID: track.info.sid,
                                       rtxPayloadType: subscription.offeredRTXPayloadType, rtxSSRC: subscription.rtxSSRC)
    }

    private func unsubscribe(_ subscription: Subscription) {
        let participant = subscription.subscriber
        participant.forwardedHistory[ForwardedStream(uid: subscription.track.owner.uid, kind: subscription.track.info.kind), default: 0]
            += subscription.packetsForwarded
        participant.subscriptions.removeAll { $0 === subscription }
        subscription.track.subscriptions.removeAll { $0 === subscription }
        if let index = participant.subscriberSections.firstIndex(where: { $0.mid == subscription.mid }) {
            participant.subscriberSections[index].direction = .inactive
            participant.subscriberSections[index].ssrc = nil
        }
    }

    /// Sends the subscriber transport's offer, or marks it due when an answer is still awaited.
    private func offerSubscriber(_ participant: Participant) {
        guard !participant.subscriberSections.isEmpty, participant.room.participants[participant.uid] === participant else { return }
        guard !participant.awaitingSubscriberAnswer else {
            participant.subscriberNeedsOffer = true
            return
        }
        participant.subscriberOfferVersion += 1
        participant.awaitingSubscriberAnswer = true
        participant.subscriberNeedsOffer = false
        let offer = SessionDescription.make(
            sessionID: UInt64(truncatingIfNeeded: participant.sid.hashValue) &+ 1, version: participant.subscriberOfferVersion,
            transport: port.localParameters(credentials: participant.subscriberCredentials), iceLite: true, setup: "actpass",
            sections: participant.subscriberSections)
        participant.send(.offer(SessionDescriptionMessage(transport: .subscriber, sdp: offer.serialized)))
    }

    private func subscriberAnswer(_ description: SessionDescriptionMessage, participant: Participant,
                                  fail: (SignalingError.Code, String) -> Void) {
        guard description.transport == .subscriber, participant.awaitingSubscriberAnswer else {
            return fail(.negotiationFailed, "no subscriber offer is waiting for an answer")
        }
        participant.awaitingSubscriberAnswer = false
        // Parsed once: its sections (RTX) and its transport parameters (ICE).
        var answer: SessionDescription?
        var remote: TransportParameters?
        var parseError: ParseError?
        do {
            answer = try SessionDescription(parsing: description.sdp)
            remote = try answer?.transportParameters(offererRole: .server)
        } catch { parseError = error }
        // Transport-wide CC on this leg where the answer kept the extension.
        if let answer {
            participant.downstream.extensionID = answer.media.lazy.flatMap(\.extensionMaps)
                .first { $0.uri == RTPExtensionURI.transportWideSequence }?.id
        }
        // RFC 4588 repairs to the subscriber where its answer kept the rtx format.
        if let answered = answer?.sections {
            for subscription in participant.subscriptions {
                let section = answered.first { $0.mid == subscription.mid }
                subscription.rtxPayloadType = section?.rtxPayloadType == subscription.offeredRTXPayloadType ? section?.rtxPayloadType : nil
            }
        }
        if participant.subscriber == nil {
            guard let remote else { return fail(.negotiationFailed, "bad answer: \(parseError.map { "\($0)" } ?? "")") }
            let session = port.makeSessionOnLoop(remote: remote, local: participant.subscriberCredentials)
            participant.subscriberRemoteUfrag = remote.ice.ufrag
            session.onRTCP = { [weak self, weak participant] packet in
                guard let self, let participant else { return }
                self.subscriberRTCP(packet, from: participant)
            }
            session.onStateChange = { [weak self, weak participant] state in
                guard let self, let participant, state == .connected else { return }
                for subscription in participant.subscriptions { self.requestKeyframe(subscription.track) }
            }
            participant.subscriber = session
        } else {
            // New client credentials answer an offer that restarted ICE (ours are in that offer).
            if let session = participant.subscriber, let remote, remote.ice.ufrag != participant.subscriberRemoteUfrag {
                session.restartICE(local: participant.subscriberCredentials, remote: remote)
                participant.subscriberRemoteUfrag = remote.ice.ufrag
                counters.iceRestarts += 1
            }
            // New subscriptions on a running transport: their first frames need a keyframe.
            for subscription in participant.subscriptions { requestKeyframe(subscription.track) }
        }
        if participant.subscriberNeedsOffer { offerSubscriber(participant) }
    }

    // MARK: The packet path (on the loop, per packet)

    private func forward(_ datagram: ByteBuffer, from publisher: Participant) {
        let start = NIODeadline.now()
        guard var packet = try? RTPPacket(parsing: datagram) else {
            counters.packetsDropped += 1
            return
        }
        counters.packetsIn += 1
        counters.bytesIn += datagram.readableBytes
        let arrivalUs = Int64(start.uptimeNanoseconds / 1000)
        // Every packet with the transport-wide number counts for feedback, probes included.
        if let id = publisher.transportWideSequenceID, let data = packet.header.extensionData(id: id),
           let sequence = try? TransportSequenceNumber(parsing: data) {
            publisher.transportFeedback.record(sequence: sequence.value, arrivalUs: arrivalUs)
        }
        let ssrc = packet.header.ssrc
        if let track = publisher.tracks.first(where: { $0.rtxSSRC == ssrc && $0.rtxPayloadType == packet.header.payloadType }) {
            // RFC 4588: the original inside, unless it is padding or already here (a probe's copy).
            guard let mediaSSRC = track.info.ssrc, let payloadType = track.payloadType,
                  let original = try? RTXPacket.unwrap(packet, ssrc: mediaSSRC, payloadType: payloadType),
                  track.cache.packet(original.header.sequenceNumber) == nil
            else {
                counters.rtxDropped += 1
                return
            }
            counters.rtxRepairs += 1
            packet = original
        }
        guard let track = publisher.tracks.first(where: { $0.info.ssrc == packet.header.ssrc })
            ?? publisher.tracks.first(where: { $0.info.ssrc == nil && $0.payloadType == packet.header.payloadType })
        else {
            counters.packetsDropped += 1
            return
        }
        if track.info.ssrc == nil { track.info.ssrc = packet.header.ssrc }
        if track.statistics == nil { track.statistics = ReceptionStatistics(ssrc: packet.header.ssrc, clockRate: track.clockRate) }
        track.statistics?.record(sequenceNumber: packet.header.sequenceNumber, rtpTimestamp: packet.header.timestamp, arrivalUs: arrivalUs)
        track.cache.insert(packet, sequence: packet.header.sequenceNumber)
        if track.info.kind == .video { track.nack.received(packet.header.sequenceNumber, nowUs: arrivalUs) }
        guard !track.info.muted else { return }
        let original = packet.header
        // The rewrite leaves the extension block alone: one lookup for every leg.
        let sequenceAt = DownstreamCongestion.sequenceOffset(in: original, sourceID: publisher.transportWideSequenceID)
        var wrote = false
        for subscription in track.subscriptions {
            guard let session = subscription.subscriber.subscriber else { continue }
            packet.header = original
            subscription.rewriter.rewrite(&packet.header)
            subscription.packetsForwarded += 1
            var out = packet.serialized
            subscription.subscriber.downstream.stamp(&out, at: sequenceAt, nowUs: arrivalUs)
            counters.packetsOut += 1
            counters.bytesOut += out.readableBytes
            session.sendRTPOnLoop(out, flush: false)
            wrote = true
        }
        // One flush for all subscribers: NIO hands the datagrams to the kernel with one sendmmsg.
        if wrote { port.flush() }
        let elapsed = (NIODeadline.now() - start).nanoseconds
        counters.recordForward(microseconds: Double(elapsed) / 1000)
        onForwardLatency?(elapsed)
    }

    private func publisherRTCP(_ datagram: ByteBuffer, from publisher: Participant) {
        guard let packets = try? RTCPPacket.parseCompound(datagram) else { return }
        let now = Int64(NIODeadline.now().uptimeNanoseconds / 1000)
        for case .senderReport(let report) in packets {
            guard let track = publisher.tracks.first(where: { $0.info.ssrc == report.ssrc }) else { continue }
            track.statistics?.recordSenderReport(compactNTP: report.compactNTP, arrivalUs: now)
        }
    }

    private func subscriberRTCP(_ datagram: ByteBuffer, from subscriber: Participant) {
        guard let packets = try? RTCPPacket.parseCompound(datagram) else { return }
        for packet in packets {
            switch packet {
            case .pictureLossIndication(let pli):
                if let subscription = subscriber.subscriptions.first(where: { $0.rewriter.outputSSRC == pli.mediaSSRC }) {
                    requestKeyframe(subscription.track)
                }
            case .fullIntraRequest(let fir):
                for entry in fir.entries {
                    if let subscription = subscriber.subscriptions.first(where: { $0.rewriter.outputSSRC == entry.ssrc }) {
                        requestKeyframe(subscription.track)
                    }
                }
            case .transportFeedback(let feedback):
                counters.downstreamFeedback += 1
                let now = Int64(NIODeadline.now().uptimeNanoseconds / 1000)
                subscriber.downstream.received(feedback, nowUs: now, rttMs: 100)
                // A leg that just lost capacity: its publishers hear it now, not within the second.
                if configuration.publisherLimitFloorKbps != nil, let estimate = subscriber.downstream.estimateBps(nowUs: now),
                   estimate < 0.9 * (subscriber.downstream.reportedBps ?? .infinity) {
                    sendPublisherLimits()
                }
            case .nack(let nack):
                counters.nacksReceived += 1
                guard let subscription = subscriber.subscriptions.first(where: { $0.rewriter.outputSSRC == nack.mediaSSRC }),
                      let session = subscriber.subscriber
                else { continue }
                for lost in nack.lostSequenceNumbers {
                    guard var packet = subscription.track.cache.packet(subscription.rewriter.inputSequence(of: lost)) else { continue }
                    guard subscriber.downstream.mayRetransmit(bytes: packet.payload.readableBytes + 30,
                                                              nowUs: Int64(NIODeadline.now().uptimeNanoseconds / 1000))
                    else {
                        counters.retransmissionsSkipped += 1
                        continue
                    }
                    var rewriter = subscription.rewriter
                    rewriter.rewrite(&packet.header)
                    if let payloadType = subscription.rtxPayloadType {
                        packet = RTXPacket.wrap(packet, ssrc: subscription.rtxSSRC, payloadType: payloadType, sequenceNumber: subscription.rtxSequence)
                        subscription.rtxSequence &+= 1
                    }
                    counters.retransmissions += 1
                    var out = packet.serialized
                    let at = DownstreamCongestion.sequenceOffset(in: packet.header, sourceID: subscription.track.owner.transportWideSequenceID)
                    subscriber.downstream.stamp(&out, at: at, nowUs: Int64(NIODeadline.now().uptimeNanoseconds / 1000))
                    session.sendRTP(out)
                }
            default:
                break
            }
        }
    }

    /// Asks a track's publisher for a keyframe with a PLI, at most once per interval per track.
    private func requestKeyframe(_ track: PublishedTrack) {
        guard track.info.kind == .video, let ssrc = track.info.ssrc, let session = track.owner.publisher else { return }
        let nowMs = Int64(NIODeadline.now().uptimeNanoseconds / 1_000_000)
        guard track.keyframeThrottle.allow(nowMs: nowMs) else {
            counters.keyframeRequestsThrottled += 1
            // Coalesce: one request goes out when the window ends, so a subscriber that asked
            // inside it (a new one, most often) is not left waiting for its own retry.
            if !track.keyframeRequestDeferred {
                track.keyframeRequestDeferred = true
                let owner = track.owner
                loop.scheduleTask(in: .milliseconds(track.keyframeThrottle.waitMs(nowMs: nowMs) + 1)) { [weak self, weak track, weak owner] in
                    guard let self, let track, let owner, owner.tracks.contains(where: { $0 === track }) else { return }
                    track.keyframeRequestDeferred = false
                    self.requestKeyframe(track)
                }
            }
            return
        }
        counters.keyframeRequestsForwarded += 1
        session.sendRTCP(RTCPPacket.serializeCompound([
            .receiverReport(ReceiverReport(ssrc: serverSSRC)),
            .pictureLossIndication(PictureLossIndication(senderSSRC: serverSSRC, mediaSSRC: ssrc)),
        ]))
    }

    /// Asks publishers again for video packets that did not arrive, so one lossy uplink is repaired
    /// once here for every subscriber (each leg has its own NACK loop).
    private func sendUpstreamNacks() {
        let now = Int64(NIODeadline.now().uptimeNanoseconds / 1000)
        for participant in rooms.values.flatMap(\.participants.values) {
            guard let session = participant.publisher else { continue }
            for track in participant.tracks where track.info.kind == .video {
                guard let ssrc = track.info.ssrc else { continue }
                let lost = track.nack.due(nowUs: now)
                guard !lost.isEmpty else { continue }
                counters.nacksSent += 1
                session.sendRTCP(RTCPPacket.serializeCompound([
                    .receiverReport(ReceiverReport(ssrc: serverSSRC)),
                    .nack(GenericNACK(senderSSRC: serverSSRC, mediaSSRC: ssrc, lost: lost)),
                ]))
            }
        }
    }

    /// Transport-wide CC feedback to every publisher that sends the sequence number, every 100 ms.
    private func sendTransportFeedback() {
        for participant in rooms.values.flatMap(\.participants.values) where participant.transportFeedback.hasPending {
            guard let session = participant.publisher,
                  let feedback = participant.transportFeedback.makeFeedback(
                      senderSSRC: serverSSRC, mediaSSRC: participant.tracks.first?.info.ssrc ?? 0)
            else { continue }
            session.sendRTCP(RTCPPacket.serializeCompound([.receiverReport(ReceiverReport(ssrc: serverSSRC)), .transportFeedback(feedback)]))
        }
    }

    /// Receiver reports to every publisher, once a second.
    private func sendReceiverReports() {
        let now = Int64(NIODeadline.now().uptimeNanoseconds / 1000)
        for participant in rooms.values.flatMap(\.participants.values) {
            guard let session = participant.publisher else { continue }
            var reports: [ReceptionReport] = []
            for track in participant.tracks {
                if var statistics = track.statistics {
                    reports.append(statistics.makeReport(nowUs: now))
                    track.statistics = statistics
                }
            }
            guard !reports.isEmpty else { continue }
            session.sendRTCP(RTCPPacket.serializeCompound([.receiverReport(ReceiverReport(ssrc: serverSSRC, reports: reports))]))
        }
    }
}
