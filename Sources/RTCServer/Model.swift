import NIOCore
import RTCConventions
import RTCTransport
import Signaling

/// The connection a participant's signaling arrives on. The SFU calls it on its event loop;
/// implementations hop to their own.
/// Where a server's signaling connections hand their messages: one ``SFU``, or the router over
/// a server's shards (``ShardedSFU``).
public protocol SignalingSink: AnyObject, Sendable {
    /// One message from `peer`: bytes that may be anything.
    func received(_ bytes: [UInt8], from peer: SignalingPeer)
}

public protocol SignalingPeer: AnyObject, Sendable {
    func send(_ envelope: ServerEnvelope)
    func close()
}

/// One uid in one room, with its two transports and its tracks and subscriptions.
final class Participant: @unchecked Sendable {
    let uid: String
    let sid: String
    var role: ParticipantRole
    let kind: ParticipantKind
    /// Strong: a participant removed from its room (and the room dropped when that left it empty)
    /// may still be looked at later in the same loop turn (`SFU.shutdown`'s list, a callback), and
    /// an unowned room was read after it was freed there. Room → participants → room is a cycle only
    /// while the participant is listed; `RoomDirectory.remove` unlists it.
    let room: Room
    var peer: SignalingPeer?
    var grants: TokenGrants
    var tokenExpiresAt: Int64
    var tokenWarned = false
    /// The kinds of track this participant subscribes to automatically.
    var autoSubscribe: Set<TrackKind>
    /// Packets forwarded to this participant by publisher uid, from subscriptions that ended
    /// (live ones count in their `Subscription`).
    var forwardedHistory: [ForwardedStream: Int] = [:]
    var ignoreScreenShare: Bool?
    /// Users subscribed to in full, now and later, whatever auto-subscription says (`uids` pins).
    var pinned: Set<String> = []
    /// Users shown to this participant even where the screen-share filter hides them: every user
    /// it ever pinned (unpinning drops the subscriptions, not the listing).
    var revealed: Set<String> = []
    var version = 1
    /// Its display name, metadata and attributes (the token's, then the API's): in ``info``.
    var name: String?
    var metadata: String?
    var attributes: [String: String] = [:]
    /// The signaling protocol its client speaks (what it may be sent).
    var protocolVersion = ProtocolVersion.current
    /// Speaking (``SpeakerDetector``): until when (monotonic µs) it counts as a speaker, and its smoothed level.
    var speakingUntilUs: Int64 = 0
    var speakingLevel = 0.0
    var lastSeen: Int64
    /// When it joined (clock s).
    let joinedAt: Int64
    /// Set while the signaling connection is gone and the participant may still `resume`: when it
    /// went (monotonic ns, so the seat is held the whole window, not a whole-second clock's 1-2 s less).
    var disconnectedAtNs: UInt64?

    var publisher: MediaSession?
    /// Data channels: what this participant may still send (messages, bytes), and the largest
    /// message its SCTP takes (`a=max-message-size`, 0 for no limit).
    var dataMessages: TokenBucket?
    var dataBytes: TokenBucket?
    var dataMaxMessageSize = 65_536
    /// How its `_reliable` and `_lossy` channels frame messages (its join says).
    var dataFraming = DataFraming.envelope
    /// Reliable messages relayed to it that its SCTP send buffer could not take yet, in order.
    var dataBacklog: [(bytes: [UInt8], binary: Bool, stream: UInt16)] = []
    var dataBacklogBytes = 0
    var dataRetryScheduled = false
    /// Past this much waiting, a reliable message to a receiver that does not drain is dropped (counted).
    static let maxDataBacklogBytes = 8 << 20
    /// Whether its data channels take messages: its association is up and a channel of its own is
    /// open (or it opened none within ``dataReadyAfterMs`` of the association), so the relay knows
    /// its framing. Until then reliable messages for it wait in ``dataPending``.
    var dataReady = false
    /// Reliable messages relayed while its data channels were not ready, in order (``SFU/deliver``).
    var dataPending: [OutgoingData] = []
    var dataPendingBytes = 0
    /// At most this much waits for a receiver's data channels, and for at most ``dataPendingMaxAgeNs``.
    static let maxDataPendingBytes = 256 << 10
    static let dataPendingMaxAgeNs: UInt64 = 10_000_000_000
    static let dataReadyAfterMs: Int64 = 250
    /// Lives as long as its publisher transport (a WHIP session): no ping timeout; it leaves when
    /// that transport fails or is closed.
    var mediaBound = false
    /// Since when (clock s) its media transport has been down, and whether for good (failed, closed).
    var mediaDownSince: Int64?
    var mediaFailed = false

