import SwiftProtobuf
import Signaling

/// One LiveKit client's signal connection in our protocol's terms: each `SignalRequest` becomes
/// the messages of ours the SFU core takes (or a reply made here), each message of the core's
/// becomes the `SignalResponse`s LiveKit's SDKs expect. The core never sees LiveKit's protocol.
///
/// A value with the connection's state (its AddTrack cids, the participants it was told of, the
/// kind of ping it sends); kept on the connection's event loop.
public struct LiveKitTranslator: Sendable {
    /// What a request turns into: messages for the core and replies for the client.
    public struct Output: Sendable {
        public var toCore: [ClientEnvelope] = []
        public var toClient: [LKSignalResponse] = []
        /// A reason to end the connection (after the replies).
        public var close: String?
    }

    public let connect: LiveKitConnectRequest
    public let claims: LiveKitClaims
    public let room: String
    /// Set by the join's answer.
    public private(set) var participantSid: String?
    private var nextRequestID: UInt32 = 1
    /// AddTrack requests in flight, by the request id they were sent to the core with.
    private var pendingTracks: [UInt32: LKAddTrackRequest] = [:]
    /// Tracks this client published: the AddTrack they answered, by track sid.
    private var published: [String: LKAddTrackRequest] = [:]
    /// The newest of each other participant this client was told of (for the DISCONNECTED update).
    private var known: [String: LKParticipantInfo] = [:]
    /// The room's metadata as last told.
    private var roomMetadata = ""
    /// Our request ids of metadata updates on their way, with LiveKit's request.
    private var metadataRequests: [UInt32: LKUpdateParticipantMetadata] = [:]
    /// The participants (sids) last told as speaking.
    private var speakingSids: Set<String> = []
    /// Whether pings come as `ping_req` (a message) rather than the older int64 `ping`.
    private var pingsAsMessages = false
    /// The id of the client's latest publisher offer, echoed in the answer.
    private var offerID: UInt32 = 0
    /// The server's subscriber offers are numbered.
    private var subscriberOfferID: UInt32 = 0
    private var screenShareSuffix = "_sub"

    public init(connect: LiveKitConnectRequest, claims: LiveKitClaims, room: String) {
        self.connect = connect
        self.claims = claims
        self.room = room
    }

    private mutating func requestID() -> UInt32 {
        defer { nextRequestID &+= 1 }
        return nextRequestID
    }

    /// The message that starts the session in the core: a join (as a broadcaster; a token without
    /// canPublish publishes nothing) or a resume, carrying `token` (ours, for the same holder).
    public mutating func start(token: String) -> ClientEnvelope {
        if connect.reconnect, let sid = connect.participantSid {
            return ClientEnvelope(.resume(ResumeRequest(token: token, participantSid: sid)), requestID: requestID())
        }
        let request = JoinRequest(token: token, channel: room, uid: claims.identity, role: .broadcaster, autoSubscribe: connect.autoSubscribe,
                                  sdk: SDKInfo(name: "livekit-" + (connect.sdk.isEmpty ? "unknown" : connect.sdk),
                                               version: connect.sdkVersion.isEmpty ? "?" : connect.sdkVersion),
                                  dataFraming: .liveKit)
        return ClientEnvelope(.join(request), requestID: requestID())
    }

    // MARK: Client to core

