import NIOCore
import RTCTransport
import Signaling

/// Why a server API call on a room could not be done (docs/server-api.md).
public enum AdminError: Error, Equatable, Sendable {
    case notFound(String)
    case invalid(String)
}

/// A change to a participant through the server's API; nil fields stay as they are.
public struct ParticipantChange: Sendable, Hashable {
    public var name: String?
    public var metadata: String?
    /// Merged into its attributes; an empty value removes that key.
    public var attributes: [String: String]?
    public var grants: TokenGrants?

    public init(name: String? = nil, metadata: String? = nil, attributes: [String: String]? = nil, grants: TokenGrants? = nil) {
        self.name = name
        self.metadata = metadata
        self.attributes = attributes
        self.grants = grants
    }
}

/// The server's API on one shard's rooms: what a backend sees and steers (listing, removing,
/// muting, updating, sending data, deleting rooms). Each runs on the loop, like everything here.
extension SFU {
    public func roomViews() -> EventLoopFuture<[RoomView]> {
        loop.submit { self.directory.allParticipants.reduce(into: [String: Room]()) { $0[$1.room.name] = $1.room }.values.map(\.view) }
    }

    /// The room's participants; nil when there is no such room here.
    public func participantViews(in room: String) -> EventLoopFuture<[ParticipantView]?> {
        loop.submit { self.directory.room(named: room)?.participants.values.map(\.view).sorted { $0.info.uid < $1.info.uid } }
    }

    /// Makes `uid` leave with `reason` (told to it first, then its connection closed).
    public func removeParticipant(_ uid: String, in room: String, reason: LeaveReason = .kicked) -> EventLoopFuture<Void> {
        loop.submit {
            guard let participant = self.directory.participant(uid: uid, in: room) else {
                throw AdminError.notFound("no participant \(uid) in \(room)")
            }
            self.dismiss(participant, reason: reason)
        }
    }

    private func dismiss(_ participant: Participant, reason: LeaveReason) {
        let told = reason == .roomDeleted && participant.protocolVersion < ProtocolVersion(major: 1, minor: 6) ? .kicked : reason
        participant.send(.leave(reason: told))
        let peer = participant.peer
        remove(participant, reason: reason)
        peer?.close()
    }

    /// Everyone in `room` leaves (`roomDeleted`); false when there was no such room here.
    public func deleteRoom(_ room: String) -> EventLoopFuture<Bool> {
        loop.submit {
            guard let found = self.directory.room(named: room) else { return false }
            // Screen shares go with their owners: take the owners last so each leaves once.
            for participant in found.participants.values.sorted(by: { self.isShare($0) && !self.isShare($1) })
            where self.directory.contains(participant) {
                self.dismiss(participant, reason: .roomDeleted)
            }
            return true
        }
    }

    private func isShare(_ participant: Participant) -> Bool {
        if case .screenShare = participant.kind { true } else { false }
    }

    /// Mutes or unmutes a published track at the server: nothing of it is forwarded while muted;
    /// its subscribers see the mute, and its publisher is told (protocol 1.6).
    public func muteTrack(_ trackSid: String, of uid: String, in room: String, muted: Bool) -> EventLoopFuture<TrackInfo> {
        loop.submit {
            guard let participant = self.directory.participant(uid: uid, in: room) else {
                throw AdminError.notFound("no participant \(uid) in \(room)")
            }
            guard let track = participant.tracks.first(where: { $0.info.sid == trackSid }) else {
                throw AdminError.notFound("\(uid) has no track \(trackSid)")
            }
            guard track.info.muted != muted else { return track.info }
            track.info.muted = muted
            if participant.protocolVersion >= ProtocolVersion(major: 1, minor: 6) {
                participant.send(.trackMuted(MuteRequest(trackSid: trackSid, muted: muted)))
            }
            self.participantChanged(participant)
            return track.info
        }
    }

    /// Changes a participant's name, metadata, attributes or grants, at once and for everyone:
    /// grants that no longer allow publishing unpublish its tracks; no subscribe ends its subscriptions.
    public func updateParticipant(_ uid: String, in room: String, _ change: ParticipantChange) -> EventLoopFuture<ParticipantView> {
        loop.submit {
            guard let participant = self.directory.participant(uid: uid, in: room) else {
                throw AdminError.notFound("no participant \(uid) in \(room)")
            }
            try self.applyDescription(name: change.name, metadata: change.metadata, attributes: change.attributes, to: participant)
            if let grants = change.grants {
                participant.grants = grants
                for track in participant.tracks where self.mayPublish(participant, kind: track.info.kind, source: track.info.source) != nil {
                    self.unpublish(track)
                }
                if !grants.subscribe {
                    for subscription in participant.subscriptions { self.unsubscribe(subscription) }
                    participant.autoSubscribe = []
                    self.offerSubscriber(participant)
                }
            }
            self.participantChanged(participant)
            // Its own client learns it too (our clients and LiveKit's apply their own entry).
            participant.send(.participantUpdate([participant.info]))
            return participant.view
        }
    }

