import Signaling

/// The client side of LiveKit's signal protocol in our protocol's terms: the inverse of
/// ``LiveKitTranslator``. An engine's session speaks our messages; each becomes the
/// `SignalRequest`s a LiveKit server expects, and each `SignalResponse` becomes our messages,
/// either the reply a request waits for (named by a ``Reply`` key: LiveKit's requests carry no
/// id, so the reply is known by what it answers) or an event. Both directions use
/// ``LiveKitMapping``, as the server side does: one mapping, one table of tests.
///
/// A value with the connection's state: the participants it was told of, the `cid` of each
/// published section, the speakers it has heard, its own participant.
public struct LiveKitClientTranslator: Sendable {
    /// What a reply answers.
    public enum Reply: Sendable, Hashable {
        /// The join: LiveKit's first response on the socket.
        case join
        /// The publisher offer's answer, by the offer's id (LiveKit echoes it).
        case answer(offerID: UInt32)
        /// A track's `TrackPublishedResponse`, by the `cid` its AddTrack carried.
        case track(cid: String)
        /// An `UpdateParticipantMetadata`, by its request id.
        case metadata(UInt32)
        /// A resume's `ReconnectResponse`: the first response on a socket opened with `reconnect=1`.
        case reconnect
        /// Answered here, at once (LiveKit has no such request).
        case immediate(ServerMessage)
    }

    /// What a response turns into.
    public enum Inbound: Sendable, Hashable {
        case reply(Reply, Result<ServerMessage, SignalingError>)
        case event(ServerMessage)
        /// A refreshed token (`refresh_token`): the one to reconnect with.
        case token(String)
        /// A request to send now (a video preference for a track that just appeared).
        case request(LKSignalRequest)
    }

    /// Our identity and the token's room.
    public let identity: String
    public private(set) var participantSid: String?
    /// The newest info of each other participant, by sid.
    private var known: [String: LKParticipantInfo] = [:]
    /// Our own, as the server last told it.
    private var own: LKParticipantInfo?
    /// The `cid` of each publisher section (by mid): its AddTrack and its `a=msid` track id.
    private var cids: [String: String] = [:]
    /// Sections announced and not yet answered, by cid: their mid.
    private var pendingTracks: [String: String] = [:]
    private var offerID: UInt32 = 0
    private var subscriberOfferID: UInt32 = 0
    private var nextRequestID: UInt32 = 1
    /// Speaking now, by sid: its level (LiveKit sends what changed; we keep the whole set).
    private var speaking: [String: Float] = [:]
    private var cidNumber = 0
    /// The video preferences asked for, by uid (nil: the default for everyone): LiveKit's are per
    /// track, so a track that appears later gets its owner's (or the default) when it comes.
    private var preferences: [String?: VideoPreference] = [:]
    /// What a resume's SyncState tells the server: the last subscriber answer and the tracks published.
    private var lastSubscriberAnswer: LKSessionDescription?
    private var publishedTracks: [String: LKTrackPublishedResponse] = [:]
    /// The signal connection's round trip as the last pong measured it (ms; 0: none yet).
    public var roundTripMs: Int64 = 0
    private let cidPrefix: String

    public init(identity: String, cidPrefix: String = "TR_swift") {
        self.identity = identity
        self.cidPrefix = cidPrefix
    }

    // MARK: Ours to LiveKit's

