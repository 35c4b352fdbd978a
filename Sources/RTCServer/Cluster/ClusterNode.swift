import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import RedisWire

/// Where a room is served: here, or on another node whose signaling URL a join is relayed to.
public enum RoomPlacement: Sendable, Hashable {
    case local
    case remote(node: String, signalingURL: String)
    /// Not served anywhere: the join gets `limitExceeded` with `reason` (the server is full).
    case refused(reason: String)
}

/// Decides where a join's room is served, for the signaling front: a cluster node (Redis) or the
/// media processes of one server (``ProcessPlacer``).
public protocol RoomPlacer: Sendable {
    /// Where the room of a join or resume is served. Each `.remote` answer is one relayed
    /// connection, handed back with ``released(_:from:)`` when it ends.
    func place(_ channel: String) async -> RoomPlacement
    /// A connection relayed for `channel` to `placement` has ended.
    func released(_ channel: String, from placement: RoomPlacement)
}

extension ClusterNode: RoomPlacer {
    /// Redis keeps the rooms: nothing to count here.
    public func released(_ channel: String, from placement: RoomPlacement) {}
}

/// One node of a cluster of servers that share rooms through Redis, as LiveKit's nodes do: Redis
/// holds the node registry and the room → node map, each room lives on one node, and a join that
/// reaches another node is relayed there (its media then goes straight to that node).
///
/// Keys (all under `rtc:`):
/// - `rtc:node:<id>` = `<signaling URL> <participants>`, with a TTL of ``nodeTTL`` renewed every
///   ``heartbeat``: a node that stops renewing it (killed, cut off) is gone when it expires;
/// - `rtc:nodes`, a set of node ids, added to at every heartbeat: where placement finds the nodes
///   (not `KEYS`, which walks the whole keyspace and blocks Redis meanwhile). An id whose key has
///   expired is taken out by the next placement that sees it;
/// - `rtc:room:<name>` = `<node id>`, TTL ``roomTTL``, renewed by its node while the room has
///   participants there; set only through ``claimScript``, which keeps another live owner,
///   renews the claimant's own claim, and replaces a missing or dead owner, in one step, so two
///   nodes never both own a room;
/// - `rtc:roomstate:<name>` = a ``RoomState`` (JSON) of that one room, TTL ``roomStateTTL``, left
///   by a node that drains; the node that takes the room next takes it (GETDEL) with its join.
///
/// Without Redis (lost mid-run) a node keeps serving the rooms it has and places new ones on
/// itself; it logs the loss, reconnects every heartbeat and then registers again with its rooms.
public final class ClusterNode: Sendable {
    public let nodeID: String
    public let signalingURL: String
    public let redisURL: RedisURL
    public static let heartbeat: TimeAmount = .milliseconds(500)
    public static let nodeTTL = 2
    public static let roomTTL = 5
    /// How long a drained room's state waits in Redis for a node to take the room.
    public static let roomStateTTL = 120
    private let group: EventLoopGroup
    private let logger: Logger
    private let state = NIOLockedValueBox<State>(State())
    /// The participants here and the rooms with participants here, asked for at each heartbeat.
    private let load: @Sendable () -> (participants: Int, rooms: [String])
    /// Whether a room is on this node now.
    private let hasRoom: @Sendable (String) -> Bool
    /// Takes up a room's state that a drained node left (before the join that brought it here).
    private let adopt: @Sendable (RoomState) -> Void

    private struct State {
        var connection: RedisConnection?
        var connecting = false
        var lost = false
        /// When Redis was found gone (monotonic ns), for the outage's length.
        var lostAtNs: UInt64 = 0
        var heartbeat: RepeatedTask?
        var stopped = false
    }

    /// KEYS[1] the room key; ARGV[1] the node wanting it (or renewing it), ARGV[2] its TTL.
    /// Returns the owner: another live node, or ARGV[1], whose key is then set and its TTL renewed.
    static let claimScript = """
        local owner = redis.call('GET', KEYS[1])
        if owner and owner ~= ARGV[1] and redis.call('EXISTS', 'rtc:node:' .. owner) == 1 then return owner end
        redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
        return ARGV[1]
        """

    /// Connects to Redis (a clear error when it cannot) and registers the node.
    public static func start(nodeID: String, signalingURL: String, redisURL: RedisURL, group: EventLoopGroup, logger: Logger,
                             hasRoom: @escaping @Sendable (String) -> Bool, adopt: @escaping @Sendable (RoomState) -> Void = { _ in },
                             load: @escaping @Sendable () -> (participants: Int, rooms: [String])) async throws(RedisError) -> ClusterNode {
        let connection = try await RedisConnection.connect(redisURL, group: group)
        let node = ClusterNode(nodeID: nodeID, signalingURL: signalingURL, redisURL: redisURL, group: group, logger: logger,
                               hasRoom: hasRoom, adopt: adopt, load: load)
        node.state.withLockedValue { $0.connection = connection }
        try await node.beat(on: connection)
        let loop = group.next()
        let task = loop.scheduleRepeatedAsyncTask(initialDelay: heartbeat, delay: heartbeat) { _ in
            loop.makeFutureWithTask { await node.heartbeatOnce() }
        }
        node.state.withLockedValue { $0.heartbeat = task }
        logger.info("cluster node registered", metadata: ["node": "\(nodeID)", "redis": "\(redisURL)", "signaling": "\(signalingURL)"])
        return node
    }

