import NIOConcurrencyHelpers
import NIOCore

/// Rooms spread over the processes of one server (`rtc-cli server --media-processes N`). Every
/// client connects to the front process. The front serves some rooms itself and relays the
/// connections of the others, whole, to the media process that has the room, as a cluster node
/// relays to another node (``RawSignalingLink``); the client's media then goes straight to that
/// process's port, which its answers carry. No Redis: the front sees every join, so it keeps the
/// room map itself.
///
/// Why processes: nothing at all is shared between them (heap, allocator, kernel socket
/// locks), and one that crashes takes only its rooms down (`docs/scale.md`).
public final class ProcessPlacer: RoomPlacer {
    /// A media process: its name in logs and the loopback signaling URL the front relays to.
    public struct Worker: Sendable {
        public let name: String
        public let signalingURL: String
        public init(name: String, signalingURL: String) {
            self.name = name
            self.signalingURL = signalingURL
        }
    }

    let workers: [Worker]
    let isAlive: @Sendable (Int) -> Bool
    private let localLoad: @Sendable () -> Int
    let hasRoom: @Sendable (String) -> Bool
    private let forgetAfter: TimeAmount
    private let maxParticipants: Int
    private let state: NIOLockedValueBox<State>

    private struct State {
        /// Rooms on media processes.
        var rooms: [String: Room] = [:]
        /// Relayed connections per media process: its load.
        var load: [Int]
        /// Rooms just placed here, until this process's SFU has them (a second join can come first).
        var placedHere: [String: NIODeadline] = [:]
    }

    private struct Room {
        var worker: Int
        var connections: Int
        /// Since when it has had no relayed connection: it is forgotten `forgetAfter` later (its
        /// participants may still resume within that time).
        var idleSince: NIODeadline?

        /// Whether it still has its place at `now`.
        func isKept(now: NIODeadline, forgetAfter: TimeAmount) -> Bool {
            connections > 0 || idleSince.map { now - $0 < forgetAfter } ?? true
        }
    }

    /// - Parameters:
    ///   - isAlive: whether media process i runs and takes connections now;
    ///   - localLoad: participants in this process's own rooms;
    ///   - hasRoom: whether this process serves a room now;
    ///   - forgetAfter: how long an empty room keeps its place (the resume window);
    ///   - maxParticipants: the whole server's bound (`--max-participants`): participants here and
    ///     connections relayed to media processes together. Each process also keeps it for itself.
    public init(workers: [Worker], forgetAfter: TimeAmount, maxParticipants: Int = .max, isAlive: @escaping @Sendable (Int) -> Bool,
                localLoad: @escaping @Sendable () -> Int, hasRoom: @escaping @Sendable (String) -> Bool) {
        self.workers = workers
        self.forgetAfter = forgetAfter
        self.maxParticipants = maxParticipants
        self.isAlive = isAlive
        self.localLoad = localLoad
        self.hasRoom = hasRoom
        state = NIOLockedValueBox(State(load: Array(repeating: 0, count: workers.count)))
    }

    /// Refused when the server is full (all its processes together); else here if the room is
    /// here; its media process if it has one that runs; else the least loaded of here and the
    /// running media processes (here first among equals: no relay).
    public func place(_ channel: String) async -> RoomPlacement {
        let here = localLoad()
        let roomHere = hasRoom(channel)
        let now = NIODeadline.now()
        let alive = workers.indices.map(isAlive)
        let (forgetAfter, maxParticipants) = (self.forgetAfter, self.maxParticipants)
        return state.withLockedValue { state in
            guard here + state.load.reduce(0, +) < maxParticipants else {
                return .refused(reason: "the server is full (\(maxParticipants) participants over its processes)")
            }
            if roomHere { return .local }
            state.placedHere = state.placedHere.filter { $0.value > now }
            if state.placedHere[channel] != nil { return .local }
            state.rooms = state.rooms.filter { _, room in room.isKept(now: now, forgetAfter: forgetAfter) }
            if let room = state.rooms[channel] {
                if alive[room.worker] {
                    state.rooms[channel]?.connections += 1
                    state.rooms[channel]?.idleSince = nil
                    state.load[room.worker] += 1
                    return .remote(node: workers[room.worker].name, signalingURL: workers[room.worker].signalingURL)
                }
                // Its process died: its participants lost their relays and join again, anywhere.
                state.rooms[channel] = nil
            }
            var best: Int?
            var lowest = here
            for index in workers.indices where alive[index] && state.load[index] < lowest {
                best = index
                lowest = state.load[index]
            }
            guard let best else {
                state.placedHere[channel] = now + .seconds(10)
                return .local
            }
            state.rooms[channel] = Room(worker: best, connections: 1)
            state.load[best] += 1
            return .remote(node: workers[best].name, signalingURL: workers[best].signalingURL)
        }
    }

    public func released(_ channel: String, from placement: RoomPlacement) {
        guard case .remote(let name, _) = placement, let worker = workers.firstIndex(where: { $0.name == name }) else { return }
        state.withLockedValue { state in
            state.load[worker] = max(0, state.load[worker] - 1)
            guard var room = state.rooms[channel], room.worker == worker else { return }
            room.connections = max(0, room.connections - 1)
            if room.connections == 0 { room.idleSince = .now() }
            state.rooms[channel] = room
        }
    }

    /// The media process that has `room` (nil: none; its place may have been forgotten).
    func roomWorker(_ room: String) -> Int? {
        let (now, forgetAfter) = (NIODeadline.now(), self.forgetAfter)
        return state.withLockedValue { state in
            guard let placed = state.rooms[room], placed.isKept(now: now, forgetAfter: forgetAfter) else { return nil }
            return placed.worker
        }
    }

    /// Relayed connections per media process, and the rooms each has (for logs and tests).
    public var snapshot: (load: [Int], rooms: [String: Int]) {
        state.withLockedValue { state in (state.load, state.rooms.mapValues(\.worker)) }
    }
}
