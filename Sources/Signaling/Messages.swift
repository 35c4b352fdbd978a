#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Broadcasters publish and subscribe; the audience only subscribes.
public enum ParticipantRole: String, Codable, Sendable, Hashable {
    case broadcaster, audience
}

/// What a participant is: a normal user, or the screen-share auxiliary user `<owner>_sub`.
public enum ParticipantKind: Codable, Sendable, Hashable {
    case normal
    case screenShare(owner: String)
}

/// Where a track's media comes from.
public enum TrackSource: String, Codable, Sendable, Hashable {
    case camera, microphone, screen, screenAudio
}

public enum TrackKind: String, Codable, Sendable, Hashable {
    case audio, video
}

/// How a track's frames are encrypted end to end, as its publisher declared it (LiveKit's
/// `Encryption.Type`; docs/e2ee.md). The server cannot check it: it forwards what it gets.
public enum TrackEncryption: String, Codable, Sendable, Hashable, CaseIterable {
    /// In the clear (SRTP between each client and the server only).
    case none
    /// LiveKit's frame format: AES-GCM over each frame, the IV and key index in its trailer.
    case gcm
    /// Something of the publisher's own the server knows nothing about.
    case custom
}

/// A published track.
public struct TrackInfo: Codable, Sendable, Hashable {
    /// Server-assigned id.
    public var sid: String
    public var kind: TrackKind
    public var source: TrackSource
    public var muted: Bool
    /// The publisher's SSRC (a subscriber sees its own rewritten SSRC in its SDP).
    public var ssrc: UInt32?
    /// `a=mid` of the track's m-section in the publisher's offer.
    public var mid: String?
    /// The RFC 8851 stream ids of its simulcast layers (protocol 1.4); nil for a single stream.
    /// A subscriber still receives one stream: the layer the server picks for it.
    public var simulcastLayers: [String]?
    /// The size its publisher announced (protocol 1.5), when it did.
    public var width: Int?
    public var height: Int?
    /// End-to-end encryption as its publisher declared it (protocol 1.7); nil is `.none`.
    public var encryption: TrackEncryption?

    public init(sid: String, kind: TrackKind, source: TrackSource, muted: Bool = false, ssrc: UInt32? = nil, mid: String? = nil,
                simulcastLayers: [String]? = nil, width: Int? = nil, height: Int? = nil, encryption: TrackEncryption? = nil) {
        self.encryption = encryption
        self.width = width
        self.height = height
        self.sid = sid
        self.kind = kind
        self.source = source
        self.muted = muted
        self.ssrc = ssrc
        self.mid = mid
        self.simulcastLayers = simulcastLayers
    }
}

/// A participant as others see it. `version` only grows; a client keeps the newest it has seen.
public struct ParticipantInfo: Codable, Sendable, Hashable {
    public var uid: String
    public var sid: String
    public var role: ParticipantRole
    public var kind: ParticipantKind
    public var tracks: [TrackInfo]
    public var version: Int
    /// A display name, the app's metadata and attributes (protocol 1.6): set by the token or by
    /// the server's API (docs/server-api.md), seen by everyone in the room.
    public var name: String?
    public var metadata: String?
    public var attributes: [String: String]?

    public init(uid: String, sid: String, role: ParticipantRole, kind: ParticipantKind, tracks: [TrackInfo] = [], version: Int = 0,
                name: String? = nil, metadata: String? = nil, attributes: [String: String]? = nil) {
        self.uid = uid
        self.sid = sid
        self.role = role
        self.kind = kind
        self.tracks = tracks
        self.version = version
        self.name = name
        self.metadata = metadata
        self.attributes = attributes
    }
}

/// Why a participant left, or was made to leave.
public enum LeaveReason: String, Codable, Sendable, Hashable {
    case clientRequest, ownerLeft, serverShutdown, duplicateIdentity, tokenExpired, timeout, kicked
    /// The room was deleted through the server's API (protocol 1.6; older clients are told `kicked`).
    case roomDeleted
}