    private init(nodeID: String, signalingURL: String, redisURL: RedisURL, group: EventLoopGroup, logger: Logger,
                 hasRoom: @escaping @Sendable (String) -> Bool, adopt: @escaping @Sendable (RoomState) -> Void,
                 load: @escaping @Sendable () -> (participants: Int, rooms: [String])) {
        self.hasRoom = hasRoom
        self.adopt = adopt
        self.nodeID = nodeID
        self.signalingURL = signalingURL
        self.redisURL = redisURL
        self.group = group
        self.logger = logger
        self.load = load
    }

    /// Whether Redis answers now.
    public var isConnected: Bool { state.withLockedValue { !$0.lost && $0.connection?.isActive == true } }

    /// Registers the node with its load and renews its rooms.
    private func beat(on connection: RedisConnection) async throws(RedisError) {
        let (participants, rooms) = load()
        _ = try await connection.command(["SET", "rtc:node:\(nodeID)", "\(signalingURL) \(participants)", "EX", String(Self.nodeTTL)])
        _ = try await connection.command(["SADD", "rtc:nodes", nodeID])
        for room in rooms {
            // Renews (or, after Redis lost its keys, takes back) each room with participants here.
            _ = try await connection.command(["EVAL", Self.claimScript, "1", "rtc:room:\(room)", nodeID, String(Self.roomTTL)])
        }
    }

    private func heartbeatOnce() async {
        let connection = state.withLockedValue { $0.stopped ? nil : $0.connection }
        do {
            if let connection, connection.isActive {
                try await beat(on: connection)
                return
            }
            guard !state.withLockedValue({ $0.stopped }) else { return }
            // A connection that closed since the last beat (Redis restarted, the path blinked) is an
            // outage too, however short: said once, with its length when it ends.
            if connection != nil { markLost("the connection closed") }
            let fresh = try await RedisConnection.connect(redisURL, group: group, timeout: .milliseconds(500))
            state.withLockedValue { $0.connection = fresh }
            try await beat(on: fresh)
            if let since = state.withLockedValue({ state -> UInt64? in
                defer { state.lost = false }
                return state.lost ? state.lostAtNs : nil
            }) {
                let seconds = Double(NIODeadline.now().uptimeNanoseconds &- since) / 1e9
                logger.notice("redis is back: node registered again with its rooms",
                              metadata: ["redis": "\(redisURL)", "outageSeconds": "\(String(format: "%.1f", seconds))"])
            }
        } catch {
            markLost("\(error)")
            state.withLockedValue { $0.connection?.close(); $0.connection = nil }
        }
    }

    /// Notes that Redis is gone (logged once per outage).
    private func markLost(_ why: String) {
        let first = state.withLockedValue { state -> Bool in
            guard !state.lost else { return false }
            state.lost = true
            state.lostAtNs = NIODeadline.now().uptimeNanoseconds
            return true
        }
        if first {
            logger.error("redis lost: rooms here keep running, new rooms are placed here until it is back",
                         metadata: ["redis": "\(redisURL)", "error": "\(why)"])
        }
    }

    /// Where `channel` is served (``placement(_:)``); a room new here takes up the state a drained
    /// node left for it, before its join goes on.
    public func place(_ channel: String) async -> RoomPlacement {
        let placement = await placement(channel)
        guard placement == .local, !hasRoom(channel), let connection = state.withLockedValue({ $0.connection }), connection.isActive,
              let text = try? await connection.command(["GETDEL", "rtc:roomstate:\(channel)"]).string else { return placement }
        do {
            let saved = try RoomState.decode(Data(text.utf8))
            adopt(saved)
            logger.info("room taken over with its state", metadata: ["channel": "\(channel)", "participants": "\(saved.rooms[channel]?.participants.count ?? 0)"])
        } catch {
            logger.error("a drained room's state is unreadable: the room starts afresh", metadata: ["channel": "\(channel)", "error": "\(error)"])
        }
        return placement
    }

    /// Leaves each room's state for the node that takes it next (a drain, before ``stop()``).
    public func handOver(_ state: RoomState) async {
        guard let connection = state.rooms.isEmpty ? nil : self.state.withLockedValue({ $0.connection }), connection.isActive else { return }
        for (name, room) in state.rooms {
            let one = RoomState(savedAt: state.savedAt, rooms: [name: room])
            _ = try? await connection.command(["SET", "rtc:roomstate:\(name)", String(decoding: one.encoded(), as: UTF8.self),
                                               "EX", String(Self.roomStateTTL)])
        }
    }

