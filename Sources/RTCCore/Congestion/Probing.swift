import RTCTransport

/// What a probe cluster measured: the rate its packets left at and the rate they arrived at (from
/// transport-wide feedback). A path that carries the probe's rate delivers it at that rate; a
/// narrower one spreads the packets out to its own capacity. The estimate is the smaller of the
/// two, and a little under the arrival rate when the path clearly saturated (as libwebrtc's
/// probe bitrate estimator does). Pure logic, caller-given times (µs).
struct ProbeRateEstimator: Sendable {
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
    mutating func update(feedback: [BandwidthEstimator.PacketResult], nowUs: Int64) -> Double? {
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

/// When to probe (in the spirit of libwebrtc's probe controller): while the estimate sits below
/// what the app wants to send, a short cluster at twice the estimate every 3 s; and at once again,
/// at twice the new estimate, after a probe that the path carried (its result at least 70 % of its
/// rate), unless that one was at the maximum already. Only on a calm path: no standing queue, no
/// overuse, no cut in the last second (a probe into a queue measures the queue's drain rate, not
/// spare capacity). A path whose capacity came back is then found in a few round trips instead of
/// by a blind ramp.
struct ProbeController: Sendable {
    static let intervalUs: Int64 = 3_000_000
    static let calmAfterCutUs: Int64 = 1_000_000
    static let calmQueueMs = 20.0
    /// Probe only while the estimate is under this share of the maximum.
    static let headroom = 0.9

    private var nextID = 1
    private var lastProbeUs: Int64?
    private var lastProbeBps: Double?

    /// A probe to send now, if one is due. `probeResult` is what a probe reported in this
    /// feedback, if any.
    mutating func next(estimateBps: Double, maximumBps: Double, queueDelayMs: Double, overusing: Bool, lastDecreaseUs: Int64?,
                       probeResult: Double?, nowUs: Int64) -> ProbeCluster? {
        guard estimateBps < Self.headroom * maximumBps else {
            lastProbeBps = nil
            return nil
        }
        guard !overusing, queueDelayMs < Self.calmQueueMs, nowUs - (lastDecreaseUs ?? .min / 2) >= Self.calmAfterCutUs else { return nil }
        let further = if let result = probeResult, let sent = lastProbeBps { result >= 0.7 * sent } else { false }
        if !further, let last = lastProbeUs, nowUs - last < Self.intervalUs { return nil }
        let bps = min(2 * estimateBps, maximumBps)
        guard bps > estimateBps * 1.1 else { return nil }
        lastProbeUs = nowUs
        // A probe at the maximum is the last of a series.
        lastProbeBps = bps < maximumBps ? bps : nil
        defer { nextID += 1 }
        return ProbeCluster(id: nextID, bps: bps)
    }
}
