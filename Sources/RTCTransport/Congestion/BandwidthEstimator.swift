#if canImport(Glibc)
import Glibc
#endif

/// A send-side bandwidth estimate in the spirit of GCC (draft-ietf-rmcat-gcc-02), fed by
/// transport-wide feedback: per packet, when it was sent, its size, and when it arrived (or that it
/// was lost). Pure logic on caller-given times (µs), so tests drive it with a simulated link and no
/// sleeps. The engine runs one per publisher transport (`SendSideCongestion`).
///
/// - Delay: packets sent within 5 ms form a group; the growth of one-way delay between groups goes
///   through a trendline filter (least-squares slope of the smoothed accumulated delay), compared with
///   an adaptive threshold: overuse, underuse or normal. A standing queue (the least delay of a
///   report over its 10 s floor) of 100 ms or more that still grows is overuse at once.
/// - Rate (AIMD): overuse cuts to 0.85 of the rate that was acknowledged, lower still in proportion
///   to the standing queue so that it drains; normal grows 8 %/s (faster the longer the path stays
///   calm) far from the last overuse point and about a packet per response time near it, never far
///   above what was acknowledged, and not while a queue stands; underuse holds. A sender that uses
///   less than its estimate keeps it.
/// - Loss: over 10 % with a standing queue (or over 20 % without one) cuts by half the loss, once
///   per 300 ms + RTT; under 2 % allows 5 % growth.
/// The estimate is the smaller of the two, within `minimumBps...maximumBps`.
public struct BandwidthEstimator: Sendable {
    public struct PacketResult: Sendable, Hashable {
        public var sendTimeUs: Int64
        public var size: Int
        /// Nil when the feedback reports it lost.
        public var arrivalTimeUs: Int64?
        /// The probe cluster the packet was sent in, if any.
        public var probeCluster: Int?

        public init(sendTimeUs: Int64, size: Int, arrivalTimeUs: Int64?, probeCluster: Int? = nil) {
            self.sendTimeUs = sendTimeUs
            self.size = size
            self.arrivalTimeUs = arrivalTimeUs
            self.probeCluster = probeCluster
        }
    }

    public enum Usage: Sendable, Hashable { case normal, overusing, underusing }

    public let minimumBps: Double
    public let maximumBps: Double
    public private(set) var usage: Usage = .normal
    private var delayBasedBps: Double
    private var lossBasedBps: Double
    /// What the receiver acknowledged over the last 500 ms (bits per second), nil before enough data.
    public private(set) var acknowledgedBps: Double?
    /// How fast the path delivered while it was busy, over the same 500 ms (bits per second): the
    /// arrivals' gaps of `busyGapUs` or more are idle time and left out, nil before enough busy
    /// time (and always nil without `cutsFromBusyRate`, which is what it is measured for). A sender
    /// of large, far-apart frames (screen content) acknowledges little on average while each frame
    /// crosses at the path's rate; this is that rate.
    public private(set) var deliveryRateBps: Double?
    /// Whether an overuse cuts from (and growth stays near) the busy rate when it is the larger: a
    /// sender whose own rate follows the estimate (an encoder) needs it, or its large frames far
    /// apart spiral the estimate down. The SFU's legs leave it off: a leg whose link collapses
    /// has its last 500 ms of fast arrivals in that rate and is cut too little, and in the
    /// collapse tests across namespaces the viewer's longest gap was over 600 ms in 9 of 35
    /// collapses with it on the legs, 2 of 16 without (noisy figures, docs/resilience.md).
    public let cutsFromBusyRate: Bool
    /// What the path is known to carry: the larger of the two rates above (the rate an overuse cuts
    /// from, and the one growth stays near); the average alone without `cutsFromBusyRate`.
    public var measuredBps: Double? {
        guard cutsFromBusyRate else { return acknowledgedBps }
        return switch (acknowledgedBps, deliveryRateBps) {
        case let (average?, busy?): max(average, busy)
        case let (average, busy): average ?? busy
        }
    }

