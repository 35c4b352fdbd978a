import NIOCore
import RTCTransport
import Signaling

/// The connection a participant's signaling arrives on. The SFU calls it on its event loop;
/// implementations hop to their own.
public protocol SignalingPeer: AnyObject, Sendable {
    func send(_ envelope: ServerEnvelope)
    func close()
}

/// A channel and the participants in it (by uid).
final class Room: @unchecked Sendable {  // confined to the SFU event loop, as are the classes below
    let name: String
    var participants: [String: Participant] = [:]

    init(name: String) { self.name = name }
}

/// One uid in one room, with its two transports and its tracks and subscriptions.
final class Participant: @unchecked Sendable {
    let uid: String
    let sid: String
    var role: ParticipantRole
    let kind: ParticipantKind
    unowned let room: Room
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
    /// The header extension id of the transport-wide sequence number in the publisher's offer.
    var transportWideSequenceID: UInt8?
    /// Arrivals of the publisher's packets, for transport-wide CC feedback.
    var transportFeedback = TransportFeedbackBuilder()
    var tracks: [PublishedTrack] = []
    /// Our ICE credentials on the subscriber transport (new ones when it restarts ICE).
    var subscriberCredentials = ICECredentials.random()
    /// The client's ufrag on the subscriber transport: an answer with another one restarts ICE.
    var subscriberRemoteUfrag: String?
    var subscriber: MediaSession?
    /// Transport-wide CC on the subscriber transport (the leg from us to this participant).
    var downstream = DownstreamCongestion()
    var subscriptions: [Subscription] = []
    /// Subscriber m-sections in offer order; removed subscriptions stay as inactive sections (JSEP).
    var subscriberSections: [MediaSectionDescription] = []
    var subscriberOfferVersion = 0
    var awaitingSubscriberAnswer = false
    var subscriberNeedsOffer = false

    init(uid: String, sid: String, role: ParticipantRole, room: Room, peer: SignalingPeer, grants: TokenGrants,
         tokenExpiresAt: Int64, autoSubscribe: Set<TrackKind>, ignoreScreenShare: Bool?, now: Int64) {
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
        kind = Participant.kind(of: uid)
    }

    /// `<host>_sub` is the screen share of `<host>`.
    static func kind(of uid: String) -> ParticipantKind {
        let suffix = "_sub"
        guard uid.count > suffix.count, uid.hasSuffix(suffix) else { return .normal }
        return .screenShare(owner: String(uid.dropLast(suffix.count)))
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
        peer?.send(ServerEnvelope(message, requestID: requestID))
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
}

/// One subscriber receiving one track.
final class Subscription: @unchecked Sendable {
    let track: PublishedTrack
    unowned let subscriber: Participant
    let mid: String
    var rewriter: StreamRewriter
    /// RTP packets forwarded (the per-pair counter tests and operators read).
    var packetsForwarded = 0
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

/// Counters the server exports as Prometheus metrics.
public struct ServerCounters: Sendable, Hashable {
    public var rooms = 0
    public var participants = 0
    public var tracks = 0
    public var packetsIn = 0
    public var bytesIn = 0
    public var packetsOut = 0
    public var bytesOut = 0
    public var nacksReceived = 0
    /// NACKs the server sent upstream to publishers.
    public var nacksSent = 0
    public var retransmissions = 0
    /// Repairs not sent because the subscriber's leg had spent its retransmission budget.
    public var retransmissionsSkipped = 0
    /// ICE restarts (RFC 8445 §9) on either transport.
    public var iceRestarts = 0
    /// Transport-wide feedback reports from subscribers, and REMB limits sent to publishers for
    /// their slowest subscriber.
    public var downstreamFeedback = 0
    public var publisherLimitsSent = 0
    /// RFC 4588 packets publishers sent: repairs forwarded, and copies of packets already here or
    /// padding (bandwidth probes) dropped after their arrival was recorded for feedback.
    public var rtxRepairs = 0
    public var rtxDropped = 0
    public var keyframeRequestsForwarded = 0
    public var keyframeRequestsThrottled = 0
    public var signalingErrors = 0
    public var packetsDropped = 0
    /// Forwarding latency histogram: counts of packets forwarded within each bound (µs), and the sum.
    public var forwardLatencyBuckets: [Int] = Array(repeating: 0, count: ServerCounters.latencyBoundsUs.count)
    public var forwardLatencySumUs: Double = 0
    public var forwardLatencyCount = 0

    public static let latencyBoundsUs: [Double] = [5, 10, 25, 50, 100, 250, 500, 1000, 5000]

    mutating func recordForward(microseconds: Double) {
        forwardLatencyCount += 1
        forwardLatencySumUs += microseconds
        for (index, bound) in Self.latencyBoundsUs.enumerated() where microseconds <= bound { forwardLatencyBuckets[index] += 1 }
    }
}