/// Who speaks now (protocol 1.6): the server reads the RFC 6464 audio level of every published
/// audio track and sends the participants speaking, loudest first, whenever that set changes.
public struct ActiveSpeakers: Codable, Sendable, Hashable {
    public struct Speaker: Codable, Sendable, Hashable {
        public var uid: String
        public var sid: String
        /// Linear, 0 (silence) to 1 (full scale), over the last 100 ms.
        public var level: Double

        public init(uid: String, sid: String, level: Double) {
            self.uid = uid
            self.sid = sid
            self.level = level
        }
    }

    public var speakers: [Speaker]

    public init(speakers: [Speaker]) { self.speakers = speakers }
}

/// A participant's own name, metadata or attributes (protocol 1.6), when its token allows
/// (`updateMetadata`); nil fields stay as they are, an empty attribute value removes the key.
public struct MetadataUpdate: Codable, Sendable, Hashable {
    public var name: String?
    public var metadata: String?
    public var attributes: [String: String]?

    public init(name: String? = nil, metadata: String? = nil, attributes: [String: String]? = nil) {
        self.name = name
        self.metadata = metadata
        self.attributes = attributes
    }
}

/// Who may subscribe to a publisher's tracks (protocol 1.8; LiveKit's `SubscriptionPermission`):
/// everyone (`allowAll`, the default), or the uids `allowed` lists, each to all its tracks or to
/// the sids it names. The server enforces it: an excluded subscriber is unsubscribed and told.
public struct SubscriptionPermission: Codable, Sendable, Hashable {
    public struct Grant: Codable, Sendable, Hashable {
        public var uid: String
        /// The tracks it may have; nil: all of them.
        public var trackSids: [String]?

        public init(uid: String, trackSids: [String]? = nil) {
            self.uid = uid
            self.trackSids = trackSids
        }
    }

    public var allowAll: Bool
    public var allowed: [Grant]

    public init(allowAll: Bool = true, allowed: [Grant] = []) {
        self.allowAll = allowAll
        self.allowed = allowed
    }

    public static let everyone = SubscriptionPermission()

    /// Whether `uid` may have track `trackSid` under this permission.
    public func permits(uid: String, trackSid: String) -> Bool {
        allowAll || allowed.contains { $0.uid == uid && ($0.trackSids?.contains(trackSid) ?? true) }
    }
}

/// Told to a subscriber when a publisher's permission gives it a track, or takes it away (protocol 1.8).
public struct SubscriptionPermissionUpdate: Codable, Sendable, Hashable {
    /// The publisher.
    public var uid: String
    public var trackSid: String
    public var allowed: Bool

    public init(uid: String, trackSid: String, allowed: Bool) {
        self.uid = uid
        self.trackSid = trackSid
        self.allowed = allowed
    }
}

/// How well participants' connections carry media now, as the server measures them (protocol
/// 1.8), in Agora's six levels: 1 excellent … 6 down; 0 unknown. `up` is the path from the
/// participant to the server (what it publishes), `down` the path to it (what it receives).
public struct ConnectionQuality: Codable, Sendable, Hashable {
    public struct Entry: Codable, Sendable, Hashable {
        public var uid: String
        public var up: Int
        public var down: Int

        public init(uid: String, up: Int, down: Int) {
            self.uid = uid
            self.up = up
            self.down = down
        }
    }

    public var participants: [Entry]

    public init(participants: [Entry]) { self.participants = participants }
}

/// The room's metadata changed (protocol 1.6).
public struct RoomUpdate: Codable, Sendable, Hashable {
    public var metadata: String

    public init(metadata: String) { self.metadata = metadata }
}

/// The client's description of itself at join.
public struct SDKInfo: Codable, Sendable, Hashable {
    public var name: String
    public var version: String
    /// The signaling protocol it speaks.
    public var protocolVersion: ProtocolVersion

    public init(name: String = "swift-rtc", version: String = "0.1", protocolVersion: ProtocolVersion = .current) {
        self.name = name
        self.version = version
        self.protocolVersion = protocolVersion
    }
}

/// The framing of messages on the `_reliable` and `_lossy` data channels: our envelope
/// (`DataEnvelope`, docs/data.md) or LiveKit's `DataPacket` protobuf.
public enum DataFraming: String, Codable, Sendable, Hashable {
    case envelope, liveKit
}

