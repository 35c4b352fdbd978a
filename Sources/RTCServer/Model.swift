import NIOCore
import RTCConventions
import RTCTransport
import Signaling

/// The connection a participant's signaling arrives on. The SFU calls it on its event loop;
/// implementations hop to their own.
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
    var lastSeen: Int64
    /// Set while the signaling connection is gone and the participant may still `resume`.
    var disconnectedAt: Int64?

    var publisher: MediaSession?
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
            guard let rtxSSRC = track.rtxSSRC, let rtxPayloadType = track.rtxPayloadType, let mediaSSRC = track.info.ssrc,
                  let payloadType = track.payloadType, streams[rtxSSRC] == nil
            else { continue }
            streams[rtxSSRC] = InboundStreamMap.RepairStream(mediaSSRC: mediaSSRC, payloadType: payloadType, rtxPayloadType: rtxPayloadType)
        }
        if streams != inbound.repairStreams { inbound.replaceRepairStreams(streams) }
    }

    var info: ParticipantInfo {
        ParticipantInfo(uid: uid, sid: sid, role: role, kind: kind, tracks: tracks.map(\.info), version: version)
    }

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

/// A track a participant publishes, with what forwarding needs: its SSRC, a packet cache for
/// NACKs, reception statistics for receiver reports and a keyframe-request throttle.
final class PublishedTrack: @unchecked Sendable {
    var info: TrackInfo
    unowned let owner: Participant
    var payloadType: UInt8?
    /// The publisher's RFC 4588 retransmission stream (from its offer), video only.
    var rtxPayloadType: UInt8?
    var rtxSSRC: UInt32?
    /// The RFC 8851 stream id of the one simulcast layer forwarded, when the offer sends several.
    var simulcastLayer: String?
    /// The last 512 packets, to answer subscribers' NACKs without asking the publisher.
    var cache = PacketHistory<RTPPacket>(capacity: 512)
    var keyframeThrottle: Throttle
    /// A throttled keyframe request is waiting for the throttle window to end.
    var keyframeRequestDeferred = false
    var statistics: ReceptionStatistics?
    /// Gaps in what the publisher sends, asked for upstream (video).
    /// Retries every 60 ms: the SFU does not measure its round trip to the publisher (it only receives).
    var nack = NackGenerator(roundTrip: 40_000)
    var subscriptions: [Subscription] = []

    init(info: TrackInfo, owner: Participant, keyframeIntervalMs: Int) {
        self.info = info
        self.owner = owner
        keyframeThrottle = Throttle(intervalMs: keyframeIntervalMs)
    }

    var clockRate: Int { info.kind == .video ? 90000 : 48000 }

    /// Takes the formats a publisher's offer gives the track's section: its payload type and its
    /// RFC 4588 stream.
    func adoptFormats(of section: MediaSectionDescription, simulcastLayer: String?) {
        payloadType = section.payloadType
        rtxPayloadType = section.rtxPayloadType
        rtxSSRC = section.rtxSSRC
        self.simulcastLayer = simulcastLayer
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

    init(track: PublishedTrack, subscriber: Participant, mid: String) {
        self.track = track
        self.subscriber = subscriber
        self.mid = mid
        var random = SystemRandomNumberGenerator()
        rewriter = StreamRewriter(outputSSRC: UInt32.random(in: 1...UInt32.max, using: &random))
        rtxSSRC = UInt32.random(in: 1...UInt32.max, using: &random)
        rtxSequence = UInt16.random(in: 0...UInt16.max, using: &random)
    }

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