    /// Sets a participant's name, metadata and attributes (attributes merged; an empty value removes
    /// a key) after checking every bound; nothing changes when one is passed.
    func applyDescription(name: String?, metadata: String?, attributes change: [String: String]?, to participant: Participant) throws(AdminError) {
        let limits = configuration.limits
        if let name, name.utf8.count > limits.maxNameBytes { throw AdminError.invalid("a name of at most \(limits.maxNameBytes) bytes") }
        if let metadata, metadata.utf8.count > limits.maxMetadataBytes {
            throw AdminError.invalid("metadata of at most \(limits.maxMetadataBytes) bytes (got \(metadata.utf8.count))")
        }
        var attributes = participant.attributes
        for (key, value) in change ?? [:] { attributes[key] = value.isEmpty ? nil : value }
        guard ParticipantAttributes.fit(attributes, limits: limits) else {
            throw AdminError.invalid("at most \(limits.maxAttributes) attributes of at most \(limits.maxAttributeBytes) bytes each")
        }
        if let name { participant.name = name }
        if let metadata { participant.metadata = metadata }
        participant.attributes = attributes
    }

    /// A participant's own `updateMetadata`, when its token allows (`updateMetadata`): applied as
    /// the API would, answered with its own `participantUpdate`.
    func updateOwnMetadata(_ update: MetadataUpdate, participant: Participant, requestID: UInt32?, fail: Fail) {
        guard participant.grants.updateMetadata == true else {
            return fail(.permissionDenied, "the token does not grant updateMetadata (LiveKit's canUpdateOwnMetadata)")
        }
        do { try applyDescription(name: update.name, metadata: update.metadata, attributes: update.attributes, to: participant) } catch {
            let reason = switch error { case .invalid(let reason), .notFound(let reason): reason }
            return fail(.limitExceeded, reason)
        }
        participantChanged(participant)
        participant.send(.participantUpdate([participant.info]), requestID: requestID)
    }

    /// Subscribes `uid` to tracks (or ends those subscriptions), as its own client could.
    public func updateSubscriptions(of uid: String, in room: String, trackSids: [String], subscribe: Bool) -> EventLoopFuture<Void> {
        loop.submit {
            guard let participant = self.directory.participant(uid: uid, in: room) else {
                throw AdminError.notFound("no participant \(uid) in \(room)")
            }
            var failure: String?
            self.updateSubscription(SubscriptionUpdate(trackSids: trackSids, subscribe: subscribe), participant: participant) { _, reason in
                failure = reason
            }
            if let failure { throw AdminError.invalid(failure) }
        }
    }

    /// A data message from the server to the room (or the uids named), on each receiver's reliable
    /// or lossy channel in its framing. Returns how many it was sent to; nil for no such room.
    public func sendData(_ payload: [UInt8], in room: String, reliable: Bool, topic: String, destinations: [String]) -> EventLoopFuture<Int?> {
        loop.submit {
            guard let found = self.directory.room(named: room) else { return nil }
            let message = RelayedData(serverPayload: payload, topic: topic, destinations: destinations)
            let channel = reliable ? DataEnvelope.reliableChannel : DataEnvelope.lossyChannel
            return self.deliver(message, reliable: reliable, channel: channel, fromSDK: true, binary: true, in: found, except: nil)
        }
    }

    /// Sets a room's metadata and tells everyone in it (protocol 1.6). Nil for no such room here.
    public func updateRoomMetadata(_ room: String, metadata: String) -> EventLoopFuture<RoomView?> {
        loop.submit {
            guard metadata.utf8.count <= self.configuration.limits.maxMetadataBytes else {
                throw AdminError.invalid("metadata of at most \(self.configuration.limits.maxMetadataBytes) bytes (got \(metadata.utf8.count))")
            }
            guard let found = self.directory.room(named: room) else { return nil }
            found.metadata = metadata
            for participant in found.participants.values where participant.protocolVersion >= ProtocolVersion(major: 1, minor: 6) {
                participant.send(.roomUpdate(RoomUpdate(metadata: metadata)))
            }
            return found.view
        }
    }
}