public struct JoinRequest: Codable, Sendable, Hashable {
    public var token: String
    public var channel: String
    public var uid: String
    public var role: ParticipantRole
    /// Subscribe to every published track automatically.
    public var autoSubscribe: Bool
    /// Per-kind overrides of `autoSubscribe` (protocol 1.1; absent means `autoSubscribe`).
    public var autoSubscribeAudio: Bool?
    public var autoSubscribeVideo: Bool?
    /// Leave `*_sub` users out of auto-subscription and of the participant list (on by default for
    /// a screen share's owner; optional for everyone).
    public var ignoreScreenShare: Bool?
    /// Users to show and subscribe to in full whatever the filter and auto-subscription say, for
    /// example a screen share its owner wants to watch (protocol 1.2; see `SubscriptionUpdate.uids`).
    public var pinnedUIDs: [String]?
    public var sdk: SDKInfo
    /// How the client frames messages on its `_reliable` and `_lossy` data channels (protocol
    /// 1.5; absent: our envelope).
    public var dataFraming: DataFraming?
    /// The participant lives as long as its media, not its signaling (protocol 1.5): no pings are
    /// expected, and it leaves when its publisher transport is lost. WHIP sessions join so.
    public var mediaBound: Bool?

    public init(token: String, channel: String, uid: String, role: ParticipantRole = .broadcaster, autoSubscribe: Bool = true,
                autoSubscribeAudio: Bool? = nil, autoSubscribeVideo: Bool? = nil,
                ignoreScreenShare: Bool? = nil, pinnedUIDs: [String]? = nil, sdk: SDKInfo = SDKInfo(), dataFraming: DataFraming? = nil,
                mediaBound: Bool? = nil) {
        self.dataFraming = dataFraming
        self.mediaBound = mediaBound
        self.token = token
        self.channel = channel
        self.uid = uid
        self.role = role
        self.autoSubscribe = autoSubscribe
        self.autoSubscribeAudio = autoSubscribeAudio
        self.autoSubscribeVideo = autoSubscribeVideo
        self.ignoreScreenShare = ignoreScreenShare
        self.pinnedUIDs = pinnedUIDs
        self.sdk = sdk
    }
}

public struct ICEServer: Codable, Sendable, Hashable {
    public var urls: [String]
    public var username: String?
    public var credential: String?

    public init(urls: [String], username: String? = nil, credential: String? = nil) {
        self.urls = urls
        self.username = username
        self.credential = credential
    }
}

public struct JoinResponse: Codable, Sendable, Hashable {
    public var participant: ParticipantInfo
    public var others: [ParticipantInfo]
    public var iceServers: [ICEServer]
    /// Seconds between pings the client sends, and after which silence ends the session.
    public var pingInterval: Int
    public var pingTimeout: Int
    /// Seconds a dropped client may `resume` within.
    public var resumeWindow: Int
    public var serverVersion: ProtocolVersion
    /// The uid suffix that marks a screen-share participant on this server (`<host><suffix>`);
    /// nil from servers that predate it, which use `_sub`.
    public var screenShareSuffix: String?
    /// The room's metadata (protocol 1.6), when it has any.
    public var roomMetadata: String?

    public init(participant: ParticipantInfo, others: [ParticipantInfo], iceServers: [ICEServer] = [], pingInterval: Int = 5,
                pingTimeout: Int = 15, resumeWindow: Int = 20, serverVersion: ProtocolVersion = .current,
                screenShareSuffix: String? = nil, roomMetadata: String? = nil) {
        self.screenShareSuffix = screenShareSuffix
        self.roomMetadata = roomMetadata
        self.participant = participant
        self.others = others
        self.iceServers = iceServers
        self.pingInterval = pingInterval
        self.pingTimeout = pingTimeout
        self.resumeWindow = resumeWindow
        self.serverVersion = serverVersion
    }
}

/// SDP for one of the two transports: the publisher (client offers) or the subscriber (server offers).
public struct SessionDescriptionMessage: Codable, Sendable, Hashable {
    public enum Transport: String, Codable, Sendable, Hashable { case publisher, subscriber }
    public var transport: Transport
    public var sdp: String

