import NIOCore
import RTCTransport
import Signaling

/// Joins, resumes and leaves, and the once-a-second housekeeping (keepalive, resume windows,
/// token expiry): who is in which room, through the ``RoomDirectory``.
extension SFU {
    func join(_ request: JoinRequest, token: TokenCheck, peer: SignalingPeer, requestID: UInt32?, fail: Fail) {
        guard !request.uid.isEmpty, request.uid.utf8.count <= 128, !request.channel.isEmpty, request.channel.utf8.count <= 128 else {
            return fail(.invalidUID, "uid and channel must be 1 to 128 bytes")
        }
        let claims: AccessToken
        do { claims = try verify(token, channel: request.channel, uid: request.uid) } catch { return fail(error.code, error.reason) }
        guard claims.grants.join else { return fail(.permissionDenied, "the token does not grant join") }
        let share = context.screenShare.host(of: request.uid)
        if let owner = share, configuration.screenShareNeedsOwner, directory.participant(uid: owner, in: request.channel) == nil {
            return fail(.screenShareOwnerAbsent, "\(request.uid) shares the screen of \(owner), who is not in \(request.channel)")
        }
        // The same uid again (a client that crashed, or one on a second device): the newer wins,
        // and the older is told why (`duplicateIdentity`).
        if let older = directory.participant(uid: request.uid, in: request.channel) {
            older.send(.leave(reason: .duplicateIdentity))
            let olderPeer = older.peer
            remove(older, reason: .duplicateIdentity)
            olderPeer?.close()
            context.counters.duplicateIdentities += 1
        }
        let existing = directory.room(named: request.channel)
        let room = existing ?? Room(name: request.channel, sid: makeID("RM"), createdAt: clock(),
                                    settings: context.takeRoomSettings?(request.channel))
        guard context.tally.total < configuration.limits.maxParticipants else {
            return fail(.limitExceeded, "the server is full (\(configuration.limits.maxParticipants) participants)")
        }
        let roomCap = room.maxParticipants > 0 ? min(room.maxParticipants, configuration.limits.maxParticipantsPerRoom)
            : configuration.limits.maxParticipantsPerRoom
        guard room.participants.count < roomCap else {
            return fail(.limitExceeded, "\(request.channel) is full (\(roomCap) participants)")
        }
        let participant = Participant(uid: request.uid, sid: makeID("PA"), role: request.role, room: room, peer: peer,
                                      grants: claims.grants, tokenExpiresAt: claims.expiresAt,
                                      // A screen share subscribes to nothing unless its app pins.
                                      autoSubscribe: share != nil ? [] : Set([request.autoSubscribeAudio ?? request.autoSubscribe ? TrackKind.audio : nil,
                                                                              request.autoSubscribeVideo ?? request.autoSubscribe ? TrackKind.video : nil]
                                                                             .compactMap { $0 }),
                                      ignoreScreenShare: request.ignoreScreenShare, screenShare: context.screenShare, now: clock())
        let pinned = Set((request.pinnedUIDs ?? []).prefix(configuration.limits.maxPinned))
        participant.pinned = pinned
        participant.revealed = pinned
        participant.speaksLayers = request.sdk.protocolVersion >= ProtocolVersion(major: 1, minor: 4)
        participant.dataFraming = request.dataFraming ?? .envelope
        participant.mediaBound = request.mediaBound ?? false
        participant.protocolVersion = request.sdk.protocolVersion
        let limits = configuration.limits
        participant.name = claims.name.map { String($0.prefix(limits.maxNameBytes)) }
        participant.metadata = claims.metadata.flatMap { $0.utf8.count <= limits.maxMetadataBytes ? $0 : nil }
        if let attributes = claims.attributes, ParticipantAttributes.fit(attributes, limits: limits) { participant.attributes = attributes }
        // Back after a drain: what the API or the participant itself had set since its token.
        if let saved = room.restored.removeValue(forKey: request.uid) { saved.apply(to: participant, limits: limits) }
        directory.insert(participant)
        setJobsTimer()  // the participants' jobs, if the shard had none
        context.tally.add(1, shard: context.shardIndex)
        directory.bind(peer, to: participant)
        participant.send(.joined(joinResponse(for: participant)), requestID: requestID)
        if existing == nil { context.onEvent?(.roomStarted(room.view)) }
        context.onEvent?(.participantJoined(room.view, participant.view))
        announce(participant)
        if !participant.autoSubscribe.isEmpty && participant.grants.subscribe {
            let tracks = room.participants.values.filter { participant.sees($0) }.flatMap(\.tracks)
                .filter { participant.subscribesAutomatically(to: $0) }
            subscribe(participant, to: tracks)
        }
    }

    private func joinResponse(for participant: Participant) -> JoinResponse {
        JoinResponse(participant: participant.info,
                     others: participant.room.participants.values.filter { participant.sees($0) }.map(\.info).sorted { $0.uid < $1.uid },
                     iceServers: iceServers(for: participant.uid),
                     pingInterval: configuration.pingInterval, pingTimeout: configuration.pingTimeout,
                     resumeWindow: configuration.resumeWindow, serverVersion: configuration.protocolVersion,
                     screenShareSuffix: configuration.screenShareSuffix,
                     roomMetadata: participant.room.metadata.isEmpty ? nil : participant.room.metadata)
    }

