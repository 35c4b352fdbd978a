import RTCTransport

/// One probe of a subscriber's leg for the capacity a larger simulcast layer needs: for a while
/// (``LayerController/probeDurationMs``) the leg is sent padding on top of its media, and every
/// packet sent meanwhile, media included, is logged in the probe's cluster. Once feedback has
/// covered it, the rate the later half of its bytes arrived at is what the leg carries: a token
/// bucket lets its first bytes through at once (a burst says nothing of the rate behind it), and a
/// path that cannot carry the probe spreads its tail out to the path's own rate. Pure logic on
/// caller-given times (µs).
struct LegProbe {
    let cluster: Int
    let startUs: Int64
    private(set) var endUs: Int64
    /// Stopped early: the leg began to queue (or lose) under it, so it cannot carry the target.
    private(set) var aborted = false
    /// The rate the leg was probed at (media and padding).
    let targetBps: Double
    private var arrivals: [(arrivalUs: Int64, size: Int)] = []
    private(set) var lost = 0

    /// Packets the measurement needs in its later half.
    static let minPackets = 5
    /// Feedback for the probe's last packets is awaited this long after it ends.
    static let settleUs: Int64 = 500_000

    init(cluster: Int, startUs: Int64, durationUs: Int64, targetBps: Double) {
        self.cluster = cluster
        self.startUs = startUs
        endUs = startUs + durationUs
        self.targetBps = targetBps
    }

    /// Stops the probe now (the leg queues under it); it then vouches for nothing.
    mutating func abort(nowUs: Int64) {
        guard !aborted, nowUs < endUs else { return }
        aborted = true
        endUs = nowUs
    }

    /// Whether padding is still to be sent at `nowUs`.
    func isRunning(nowUs: Int64) -> Bool { !aborted && nowUs < endUs }

    /// Whether a packet sent now belongs to the probe.
    func covers(sendUs: Int64) -> Bool { sendUs >= startUs && sendUs < endUs }

    /// Takes the probe's packets from a feedback report.
    mutating func add(_ results: [BandwidthEstimator.PacketResult]) {
        for result in results where result.probeCluster == cluster {
            if let arrival = result.arrivalTimeUs { arrivals.append((arrival, result.size)) } else { lost += 1 }
        }
    }

    /// Whether feedback has had time to cover the whole probe.
    func isSettled(nowUs: Int64) -> Bool { nowUs >= endUs + Self.settleUs }

    /// The rate the later half of the probe's bytes arrived at (bits per second); nil with too little to tell.
    func measuredBps() -> Double? {
        guard !aborted else { return nil }
        let sorted = arrivals.sorted { $0.arrivalUs < $1.arrivalUs }
        let total = sorted.reduce(0) { $0 + $1.size }
        var seen = 0
        guard let half = sorted.firstIndex(where: { seen += $0.size; return seen * 2 >= total }) else { return nil }
        let tail = sorted[half...]
        guard tail.count >= Self.minPackets, let first = tail.first, let last = tail.last, last.arrivalUs > first.arrivalUs else { return nil }
        let bytes = tail.dropFirst().reduce(0) { $0 + $1.size }
        return Double(bytes * 8) / (Double(last.arrivalUs - first.arrivalUs) / 1e6)
    }
}