    /// A media-bound participant's media is gone: its transport (publisher, or subscriber for a
    /// viewer) failed, or has been down (or never came up after the join) for longer than `within` s.
    func mediaLost(now: Int64, within: Int64) -> Bool {
        if mediaFailed { return true }
        if let since = mediaDownSince { return now - since > within }
        return publisher == nil && subscriber == nil && now - joinedAt > within
    }

    /// A transport's state, for ``mediaLost(now:within:)``.
    func mediaTransport(_ state: MediaTransportState, now: Int64) {
        switch state {
        case .connected: mediaDownSince = nil
        case .disconnected: mediaDownSince = mediaDownSince ?? now
        case .failed, .closed: mediaFailed = true
        case .new, .connecting: break
        }
    }
    /// The publisher session's ICE credentials now, ours and the client's (an ICE restart changes both).
    var publisherICE: (local: ICECredentials, remoteUfrag: String)?
    /// The mid the publisher transport's BUNDLE group was tagged with in the last offer.
    var publisherBundleTag: String?
    /// What every packet the publisher sends goes through first: the transport-wide number's
    /// arrival (its id from the publisher's offer) and the RFC 4588 streams of its tracks.
    var inbound = InboundStreamMap()
    /// The publisher's header extension ids (from its offer) → the SFU's own numbering
    /// (``SDPCodecs/extensionIDs``), keeping only what is forwarded: packets are renumbered once on
    /// arrival, so the cache and every leg see one numbering.
    var upstreamExtensions = ExtensionIDMap.identity
    /// The publisher's ids for the mid and the RFC 8852 stream id: a track offered without SSRCs
    /// (a simulcast offer) is found by them.
    var midExtensionID: UInt8?
    var ridExtensionID: UInt8?
    /// The publisher's id for the RFC 8852 repaired stream id: a layer's repair stream is learnt from it.
    var repairedRidExtensionID: UInt8?
    /// The client speaks protocol 1.4 (layer messages: `videoLayers`, `layerChanged`).
    var speaksLayers = false
    /// Who may subscribe to its tracks (`setSubscriptionPermission`, LiveKit's `SubscriptionPermission`).
    var subscriptionPermission = SubscriptionPermission.everyone
    /// Tracks of others it would have subscribed to (automatically or asked) that their
    /// publisher's permission keeps from it; it gets them once the permission allows.
    var refusedTrackSids: Set<String> = []
    /// Packets forwarded to it by the last connection-quality tick (``SFU/reportConnectionQuality()``).
    var qualitySentMark = 0
    /// The client speaks protocol 1.8 (`subscriptionPermission`, `connectionQuality`).
    var speaksPermissionsAndQuality: Bool { protocolVersion >= .permissionsAndQuality }
    /// What this subscriber wants of layered video, per publisher uid and by default (`setVideoPreference`).
    var videoPreferences: [String: LayerSelector.Request] = [:]
    var defaultVideoPreference = LayerSelector.Request()
    /// When the leg was last probed for more capacity (simulcast up-switches), how long until the
    /// next probe, and which probe's outcome that interval was set from.
    var lastProbeUs: Int64?
    var probeIntervalUs = LayerController.probeIntervalUs
    var probeOutcomeSeen: Int64?
    /// When ``LayerController`` last logged why this leg was not probed.
    var probeHeldLoggedUs: Int64?
    var tracks: [PublishedTrack] = []
    /// Our ICE credentials on the subscriber transport (new ones when it restarts ICE).
    var subscriberCredentials = ICECredentials.random()
    /// The client's ufrag on the subscriber transport: an answer with another one restarts ICE.
    var subscriberRemoteUfrag: String?
    var subscriber: MediaSession?
    /// Transport-wide CC on the subscriber transport (the leg from us to this participant).
    var downstream = DownstreamCongestion()
    /// The SFU's extension numbering → the one this subscriber's answer kept (extensions it did not
    /// keep are left out of what it is sent).
    var downstreamExtensions = ExtensionIDMap.identity
    var subscriptions: [Subscription] = []
    /// Subscriber m-sections in offer order; removed subscriptions stay as inactive sections (JSEP).
    var subscriberSections: [MediaSectionDescription] = []
    var subscriberOfferVersion = 0
    var awaitingSubscriberAnswer = false
    var subscriberNeedsOffer = false