    /// The configured TURN servers with credentials for `uid` that expire with `turnCredentialSeconds`.
    func iceServers(for uid: String) -> [ICEServer] {
        guard !configuration.turnURLs.isEmpty else { return [] }
        guard let secret = configuration.turnSecret else { return [ICEServer(urls: configuration.turnURLs)] }
        let now = clock()
        let made = TURNCredentials.make(secret: secret, uid: uid, now: now, ttl: Int64(configuration.turnCredentialSeconds))
        return [ICEServer(urls: configuration.turnURLs, username: made.username, credential: made.credential)]
    }

    func resume(_ request: ResumeRequest, token: TokenCheck, peer: SignalingPeer, requestID: UInt32?, fail: Fail) {
        // The token first: whoever cannot sign one learns nothing about which sessions exist.
        do { _ = try verifySignature(token) } catch { return fail(error.code, error.reason) }
        guard let participant = directory.participant(sid: request.participantSid) else {
            return fail(.resumeFailed, "no session \(request.participantSid) to resume")
        }
        do { _ = try verify(token, channel: participant.room.name, uid: participant.uid) } catch { return fail(error.code, error.reason) }
        // The client knows its connection is gone before the server does (no FIN from a dead
        // network): the resume takes the session over from the old connection.
        if let old = participant.peer, old !== peer {
            directory.unbind(old)
            participant.peer = nil
            old.close()
        }
        participant.peer = peer
        participant.disconnectedAtNs = nil
        participant.lastSeen = clock()
        directory.bind(peer, to: participant)
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
    /// screen share (`<uid><screenShareSuffix>`) with it.
    func remove(_ participant: Participant, reason: LeaveReason) {
        guard directory.contains(participant) else { return }
        let room = participant.room
        for track in participant.tracks { unpublish(track) }
        for subscription in participant.subscriptions {
            subscription.track.subscriptions.removeAll { $0 === subscription }
        }
        participant.subscriptions.removeAll()
        if !pendingRPCs.isEmpty { failRPCs(of: participant) }
        if let publisher = participant.publisher { port.removeOnLoop(publisher) }
        if let subscriber = participant.subscriber { port.removeOnLoop(subscriber) }
        let view = participant.view
        directory.remove(participant)
        context.tally.add(-1, shard: context.shardIndex)
        context.onEvent?(.participantLeft(room.view, view, reason))
        if directory.room(named: room.name) == nil {
            context.onRoomDropped?(room.name)
            context.onEvent?(.roomFinished(room.view))
        }
        for other in room.participants.values where other.sees(participant) {
            other.send(.participantLeft(uid: participant.uid, reason: reason))
        }
        if let share = directory.participant(uid: context.screenShare.sharer(of: participant.uid), in: room.name), share !== participant {
            share.send(.leave(reason: .ownerLeft))
            let peer = share.peer
            remove(share, reason: .ownerLeft)
            peer?.close()
        }
    }

    /// Tells everyone who can see `participant` about its new state.
    func participantChanged(_ participant: Participant) {
        participant.version += 1
        announce(participant)
    }

    /// Queues `participant`'s state for everyone who sees it; each gets its queue as one
    /// `participantUpdate` after the messages already waiting on the loop (a burst of joins or
    /// track changes is one message per recipient, not one per change).
    func announce(_ participant: Participant) {
        let info = participant.info
        for other in participant.room.participants.values where other.sees(participant) {
            other.queueUpdate(info)
            guard !other.updateFlushScheduled else { continue }
            other.updateFlushScheduled = true
            loop.execute { other.flushUpdates() }
        }
    }

    /// Once a second: keepalive, resume windows and token expiry; then receiver reports and
    /// limits to publishers.
    func tick() {
        let now = clock(), nowNs = monotonicClock()
        for participant in directory.allParticipants {
            if let gone = participant.disconnectedAtNs {
                if Double(nowNs &- gone) / 1e9 >= Double(configuration.resumeWindow) { remove(participant, reason: .timeout) }
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
            if participant.mediaBound {
                // Its media is its liveness: gone once the publisher transport is lost (or never came).
                if participant.mediaLost(now: now, within: Int64(configuration.pingTimeout)) {
                    let peer = participant.peer
                    remove(participant, reason: .timeout)
                    peer?.close()
                }
                continue
            }
            if now - participant.lastSeen > Int64(configuration.pingTimeout), let peer = participant.peer {
                directory.unbind(peer)
                participant.peer = nil
                participant.disconnectedAtNs = nowNs
                peer.close()
            }
        }
        let nowUs = context.nowUs
        terminator.sendReceiverReports(nowUs: nowUs)
        terminator.sendPublisherLimits(nowUs: nowUs)
    }
}