    // Arrival groups.
    private var group: (firstSendUs: Int64, lastSendUs: Int64, lastArrivalUs: Int64)?
    private var previousGroup: (sendUs: Int64, arrivalUs: Int64)?
    // Trendline filter.
    private var accumulatedDelayMs = 0.0
    private var smoothedDelayMs = 0.0
    private var samples: [(arrivalMs: Double, delayMs: Double)] = []
    private var deltaCount = 0
    private var firstArrivalUs: Int64?
    // Overuse detector.
    private var threshold = 12.5
    private var overuseStartUs: Int64?
    private var previousTrend = 0.0
    private var lastThresholdUpdateUs: Int64?
    // Rate control.
    private var lastUpdateUs: Int64?
    private var firstUpdateUs: Int64?
    private var linkCapacityBps: Double?
    /// When the delay-based rate was last cut.
    public private(set) var lastDecreaseUs: Int64?
    private var lastLossDecreaseUs: Int64?
    private var acknowledged: [(arrivalUs: Int64, bytes: Int)] = []
    // Standing queue: one-way delay (arrival minus send, clocks unsynchronised) over its minimum
    // of the last 10 s, per 1 s bucket so the minimum can age out.
    private var delayFloors: [(startUs: Int64, minimumUs: Int64)] = []
    /// The least one-way delay of the last report above the path's floor: the standing queue (ms).
    public private(set) var queueDelayMs = 0.0

    static let groupSpanUs: Int64 = 5_000
    static let trendWindow = 20
    static let smoothing = 0.9
    static let trendGain = 4.0
    static let overuseTimeUs: Int64 = 10_000
    /// A standing queue this long (ms) holds the rate; the cut grows with the queue up to this one.
    static let standingQueueMs = 60.0
    static let drainTargetMs = 500.0
    static let fastOveruseMs = 100.0
    /// A standing queue this long (ms) makes loss over 10 % count as congestion.
    static let lossQueueMs = 30.0
    /// Arrivals this far apart are idle time, not the path at work: a 1200-byte packet every
    /// 30 ms is 320 kbps, so a path slower than that (its packets always this far apart) is
    /// measured by the average alone.
    static let busyGapUs: Int64 = 30_000
    /// Busy time to measure over: at least this long, in at least `busyMinimumGaps` gaps (a few
    /// packets delivered in one batch say nothing of the rate).
    static let busyMinimumUs: Int64 = 20_000
    static let busyMinimumGaps = 8

    public init(startBps: Double = 300_000, minimumBps: Double = 50_000, maximumBps: Double = 2_500_000, cutsFromBusyRate: Bool = true) {
        self.cutsFromBusyRate = cutsFromBusyRate
        self.minimumBps = minimumBps
        self.maximumBps = maximumBps
        delayBasedBps = startBps
        lossBasedBps = startBps
    }

    /// The current target send rate, bits per second.
    public var targetBps: Double { min(max(min(delayBasedBps, lossBasedBps), minimumBps), maximumBps) }

    /// Takes one feedback report (packets in send order) received at `nowUs`, with the current
    /// round-trip time; returns the new target.
    @discardableResult
    public mutating func update(feedback: [PacketResult], nowUs: Int64, rttMs: Double = 100) -> Double {
        guard !feedback.isEmpty else { return targetBps }
        var lost = 0
        var leastDelayUs: Int64?
        for packet in feedback {
            guard let arrival = packet.arrivalTimeUs else {
                lost += 1
                continue
            }
            acknowledged.append((arrival, packet.size))
            addToGroup(sendUs: packet.sendTimeUs, arrivalUs: arrival, nowUs: nowUs)
            recordOneWayDelay(arrival - packet.sendTimeUs, arrivalUs: arrival)
            leastDelayUs = min(leastDelayUs ?? .max, arrival - packet.sendTimeUs)
        }
        // The least delayed packet of the report: a standing queue delays every packet, while a
        // frame sent as a burst into a slow link only delays its own tail.
        let previousQueueDelayMs = queueDelayMs
        if let least = leastDelayUs, let floor = delayFloors.lazy.map(\.minimumUs).min() { queueDelayMs = Double(least - floor) / 1000 }
        // A standing queue that is long and still growing is overuse now, whatever the trendline
        // (which needs a few hundred ms of groups to turn): a sudden drop in capacity fills the
        // queue faster than the filter sees it.
        if queueDelayMs >= Self.fastOveruseMs && queueDelayMs > previousQueueDelayMs { usage = .overusing }
        if let latest = acknowledged.last?.arrivalUs {
            acknowledged.removeAll { $0.arrivalUs < latest - 500_000 }
            if let first = acknowledged.first?.arrivalUs, latest - first >= 200_000 {
                let bits = Double(acknowledged.reduce(0) { $0 + $1.bytes } * 8)
                acknowledgedBps = bits / (Double(latest - first) / 1e6)
            }
            if cutsFromBusyRate { deliveryRateBps = Self.busyRate(acknowledged) }
        }
        updateDelayBased(nowUs: nowUs, rttMs: rttMs)
        updateLossBased(lossFraction: Double(lost) / Double(feedback.count), nowUs: nowUs, rttMs: rttMs)
        return targetBps
    }