    public mutating func translate(_ request: LKSignalRequest, nowMs: Int64) -> Output {
        var out = Output()
        switch request.message {
        case .offer(let offer):
            offerID = offer.id
            out.toCore.append(ClientEnvelope(.offer(SessionDescriptionMessage(transport: .publisher, sdp: offer.sdp)), requestID: requestID()))
        case .answer(let answer):
            out.toCore.append(ClientEnvelope(.answer(SessionDescriptionMessage(transport: .subscriber, sdp: answer.sdp)), requestID: requestID()))
        case .trickle:
            // The server is ICE-lite: it learns the client's addresses from the client's checks.
            break
        case .addTrack(let add):
            addTrack(add, into: &out)
        case .mute(let mute):
            out.toCore.append(ClientEnvelope(.mute(MuteRequest(trackSid: mute.sid, muted: mute.muted)), requestID: requestID()))
        case .subscription(let update):
            let sids = update.trackSids + update.participantTracks.flatMap(\.trackSids)
            if !sids.isEmpty {
                out.toCore.append(ClientEnvelope(.updateSubscription(SubscriptionUpdate(trackSids: sids, subscribe: update.subscribe)),
                                                 requestID: requestID()))
            }
        case .trackSetting(let settings):
            for preference in preferences(settings) {
                out.toCore.append(ClientEnvelope(.setVideoPreference(preference), requestID: requestID()))
            }
        case .leave:
            out.toCore.append(ClientEnvelope(.leave(reason: .clientRequest), requestID: requestID()))
        case .ping(let timestamp):
            pingsAsMessages = false
            out.toCore.append(ClientEnvelope(.ping(timestamp: timestamp), requestID: requestID()))
        case .pingReq(let ping):
            pingsAsMessages = true
            out.toCore.append(ClientEnvelope(.ping(timestamp: ping.timestamp), requestID: requestID()))
        case .updateMetadata(let update):
            // Empty fields are left as they are (LiveKit's SDKs send the whole message for one change).
            let id = requestID()
            metadataRequests[id] = update
            out.toCore.append(ClientEnvelope(.updateMetadata(MetadataUpdate(name: update.name.isEmpty ? nil : update.name,
                                                                            metadata: update.metadata.isEmpty ? nil : update.metadata,
                                                                            attributes: update.attributes.isEmpty ? nil : update.attributes)),
                                             requestID: id))
        case .subscriptionPermission(let permission):
            // A grant names its participant by identity (the SDKs set it) or by sid.
            let grants = permission.trackPermissions.compactMap { grant -> SubscriptionPermission.Grant? in
                let uid = grant.participantIdentity.isEmpty ? known.first { $0.value.sid == grant.participantSid }?.key : grant.participantIdentity
                return uid.map { SubscriptionPermission.Grant(uid: $0, trackSids: grant.allTracks ? nil : grant.trackSids) }
            }
            out.toCore.append(ClientEnvelope(.setSubscriptionPermission(SubscriptionPermission(allowAll: permission.allParticipants, allowed: grants)),
                                             requestID: requestID()))
        case .syncState, .simulate, .updateLayers, .updateAudioTrack, .updateVideoTrack:
            // Accepted and not acted on (docs/livekit.md lists them).
            break
        case nil:
            // A message this server does not know (a newer SDK's): ignored, as LiveKit ignores them.
            break
        }
        return out
    }

    private mutating func addTrack(_ add: LKAddTrackRequest, into out: inout Output) {
        func refuse(_ reason: LKRequestResponse.Reason, _ message: String) {
            var response = LKRequestResponse()
            response.reason = reason
            response.message = message
            response.request = .addTrack(add)
            out.toClient.append(.with { $0.requestResponse = response })
        }
        guard let kind = LiveKitMapping.kind(add.type) else {
            return refuse(.unsupportedType, "only audio and video tracks are published here (data tracks are not)")
        }
        // The codecs this server forwards: VP8 and Opus. A client asking for another is refused
        // now, not after its offer.
        let codecs = add.simulcastCodecs.map { $0.codec.lowercased() }.filter { !$0.isEmpty }
        let forwarded = kind == .video ? "vp8" : "opus"
        if let first = codecs.first, !first.hasSuffix(forwarded) {
            return refuse(.unsupportedType, "codec \(first) is not forwarded by this server: publish \(kind == .video ? "VP8" : "Opus")")
        }
        let screenShare = claims.identity.hasSuffix(screenShareSuffix) && claims.identity.count > screenShareSuffix.count
        let source = LiveKitMapping.source(add.source, kind: kind, screenShare: screenShare)
        let id = requestID()
        pendingTracks[id] = add
        // LiveKit's clients name two or three layers q, h (and f), smallest first.
        let layerCount = max(add.layers.count, add.simulcastCodecs.first?.layers.count ?? 0)
        let rids = kind == .video && layerCount > 1 ? Array(["q", "h", "f"].prefix(min(layerCount, 3))) : nil
        let sized = kind == .video && add.width > 0 && add.height > 0
        out.toCore.append(ClientEnvelope(.publishTrack(PublishTrackRequest(kind: kind, source: source, trackID: add.cid, simulcastLayers: rids,
                                                                           width: sized ? Int(add.width) : nil,
                                                                           height: sized ? Int(add.height) : nil,
                                                                           encryption: LiveKitMapping.encryption(add.encryption))),
                                         requestID: id))
        if add.muted {
            // Muted from the start: the core hears it once the track exists (see trackPublished).
        }
    }

