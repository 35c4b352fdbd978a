import Signaling

/// A room as the server's API and its webhooks show it.
public struct RoomView: Sendable, Hashable {
    public var name: String
    public var sid: String
    /// Seconds since 1970.
    public var createdAt: Int64
    public var metadata: String
    public var participants: Int
    public var publishers: Int
    /// The cap `CreateRoom` set (0: the server's own).
    public var maxParticipants: Int
    public var emptyTimeout: Int
    /// Publishers must encrypt every track end to end (docs/e2ee.md).
    public var requireEncryption: Bool

    public init(name: String, sid: String, createdAt: Int64, metadata: String = "", participants: Int = 0, publishers: Int = 0,
                maxParticipants: Int = 0, emptyTimeout: Int = 0, requireEncryption: Bool = false) {
        self.requireEncryption = requireEncryption
        self.name = name
        self.sid = sid
        self.createdAt = createdAt
        self.metadata = metadata
        self.participants = participants
        self.publishers = publishers
        self.maxParticipants = maxParticipants
        self.emptyTimeout = emptyTimeout
    }
}

/// A participant as the server's API and its webhooks show it: what the room sees of it, and
/// what only the server knows (when it joined, its grants).
public struct ParticipantView: Sendable, Hashable {
    public var info: ParticipantInfo
    /// Seconds since 1970.
    public var joinedAt: Int64
    public var grants: TokenGrants
    /// Whether its connection is up (false while it may still resume).
    public var connected: Bool

    public init(info: ParticipantInfo, joinedAt: Int64, grants: TokenGrants, connected: Bool = true) {
        self.info = info
        self.joinedAt = joinedAt
        self.grants = grants
        self.connected = connected
    }
}

/// What happens in rooms, for webhooks (docs/server-api.md): told on the room's SFU loop, in the
/// order it happened there.
public enum RoomEvent: Sendable, Hashable {
    case roomStarted(RoomView)
    case roomFinished(RoomView)
    case participantJoined(RoomView, ParticipantView)
    case participantLeft(RoomView, ParticipantView, LeaveReason)
    case trackPublished(RoomView, ParticipantView, TrackInfo)
    case trackUnpublished(RoomView, ParticipantView, TrackInfo)

    /// LiveKit's name for it.
    public var name: String {
        switch self {
        case .roomStarted: "room_started"
        case .roomFinished: "room_finished"
        case .participantJoined: "participant_joined"
        case .participantLeft: "participant_left"
        case .trackPublished: "track_published"
        case .trackUnpublished: "track_unpublished"
        }
    }

    public var room: RoomView {
        switch self {
        case .roomStarted(let room), .roomFinished(let room), .participantJoined(let room, _), .participantLeft(let room, _, _),
             .trackPublished(let room, _, _), .trackUnpublished(let room, _, _): room
        }
    }
}

extension Room {
    var view: RoomView {
        RoomView(name: name, sid: sid, createdAt: createdAt, metadata: metadata, participants: participants.count,
                 publishers: participants.values.filter { !$0.tracks.isEmpty }.count, maxParticipants: maxParticipants,
                 requireEncryption: requireEncryption)
    }
}

extension Participant {
    var view: ParticipantView {
        ParticipantView(info: info, joinedAt: joinedAt, grants: grants, connected: peer != nil || mediaBound)
    }
}

/// The bounds on a participant's attributes (``ServerLimits``).
enum ParticipantAttributes {
    static func fit(_ attributes: [String: String], limits: ServerLimits) -> Bool {
        attributes.count <= limits.maxAttributes
            && attributes.allSatisfy { $0.key.utf8.count + $0.value.utf8.count <= limits.maxAttributeBytes && !$0.key.isEmpty }
    }
}