    init(uid: String, sid: String, role: ParticipantRole, room: Room, peer: SignalingPeer, grants: TokenGrants,
         tokenExpiresAt: Int64, autoSubscribe: Set<TrackKind>, ignoreScreenShare: Bool?, screenShare: ScreenShareUID, now: Int64) {
        self.uid = uid
        self.sid = sid
        self.role = role
        self.room = room
        self.peer = peer
        self.grants = grants
        self.tokenExpiresAt = tokenExpiresAt
        self.autoSubscribe = autoSubscribe
        self.ignoreScreenShare = ignoreScreenShare
        lastSeen = now
        joinedAt = now
        kind = Participant.kind(of: uid, screenShare: screenShare)
    }

    /// `<host><suffix>` is the screen share of `<host>` (the suffix configured on the server).
    static func kind(of uid: String, screenShare: ScreenShareUID) -> ParticipantKind {
        guard let owner = screenShare.host(of: uid) else { return .normal }
        return .screenShare(owner: owner)
    }

    /// Tells ``inbound`` the RFC 4588 streams of the tracks as they are now (after an offer, a
    /// track's first packet or its end): the first track naming a stream has it.
    func refreshRepairStreams() {
        var streams: [UInt32: InboundStreamMap.RepairStream] = [:]
        for track in tracks {
            guard let rtxPayloadType = track.rtxPayloadType, let payloadType = track.payloadType else { continue }
            for stream in track.streams {
                guard let rtxSSRC = stream.rtxSSRC, let mediaSSRC = stream.ssrc, streams[rtxSSRC] == nil else { continue }
                streams[rtxSSRC] = InboundStreamMap.RepairStream(mediaSSRC: mediaSSRC, payloadType: payloadType, rtxPayloadType: rtxPayloadType)
            }
        }
        if streams != inbound.repairStreams { inbound.replaceRepairStreams(streams) }
    }

    var info: ParticipantInfo {
        ParticipantInfo(uid: uid, sid: sid, role: role, kind: kind, tracks: tracks.map(\.info), version: version,
                        name: name, metadata: metadata, attributes: attributes.isEmpty ? nil : attributes)
    }

    /// The track and stream a packet with SSRC `ssrc` belongs to.
    func stream(ssrc: UInt32) -> (track: PublishedTrack, stream: PublishedStream)? {
        for track in tracks {
            if let stream = track.stream(ssrc: ssrc) { return (track, stream) }
        }
        return nil
    }

    /// What this subscriber wants of `uid`'s layered video.
    func videoPreference(for uid: String) -> LayerSelector.Request { videoPreferences[uid] ?? defaultVideoPreference }

    /// Whether `other` is shown to (and auto-subscribed by) this participant: screen shares are
    /// hidden from their owner by default, and from everyone who asks with `ignoreScreenShare`,
    /// unless they pinned it.
    func sees(_ other: Participant) -> Bool {
        guard other !== self else { return false }
        guard case .screenShare(let owner) = other.kind, !revealed.contains(other.uid) else { return true }
        if let ignoreScreenShare { return !ignoreScreenShare }
        return owner != uid
    }

    /// Whether a track of a user this participant sees is subscribed to without being asked for.
    func subscribesAutomatically(to track: PublishedTrack) -> Bool {
        autoSubscribe.contains(track.info.kind) || pinned.contains(track.owner.uid)
    }

    func send(_ message: ServerMessage, requestID: UInt32? = nil) {
        flushUpdates()
        peer?.send(ServerEnvelope(message, requestID: requestID))
    }

    /// Changes of others not yet sent, latest per uid, in order of their first change: a burst of
    /// joins reaches each participant as one `participantUpdate` (a delta), not one message per join.
    private var pendingUpdates: [ParticipantInfo] = []
    private var pendingIndex: [String: Int] = [:]
    var updateFlushScheduled = false

    /// Queues `other`'s state for the next ``flushUpdates()`` (the caller schedules one).
    func queueUpdate(_ other: ParticipantInfo) {
        if let index = pendingIndex[other.uid] {
            pendingUpdates[index] = other
        } else {
            pendingIndex[other.uid] = pendingUpdates.count
            pendingUpdates.append(other)
        }
    }

