import NIOCore

/// ICE checks that reached the server's media port before the session they name existed.
///
/// A client starts its checks as soon as it has sent its answer (or offer) over signaling, and the
/// first check can beat that message to the server: it names a local ufrag no session has yet.
/// Dropped, it costs the client its first retransmission timeout (100 ms or more) on every new
/// transport. Kept here instead (a few, briefly), it is handed to the session as soon as the
/// session is made, and answered then. Bounded: at most `capacity` checks, none older than
/// `maxAgeUs`, none larger than `maxBytes`; a flood of made-up ufrags only pushes out older ones.
struct EarlyChecks {
    static let capacity = 64
    static let maxAgeUs: Int64 = 2_000_000
    static let maxBytes = 600

    private struct Entry {
        var ufrag: String
        var datagram: ByteBuffer
        var from: SocketAddress
        var atUs: Int64
    }

    private var entries: [Entry] = []

    var count: Int { entries.count }

    /// Keeps a check for `ufrag` (the oldest goes when full).
    mutating func keep(_ datagram: ByteBuffer, ufrag: String, from: SocketAddress, nowUs: Int64) {
        guard datagram.readableBytes <= Self.maxBytes else { return }
        expire(nowUs: nowUs)
        if entries.count >= Self.capacity { entries.removeFirst() }
        entries.append(Entry(ufrag: ufrag, datagram: datagram, from: from, atUs: nowUs))
    }

    /// The checks kept for `ufrag`, oldest first; they are forgotten.
    mutating func take(ufrag: String, nowUs: Int64) -> [(datagram: ByteBuffer, from: SocketAddress)] {
        expire(nowUs: nowUs)
        guard entries.contains(where: { $0.ufrag == ufrag }) else { return [] }
        let taken = entries.filter { $0.ufrag == ufrag }.map { ($0.datagram, $0.from) }
        entries.removeAll { $0.ufrag == ufrag }
        return taken
    }

    private mutating func expire(nowUs: Int64) {
        while let first = entries.first, nowUs - first.atUs > Self.maxAgeUs { entries.removeFirst() }
    }
}
