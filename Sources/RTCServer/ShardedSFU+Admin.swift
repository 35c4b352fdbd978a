import Foundation
import NIOConcurrencyHelpers
import NIOCore
import Signaling

/// Rooms made through the API that nobody has joined yet: listed until their empty timeout, and
/// their settings handed to the shard that makes the room on its first join.
final class CreatedRooms: Sendable {
    private let rooms = NIOLockedValueBox([String: RoomSettings]())

    func create(_ name: String, _ settings: RoomSettings) { rooms.withLockedValue { $0[name] = settings } }
    func take(_ name: String) -> RoomSettings? { rooms.withLockedValue { $0.removeValue(forKey: name) } }
    @discardableResult func remove(_ name: String) -> Bool { rooms.withLockedValue { $0.removeValue(forKey: name) != nil } }

    /// Those still waiting at `now` (seconds since 1970); the expired are forgotten.
    func waiting(now: Int64) -> [String: RoomSettings] {
        rooms.withLockedValue { rooms in
            rooms = rooms.filter { now < $0.value.waitingSince + Int64($0.value.emptyTimeout) }
            return rooms
        }
    }
}

/// The server's API over every shard: a call about a room goes to the shard it lives on.
extension ShardedSFU {
    /// Where every shard tells what happens in its rooms (webhooks); once, at start.
    public func setEventSink(_ sink: @escaping @Sendable (RoomEvent) -> Void) async throws {
        for shard in shards {
            try await shard.loop.submit { shard.context.onEvent = { sink($0) } }.get()
        }
    }

    var anyLoop: EventLoop { shards[0].loop }

    private func placedShard(_ room: String) -> SFU? { shard(of: room).map { shards[$0] } }

    /// Whether this server has `room`: placed on a shard, or made by `CreateRoom` and waiting for
    /// its first participant (its joins belong here, where its settings are).
    public func serves(_ room: String) -> Bool {
        shard(of: room) != nil || createdRooms.waiting(now: Self.now())[room] != nil
    }

    /// The rooms made by `CreateRoom` that wait for their first participant.
    public var waitingRoomNames: [String] { Array(createdRooms.waiting(now: Self.now()).keys) }

    private static func now() -> Int64 { Int64(Date().timeIntervalSince1970) }

