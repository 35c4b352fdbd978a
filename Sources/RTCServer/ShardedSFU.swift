import Logging
import NIOConcurrencyHelpers
import NIOCore
import RTCTransport
import Signaling

/// The server's media plane on every core: one ``SFU`` per event loop (a shard), each with its
/// own UDP media port (`mediaPort + i`) and ICE-TCP port, so that a room's packets are read,
/// forwarded and sent on one loop with no lock and no hop, and rooms on different loops run in
/// parallel. A room lives on one shard: the first join places it on the least-loaded one
/// (participants there plus joins on their way), later joins and resumes follow it, and the
/// place is forgotten when the room empties.
///
/// Signaling connections are routed here: a connection belongs to the shard of the room it
/// joined (or resumed) and every later message of it goes there. This router is the only state
/// shared between shards, under one lock taken once per signaling message, never per packet.
public final class ShardedSFU: SignalingSink, Sendable {
    public let shards: [SFU]
    private let router: NIOLockedValueBox<ShardRouter>
    private let tally: ParticipantTally
    /// Rooms made through the API that wait for their first join (``listRooms(names:)``).
    let createdRooms = CreatedRooms()

    public var configuration: ServerConfiguration { shards[0].configuration }
    /// The first shard's media port (the only one with `mediaThreads` 1).
    public var port: SharedMediaPort { shards[0].port }
    public var mediaAddress: SocketAddress? { shards[0].mediaAddress }
    /// Every shard's UDP media address, in shard order.
    public var mediaAddresses: [SocketAddress] { shards.compactMap(\.mediaAddress) }

    /// Starts `configuration.mediaThreads` shards on distinct loops of `group` (as many as it has).
    /// Shard `i` binds `mediaPort + i` (each its own free port when `mediaPort` is 0), and
    /// `tcpMediaPort + i` likewise.
    public static func start(configuration: ServerConfiguration, group: EventLoopGroup,
                             logger: Logger = Logger(label: "rtc.sfu")) async throws -> ShardedSFU {
        let count = max(1, configuration.mediaThreads)
        let loops = Array(group.makeIterator())
        let tally = ParticipantTally(shards: count)
        var shards: [SFU] = []
        do {
            for index in 0..<count {
                var shardConfiguration = configuration
                if configuration.mediaPort != 0 { shardConfiguration.mediaPort = configuration.mediaPort + index }
                if let tcp = configuration.tcpMediaPort, tcp != 0 { shardConfiguration.tcpMediaPort = tcp + index }
                let shard = try await SFU.start(configuration: shardConfiguration, group: loops[index % loops.count],
                                                logger: count > 1 ? logger.with("shard", "\(index)") : logger)
                try await shard.loop.submit {
                    shard.context.shardIndex = index
                    shard.context.idTag = count > 1 ? "\(index)x" : ""
                    shard.context.tally = tally
                }.get()
                shards.append(shard)
            }
        } catch {
            for shard in shards { await shard.shutdown() }
            throw error
        }
        let sharded = ShardedSFU(shards: shards, tally: tally)
        for (index, shard) in shards.enumerated() {
            try await shard.loop.submit {
                shard.context.onRoomDropped = { [weak sharded] name in sharded?.roomDropped(name, shard: index) }
                shard.context.takeRoomSettings = { [weak sharded] name in sharded?.createdRooms.take(name) }
            }.get()
        }
        return sharded
    }

    private init(shards: [SFU], tally: ParticipantTally) {
        self.shards = shards
        self.tally = tally
        router = NIOLockedValueBox(ShardRouter(shards: shards.count))
    }

    // MARK: Signaling

    /// One message from `peer` (any bytes): decoded here, on the connection's loop, then handed
    /// to its shard.
    public func received(_ bytes: [UInt8], from peer: SignalingPeer) {
        deliver(InboundMessage(bytes, secret: configuration.secret), from: peer)
    }

    /// A message already decoded where it arrived, to its shard.
    func deliver(_ message: InboundMessage, from peer: SignalingPeer) {
        let id = ObjectIdentifier(peer)
        if message.isJoinOrResume, let channel = message.channel {
            let isJoin = if case .join = (try? message.decoded.get())?.message { true } else { false }
            let index = router.withLockedValue { $0.route(id, channel: channel, placing: isJoin, load: tally.perShard) }
            shards[index].deliver(message, from: peer) { [weak self] exists in
                guard isJoin, let self else { return }
                self.router.withLockedValue { $0.joinHandled(channel, shard: index, roomExists: exists) }
            }
        } else {
            let index = router.withLockedValue { $0.shard(of: id) } ?? 0
            shards[index].deliver(message, from: peer)
        }
    }

    public func disconnected(_ peer: SignalingPeer) {
        let index = router.withLockedValue { $0.forget(ObjectIdentifier(peer)) }
        shards[index ?? 0].disconnected(peer)
    }

