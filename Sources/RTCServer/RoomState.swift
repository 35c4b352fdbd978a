import Foundation
import NIOCore

/// A participant's own state that a drain carries to the next server: its name, metadata and
/// attributes as they are at the drain (its token's, then what the API or the participant set).
public struct SavedParticipant: Sendable, Hashable, Codable {
    public var name: String?
    public var metadata: String?
    public var attributes: [String: String]

    public init(name: String? = nil, metadata: String? = nil, attributes: [String: String] = [:]) {
        self.name = name
        self.metadata = metadata
        self.attributes = attributes
    }

    /// Sets them on a participant that joins again, within this server's limits (a state file is
    /// input like any other: what does not fit is left out).
    func apply(to participant: Participant, limits: ServerLimits) {
        if let name, name.utf8.count <= limits.maxNameBytes { participant.name = name }
        if let metadata, metadata.utf8.count <= limits.maxMetadataBytes { participant.metadata = metadata }
        if !attributes.isEmpty, ParticipantAttributes.fit(attributes, limits: limits) { participant.attributes = attributes }
    }
}

/// What a drain hands to the server that takes its rooms (docs/server.md, "Drain and restart"):
/// each room's settings (sid, metadata, the `CreateRoom` cap, empty timeout, required encryption)
/// and its participants' saved state. A restarted server reads it from `--state-file`; a cluster
/// node finds it in Redis (``ClusterNode``) when it takes the room. The rooms wait there as a
/// `CreateRoom` room does, for their empty timeout.
public struct RoomState: Sendable, Hashable, Codable {
    public static let version = 1
    public var version: Int
    /// When it was saved (clock s).
    public var savedAt: Int64
    public var rooms: [String: RoomSettings]

    public init(savedAt: Int64, rooms: [String: RoomSettings]) {
        self.version = Self.version
        self.savedAt = savedAt
        self.rooms = rooms
    }

    public func encoded() -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return (try? encoder.encode(self)) ?? Data("{}".utf8)
    }

    public static func decode(_ data: Data) throws(RoomStateError) -> RoomState {
        let state: RoomState
        do { state = try JSONDecoder().decode(RoomState.self, from: data) } catch {
            throw .unreadable("not a room state (\(error))")
        }
        guard state.version == Self.version else { throw .unreadable("room state version \(state.version); this server reads \(Self.version)") }
        for (name, room) in state.rooms where name.isEmpty || name.utf8.count > 128 || room.emptyTimeout < 0 {
            throw .unreadable("a room named \(name.prefix(40).debugDescription) with empty timeout \(room.emptyTimeout)")
        }
        return state
    }

    /// The rooms as they wait on the next server, from `now` (clock s) on.
    func waiting(from now: Int64) -> [String: RoomSettings] {
        rooms.mapValues { room in
            var room = room
            room.waitingSince = now
            return room
        }
    }
}

public enum RoomStateError: Error, Equatable, CustomStringConvertible {
    case unreadable(String)
    case io(String)

    public var description: String {
        switch self {
        case .unreadable(let why): "unreadable room state: \(why)"
        case .io(let why): "room state file: \(why)"
        }
    }
}

/// `--state-file`: where a drained server leaves its rooms' state and the next one picks it up.
public struct RoomStateFile: Sendable {
    public let path: String

    public init(path: String) { self.path = path }

    /// Writes the state (to a temporary file renamed over the path, so a reader never sees half).
    public func save(_ state: RoomState) throws(RoomStateError) {
        let temporary = path + ".tmp"
        do {
            try state.encoded().write(to: URL(fileURLWithPath: temporary))
            if FileManager.default.fileExists(atPath: path) { try FileManager.default.removeItem(atPath: path) }
            try FileManager.default.moveItem(atPath: temporary, toPath: path)
        } catch {
            throw .io("cannot write \(path): \(error.localizedDescription)")
        }
    }

    /// Reads and removes the state, nil when there is none. One that cannot be read is moved
    /// aside to `<path>.unreadable` (kept for the operator, never read again) and reported.
    public func take() throws(RoomStateError) -> RoomState? {
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        let data: Data
        do { data = try Data(contentsOf: URL(fileURLWithPath: path)) } catch {
            throw .io("cannot read \(path): \(error.localizedDescription)")
        }
        do {
            let state = try RoomState.decode(data)
            try? FileManager.default.removeItem(atPath: path)
            return state
        } catch {
            let aside = path + ".unreadable"
            try? FileManager.default.removeItem(atPath: aside)
            try? FileManager.default.moveItem(atPath: path, toPath: aside)
            throw error
        }
    }
}

extension SFU {
    /// This shard's rooms as a drain hands them over: settings and each participant's state.
    func roomStates() -> EventLoopFuture<[String: RoomSettings]> {
        loop.submit {
            var rooms: [String: RoomSettings] = [:]
            for room in self.directory.allRooms {
                var participants = room.restored  // not back yet: still theirs
                for participant in room.participants.values {
                    participants[participant.uid] = SavedParticipant(name: participant.name, metadata: participant.metadata,
                                                                     attributes: participant.attributes)
                }
                rooms[room.name] = RoomSettings(sid: room.sid, createdAt: room.createdAt, metadata: room.metadata,
                                                maxParticipants: room.maxParticipants, emptyTimeout: room.emptyTimeout,
                                                requireEncryption: room.requireEncryption, participants: participants)
            }
            return rooms
        }
    }
}

extension ShardedSFU {
    /// Every room this server has, live or waiting, as a drain hands them over.
    public func roomState(now: Int64 = Int64(Date().timeIntervalSince1970)) async -> RoomState {
        var rooms = createdRooms.waiting(now: now)
        for shard in shards {
            guard let states = try? await shard.roomStates().get() else { continue }
            rooms.merge(states) { _, live in live }
        }
        return RoomState(savedAt: now, rooms: rooms)
    }

    /// Takes over rooms a drain handed over: each waits here, as a `CreateRoom` room, for its
    /// participants (a room already here keeps its own settings).
    public func restore(_ state: RoomState, now: Int64 = Int64(Date().timeIntervalSince1970)) {
        for (name, settings) in state.waiting(from: now) where !serves(name) {
            createdRooms.create(name, settings)
        }
    }
}