    public init(transport: Transport, sdp: String) {
        self.transport = transport
        self.sdp = sdp
    }
}

public struct PublishTrackRequest: Codable, Sendable, Hashable {
    public var kind: TrackKind
    public var source: TrackSource
    public var mid: String?
    public var ssrc: UInt32?
    /// The track id its section of a coming offer carries (`a=msid:<stream> <track id>`), which
    /// binds the two when the request comes first (LiveKit's clients send their `cid`).
    public var trackID: String?
    /// The stream ids of the simulcast layers its offer will send, and the size of the largest,
    /// when the request comes before the offer (protocol 1.5).
    public var simulcastLayers: [String]?
    public var width: Int?
    public var height: Int?
    /// How the publisher encrypts the track's frames end to end (protocol 1.7); nil is `.none`. A
    /// room that requires encryption refuses a track without it.
    public var encryption: TrackEncryption?
    /// The most the publisher sends of it (bit/s), when it says (LiveKit's layers carry it).
    public var bitrateBps: Int?

    public init(kind: TrackKind, source: TrackSource, mid: String? = nil, ssrc: UInt32? = nil, trackID: String? = nil,
                simulcastLayers: [String]? = nil, width: Int? = nil, height: Int? = nil, encryption: TrackEncryption? = nil,
                bitrateBps: Int? = nil) {
        self.bitrateBps = bitrateBps
        self.encryption = encryption
        self.simulcastLayers = simulcastLayers
        self.width = width
        self.height = height
        self.kind = kind
        self.source = source
        self.mid = mid
        self.ssrc = ssrc
        self.trackID = trackID
    }
}

public struct MuteRequest: Codable, Sendable, Hashable {
    public var trackSid: String
    public var muted: Bool

    public init(trackSid: String, muted: Bool) {
        self.trackSid = trackSid
        self.muted = muted
    }
}

/// Subscribes to or unsubscribes from tracks. With `kind`, it applies to every track of that kind
/// the participant sees, now and later: auto-subscription of the kind is switched with it
/// (`muteAllRemoteVideoStreams` and friends; protocol 1.1).
///
/// With `uids` (protocol 1.2), it pins (or unpins) whole users: every track they publish, now and
/// later, and the users themselves become visible even when the screen-share filter hides them.
/// This is how a filtered client still watches a screen share on purpose.
public struct SubscriptionUpdate: Codable, Sendable, Hashable {
    public var trackSids: [String]
    public var subscribe: Bool
    public var kind: TrackKind?
    public var uids: [String]?

    public init(trackSids: [String], subscribe: Bool, kind: TrackKind? = nil, uids: [String]? = nil) {
        self.trackSids = trackSids
        self.subscribe = subscribe
        self.kind = kind
        self.uids = uids
    }
}

/// Which of a publisher's video streams a subscriber wants (Agora's `setRemoteVideoStreamType`):
/// the full one or the small one.
public enum VideoStreamType: String, Codable, Sendable, Hashable {
    case high, low
    /// The middle layer of three (the full one of two): LiveKit's MEDIUM quality.
    case medium
}

/// What a subscriber wants of a publisher's layered video (protocol 1.4): a stream type, or the
/// size it renders at (the smallest layer covering it is sent), for one user (`uid`) or, with no
/// uid, for every user without a preference of its own. Clearing both fields returns to the
/// default (the full layer, as far as the path carries it).
public struct VideoPreference: Codable, Sendable, Hashable {
    public var uid: String?
    public var streamType: VideoStreamType?
    public var renderWidth: Int?
    public var renderHeight: Int?

    public init(uid: String? = nil, streamType: VideoStreamType? = nil, renderWidth: Int? = nil, renderHeight: Int? = nil) {
        self.uid = uid
        self.streamType = streamType
        self.renderWidth = renderWidth
        self.renderHeight = renderHeight
    }
}

/// Dynacast (protocol 1.4): the simulcast layers of a published track that some subscriber wants;
/// the publisher pauses the others' encoders until they are wanted again.
public struct VideoLayersRequest: Codable, Sendable, Hashable {
    public var trackSid: String
    public var activeLayers: [String]