    /// Every room, live or created and waiting, by name.
    public func listRooms(names: [String] = []) -> EventLoopFuture<[RoomView]> {
        EventLoopFuture.whenAllSucceed(shards.map { $0.roomViews() }, on: anyLoop).map { perShard in
            var rooms = Dictionary(perShard.joined().map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
            for (name, settings) in self.createdRooms.waiting(now: Self.now()) where rooms[name] == nil {
                rooms[name] = RoomView(name: name, sid: settings.sid, createdAt: settings.createdAt, metadata: settings.metadata,
                                       maxParticipants: settings.maxParticipants, emptyTimeout: settings.emptyTimeout,
                                       requireEncryption: settings.requireEncryption)
            }
            let wanted = Set(names)
            return rooms.values.filter { wanted.isEmpty || wanted.contains($0.name) }.sorted { $0.name < $1.name }
        }
    }

    /// Makes a room that waits for its first participant (or returns the one that exists).
    public func createRoom(_ name: String, metadata: String, maxParticipants: Int, emptyTimeout: Int,
                           requireEncryption: Bool = false) -> EventLoopFuture<RoomView> {
        let limits = configuration.limits
        guard !name.isEmpty, name.utf8.count <= 128 else { return anyLoop.makeFailedFuture(AdminError.invalid("a room name of 1 to 128 bytes")) }
        guard metadata.utf8.count <= limits.maxMetadataBytes else {
            return anyLoop.makeFailedFuture(AdminError.invalid("metadata of at most \(limits.maxMetadataBytes) bytes (got \(metadata.utf8.count))"))
        }
        return listRooms(names: [name]).map { existing in
            if let room = existing.first { return room }
            let settings = RoomSettings(sid: "RM_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(12), createdAt: Self.now(),
                                        metadata: metadata, maxParticipants: maxParticipants, emptyTimeout: emptyTimeout > 0 ? emptyTimeout : 300,
                                        requireEncryption: requireEncryption)
            self.createdRooms.create(name, settings)
            return RoomView(name: name, sid: settings.sid, createdAt: settings.createdAt, metadata: metadata,
                            maxParticipants: maxParticipants, emptyTimeout: settings.emptyTimeout, requireEncryption: requireEncryption)
        }
    }

    /// Ends a room: everyone in it leaves (`roomDeleted`). Fails with notFound when there is none.
    public func deleteRoom(_ name: String) -> EventLoopFuture<Void> {
        let waiting = createdRooms.remove(name)
        guard let shard = placedShard(name) else {
            return waiting ? anyLoop.makeSucceededVoidFuture() : anyLoop.makeFailedFuture(AdminError.notFound("no room \(name)"))
        }
        return shard.deleteRoom(name).flatMapThrowing { found in
            guard found || waiting else { throw AdminError.notFound("no room \(name)") }
        }
    }

    public func listParticipants(in room: String) -> EventLoopFuture<[ParticipantView]> {
        guard let shard = placedShard(room) else {
            return createdRooms.waiting(now: Self.now())[room] != nil ? anyLoop.makeSucceededFuture([])
                : anyLoop.makeFailedFuture(AdminError.notFound("no room \(room)"))
        }
        return shard.participantViews(in: room).flatMapThrowing { views in
            guard let views else { throw AdminError.notFound("no room \(room)") }
            return views
        }
    }

    private func onRoom<T>(_ room: String, _ body: (SFU) -> EventLoopFuture<T>) -> EventLoopFuture<T> {
        guard let shard = placedShard(room) else { return anyLoop.makeFailedFuture(AdminError.notFound("no room \(room)")) }
        return body(shard)
    }

    public func getParticipant(_ uid: String, in room: String) -> EventLoopFuture<ParticipantView> {
        listParticipants(in: room).flatMapThrowing { views in
            guard let view = views.first(where: { $0.info.uid == uid }) else { throw AdminError.notFound("no participant \(uid) in \(room)") }
            return view
        }
    }

    public func removeParticipant(_ uid: String, in room: String) -> EventLoopFuture<Void> {
        onRoom(room) { $0.removeParticipant(uid, in: room) }
    }

    public func muteTrack(_ trackSid: String, of uid: String, in room: String, muted: Bool) -> EventLoopFuture<TrackInfo> {
        onRoom(room) { $0.muteTrack(trackSid, of: uid, in: room, muted: muted) }
    }

    public func updateParticipant(_ uid: String, in room: String, _ change: ParticipantChange) -> EventLoopFuture<ParticipantView> {
        onRoom(room) { $0.updateParticipant(uid, in: room, change) }
    }

    public func updateSubscriptions(of uid: String, in room: String, trackSids: [String], subscribe: Bool) -> EventLoopFuture<Void> {
        onRoom(room) { $0.updateSubscriptions(of: uid, in: room, trackSids: trackSids, subscribe: subscribe) }
    }

    /// Calls participant `identity`'s RPC method in `room` (LiveKit's `PerformRpc`): the answer's
    /// payload, or ``RPCFailure``, or ``AdminError/notFound(_:)``.
    public func performRPC(room: String, identity: String, method: String, payload: String, timeoutMs: Int64) -> EventLoopFuture<String> {
        guard let shard = placedShard(room) else { return anyLoop.makeFailedFuture(AdminError.notFound("no room \(room)")) }
        return shard.performRPC(room: room, identity: identity, method: method, payload: payload, timeoutMs: timeoutMs)
    }

    public func sendData(_ payload: [UInt8], in room: String, reliable: Bool, topic: String, destinations: [String]) -> EventLoopFuture<Int> {
        onRoom(room) { $0.sendData(payload, in: room, reliable: reliable, topic: topic, destinations: destinations) }.flatMapThrowing { sent in
            guard let sent else { throw AdminError.notFound("no room \(room)") }
            return sent
        }
    }

    public func updateRoomMetadata(_ room: String, metadata: String) -> EventLoopFuture<RoomView> {
        guard placedShard(room) != nil else {
            // A created room that waits: its settings take the metadata.
            guard var settings = createdRooms.take(room) else { return anyLoop.makeFailedFuture(AdminError.notFound("no room \(room)")) }
            guard metadata.utf8.count <= configuration.limits.maxMetadataBytes else {
                createdRooms.create(room, settings)
                return anyLoop.makeFailedFuture(AdminError.invalid("metadata of at most \(configuration.limits.maxMetadataBytes) bytes"))
            }
            settings.metadata = metadata
            createdRooms.create(room, settings)
            return anyLoop.makeSucceededFuture(RoomView(name: room, sid: settings.sid, createdAt: settings.createdAt, metadata: metadata,
                                                        maxParticipants: settings.maxParticipants, emptyTimeout: settings.emptyTimeout,
                                                        requireEncryption: settings.requireEncryption))
        }
        return onRoom(room) { $0.updateRoomMetadata(room, metadata: metadata) }.flatMapThrowing { view in
            guard let view else { throw AdminError.notFound("no room \(room)") }
            return view
        }
    }
}