    /// The requests for one of our messages, and the reply it waits for (nil: none). A message
    /// LiveKit's protocol has no place for throws with the reason.
    public mutating func translate(_ message: ClientMessage) throws(SignalingError) -> (requests: [LKSignalRequest], reply: Reply?) {
        switch message {
        case .join:
            // The join is the WebSocket's URL (``LiveKitConnectRequest/query``): nothing to send.
            return ([], .join)
        case .offer(let offer):
            offerID &+= 1
            let sdp = LiveKitSDP.withTrackIDs(offer.sdp, cids)
            return ([.with { $0.offer = .with { $0.type = "offer"; $0.sdp = sdp; $0.id = offerID } }], .answer(offerID: offerID))
        case .answer(let answer):
            let description = LKSessionDescription.with { $0.type = "answer"; $0.sdp = answer.sdp; $0.id = subscriberOfferID }
            lastSubscriberAnswer = description
            return ([.with { $0.answer = description }], nil)
        case .publishTrack(let request):
            let cid = cid(for: request.mid)
            pendingTracks[cid] = request.mid ?? ""
            return ([.with { $0.addTrack = addTrack(request, cid: cid) }], .track(cid: cid))
        case .unpublishTrack:
            // LiveKit's clients unpublish by removing the section and offering again.
            return ([], nil)
        case .mute(let mute):
            return ([.with { $0.mute = .with { $0.sid = mute.trackSid; $0.muted = mute.muted } }], nil)
        case .updateSubscription(let update):
            let sids = trackSids(update)
            guard !sids.isEmpty else { return ([], nil) }
            return ([.with { $0.subscription = .with { $0.trackSids = sids; $0.subscribe = update.subscribe } }], nil)
        case .setVideoPreference(let preference):
            preferences[preference.uid] = preference
            return (settings(preference).map { settings in .with { $0.trackSetting = settings } }, nil)
        case .leave:
            return ([.with { $0.leave = .with { $0.reason = .clientInitiated; $0.action = .disconnect } }], nil)
        case .ping(let timestamp):
            let rtt = roundTripMs
            return ([.with { $0.pingReq = .with { $0.timestamp = timestamp; $0.rtt = rtt } }], nil)
        case .updateMetadata(let update):
            let id = nextRequestID
            nextRequestID &+= 1
            let request = LKUpdateParticipantMetadata.with {
                $0.name = update.name ?? ""
                $0.metadata = update.metadata ?? ""
                $0.attributes = update.attributes ?? [:]
                $0.requestID = id
            }
            return ([.with { $0.updateMetadata = request }], .metadata(id))
        case .setSubscriptionPermission(let permission):
            let request = LKSubscriptionPermission.with {
                $0.allParticipants = permission.allowAll
                $0.trackPermissions = permission.allowed.map { grant in
                    .with {
                        $0.participantIdentity = grant.uid
                        $0.allTracks = grant.trackSids == nil
                        $0.trackSids = grant.trackSids ?? []
                    }
                }
            }
            return ([.with { $0.subscriptionPermission = request }], nil)
        case .refreshToken:
            // LiveKit's server refreshes the token itself (`refresh_token`); nothing to ask.
            return ([], .immediate(.tokenRefreshed(expiresAt: 0)))
        case .restartICE:
            // LiveKit restarts the subscriber's ICE on a resume; a request of its own does not exist.
            return ([], nil)
        case .setRole:
            throw SignalingError(.unknownMessageType, "LiveKit's protocol has no role switch: join again with a token that grants it")
        case .resume:
            throw SignalingError(.unknownMessageType, "a LiveKit session resumes by reconnecting its WebSocket (reconnect=1)")
        }
    }

    /// The cid a section's track goes by: its AddTrack's, and its `a=msid` track id.
    private mutating func cid(for mid: String?) -> String {
        if let mid, let cid = cids[mid] { return cid }
        cidNumber += 1
        let cid = "\(cidPrefix)_\(cidNumber)"
        if let mid { cids[mid] = cid }
        return cid
    }

    private func addTrack(_ request: PublishTrackRequest, cid: String) -> LKAddTrackRequest {
        .with { add in
            add.cid = cid
            add.type = request.kind == .video ? .video : .audio
            add.source = LiveKitMapping.source(request.source)
            add.name = request.source.rawValue
            add.encryption = LiveKitMapping.encryption(request.encryption)
            if let width = request.width, let height = request.height {
                add.width = UInt32(clamping: width)
                add.height = UInt32(clamping: height)
            }
            // Simulcast: LiveKit's VideoLayers, smallest first, each half the next one's size.
            let rids = (request.simulcastLayers ?? []).filter { LiveKitMapping.quality(rid: $0) != nil }
                .sorted { LiveKitMapping.quality(rid: $0)!.rawValue < LiveKitMapping.quality(rid: $1)!.rawValue }
            if request.kind == .video {
                let sizes = rids.isEmpty ? [String?.none] : rids.map(Optional.some)
                add.layers = sizes.enumerated().map { index, rid in
                    LKVideoLayer.with {
                        $0.quality = rid.flatMap(LiveKitMapping.quality(rid:)) ?? .high
                        $0.rid = rid ?? ""
                        let scale = UInt32(1) << UInt32(sizes.count - 1 - index)
                        $0.width = add.width / scale
                        $0.height = add.height / scale
                        if let bitrate = request.bitrateBps {
                            // Each layer's share of the track's rate: a quarter per halving of the size.
                            $0.bitrate = UInt32(clamping: bitrate / (Int(scale) * Int(scale)))
                        }
                    }
                }
                add.simulcastCodecs = [.with { $0.codec = "vp8"; $0.cid = cid; $0.layers = add.layers }]
            }
        }
    }