    /// Sends the queued changes (before any other message, so the order of events holds).
    func flushUpdates() {
        updateFlushScheduled = false
        guard !pendingUpdates.isEmpty else { return }
        let updates = pendingUpdates
        pendingUpdates = []
        pendingIndex = [:]
        peer?.send(ServerEnvelope(.participantUpdate(updates), requestID: nil))
    }
}

/// A track a participant publishes: what subscribers see of it (``info``), its formats, and the
/// RTP streams it arrives on: one, or one per simulcast layer (``PublishedStream``).
final class PublishedTrack: @unchecked Sendable {
    var info: TrackInfo
    unowned let owner: Participant
    /// The RFC 6464 levels of an audio track since the last speaker tick.
    var levels = AudioLevelWindow()
    var payloadType: UInt8?
    /// The publisher's RFC 4588 retransmission format (from its offer), video only.
    var rtxPayloadType: UInt8?
    /// The streams the track arrives on: one without simulcast, else one per layer in the offer's
    /// order (``PublishedStream/rid``). Never empty.
    private(set) var streams: [PublishedStream]
    var subscriptions: [Subscription] = []
    private let keyframeIntervalMs: Int
    /// Dynacast: the layers the publisher was last told to send (nil: never told, all of them).
    var announcedLayers: [String]?
    /// The msid track id its publish request said its offer section will carry.
    var announcedTrackID: String?
    /// When a layer nobody wants was first seen unwanted (it is paused after a grace period).
    var unwantedSinceUs: [String: Int64] = [:]

    init(info: TrackInfo, owner: Participant, keyframeIntervalMs: Int) {
        self.info = info
        self.owner = owner
        self.keyframeIntervalMs = keyframeIntervalMs
        streams = [PublishedStream(rid: nil, ssrc: info.ssrc, keyframeIntervalMs: keyframeIntervalMs)]
    }

    var clockRate: Int { info.kind == .video ? 90000 : 48000 }

    /// Whether the track arrives as simulcast layers.
    var isSimulcast: Bool { streams.count > 1 || streams[0].rid != nil }

    /// Whether a subscriber can be sent less of it than the others: simulcast layers, or temporal layers.
    var hasLayers: Bool { isSimulcast || streams[0].hasTemporalLayers }

    /// The stream with SSRC `ssrc`.
    func stream(ssrc: UInt32) -> PublishedStream? {
        for stream in streams where stream.ssrc == ssrc { return stream }
        return nil
    }

    /// The stream a repair stream's SSRC repairs.
    func stream(rtxSSRC: UInt32) -> PublishedStream? {
        for stream in streams where stream.rtxSSRC == rtxSSRC { return stream }
        return nil
    }

    /// The index of `stream` in ``streams``.
    func index(of stream: PublishedStream) -> Int? { streams.firstIndex { $0 === stream } }

    /// Takes the formats a publisher's offer gives the track's section: its payload type, its
    /// RFC 4588 stream, and its simulcast layers (a stream per layer; streams of layers the offer
    /// still sends are kept with what they learnt).
    func adoptFormats(of section: MediaSectionDescription, simulcastLayers: [String]) {
        payloadType = section.payloadType
        rtxPayloadType = section.rtxPayloadType
        if simulcastLayers.isEmpty {
            if streams.count != 1 || streams[0].rid != nil {
                streams = [PublishedStream(rid: nil, ssrc: section.ssrc, keyframeIntervalMs: keyframeIntervalMs)]
            }
            streams[0].rtxSSRC = section.rtxSSRC
            if streams[0].ssrc == nil { streams[0].ssrc = section.ssrc }
        } else if streams.map(\.rid) != simulcastLayers {
            streams = simulcastLayers.map { rid in
                streams.first { $0.rid == rid } ?? PublishedStream(rid: rid, ssrc: nil, keyframeIntervalMs: keyframeIntervalMs)
            }
            for subscription in subscriptions { subscription.layersChanged() }
        }
        info.ssrc = streams.count == 1 ? streams[0].ssrc : nil
    }
}

