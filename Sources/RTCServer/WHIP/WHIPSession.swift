import NIOConcurrencyHelpers
import NIOCore
import Signaling

/// One WHIP resource (RFC 9725): a participant of the SFU core with no WebSocket of its own. It
/// speaks our protocol's messages to the core like any client (join, publishTrack, offer, leave)
/// and lives as long as its media (`JoinRequest.mediaBound`) or until its DELETE.
final class WHIPSession: SignalingPeer, @unchecked Sendable {
    let id: String
    let room: String
    let uid: String
    /// The entity tag of the session's current ICE state (RFC 9725 §4.3.1: `If-Match` on PATCH).
    var etag: String { state.withLockedValue { "\"\(id.prefix(8))-\($0.iceGeneration)\"" } }
    /// The client's current ICE username fragment: a PATCH with another one is an ICE restart.
    var iceUfrag: String? { state.withLockedValue { $0.iceUfrag } }
    /// The publisher's offer (WHIP; nil for a WHEP viewer), for an ICE restart's new offer.
    var offer: String? { state.withLockedValue { $0.offerSDP } }

    private let sfu: ShardedSFU
    private let registry: WHIPSessions
    private struct State {
        var nextID: UInt32 = 1
        var pending: [UInt32: EventLoopPromise<ServerEnvelope>] = [:]
        var ended = false
        /// WHEP: the core's first subscriber offer, or who waits for it.
        var offer: ServerEnvelope?
        var offerWaiter: EventLoopPromise<ServerEnvelope>?
        var iceGeneration = 1
        var iceUfrag: String?
        var offerSDP: String?
    }
    private let state = NIOLockedValueBox(State())

    init(id: String, room: String, uid: String, iceUfrag: String?, offer: String? = nil, sfu: ShardedSFU, registry: WHIPSessions) {
        self.id = id
        self.room = room
        self.uid = uid
        self.sfu = sfu
        self.registry = registry
        state.withLockedValue { state in
            state.iceUfrag = iceUfrag
            state.offerSDP = offer
        }
    }

    /// After an ICE restart: the client's new credentials in the kept offer, a new ETag.
    func restarted(ufrag: String, offer: String) {
        state.withLockedValue { state in
            state.iceUfrag = ufrag
            state.offerSDP = offer
            state.iceGeneration += 1
        }
    }

    var isEnded: Bool { state.withLockedValue { $0.ended } }

    /// Sends `message` to the core; the future is its reply (or the error about it).
    func request(_ message: ClientMessage, on loop: EventLoop) -> EventLoopFuture<ServerEnvelope> {
        let promise = loop.makePromise(of: ServerEnvelope.self)
        let id: UInt32? = state.withLockedValue { state in
            guard !state.ended else { return nil }
            defer { state.nextID &+= 1 }
            state.pending[state.nextID] = promise
            return state.nextID
        }
        guard let id else {
            promise.fail(SignalingError(.notJoined, "the session has ended"))
            return promise.futureResult
        }
        sfu.received(ClientEnvelope(message, requestID: id).encoded(), from: self)
        return promise.futureResult
    }

    /// A message for which no reply is awaited (the leave).
    func post(_ message: ClientMessage) {
        guard !isEnded else { return }
        sfu.received(ClientEnvelope(message).encoded(), from: self)
    }

    // SignalingPeer: called on the SFU's loop.
    func send(_ envelope: ServerEnvelope) {
        if let id = envelope.requestID, let promise = state.withLockedValue({ $0.pending.removeValue(forKey: id) }) {
            promise.succeed(envelope)
            return
        }
        if case .offer(let offer) = envelope.message, offer.transport == .subscriber {
            let waiter = state.withLockedValue { state -> EventLoopPromise<ServerEnvelope>? in
                guard state.offer == nil else { return nil }
                state.offer = envelope
                defer { state.offerWaiter = nil }
                return state.offerWaiter
            }
            waiter?.succeed(envelope)
            return
        }
        if case .leave = envelope.message { close() }
    }

    /// WHEP: the core's first subscriber offer (once the session subscribes to something).
    func subscriberOffer(on loop: EventLoop, within seconds: Int64) -> EventLoopFuture<ServerEnvelope> {
        let promise = loop.makePromise(of: ServerEnvelope.self)
        let ready = state.withLockedValue { state -> ServerEnvelope? in
            if state.offer == nil { state.offerWaiter = promise }
            return state.offer
        }
        if let ready { promise.succeed(ready) }
        loop.scheduleTask(in: .seconds(seconds)) {
            promise.fail(SignalingError(.trackNotFound, "nothing to watch in \(self.room) within \(seconds) s"))
        }
        return promise.futureResult
    }

    /// The core ended the participant (its media was lost, its token expired, a newer join of the
    /// same uid): the resource is gone.
    func close() {
        let pending = state.withLockedValue { state -> [EventLoopPromise<ServerEnvelope>] in
            state.ended = true
            defer { state.pending.removeAll() }
            return Array(state.pending.values)
        }
        for promise in pending { promise.fail(SignalingError(.notJoined, "the session has ended")) }
        registry.remove(self)
    }
}

/// The live WHIP resources, by id and by room and uid (one session per uid in a room).
final class WHIPSessions: Sendable {
    private let sessions = NIOLockedValueBox<[String: WHIPSession]>([:])

    func session(id: String, room: String) -> WHIPSession? {
        sessions.withLockedValue { $0[id] }.flatMap { $0.room == room ? $0 : nil }
    }

    func live(room: String, uid: String) -> WHIPSession? {
        sessions.withLockedValue { sessions in sessions.values.first { $0.room == room && $0.uid == uid && !$0.isEnded } }
    }

    /// Adds `session` unless its uid already has a live one in the room.
    func insert(_ session: WHIPSession) -> Bool {
        sessions.withLockedValue { sessions in
            guard !sessions.values.contains(where: { $0.room == session.room && $0.uid == session.uid && !$0.isEnded }) else { return false }
            sessions[session.id] = session
            return true
        }
    }

    func remove(_ session: WHIPSession) {
        sessions.withLockedValue { sessions in if sessions[session.id] === session { sessions[session.id] = nil } }
    }

    var count: Int { sessions.withLockedValue { $0.count } }
}
