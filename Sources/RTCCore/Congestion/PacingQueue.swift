import NIOCore
import RTCTransport

/// The order in which queued packets leave the pacer.
enum PacketPriority: Int, Sendable, CaseIterable {
    /// Never held back: a 20 ms Opus packet is small and late audio is lost audio.
    case audio = 0
    /// Repairs before new media: the receiver is already waiting for them.
    case retransmission = 1
    case video = 2
}

/// A probe: send at `bps` until at least `minBytes` and `minPackets` have left, every packet
/// marked with `id`, so that their feedback tells what the path carries at that rate
/// (see ``ProbeRateEstimator``).
struct ProbeCluster: Sendable, Hashable {
    var id: Int
    var bps: Double
    var minBytes: Int
    var minPackets: Int

    /// A cluster of about 40 ms at `bps`, at least 5 packets.
    init(id: Int, bps: Double) {
        self.id = id
        self.bps = bps
        minBytes = Int(bps / 8 * 0.040)
        minPackets = 5
    }
}

/// The pacing logic, on caller-given times (µs): queued packets leave at the pacing rate in bursts
/// of at most 40 ms of it (as libwebrtc's pacer now does: a small frame leaves at once, a large one
/// is spread), 5 ms while probing (a probe's timing is its measurement), by priority (audio at
/// once, then retransmissions, then video). The rate rises so that nothing waits over 2 s (as
/// libwebrtc's queue limit): a keyframe far larger than the path carries in a second (720p screen
/// content on a 0.3 Mbps path) then leaves over up to 2 s, not faster than the bottleneck's queue
/// can hold it. During a probe the rate is the probe's, and when no media is queued the padding
/// source fills the gap (RTX copies of recent video packets).
struct PacingQueue {
    struct Released {
        var packet: RTPPacket
        var probeCluster: Int?
    }

    static let burstUs: Int64 = 40_000
    static let probeBurstUs: Int64 = 5_000
    static let maxQueueUs: Int64 = 2_000_000
    /// A probe that cannot finish within this long (nothing to send, or a padding source that
    /// gives out) ends with what it sent.
    static let probeTimeoutUs: Int64 = 500_000

    /// The pacing rate without a probe or a backlog (the owner sets 2.5 x the estimate).
    var pacingBps: Double
    /// Per priority: packets with the time they were queued.
    private var queues = PacketPriority.allCases.map { _ in CircularBuffer<(packet: RTPPacket, queuedUs: Int64)>() }
    private(set) var queuedBytes = 0
    /// Bytes sent ahead of the rate; paid off at the rate as time passes.
    private var debtBytes = 0.0
    private var lastUs: Int64?
    private var probe: (cluster: ProbeCluster, bytes: Int, packets: Int, startUs: Int64?)?

    init(pacingBps: Double) { self.pacingBps = pacingBps }

    var queuedPackets: Int { queues.reduce(0) { $0 + $1.count } }
    var isProbing: Bool { probe != nil }

    mutating func enqueue(_ packets: [RTPPacket], priority: PacketPriority, nowUs: Int64) {
        for packet in packets {
            queues[priority.rawValue].append((packet, nowUs))
            queuedBytes += packet.serializedSize
        }
    }

    /// Starts a probe (replacing one under way).
    mutating func startProbe(_ cluster: ProbeCluster) { probe = (cluster, 0, 0, nil) }

    /// The rate at `nowUs`: the probe's, or the pacing rate raised so that the backlog has left
    /// by the time its oldest packet has waited 2 s.
    func rateBps(nowUs: Int64) -> Double {
        if let probe { return probe.cluster.bps }
        let oldest = queues.compactMap { $0.first?.queuedUs }.min() ?? nowUs
        let leftUs = max(Self.maxQueueUs - (nowUs - oldest), 10_000)
        // What was sent ahead of the rate (a burst) is still to be paid off before the deadline too.
        return max(pacingBps, (Double(queuedBytes) + debtBytes) * 8 / (Double(leftUs) / 1e6), 8_000)
    }

    /// How far ahead of the rate sending may run.
    private func burstBytes(nowUs: Int64) -> Double {
        rateBps(nowUs: nowUs) / 8 * Double(probe == nil ? Self.burstUs : Self.probeBurstUs) / 1e6
    }

    /// The packets that leave now and when to call again (nil: nothing is waiting).
    mutating func release(nowUs: Int64, padding: () -> RTPPacket?) -> (released: [Released], nextUs: Int64?) {
        if let last = lastUs { debtBytes = max(0, debtBytes - rateBps(nowUs: last) / 8 * Double(max(0, nowUs - last)) / 1e6) }
        lastUs = nowUs
        if let started = probe?.startUs, nowUs - started > Self.probeTimeoutUs { probe = nil }
        var released: [Released] = []
        // Audio goes at once; it still counts against the rate.
        while let item = queues[PacketPriority.audio.rawValue].popFirst() { released.append(send(item.packet, nowUs: nowUs)) }
        while debtBytes < burstBytes(nowUs: nowUs) {
            if let item = queues[PacketPriority.retransmission.rawValue].popFirst() ?? queues[PacketPriority.video.rawValue].popFirst() {
                released.append(send(item.packet, nowUs: nowUs))
            } else if probe != nil, let packet = padding() {
                queuedBytes += packet.serializedSize
                released.append(send(packet, nowUs: nowUs))
            } else {
                if probe != nil { probe = nil }  // nothing to probe with
                break
            }
        }
        guard queuedPackets > 0 || probe != nil else { return (released, nil) }
        // When the debt is down to one burst again.
        let waitUs = (debtBytes - burstBytes(nowUs: nowUs)) / (rateBps(nowUs: nowUs) / 8) * 1e6
        return (released, nowUs + max(Int64(waitUs), 500))
    }

    private mutating func send(_ packet: RTPPacket, nowUs: Int64) -> Released {
        let size = packet.serializedSize
        queuedBytes -= size
        debtBytes += Double(size)
        guard var current = probe else { return Released(packet: packet, probeCluster: nil) }
        current.bytes += size
        current.packets += 1
        current.startUs = current.startUs ?? nowUs
        probe = current.bytes >= current.cluster.minBytes && current.packets >= current.cluster.minPackets ? nil : current
        return Released(packet: packet, probeCluster: current.cluster.id)
    }
}