    /// LiveKit's per-track settings as our per-publisher video preference: a quality, or the
    /// size the client renders at.
    private func preferences(_ settings: LKUpdateTrackSettings) -> [VideoPreference] {
        var uids: [String] = []
        for sid in settings.trackSids {
            if let owner = known.values.first(where: { $0.tracks.contains { $0.sid == sid } }), !uids.contains(owner.identity) {
                uids.append(owner.identity)
            }
        }
        return uids.map { uid in
            if settings.width > 0, settings.height > 0 {
                return VideoPreference(uid: uid, renderWidth: Int(settings.width), renderHeight: Int(settings.height))
            }
            switch settings.quality {
            case .low: return VideoPreference(uid: uid, streamType: .low)
            case .medium: return VideoPreference(uid: uid, streamType: .medium)
            default: return VideoPreference(uid: uid, streamType: .high)
            }
        }
    }

    // MARK: Core to client

    public mutating func translate(_ envelope: ServerEnvelope, nowMs: Int64) -> Output {
        var out = Output()
        switch envelope.message {
        case .joined(let join):
            participantSid = join.participant.sid
            screenShareSuffix = join.screenShareSuffix ?? "_sub"
            out.toClient.append(.with { $0.join = joinResponse(join) })
        case .resumed(let join):
            participantSid = join.participant.sid
            var reconnect = LKReconnectResponse()
            reconnect.iceServers = join.iceServers.map(Self.iceServer)
            reconnect.serverInfo = Self.serverInfo
            out.toClient.append(.with { $0.reconnect = reconnect })
            out.toClient.append(update(join.others))
        case .error(let error):
            out = failure(error, requestID: envelope.requestID)
        case .offer(let offer):
            subscriberOfferID &+= 1
            var description = LKSessionDescription()
            description.type = "offer"
            description.sdp = LiveKitSDP.subscriberOffer(offer.sdp)
            description.id = subscriberOfferID
            out.toClient.append(.with { $0.offer = description })
        case .answer(let answer):
            var description = LKSessionDescription()
            description.type = "answer"
            description.sdp = answer.sdp
            description.id = offerID
            out.toClient.append(.with { $0.answer = description })
        case .trackPublished(let track):
            guard let id = envelope.requestID, let add = pendingTracks.removeValue(forKey: id) else { break }
            published[track.sid] = add
            var response = LKTrackPublishedResponse()
            response.cid = add.cid
            response.track = ownTrack(track, add: add)
            out.toClient.append(.with { $0.trackPublished = response })
            if add.muted { out.toCore.append(ClientEnvelope(.mute(MuteRequest(trackSid: track.sid, muted: true)), requestID: requestID())) }
        case .participantUpdate(let participants):
            let others = participants.filter { $0.sid != participantSid }
            if !others.isEmpty { out.toClient.append(update(others)) }
            // Its own entry (the server's API, or its own metadata request): LiveKit's SDKs apply it to the local participant.
            if let own = participants.first(where: { $0.sid == participantSid }) {
                var info = LiveKitMapping.participant(own)
                info.permission.canPublishData = claims.grants.maySendData(screenShare: false)
                out.toClient.append(.with { $0.update = .with { $0.participants = [info] } })
            }
            if let id = envelope.requestID, let request = metadataRequests.removeValue(forKey: id) {
                var response = LKRequestResponse()
                response.requestID = request.requestID
                response.reason = .ok
                response.request = .updateMetadata(request)
                out.toClient.append(.with { $0.requestResponse = response })
            }
        case .subscriptionPermission(let update):
            guard let sid = known[update.uid]?.sid else { break }
            out.toClient.append(.with {
                $0.subscriptionPermissionUpdate = .with { $0.participantSid = sid; $0.trackSid = update.trackSid; $0.allowed = update.allowed }
            })
        case .connectionQuality(let quality):
            let updates = quality.participants.compactMap { entry -> LKConnectionQualityInfo? in
                guard let sid = entry.uid == claims.identity ? participantSid : known[entry.uid]?.sid,
                      let level = LiveKitMapping.connectionQuality(up: entry.up, down: entry.down) else { return nil }
                return .with { $0.participantSid = sid; $0.quality = level.quality; $0.score = level.score }
            }
            if !updates.isEmpty { out.toClient.append(.with { $0.connectionQuality = .with { $0.updates = updates } }) }
        case .participantLeft(let uid, let reason):
            guard var info = known.removeValue(forKey: uid) else { break }
            info.state = .disconnected
            info.version &+= 1
            info.tracks = []
            info.disconnectReason = LiveKitMapping.reason(reason)
            out.toClient.append(.with { $0.update = .with { $0.participants = [info] } })
        case .pong(let timestamp):
            if pingsAsMessages {
                out.toClient.append(.with { $0.pongResp = .with { $0.lastPingTimestamp = timestamp; $0.timestamp = nowMs } })
            } else {
                out.toClient.append(.with { $0.pong = timestamp })
            }
        case .tokenWillExpire, .tokenRefreshed:
            // The front end refreshes LiveKit clients itself (``LiveKitSignalPeer``).
            break
        case .leave(let reason):
            out.toClient.append(.with { $0.leave = LiveKitMapping.leave(reason) })
        case .videoLayers(let request):
            out.toClient.append(.with { $0.subscribedQualityUpdate = Self.qualityUpdate(request) })
        case .layerChanged:
            break
        case .roomUpdate(let update):
            roomMetadata = update.metadata
            out.toClient.append(.with { $0.roomUpdate = .with { $0.room = roomInfo(participants: nil) } })
        case .trackMuted(let request):
            out.toClient.append(.with { $0.mute = .with { $0.sid = request.trackSid; $0.muted = request.muted } })
        case .activeSpeakers(let update):
            // LiveKit's SpeakersChanged lists what changed: those speaking now, and those who stopped (inactive).
            let now = Set(update.speakers.map(\.sid))
            var infos = update.speakers.map { speaker in
                LKSpeakerInfo.with { $0.sid = speaker.sid; $0.level = Float(speaker.level); $0.active = true }
            }
            infos += speakingSids.subtracting(now).sorted().map { sid in LKSpeakerInfo.with { $0.sid = sid; $0.active = false } }
            speakingSids = now
            out.toClient.append(.with { $0.speakersChanged = .with { $0.speakers = infos } })
        }
        return out
    }