    public init(trackSid: String, activeLayers: [String]) {
        self.trackSid = trackSid
        self.activeLayers = activeLayers
    }
}

/// Why the server forwards a subscriber the layer it does.
public enum LayerReason: String, Codable, Sendable, Hashable {
    /// What the subscriber asked for (stream type, render size or the default).
    case request
    /// The subscriber's path estimate holds it below what it asked for.
    case estimate
    /// The layer asked for is not being sent; the nearest one is.
    case unavailable
}

/// The layer a subscriber now receives of a publisher's layered track (protocol 1.4), sent when it changes.
public struct LayerChange: Codable, Sendable, Hashable {
    public var uid: String
    public var trackSid: String
    public var layer: String
    public var width: Int?
    public var height: Int?
    public var reason: LayerReason

    public init(uid: String, trackSid: String, layer: String, width: Int?, height: Int?, reason: LayerReason) {
        self.uid = uid
        self.trackSid = trackSid
        self.layer = layer
        self.width = width
        self.height = height
        self.reason = reason
    }
}

public struct ResumeRequest: Codable, Sendable, Hashable {
    public var token: String
    public var participantSid: String

    public init(token: String, participantSid: String) {
        self.token = token
        self.participantSid = participantSid
    }
}

/// Everything a client sends, one case per message type.
public enum ClientMessage: Sendable, Hashable {
    case join(JoinRequest)
    case offer(SessionDescriptionMessage)
    case answer(SessionDescriptionMessage)
    case publishTrack(PublishTrackRequest)
    case unpublishTrack(trackSid: String)
    case mute(MuteRequest)
    case updateSubscription(SubscriptionUpdate)
    /// Switches between broadcaster and audience (protocol 1.1); an audience member's tracks are unpublished.
    case setRole(ParticipantRole)
    case leave(reason: LeaveReason)
    case ping(timestamp: Int64)
    case refreshToken(token: String)
    case resume(ResumeRequest)
    /// Asks the server to restart ICE on a transport it offers (the subscriber transport): it
    /// answers with a new `offer` carrying new credentials (protocol 1.3). The publisher transport
    /// restarts with a client `offer` instead.
    case restartICE(transport: SessionDescriptionMessage.Transport)
    /// Which layer of layered video this client wants (protocol 1.4).
    case setVideoPreference(VideoPreference)
    /// Its own name, metadata or attributes (protocol 1.6): answered with its `participantUpdate`.
    case updateMetadata(MetadataUpdate)
    /// Who may subscribe to its tracks (protocol 1.8).
    case setSubscriptionPermission(SubscriptionPermission)
}

/// Everything the server sends.
public enum ServerMessage: Sendable, Hashable {
    case joined(JoinResponse)
    case error(SignalingError)
    case offer(SessionDescriptionMessage)
    case answer(SessionDescriptionMessage)
    case trackPublished(TrackInfo)
    case participantUpdate([ParticipantInfo])
    case participantLeft(uid: String, reason: LeaveReason)
    case pong(timestamp: Int64)
    case tokenWillExpire(expiresAt: Int64)
    case tokenRefreshed(expiresAt: Int64)
    case leave(reason: LeaveReason)
    case resumed(JoinResponse)
    /// Dynacast: the layers of a track this publisher should encode (protocol 1.4).
    case videoLayers(VideoLayersRequest)
    /// The layer this subscriber now receives of a layered track (protocol 1.4).
    case layerChanged(LayerChange)
    /// The room's metadata changed (protocol 1.6).
    case roomUpdate(RoomUpdate)
    /// Who speaks now, loudest first (protocol 1.6; older clients report it as an unknown type).
    case activeSpeakers(ActiveSpeakers)
    /// The server muted (or unmuted) one of this publisher's tracks: its subscribers get nothing of
    /// it until it is unmuted (protocol 1.6).
    case trackMuted(MuteRequest)
    /// A publisher's permission gave this subscriber a track or took it away (protocol 1.8).
    case subscriptionPermission(SubscriptionPermissionUpdate)
    /// The connection quality of the participants this one sees, and its own (protocol 1.8).
    case connectionQuality(ConnectionQuality)
}
