import RTCTransport

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