    /// The join as LiveKit's JoinResponse: the room, this participant and the others, the ICE
    /// servers, pings, and the server's description. The subscriber is not primary: the client
    /// connects its publisher PeerConnection at once, with the data channels on it.
    private mutating func joinResponse(_ join: Signaling.JoinResponse) -> LKJoinResponse {
        var response = LKJoinResponse()
        roomMetadata = join.roomMetadata ?? ""
        response.room = roomInfo(participants: join.others.count + 1)
        response.participant = LiveKitMapping.participant(join.participant)
        response.participant.permission.canPublishData = claims.grants.maySendData(screenShare: false)
        for other in join.others { known[other.uid] = LiveKitMapping.participant(other) }
        response.otherParticipants = join.others.map { known[$0.uid] ?? LiveKitMapping.participant($0) }
        response.serverVersion = LiveKitMapping.serverVersion
        response.iceServers = join.iceServers.map(Self.iceServer)
        response.subscriberPrimary = false
        response.pingInterval = Int32(clamping: max(join.pingInterval, 1))
        response.pingTimeout = Int32(clamping: max(join.pingTimeout, 2))
        response.serverInfo = Self.serverInfo
        response.enabledPublishCodecs = [.with { $0.mime = "video/VP8" }, .with { $0.mime = "audio/opus" }]
        return response
    }