    /// Where `channel` is served: here if the room is already here, else its live owner, else
    /// the least-loaded live node, which claims it atomically (another node's claim may win: then
    /// that node). Here when Redis is away.
    private func placement(_ channel: String) async -> RoomPlacement {
        guard let connection = state.withLockedValue({ $0.connection }), connection.isActive else { return .local }
        do {
            // A room this node has stays here, whatever Redis says now (its key may have expired
            // while Redis was away or this node stalled): claim it back rather than split it.
            if hasRoom(channel) {
                let owner = try await connection.command(["EVAL", Self.claimScript, "1", "rtc:room:\(channel)", nodeID, String(Self.roomTTL)]).string
                if owner != nodeID {
                    logger.warning("room also owned elsewhere: served here too", metadata: ["channel": "\(channel)", "owner": "\(owner ?? "?")"])
                }
                return .local
            }
            let owner = try await connection.command(["GET", "rtc:room:\(channel)"]).string
            if owner == nodeID { return .local }
            let nodes = try await liveNodes(connection)
            if let owner, let url = nodes[owner]?.url { return .remote(node: owner, signalingURL: url) }
            // Least loaded, this node first among equals (no relay).
            let mine = load().participants
            var candidate = (id: nodeID, load: mine)
            for (id, node) in nodes where id != nodeID && node.load < candidate.load { candidate = (id, node.load) }
            let winner = try await connection.command(["EVAL", Self.claimScript, "1", "rtc:room:\(channel)", candidate.id, String(Self.roomTTL)])
                .string ?? nodeID
            logger.debug("room placed", metadata: ["channel": "\(channel)", "candidate": "\(candidate.id)", "winner": "\(winner)",
                                                   "nodes": "\(nodes.mapValues(\.load))"])
            if winner == nodeID { return .local }
            guard let url = nodes[winner]?.url else { return .local }
            return .remote(node: winner, signalingURL: url)
        } catch {
            logger.warning("room placement without redis: here", metadata: ["channel": "\(channel)", "error": "\(error)"])
            return .local
        }
    }

    /// The other node a room lives on now, with its signaling URL; nil when it is here, nowhere,
    /// or Redis is away (the server's API then answers from this node).
    public func remoteOwner(of channel: String) async -> (node: String, signalingURL: String)? {
        guard !hasRoom(channel), let connection = state.withLockedValue({ $0.connection }), connection.isActive else { return nil }
        do {
            guard let owner = try await connection.command(["GET", "rtc:room:\(channel)"]).string, owner != nodeID,
                  let url = try await liveNodes(connection)[owner]?.url else { return nil }
            return (owner, url)
        } catch {
            return nil
        }
    }

    /// The signaling URLs of the other live nodes (the API's ListRooms asks each).
    public func otherNodeURLs() async -> [String] {
        guard let connection = state.withLockedValue({ $0.connection }), connection.isActive,
              let nodes = try? await liveNodes(connection) else { return [] }
        return nodes.filter { $0.key != nodeID }.map(\.value.url).sorted()
    }

    /// Registered nodes: signaling URL and participants, by id.
    private func liveNodes(_ connection: RedisConnection) async throws(RedisError) -> [String: (url: String, load: Int)] {
        guard case .array(let members?) = try await connection.command(["SMEMBERS", "rtc:nodes"]) else { return [:] }
        let ids = members.compactMap(\.string)
        guard !ids.isEmpty, case .array(let values?) = try await connection.command(["MGET"] + ids.map { "rtc:node:\($0)" }) else { return [:] }
        var nodes: [String: (url: String, load: Int)] = [:]
        var gone: [String] = []
        for (id, value) in zip(ids, values) {
            guard let text = value.string else {
                gone.append(id)
                continue
            }
            let parts = text.split(separator: " ")
            guard parts.count == 2, let load = Int(parts[1]) else { continue }
            nodes[id] = (String(parts[0]), load)
        }
        // Expired nodes leave the set (a node that comes back adds itself at its next heartbeat).
        if !gone.isEmpty { _ = try await connection.command(["SREM", "rtc:nodes"] + gone) }
        return nodes
    }

    /// Stops the heartbeat and removes the node's key (its rooms expire with their TTL).
    public func stop() async {
        let (task, connection) = state.withLockedValue { state in
            state.stopped = true
            return (state.heartbeat, state.connection)
        }
        task?.cancel()
        if let connection, connection.isActive {
            _ = try? await connection.command(["DEL", "rtc:node:\(nodeID)"])
            _ = try? await connection.command(["SREM", "rtc:nodes", nodeID])
            connection.close()
        }
    }
}