    /// Bits per second over the busy time of `arrivals` (in feedback order): each gap under
    /// `busyGapUs` counts with the bytes of the packet that ended it. Nil with too little busy time.
    static func busyRate(_ arrivals: [(arrivalUs: Int64, bytes: Int)]) -> Double? {
        var busyUs: Int64 = 0, bytes = 0, gaps = 0
        for (previous, packet) in zip(arrivals, arrivals.dropFirst()) {
            let gap = max(packet.arrivalUs - previous.arrivalUs, 0)
            guard gap < busyGapUs else { continue }
            busyUs += gap
            bytes += packet.bytes
            gaps += 1
        }
        guard busyUs >= busyMinimumUs, gaps >= busyMinimumGaps else { return nil }
        return Double(bytes * 8) / (Double(busyUs) / 1e6)
    }

    /// A probe measured that the path carries `bps`: the estimate jumps to it when that is more
    /// (a capacity that came back), and the capacity seen at the last overuse is forgotten. Not
    /// while overusing or over a standing queue: a probe then measures how fast the queue drains.
    public mutating func applyProbe(bps: Double) {
        guard bps > delayBasedBps, usage != .overusing, queueDelayMs < Self.lossQueueMs else { return }
        delayBasedBps = min(bps, maximumBps)
        lossBasedBps = max(lossBasedBps, delayBasedBps)
        linkCapacityBps = nil
    }

    // MARK: Delay

    private mutating func recordOneWayDelay(_ delayUs: Int64, arrivalUs: Int64) {
        if let last = delayFloors.last, arrivalUs - last.startUs < 1_000_000 {
            delayFloors[delayFloors.count - 1].minimumUs = min(last.minimumUs, delayUs)
        } else {
            delayFloors.append((arrivalUs, delayUs))
            if delayFloors.count > 10 { delayFloors.removeFirst() }
        }
    }

    private mutating func addToGroup(sendUs: Int64, arrivalUs: Int64, nowUs: Int64) {
        guard var current = group else {
            group = (sendUs, sendUs, arrivalUs)
            return
        }
        if sendUs - current.firstSendUs <= Self.groupSpanUs {
            current.lastSendUs = max(current.lastSendUs, sendUs)
            current.lastArrivalUs = max(current.lastArrivalUs, arrivalUs)
            group = current
            return
        }
        // The group is complete: compare it with the one before.
        if let previous = previousGroup {
            let sendDeltaMs = Double(current.lastSendUs - previous.sendUs) / 1000
            let arrivalDeltaMs = Double(current.lastArrivalUs - previous.arrivalUs) / 1000
            trendline(delayDeltaMs: arrivalDeltaMs - sendDeltaMs, arrivalUs: current.lastArrivalUs, nowUs: nowUs)
        }
        previousGroup = (current.lastSendUs, current.lastArrivalUs)
        group = (sendUs, sendUs, arrivalUs)
    }

    private mutating func trendline(delayDeltaMs: Double, arrivalUs: Int64, nowUs: Int64) {
        deltaCount = min(deltaCount + 1, 1000)
        let first = firstArrivalUs ?? arrivalUs
        firstArrivalUs = first
        accumulatedDelayMs += delayDeltaMs
        smoothedDelayMs = Self.smoothing * smoothedDelayMs + (1 - Self.smoothing) * accumulatedDelayMs
        samples.append((Double(arrivalUs - first) / 1000, smoothedDelayMs))
        if samples.count > Self.trendWindow { samples.removeFirst() }
        guard samples.count == Self.trendWindow else { return }
        let meanX = samples.reduce(0) { $0 + $1.arrivalMs } / Double(samples.count)
        let meanY = samples.reduce(0) { $0 + $1.delayMs } / Double(samples.count)
        var numerator = 0.0, denominator = 0.0
        for sample in samples {
            numerator += (sample.arrivalMs - meanX) * (sample.delayMs - meanY)
            denominator += (sample.arrivalMs - meanX) * (sample.arrivalMs - meanX)
        }
        let slope = denominator == 0 ? 0 : numerator / denominator
        detect(trend: slope * Double(min(deltaCount, 60)) * Self.trendGain, nowUs: nowUs)
    }

    private mutating func detect(trend: Double, nowUs: Int64) {
        if trend > threshold {
            let start = overuseStartUs ?? nowUs
            overuseStartUs = start
            if nowUs - start >= Self.overuseTimeUs, trend >= previousTrend { usage = .overusing }
        } else if trend < -threshold {
            overuseStartUs = nil
            usage = .underusing
        } else {
            overuseStartUs = nil
            usage = .normal
        }
        previousTrend = trend
        adaptThreshold(trend: trend, nowUs: nowUs)
    }