    /// The room as LiveKit's clients see it (`participants` when known).
    private func roomInfo(participants: Int?) -> LKRoom {
        .with {
            $0.sid = "RM_" + room
            $0.name = room
            $0.metadata = roomMetadata
            if let participants { $0.numParticipants = UInt32(participants) }
            $0.enabledCodecs = [.with { $0.mime = "video/VP8" }, .with { $0.mime = "audio/opus" }]
        }
    }

    private mutating func update(_ participants: [Signaling.ParticipantInfo]) -> LKSignalResponse {
        let infos = participants.map { participant in
            let info = LiveKitMapping.participant(participant)
            known[participant.uid] = info
            return info
        }
        return .with { $0.update = .with { $0.participants = infos } }
    }

    /// This client's own track, with what its AddTrack said (name, size, layers).
    private func ownTrack(_ track: Signaling.TrackInfo, add: LKAddTrackRequest) -> LKTrackInfo {
        var layers = add.layers
        for index in layers.indices where layers[index].rid.isEmpty {
            layers[index].rid = LiveKitMapping.rid(layers[index].quality) ?? ""
        }
        var info = LiveKitMapping.track(track, name: add.name, width: add.width, height: add.height, layers: layers)
        info.simulcast = layers.count > 1
        info.stream = add.stream
        return info
    }

    /// A refused request: the AddTrack it answers (a RequestResponse naming it), or for a join
    /// or resume a LeaveRequest and the close, the reason in both.
    private mutating func failure(_ error: SignalingError, requestID: UInt32?) -> Output {
        var out = Output()
        if let requestID, let add = pendingTracks.removeValue(forKey: requestID) {
            var response = LKRequestResponse()
            response.reason = error.code == .permissionDenied ? .notAllowed : error.code == .limitExceeded ? .limitExceeded : .unclassifiedError
            response.message = error.reason
            response.request = .addTrack(add)
            out.toClient.append(.with { $0.requestResponse = response })
            return out
        }
        if participantSid == nil {
            // A server that is draining refuses joins: the SDK is to try again (the next server,
            // another node), not give up as it does on a final join failure.
            var leave = error.code == .shuttingDown ? LiveKitMapping.leave(.serverShutdown) : LKLeaveRequest()
            if error.code != .shuttingDown {
                // A screen share whose owner is not in the room yet: USER_UNAVAILABLE (the one
                // reason LiveKit's enum has for "the other one is not there"), which our client
                // reads as 3003 and waits for the owner as on our protocol; any other: JOIN_FAILURE.
                leave.reason = LiveKitMapping.joinRefusal(error.code)
                leave.action = .disconnect
            }
            out.toClient.append(.with { $0.leave = leave })
            out.close = error.reason
            return out
        }
        var response = LKRequestResponse()
        response.requestID = requestID ?? 0
        response.reason = error.code == .permissionDenied ? .notAllowed : error.code == .limitExceeded ? .limitExceeded : .unclassifiedError
        response.message = error.reason
        if let requestID, let request = metadataRequests.removeValue(forKey: requestID) {
            response.requestID = request.requestID
            response.request = .updateMetadata(request)
        }
        out.toClient.append(.with { $0.requestResponse = response })
        return out
    }

    static func iceServer(_ server: Signaling.ICEServer) -> LKICEServer {
        .with {
            $0.urls = server.urls
            $0.username = server.username ?? ""
            $0.credential = server.credential ?? ""
        }
    }

    static var serverInfo: LKServerInfo {
        .with {
            $0.edition = .standard
            $0.version = LiveKitMapping.serverVersion
            $0.protocol = LiveKitMapping.protocolVersion
            $0.nodeID = "swift-rtc"
        }
    }

    /// Dynacast: the layers the core wants sent, as LiveKit's per-quality switches.
    public static func qualityUpdate(_ request: VideoLayersRequest) -> LKSubscribedQualityUpdate {
        let qualities: [LKSubscribedQuality] = [LKVideoQuality.low, .medium, .high].map { quality in
            .with {
                $0.quality = quality
                $0.enabled = LiveKitMapping.rid(quality).map(request.activeLayers.contains) ?? false
            }
        }
        return .with {
            $0.trackSid = request.trackSid
            $0.subscribedQualities = qualities
            $0.subscribedCodecs = [.with { $0.codec = "vp8"; $0.qualities = qualities }]
        }
    }
}