/// One subscriber receiving one track.
final class Subscription: @unchecked Sendable {
    let track: PublishedTrack
    unowned let subscriber: Participant
    let mid: String
    var rewriter: StreamRewriter
    /// RTP packets forwarded (the per-pair counter tests and operators read).
    var packetsForwarded = 0
    /// RTP payload bytes forwarded (the octet count of the sender reports passed on).
    var payloadBytesForwarded = 0
    /// The RFC 4588 stream repairs to this subscriber travel on (video), once its answer accepts it.
    let rtxSSRC: UInt32
    var rtxPayloadType: UInt8?
    var rtxSequence: UInt16
    /// The subscriber's answer declined the section (port 0 or inactive: a WHEP viewer with
    /// fewer transceivers than the room has tracks): nothing is sent on it, no layer is wanted for it.
    var declined = false
    /// Simulcast: the layer forwarded (an index of the track's streams; nil before the first
    /// keyframe), the layer wanted and why. Without simulcast both stay at the one stream.
    var currentLayer: Int?
    var targetLayer: Int?
    /// The layer it would get were every layer sent (dynacast keeps it wanted).
    var desiredLayer: Int?
    /// Temporal layers (a single stream): the highest temporal layer forwarded (nil: all), and
    /// whether it should be the base layer alone (applied at the next frame start).
    var maxTemporalLayer: UInt8? { temporalCap.current }
    var temporalCap = TemporalCap()
    var wantsBaseLayerOnly = false
    var layerReason: LayerReason = .request
    /// When the target layer last moved away from the current one (its keyframe is awaited).
    var targetSinceUs: Int64?
    /// The leg queues and waits for a smaller layer's keyframe: the current layer is no longer
    /// sent meanwhile (``LayerController``), so the queue drains before that keyframe comes.
    var shedsCurrentLayer = false
    /// Set from such a move down until the leg's queue has drained (``LegPacer``).
    var pacer: LegPacer?
    /// What was repaired lately, so one packet is not sent again per NACK (``RepairHistory``).
    var repairs = RepairHistory()

    init(track: PublishedTrack, subscriber: Participant, mid: String) {
        self.track = track
        self.subscriber = subscriber
        self.mid = mid
        var random = SystemRandomNumberGenerator()
        rewriter = StreamRewriter(outputSSRC: UInt32.random(in: 1...UInt32.max, using: &random))
        rtxSSRC = UInt32.random(in: 1...UInt32.max, using: &random)
        rtxSequence = UInt16.random(in: 0...UInt16.max, using: &random)
        if !track.isSimulcast {
            currentLayer = 0
            targetLayer = 0
        }
    }

    /// The track's layers changed (a new offer): start over from the next keyframe.
    func layersChanged() {
        currentLayer = track.isSimulcast ? nil : 0
        targetLayer = currentLayer
    }

    /// Tells the subscriber (protocol 1.4) which layer it now gets and why.
    /// A single stream with temporal layers is named `T0` (its base layer alone) or `T1` (all of it).
    func announceLayer() {
        guard subscriber.speaksLayers, let layer = currentLayer, layer < track.streams.count else { return }
        let stream = track.streams[layer]
        let name = stream.rid ?? (maxTemporalLayer == 0 ? "T0" : "T1")
        subscriber.send(.layerChanged(LayerChange(uid: track.owner.uid, trackSid: track.info.sid, layer: name,
                                                  width: stream.width, height: stream.height, reason: layerReason)))
    }

    /// The stream forwarded now.
    var currentStream: PublishedStream? { currentLayer.flatMap { $0 < track.streams.count ? track.streams[$0] : nil } }

    /// The subscriber transport's m-section for this subscription.
    var offeredSection: MediaSectionDescription {
        MediaSectionDescription(mid: mid, kind: track.info.kind == .video ? .video : .audio, direction: .sendonly,
                                payloadType: track.payloadType, ssrc: rewriter.outputSSRC,
                                streamID: track.owner.sid, trackID: track.info.sid,
                                rtxPayloadType: offeredRTXPayloadType, rtxSSRC: rtxSSRC)
    }

    /// The RTX format offered for this subscription: 97, or 98 when the codec itself is 97.
    var offeredRTXPayloadType: UInt8? {
        guard track.info.kind == .video else { return nil }
        return track.payloadType == SDPCodecs.rtxPayloadType ? SDPCodecs.rtxPayloadType + 1 : SDPCodecs.rtxPayloadType
    }
}

/// A publisher's media of one kind, as a key of per-subscriber forwarding counts.
public struct ForwardedStream: Sendable, Hashable, CustomStringConvertible {
    public var uid: String
    public var kind: TrackKind

    public init(uid: String, kind: TrackKind) {
        self.uid = uid
        self.kind = kind
    }

    public var description: String { "\(uid)/\(kind.rawValue)" }
}