    /// The threshold follows the trend slowly upward and faster downward, so it tolerates a noisy
    /// path without losing to a loss-based competitor (the draft's §5.4).
    private mutating func adaptThreshold(trend: Double, nowUs: Int64) {
        let last = lastThresholdUpdateUs ?? nowUs
        lastThresholdUpdateUs = nowUs
        guard abs(trend) <= threshold + 15 else { return }
        let gain = abs(trend) < threshold ? 0.039 : 0.0087
        let elapsedMs = min(Double(nowUs - last) / 1000, 100)
        threshold = min(max(threshold + gain * (abs(trend) - threshold) * elapsedMs, 6), 600)
    }

    private mutating func updateDelayBased(nowUs: Int64, rttMs: Double) {
        let elapsed = Double(nowUs - (lastUpdateUs ?? nowUs)) / 1e6
        lastUpdateUs = nowUs
        if firstUpdateUs == nil { firstUpdateUs = nowUs }
        switch usage {
        case .overusing:
            // At most one cut per response time: the queue needs that long to show the effect.
            if let last = lastDecreaseUs, Double(nowUs - last) / 1000 < max(rttMs, 100) { return }
            // Below what got through, and further below it the longer the standing queue: 0.85 of
            // the acknowledged rate only drains a queue at 15 % of the capacity, so a queue built
            // while the drop went unseen (2.5 → 0.5 Mbps) would stand for seconds.
            let measured = measuredBps ?? delayBasedBps
            let cut = 0.85 * measured * min(max(1 - queueDelayMs / Self.drainTargetMs, 0.4), 1)
            linkCapacityBps = measured
            delayBasedBps = min(delayBasedBps, max(cut, minimumBps))
            lastDecreaseUs = nowUs
        case .underusing:
            break  // hold while the queue drains
        case .normal:
            // No growth over a standing queue: it is still draining.
            guard elapsed > 0, queueDelayMs < Self.standingQueueMs else { return }
            // The path carries clearly more than the capacity last seen: that estimate is stale.
            if let capacity = linkCapacityBps, let measured = measuredBps, measured > 1.25 * capacity { linkCapacityBps = nil }
            let before = delayBasedBps
            let nearCapacity = linkCapacityBps.map { abs(delayBasedBps - $0) < 0.15 * $0 } ?? false
            if nearCapacity {
                // About one 1200-byte packet more per response time.
                let responseTime = (rttMs + 100) / 1000
                delayBasedBps += max(1_000, 1_200 * 8 / responseTime * elapsed)
            } else {
                // 8 %/s as the draft says, quickening the longer no overuse was seen, so a path that
                // came back (0.5 → 2.5 Mbps) is found within seconds rather than the 21 s of 8 %/s.
                let calmSeconds = Double(nowUs - (lastDecreaseUs ?? firstUpdateUs ?? nowUs)) / 1e6
                delayBasedBps *= pow(1.08 + 0.05 * min(max(calmSeconds, 0), 8), min(elapsed, 1))
                if let capacity = linkCapacityBps, delayBasedBps > 1.5 * capacity { linkCapacityBps = nil }
            }
            // Never grow far ahead of what the receiver actually acknowledged; but a sender that
            // uses less than its estimate (a still screen sends little) keeps what it has: a quiet
            // path is no sign of a narrow one.
            if let measured = measuredBps { delayBasedBps = max(before, min(delayBasedBps, 1.5 * measured + 10_000)) }
            delayBasedBps = min(delayBasedBps, maximumBps)
        }
    }

    // MARK: Loss

    private mutating func updateLossBased(lossFraction: Double, nowUs: Int64, rttMs: Double) {
        // Over 10 % is congestion when a queue stands behind it; with a flat delay the path is
        // losing packets at random (radio, a policer-free lossy link) and only heavy loss cuts:
        // NACK repairs the rest, and cutting would only starve the encoder.
        let queued = queueDelayMs >= Self.lossQueueMs || usage == .overusing
        if lossFraction > (queued ? 0.10 : 0.20) {
            // One cut per 300 ms plus a round trip: the losses of one episode show up in several
            // feedback reports, and compounding them would collapse the rate.
            if let last = lastLossDecreaseUs, Double(nowUs - last) / 1000 < 300 + rttMs { return }
            lastLossDecreaseUs = nowUs
            lossBasedBps = max(minimumBps, min(lossBasedBps, delayBasedBps) * (1 - 0.5 * lossFraction))
        } else if lossFraction < 0.02 {
            lossBasedBps = min(maximumBps, max(lossBasedBps, delayBasedBps) * 1.05)
        }
    }
}
