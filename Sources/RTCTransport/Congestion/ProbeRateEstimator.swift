/// What a probe cluster measured: the rate its packets left at and the rate they arrived at (from
/// transport-wide feedback). A path that carries the probe's rate delivers it at that rate; a
/// narrower one spreads the packets out to its own capacity. The estimate is the smaller of the
/// two, and a little under the arrival rate when the path clearly saturated (as libwebrtc's
/// probe bitrate estimator does). Pure logic, caller-given times (µs).
public struct ProbeRateEstimator: Sendable {
    public init() {}

    private struct Cluster {
        var firstSendUs = Int64.max, lastSendUs = Int64.min, lastSendSize = 0
        var firstArrivalUs = Int64.max, lastArrivalUs = Int64.min, firstArrivalSize = 0
        var bytes = 0
        var packets = 0
        var touchedUs: Int64 = 0
    }

    /// Received packets a cluster needs before it says anything (of the 5 sent at the least).
    static let minPackets = 4
    private var clusters: [Int: Cluster] = [:]

    /// Takes the feedback's received packets that belong to probe clusters; returns the rate the
    /// best cluster of this report measured (bits per second), if any measured one.
    public mutating func update(feedback: [BandwidthEstimator.PacketResult], nowUs: Int64) -> Double? {
        var touched: Set<Int> = []
        for packet in feedback {
            guard let id = packet.probeCluster, let arrival = packet.arrivalTimeUs else { continue }
            var cluster = clusters[id] ?? Cluster()
            if packet.sendTimeUs < cluster.firstSendUs { cluster.firstSendUs = packet.sendTimeUs }
            if packet.sendTimeUs >= cluster.lastSendUs {
                cluster.lastSendUs = packet.sendTimeUs
                cluster.lastSendSize = packet.size
            }
            if arrival < cluster.firstArrivalUs {
                cluster.firstArrivalUs = arrival
                cluster.firstArrivalSize = packet.size
            }
            cluster.lastArrivalUs = max(cluster.lastArrivalUs, arrival)
            cluster.bytes += packet.size
            cluster.packets += 1
            cluster.touchedUs = nowUs
            clusters[id] = cluster
            touched.insert(id)
        }
        clusters = clusters.filter { nowUs - $0.value.touchedUs < 5_000_000 }
        return touched.compactMap { clusters[$0].flatMap(Self.rate) }.max()
    }

    private static func rate(of cluster: Cluster) -> Double? {
        guard cluster.packets >= minPackets else { return nil }
        let sendSpan = Double(cluster.lastSendUs - cluster.firstSendUs) / 1e6
        let arrivalSpan = Double(cluster.lastArrivalUs - cluster.firstArrivalUs) / 1e6
        // Too short to time (a burst), or too long to be one probe.
        guard sendSpan >= 0.001, sendSpan <= 1, arrivalSpan >= 0.001 else { return nil }
        // The last packet's bits leave after the send span ends; the first's arrive before the arrival span starts.
        let sendBps = Double(cluster.bytes - cluster.lastSendSize) * 8 / sendSpan
        let arrivalBps = Double(cluster.bytes - cluster.firstArrivalSize) * 8 / arrivalSpan
        // Arrivals squeezed far closer than they left: a timing artefact, not a fast path.
        guard arrivalBps <= 2 * sendBps else { return nil }
        if arrivalBps < 0.9 * sendBps { return 0.95 * arrivalBps }
        return min(sendBps, arrivalBps)
    }
}
