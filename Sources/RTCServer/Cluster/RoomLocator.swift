/// Where a room lives when it is not in this process: another node of a cluster (``ClusterNode``,
/// through Redis) or a media process of this server (``ProcessPlacer``, whose front keeps the map).
/// The server API passes a call about such a room there, whole, and asks each of them for
/// `ListRooms`.
public protocol RoomLocator: Sendable {
    /// The place that serves `room` now (a name for logs and its loopback or cluster signaling
    /// URL); nil when it is here or nowhere.
    func remoteOwner(of room: String) async -> (node: String, signalingURL: String)?
    /// The signaling URLs of the other places that serve rooms now.
    func otherNodeURLs() async -> [String]
    /// `room` was made here (`CreateRoom`): its joins are to come here, wherever they arrive.
    func keep(_ room: String) async
}

extension ClusterNode: RoomLocator {
    public func keep(_ room: String) async {
        _ = await place(room)
    }
}

extension ProcessPlacer: RoomLocator {
    public func remoteOwner(of room: String) async -> (node: String, signalingURL: String)? {
        guard !hasRoom(room), let worker = roomWorker(room), isAlive(worker) else { return nil }
        return (workers[worker].name, workers[worker].signalingURL)
    }

    public func otherNodeURLs() async -> [String] {
        workers.indices.filter(isAlive).map { workers[$0].signalingURL }
    }

    /// Nothing to record: the front sees every join, and a room it has stays with it.
    public func keep(_ room: String) async {}
}