    /// The track sids an update of ours names: its sids, every track of its uids, every track of its kind.
    private func trackSids(_ update: SubscriptionUpdate) -> [String] {
        var sids = update.trackSids
        let people = known.values.filter { info in (update.uids ?? []).contains(info.identity) || (update.kind != nil && update.uids == nil) }
        for person in people {
            for track in person.tracks where update.kind == nil || LiveKitMapping.kind(track.type) == update.kind { sids.append(track.sid) }
        }
        return sids
    }

    /// Our video preference as LiveKit's per-track settings: a quality, or the size we render at.
    /// `only`: for these track sids (a new track's), not every video track it covers.
    private func settings(_ preference: VideoPreference, only: [String]? = nil) -> [LKUpdateTrackSettings] {
        let owners = known.values.filter { preference.uid == nil || $0.identity == preference.uid }
        let sids = only ?? owners.flatMap { $0.tracks.filter { $0.type == .video }.map(\.sid) }.sorted()
        guard !sids.isEmpty else { return [] }
        return [.with {
            $0.trackSids = sids
            if let width = preference.renderWidth, let height = preference.renderHeight {
                $0.width = UInt32(clamping: width)
                $0.height = UInt32(clamping: height)
            }
            $0.quality = switch preference.streamType {
            case .low?: .low
            case .medium?: .medium
            default: .high
            }
        }]
    }

    // MARK: LiveKit's to ours

