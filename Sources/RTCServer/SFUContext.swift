import Logging
import NIOConcurrencyHelpers
import NIOCore
import RTCConventions
import RTCTransport

#if canImport(Glibc)
import Glibc
#endif

/// What the SFU's parts share: the configuration, the media port and its event loop, the
/// server's RTCP SSRC, the counters and the two clocks. One per ``SFU``, confined to its loop like
/// everything else there.
///
/// The clocks are the only time sources of the SFU: the wall clock (seconds since 1970) for
/// tokens, keepalive and resume windows; the monotonic clock (nanoseconds) for the packet path,
/// RTCP, estimates and throttles. Both are replaceable in tests.
final class SFUContext: @unchecked Sendable {
    let configuration: ServerConfiguration
    let port: SharedMediaPort
    let loop: EventLoop
    /// The SSRC the server's own RTCP (reports, feedback, requests) is sent as.
    let serverSSRC: UInt32
    /// The screen-share uid rule under the configured suffix.
    let screenShare: ScreenShareUID
    var counters = ServerCounters()
    /// Whether some publisher's video has a gap the server may still ask for (set on the packet
    /// path, cleared by the NACK job once every gap is closed or given up).
    var upstreamGapsOpen = false
    /// Told when ``upstreamGapsOpen`` turns true (the SFU sets its timer for the NACK job).
    var onUpstreamGapOpened: (() -> Void)?
    /// This SFU's place among the server's shards (``ShardedSFU``), and what its ids carry so
    /// that sids stay unique across shards ("" alone).
    var shardIndex = 0
    var idTag = ""
    /// Participants on every shard of the server (`maxParticipants` is the whole server's bound).
    var tally = ParticipantTally(shards: 1)
    /// Told when a video track whose size nobody announced (a WHIP publisher, a plain browser)
    /// shows it in its first keyframe: its participant's state goes out again with the size.
    var onTrackSizeLearned: ((PublishedTrack) -> Void)?
    /// Told the name of a room this SFU has just dropped (its last participant left).
    var onRoomDropped: ((String) -> Void)?
    /// Settings a room made through the API left for its first join (``ShardedSFU``), taken once.
    var takeRoomSettings: ((String) -> RoomSettings?)?
    /// Told what happens in rooms (webhooks), on this loop.
    var onEvent: ((RoomEvent) -> Void)?
    /// The server's log (negotiation outcomes at info level).
    var logger = Logger(label: "rtc.sfu")
    /// Seconds since 1970.
    var wallClock: @Sendable () -> Int64 = { Int64(time(nil)) }
    /// Monotonic nanoseconds (any origin).
    var monotonicClock: @Sendable () -> UInt64 = { NIODeadline.now().uptimeNanoseconds }

    init(configuration: ServerConfiguration, port: SharedMediaPort) {
        self.configuration = configuration
        self.port = port
        loop = port.channel.eventLoop
        screenShare = ScreenShareUID(suffix: configuration.screenShareSuffix)
        var random = SystemRandomNumberGenerator()
        serverSSRC = UInt32.random(in: 1...UInt32.max, using: &random)
    }

    /// The monotonic clock in microseconds.
    var nowUs: Int64 { Int64(monotonicClock() / 1000) }
}

/// Participants per shard, for the server-wide bound and the placement of new rooms: read and
/// written from every shard's loop, under a lock (once per join and leave, never per packet).
final class ParticipantTally: Sendable {
    private let counts: NIOLockedValueBox<[Int]>

    init(shards: Int) { counts = NIOLockedValueBox([Int](repeating: 0, count: max(1, shards))) }

    func add(_ delta: Int, shard: Int) { counts.withLockedValue { $0[shard] += delta } }
    var total: Int { counts.withLockedValue { $0.reduce(0, +) } }
    var perShard: [Int] { counts.withLockedValue { $0 } }
}
