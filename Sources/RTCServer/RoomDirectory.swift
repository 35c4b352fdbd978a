/// A channel and the participants in it (by uid). Made and changed only by a ``RoomDirectory``;
/// everyone else reads it.
final class Room: @unchecked Sendable {  // confined to the SFU event loop, as are the model classes
    let name: String
    fileprivate(set) var participants: [String: Participant] = [:]
    /// What the server's API shows of it (docs/server-api.md): an id, when it started (clock s),
    /// the app's metadata, and a cap on participants set by `CreateRoom` (0: the server's).
    let sid: String
    let createdAt: Int64
    var metadata: String
    var maxParticipants: Int
    /// Whether every track published here must be encrypted end to end (docs/e2ee.md).
    var requireEncryption: Bool
    /// Seconds the room is kept after its last participant (as `CreateRoom` set it).
    var emptyTimeout: Int
    /// What participants had before a drain moved the room here (RoomState): applied to each
    /// identity when it joins again, then forgotten.
    var restored: [String: SavedParticipant]
    /// The speakers last told to the room (uids, loudest first), and when (monotonic µs).
    var announcedSpeakers: [String] = []
    var speakersAnnouncedUs: Int64 = 0

    init(name: String, sid: String = "", createdAt: Int64 = 0, settings: RoomSettings? = nil) {
        self.name = name
        self.sid = settings?.sid ?? sid
        self.createdAt = settings?.createdAt ?? createdAt
        metadata = settings?.metadata ?? ""
        maxParticipants = settings?.maxParticipants ?? 0
        requireEncryption = settings?.requireEncryption ?? false
        emptyTimeout = settings?.emptyTimeout ?? 300
        restored = settings?.participants ?? [:]
    }
}

/// A room made through the server's API before anyone joined it: its settings wait for the first
/// join (``ShardedSFU``'s table), and it is listed until then, or until its empty timeout.
public struct RoomSettings: Sendable, Hashable, Codable {
    public var sid: String
    public var createdAt: Int64
    public var metadata: String
    public var maxParticipants: Int
    public var emptyTimeout: Int
    /// Publishers must encrypt every track end to end (docs/e2ee.md).
    public var requireEncryption: Bool
    /// When (clock s) it began to wait for a first join: it is listed until `emptyTimeout` after.
    /// `createdAt` for a new room; the restart's time for one a drain handed over (RoomState).
    public var waitingSince: Int64
    /// The participants a drain saw in it, by identity: their name, metadata and attributes come
    /// back when they join again.
    public var participants: [String: SavedParticipant]

    public init(sid: String, createdAt: Int64, metadata: String = "", maxParticipants: Int = 0, emptyTimeout: Int = 300,
                requireEncryption: Bool = false, waitingSince: Int64? = nil, participants: [String: SavedParticipant] = [:]) {
        self.requireEncryption = requireEncryption
        self.waitingSince = waitingSince ?? createdAt
        self.participants = participants
        self.sid = sid
        self.createdAt = createdAt
        self.metadata = metadata
        self.maxParticipants = maxParticipants
        self.emptyTimeout = emptyTimeout
    }
}

/// Where the SFU finds rooms and participants: by room name, by uid within a room, by session id
/// (`resume`) and by signaling connection. All room membership goes through it, so a directory
/// shared between nodes (a Redis-backed one, say) can later stand in for this process's own
/// (``LocalRoomDirectory``). Called on the SFU's event loop only.
protocol RoomDirectory: AnyObject {
    /// How many rooms and participants there are.
    var roomCount: Int { get }
    var participantCount: Int { get }
    /// Every participant of every room, as a copy: callers may remove participants while going through it.
    var allParticipants: [Participant] { get }
    /// Calls `body` with every participant of every room, without a copy (the media timers, many
    /// times a second): `body` must not add or remove participants.
    func forEachParticipant(_ body: (Participant) -> Void)
    /// Every room, as a copy.
    var allRooms: [Room] { get }

    func room(named name: String) -> Room?
    func participant(uid: String, in room: String) -> Participant?
    /// The participant with session id `sid`, in whichever room.
    func participant(sid: String) -> Participant?
    /// The participant whose signaling arrives on `peer`.
    func participant(peer: SignalingPeer) -> Participant?
    /// Whether `participant` (this very object) is listed in its room.
    func contains(_ participant: Participant) -> Bool

    /// Lists `participant` in its room (``Participant/room``), listing the room when it is new.
    func insert(_ participant: Participant)
    /// Unlists `participant` and the connection bound to it; a room left empty is dropped.
    func remove(_ participant: Participant)
    /// Binds a signaling connection to a participant (on join and resume).
    func bind(_ peer: SignalingPeer, to participant: Participant)
    /// Unbinds a connection; returns the participant it was bound to.
    @discardableResult func unbind(_ peer: SignalingPeer) -> Participant?
}

/// The in-process ``RoomDirectory``: dictionaries on the SFU's event loop.
final class LocalRoomDirectory: RoomDirectory, @unchecked Sendable {
    private var rooms: [String: Room] = [:]
    private var byPeer: [ObjectIdentifier: Participant] = [:]

    var roomCount: Int { rooms.count }
    var participantCount: Int { rooms.values.reduce(0) { $0 + $1.participants.count } }
    /// A loop, not a key path's flatMap: the 20 ms NACK timer reads this (a key path projected
    /// per room cost as much as the NACKs' work).
    var allParticipants: [Participant] {
        var all: [Participant] = []
        all.reserveCapacity(participantCount)
        for room in rooms.values { all.append(contentsOf: room.participants.values) }
        return all
    }
    var allRooms: [Room] { Array(rooms.values) }

    func forEachParticipant(_ body: (Participant) -> Void) {
        for room in rooms.values {
            for participant in room.participants.values { body(participant) }
        }
    }

    func room(named name: String) -> Room? { rooms[name] }

    func participant(uid: String, in room: String) -> Participant? { rooms[room]?.participants[uid] }

    func participant(sid: String) -> Participant? {
        rooms.values.lazy.compactMap { $0.participants.values.first { $0.sid == sid } }.first
    }

    func participant(peer: SignalingPeer) -> Participant? { byPeer[ObjectIdentifier(peer)] }

    func contains(_ participant: Participant) -> Bool { participant.room.participants[participant.uid] === participant }

    func insert(_ participant: Participant) {
        let room = participant.room
        rooms[room.name] = room
        room.participants[participant.uid] = participant
    }

    func remove(_ participant: Participant) {
        let room = participant.room
        guard contains(participant) else { return }
        room.participants[participant.uid] = nil
        if let peer = participant.peer { byPeer[ObjectIdentifier(peer)] = nil }
        if room.participants.isEmpty, rooms[room.name] === room { rooms[room.name] = nil }
    }

    func bind(_ peer: SignalingPeer, to participant: Participant) { byPeer[ObjectIdentifier(peer)] = participant }

    @discardableResult
    func unbind(_ peer: SignalingPeer) -> Participant? { byPeer.removeValue(forKey: ObjectIdentifier(peer)) }
}