    /// Our messages for one response.
    public mutating func translate(_ response: LKSignalResponse) -> [Inbound] {
        switch response.message {
        case .join(let join):
            return [.reply(.join, .success(.joined(joined(join))))]
        case .reconnect:
            return [.reply(.reconnect, .success(.pong(timestamp: 0)))]
        case .answer(let answer):
            return [.reply(.answer(offerID: answer.id), .success(.answer(SessionDescriptionMessage(transport: .publisher, sdp: answer.sdp))))]
        case .offer(let offer):
            subscriberOfferID = offer.id
            return [.event(.offer(SessionDescriptionMessage(transport: .subscriber, sdp: LiveKitSDP.ourStreamIDs(offer.sdp))))]
        case .trickle:
            // Our server's LiveKit front end is ICE-lite and puts its candidates in its SDP; a
            // full-ICE server's trickled candidates are not taken yet (docs/livekit.md).
            return []
        case .update(let update):
            return participantsChanged(update.participants)
        case .trackPublished(let published):
            pendingTracks[published.cid] = nil
            publishedTracks[published.track.sid] = published
            return [.reply(.track(cid: published.cid), .success(.trackPublished(Self.track(published.track))))]
        case .trackUnpublished:
            return []
        case .leave(let leave):
            // Before the join's answer: the join's refusal, with the reason's code.
            guard participantSid != nil else { return [.reply(.join, .failure(LiveKitMapping.joinRefusal(leave)))] }
            return [.event(.leave(reason: Self.leaveReason(leave)))]
        case .mute(let mute):
            return [.event(.trackMuted(MuteRequest(trackSid: mute.sid, muted: mute.muted)))]
        case .speakersChanged(let changed):
            for speaker in changed.speakers {
                if speaker.active { speaking[speaker.sid] = speaker.level } else { speaking[speaker.sid] = nil }
            }
            let speakers = speaking.sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }.compactMap { sid, level -> ActiveSpeakers.Speaker? in
                guard let uid = uid(of: sid) else { return nil }
                return ActiveSpeakers.Speaker(uid: uid, sid: sid, level: Double(level))
            }
            return [.event(.activeSpeakers(ActiveSpeakers(speakers: speakers)))]
        case .roomUpdate(let update):
            return [.event(.roomUpdate(RoomUpdate(metadata: update.room.metadata)))]
        case .connectionQuality(let update):
            let entries = update.updates.compactMap { info -> ConnectionQuality.Entry? in
                guard let uid = uid(of: info.participantSid) else { return nil }
                let level = LiveKitMapping.level(info.quality)
                return ConnectionQuality.Entry(uid: uid, up: level, down: level)
            }
            return entries.isEmpty ? [] : [.event(.connectionQuality(ConnectionQuality(participants: entries)))]
        case .subscribedQualityUpdate(let update):
            let qualities = update.subscribedCodecs.first?.qualities ?? update.subscribedQualities
            let active = qualities.filter(\.enabled).compactMap { LiveKitMapping.rid($0.quality) }
            return [.event(.videoLayers(VideoLayersRequest(trackSid: update.trackSid, activeLayers: active)))]
        case .subscriptionPermissionUpdate(let update):
            guard let uid = uid(of: update.participantSid) else { return [] }
            return [.event(.subscriptionPermission(SubscriptionPermissionUpdate(uid: uid, trackSid: update.trackSid, allowed: update.allowed)))]
        case .refreshToken(let token):
            return [.token(token)]
        case .pong(let timestamp):
            return [.event(.pong(timestamp: timestamp))]
        case .pongResp(let pong):
            return [.event(.pong(timestamp: pong.lastPingTimestamp))]
        case .requestResponse(let response):
            return refused(response)
        case .streamStateUpdate, .subscriptionResponse, .trackSubscribed, nil:
            // Nothing our engine acts on; a newer server's kinds are skipped.
            return []
        }
    }

    /// What a resume tells the server it has (LiveKit's `SyncState`, sent after the
    /// `ReconnectResponse` and before the publisher's re-offer): the last subscriber answer, the
    /// tracks it subscribes to (everyone's, with auto-subscription) and the tracks it publishes.
    public func syncState(autoSubscribe: Bool) -> LKSignalRequest {
        let subscribed = autoSubscribe ? known.values.flatMap { $0.tracks.map(\.sid) }.sorted() : []
        return .with {
            $0.syncState = .with { state in
                if let lastSubscriberAnswer { state.answer = lastSubscriberAnswer }
                state.subscription = .with { $0.trackSids = subscribed; $0.subscribe = true }
                state.publishTracks = publishedTracks.values.sorted { $0.track.sid < $1.track.sid }
            }
        }
    }

    private func uid(of sid: String) -> String? {
        sid == participantSid ? identity : known[sid]?.identity
    }

    private mutating func joined(_ join: LKJoinResponse) -> JoinResponse {
        participantSid = join.participant.sid
        own = join.participant
        for other in join.otherParticipants { known[other.sid] = other }
        return JoinResponse(
            participant: Self.participant(join.participant),
            others: join.otherParticipants.filter { $0.state != .disconnected }.map(Self.participant),
            iceServers: join.iceServers.map { ICEServer(urls: $0.urls, username: $0.username.isEmpty ? nil : $0.username,
                                                        credential: $0.credential.isEmpty ? nil : $0.credential) },
            pingInterval: Int(join.pingInterval > 0 ? join.pingInterval : 5), pingTimeout: Int(join.pingTimeout > 0 ? join.pingTimeout : 15),
            resumeWindow: 0, serverVersion: .current, screenShareSuffix: nil,
            roomMetadata: join.room.metadata.isEmpty ? nil : join.room.metadata)
    }

    /// Participant updates: the newer of each (by version) as ours; those gone as `participantLeft`;
    /// our own as its own update (metadata the API set on us).
    private mutating func participantsChanged(_ participants: [LKParticipantInfo]) -> [Inbound] {
        var changed: [ParticipantInfo] = []
        var out: [Inbound] = []
        for info in participants {
            if info.sid == participantSid || (info.identity == identity && info.state != .disconnected) {
                own = info
                changed.append(Self.participant(info))
                continue
            }
            if let older = known[info.sid], older.version > info.version { continue }
            // A video track new to us gets the preference its owner (or everyone) was given.
            let before = Set(known[info.sid]?.tracks.map(\.sid) ?? [])
            let added = info.tracks.filter { $0.type == .video && !before.contains($0.sid) }.map(\.sid)
            if info.state != .disconnected, !added.isEmpty, let preference = preferences[info.identity] ?? preferences[nil] {
                known[info.sid] = info
                out += settings(preference, only: added).map { settings in .request(.with { $0.trackSetting = settings }) }
            }
            if info.state == .disconnected {
                known[info.sid] = nil
                speaking[info.sid] = nil
                out.append(.event(.participantLeft(uid: info.identity, reason: LiveKitMapping.leaveReason(info.disconnectReason))))
            } else {
                known[info.sid] = info
                changed.append(Self.participant(info))
            }
        }
        if !changed.isEmpty { out.insert(.event(.participantUpdate(changed)), at: 0) }
        return out
    }

    /// A refused request: the AddTrack or metadata update it names fails with LiveKit's reason.
    private mutating func refused(_ response: LKRequestResponse) -> [Inbound] {
        let code: SignalingError.Code = switch response.reason {
        case .ok: .internalError
        case .notAllowed: .permissionDenied
        case .limitExceeded: .limitExceeded
        case .notFound: .trackNotFound
        default: .negotiationFailed
        }
        let error = SignalingError(code, response.message.isEmpty ? "refused (\(response.reason))" : response.message)
        switch response.request {
        case .addTrack(let add)?:
            pendingTracks[add.cid] = nil
            return [.reply(.track(cid: add.cid), .failure(error))]
        case .updateMetadata(let update)?:
            guard response.reason != .ok else {
                return [.reply(.metadata(update.requestID), .success(.participantUpdate(own.map { [Self.participant($0)] } ?? [])))]
            }
            return [.reply(.metadata(update.requestID), .failure(error))]
        default:
            guard response.requestID != 0 else { return [] }
            return response.reason == .ok
                ? [.reply(.metadata(response.requestID), .success(.participantUpdate(own.map { [Self.participant($0)] } ?? [])))]
                : [.reply(.metadata(response.requestID), .failure(error))]
        }
    }

    // MARK: Mapping back

    /// A LiveKit participant as ours: a screen share by its `screenShareOwner` attribute.
    public static func participant(_ info: LKParticipantInfo) -> ParticipantInfo {
        var attributes = info.attributes
        let owner = attributes.removeValue(forKey: "screenShareOwner")
        return ParticipantInfo(uid: info.identity, sid: info.sid, role: info.permission.canPublish || !info.tracks.isEmpty ? .broadcaster : .audience,
                               kind: owner.map { .screenShare(owner: $0) } ?? .normal,
                               tracks: info.tracks.compactMap { LiveKitMapping.kind($0.type) == nil ? nil : track($0) },
                               version: Int(info.version), name: info.name.isEmpty || info.name == info.identity ? nil : info.name,
                               metadata: info.metadata.isEmpty ? nil : info.metadata, attributes: attributes.isEmpty ? nil : attributes)
    }

    /// A LiveKit track as ours.
    public static func track(_ info: LKTrackInfo) -> TrackInfo {
        let kind = LiveKitMapping.kind(info.type) ?? .audio
        let rids = info.layers.compactMap { $0.rid.isEmpty ? LiveKitMapping.rid($0.quality) : $0.rid }
        return TrackInfo(sid: info.sid, kind: kind, source: LiveKitMapping.source(info.source, kind: kind, screenShare: false),
                         muted: info.muted, mid: info.mid.isEmpty ? nil : info.mid, simulcastLayers: rids.count > 1 ? rids : nil,
                         width: info.width > 0 ? Int(info.width) : nil, height: info.height > 0 ? Int(info.height) : nil,
                         encryption: LiveKitMapping.encryption(info.encryption))
    }

    /// What a LiveKit leave asks of us: a reconnect (a server going down) is our `serverShutdown`,
    /// which makes the engine join again; anything else ends the session with its reason.
    public static func leaveReason(_ leave: LKLeaveRequest) -> LeaveReason {
        if leave.action == .reconnect || leave.action == .resume || leave.canReconnect {
            return .serverShutdown
        }
        return LiveKitMapping.leaveReason(leave.reason)
    }
}