    public func hasJoined(_ peer: SignalingPeer) -> EventLoopFuture<Bool> {
        guard let index = router.withLockedValue({ $0.shard(of: ObjectIdentifier(peer)) }) else {
            return shards[0].loop.makeSucceededFuture(false)
        }
        return shards[index].hasJoined(peer)
    }

    func countLimitRefusal() { shards[0].countLimitRefusal() }
    func countClosedUnjoined() { shards[0].countClosedUnjoined() }

    private func roomDropped(_ name: String, shard: Int) {
        router.withLockedValue { $0.roomDropped(name, shard: shard) }
    }

    // MARK: Views for operators and tests

    /// The shard a room lives on now, if it lives anywhere.
    public func shard(of channel: String) -> Int? { router.withLockedValue { $0.placed(channel) } }

    /// The rooms placed on a shard now.
    public var roomNames: [String] { router.withLockedValue { $0.roomNames } }

    /// Participants per shard now.
    public var participantsPerShard: [Int] { tally.perShard }

    private func shardFor(_ channel: String) -> SFU { shards[shard(of: channel) ?? 0] }

    /// Every shard's counters added up.
    public var counterSnapshot: EventLoopFuture<ServerCounters> {
        let loop = shards[0].loop
        return EventLoopFuture.whenAllSucceed(shards.map(\.counterSnapshot), on: loop).map { snapshots in
            snapshots.dropFirst().reduce(into: snapshots[0]) { $0.add($1) }
        }
    }

    /// Each shard's counters, in shard order.
    public var shardCounters: EventLoopFuture<[ServerCounters]> {
        EventLoopFuture.whenAllSucceed(shards.map(\.counterSnapshot), on: shards[0].loop)
    }

    public func participants(in channel: String) -> EventLoopFuture<[ParticipantInfo]> { shardFor(channel).participants(in: channel) }

    public func packetsForwarded(to uid: String, in channel: String) -> EventLoopFuture<[ForwardedStream: Int]> {
        shardFor(channel).packetsForwarded(to: uid, in: channel)
    }

    public func downstreamEstimates(in channel: String) -> EventLoopFuture<[String: Double]> {
        shardFor(channel).downstreamEstimates(in: channel)
    }

    /// Every shard leaves its participants with `serverShutdown` and closes its ports.
    public func shutdown() async {
        for shard in shards { await shard.shutdown() }
    }
}

/// Which shard each room and each signaling connection belongs to (a value under the
/// ``ShardedSFU``'s lock).
struct ShardRouter {
    private struct Place {
        var shard: Int
        /// Joins routed to the room that its shard has not handled yet.
        var pending = 0
    }
    private var rooms: [String: Place] = [:]
    private var peers: [ObjectIdentifier: Int] = [:]
    private var pendingPerShard: [Int]

    init(shards: Int) { pendingPerShard = [Int](repeating: 0, count: shards) }

    var roomCount: Int { rooms.count }
    var roomNames: [String] { Array(rooms.keys) }

    func placed(_ channel: String) -> Int? { rooms[channel]?.shard }
    func shard(of peer: ObjectIdentifier) -> Int? { peers[peer] }

    /// The shard for a join (`placing`: a room not placed yet goes to the least-loaded shard) or a
    /// resume (to the room's shard; shard 0, which will refuse it, when the room is nowhere).
    /// The connection belongs to that shard from now on.
    mutating func route(_ peer: ObjectIdentifier, channel: String, placing: Bool, load: [Int]) -> Int {
        let shard: Int
        if let place = rooms[channel] {
            shard = place.shard
        } else if placing {
            let loads = zip(load, pendingPerShard).map { $0 + $1 }
            shard = loads.indices.min { loads[$0] < loads[$1] } ?? 0
            rooms[channel] = Place(shard: shard)
        } else {
            shard = 0
        }
        if placing {
            rooms[channel]?.pending += 1
            pendingPerShard[shard] += 1
        }
        peers[peer] = shard
        return shard
    }

    /// A routed join was handled: its place is kept while the room exists or other joins are on their way.
    mutating func joinHandled(_ channel: String, shard: Int, roomExists: Bool) {
        pendingPerShard[shard] -= 1
        guard var place = rooms[channel], place.shard == shard else { return }
        place.pending -= 1
        rooms[channel] = place.pending == 0 && !roomExists ? nil : place
    }

    /// A shard dropped its (now empty) room: the place is forgotten unless a join is on its way there.
    mutating func roomDropped(_ channel: String, shard: Int) {
        guard let place = rooms[channel], place.shard == shard, place.pending == 0 else { return }
        rooms[channel] = nil
    }

    mutating func forget(_ peer: ObjectIdentifier) -> Int? { peers.removeValue(forKey: peer) }
}

extension Logger {
    func with(_ key: String, _ value: String) -> Logger {
        var copy = self
        copy[metadataKey: key] = "\(value)"
        return copy
    }
}
