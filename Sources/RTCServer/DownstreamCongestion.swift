import NIOCore
import RTCTransport

/// Transport-wide congestion control on one subscriber's downstream leg. The publisher's
/// transport-wide numbers mean nothing on this leg, so the SFU writes its own into every packet it
/// sends the subscriber (in place: the publisher's extension element is reused), logs when and how
/// much it sent, and runs a ``BandwidthEstimator`` on the subscriber's feedback. Confined to the
/// SFU's event loop.
struct DownstreamCongestion {
    /// The extension id the subscriber's answer kept for the transport-wide number; nil: no TWCC on this leg.
    var extensionID: UInt8?
    private var nextSequence: UInt16 = 0
    private var log = SendLog()
    /// Cuts from the acknowledged average (``BandwidthEstimator/cutsFromBusyRate``).
    private(set) var estimator = BandwidthEstimator(startBps: DownstreamCongestion.maximumBps, minimumBps: 100_000,
                                                    maximumBps: DownstreamCongestion.maximumBps, cutsFromBusyRate: false)
    private(set) var lastFeedbackUs: Int64?
    private(set) var feedbackReports = 0
    /// The probe running or awaiting its feedback (simulcast up-switches need capacity the layer
    /// being sent does not show), and what the last one found: the rate it probed at and measured.
    private(set) var probe: LegProbe?
    private(set) var lastProbe: (targetBps: Double, measuredBps: Double?, atUs: Int64)?
    private var nextProbeCluster = 1

    /// Where a leg's estimate starts and stops: a leg carries what publishers send, so the
    /// estimate only has to come down when the path cannot carry that.
    static let maximumBps = 20_000_000.0
    /// An estimate without feedback for this long is stale.
    static let staleAfterUs: Int64 = 2_000_000

    /// Where the publisher's transport-wide number sits in a packet it sent (`sourceID`: the
    /// publisher's extension id for it), found once per packet for all the legs it goes out on.
    static func sequenceOffset(in header: RTPHeader, sourceID: UInt8?) -> (id: UInt8, offset: Int)? {
        guard let sourceID, let at = header.extensionDataOffset(id: sourceID), at.length == 2 else { return nil }
        return (sourceID, at.offset)
    }

    /// Writes the leg's next transport-wide number into a serialized packet at `at` (from
    /// ``sequenceOffset(in:sourceID:)``), when the leg negotiated the extension under the same id
    /// (the extension block is forwarded as the publisher wrote it), and logs it as sent now.
    /// While a probe runs, every packet sent is in its cluster.
    mutating func stamp(_ packet: inout ByteBuffer, at: (id: UInt8, offset: Int)?, nowUs: Int64) {
        guard let at, at.id == extensionID else { return }
        packet.setInteger(nextSequence, at: packet.readerIndex + at.offset)
        let cluster = probe.flatMap { $0.covers(sendUs: nowUs) ? $0.cluster : nil }
        log.record(sequence: nextSequence, bytes: packet.readableBytes, sendUs: nowUs, probeCluster: cluster)
        nextSequence &+= 1
    }

    /// Whether the running probe may go on sending: it stops at the first sign that the leg
    /// queues or loses under it (overuse, a standing queue of 30 ms): a capped leg is hurt for a
    /// feedback interval or two, never for the whole probe.
    mutating func continueProbe(nowUs: Int64) -> Bool {
        guard var running = probe, running.isRunning(nowUs: nowUs) else { return false }
        if estimator.usage == .overusing || estimator.queueDelayMs > 30 || (estimator.lastDecreaseUs ?? .min) > running.startUs {
            running.abort(nowUs: nowUs)
            probe = running
            return false
        }
        return true
    }

    /// Forgets a probe whose feedback never came.
    mutating func abandonProbe(nowUs: Int64) {
        guard let running = probe, nowUs > running.endUs + 3_000_000 else { return }
        lastProbe = (running.targetBps, nil, nowUs)
        probe = nil
    }

    /// Starts a probe at `targetBps` for `durationUs` (the caller sends the padding).
    mutating func startProbe(targetBps: Double, durationUs: Int64, nowUs: Int64) {
        defer { nextProbeCluster += 1 }
        probe = LegProbe(cluster: nextProbeCluster, startUs: nowUs, durationUs: durationUs, targetBps: targetBps)
    }

    /// Whether the leg is calm enough to probe: feedback flows, no overuse, no standing queue, no
    /// cut in the last second (a probe into a queue measures its drain rate, not spare capacity).
    func mayProbe(nowUs: Int64) -> Bool {
        guard probe == nil, estimateBps(nowUs: nowUs) != nil, estimator.usage != .overusing, estimator.queueDelayMs < 20 else { return false }
        return nowUs - (estimator.lastDecreaseUs ?? .min / 2) >= 1_000_000
    }

    /// Packets the feedback since the last connection-quality tick covered, and of those lost
    /// (``SFU/reportConnectionQuality()`` reads and resets them).
    var qualityWindow: (packets: Int, lost: Int) = (0, 0)

    /// Takes the subscriber's transport-wide feedback.
    mutating func received(_ feedback: TransportFeedback, nowUs: Int64, rttMs: Double) {
        let results = log.results(for: feedback)
        guard !results.isEmpty else { return }
        qualityWindow.packets += results.count
        for result in results where result.arrivalTimeUs == nil { qualityWindow.lost += 1 }
        estimator.update(feedback: results, nowUs: nowUs, rttMs: rttMs)
        if var running = probe {
            running.add(results)
            probe = running
            if running.isSettled(nowUs: nowUs) {
                let measured = running.measuredBps()
                lastProbe = (running.targetBps, measured, nowUs)
                probe = nil
                if let measured { estimator.applyProbe(bps: measured) }
            }
        }
        lastFeedbackUs = nowUs
        feedbackReports += 1
    }

    /// Retransmissions may spend a quarter of the estimate (a bucket of up to 200 ms of it): on a
    /// leg that is over its capacity, repairs for the losses would otherwise add to the overload.
    /// The bucket holds one full packet at least: under 192 kbit/s 200 ms of a quarter is less than
    /// one, and no repair could ever go (a viewer moved to the smallest layer on a collapsed link
    /// then waited out every loss and asked for a keyframe through the queue: 1-2 s frozen).
    /// It starts full: a leg whose first repair is asked for after a collapse (every NACK before
    /// was for a layer it had left, which never reaches the bucket) would otherwise be refused
    /// it, and wait out a refill at a quarter of the 100 kbit/s floor (about 400 ms).
    private var retransmissions = RetransmissionBudget(share: 0.25, windowUs: 200_000, floorBytes: 1500, startsFull: true)

    /// Whether a repair of `bytes` fits the leg's budget now (always, without an estimate).
    mutating func mayRetransmit(bytes: Int, nowUs: Int64) -> Bool {
        // Of what the leg delivers, when more than its estimate: an estimate cut to its floor by a
        // collapse (a queue that stands for a second reads as overuse all along) left repairs one
        // per 400 ms while the link still delivered 400 kbit/s.
        let estimate = estimateBps(nowUs: nowUs).map { max($0, estimator.acknowledgedBps ?? 0) }
        return retransmissions.mayRetransmit(bytes: bytes, estimateBps: estimate, nowUs: nowUs)
    }

    /// The estimate the latest limit to publishers was computed from: a fall of 10 % below it sends
    /// the limits at once rather than at the next second.
    var reportedBps: Double?
    /// The estimate the leg's layers were last picked with: a fall of 15 % below it picks them
    /// again at once (``LayerController/updateAll(of:nowUs:)``).
    var layersChosenAtBps: Double?

    /// Whether the leg is queueing now (overuse, or a standing queue of 50 ms): what it is sent
    /// must also leave room for the queue to drain.
    var isCongested: Bool { estimator.usage == .overusing || estimator.queueDelayMs > Self.congestedQueueMs }
    static let congestedQueueMs = 50.0

    /// What the leg may be moved up to (bits per second): its estimate while the estimate never
    /// had to come down (the path showed no limit yet); after that, only what a probe of the last
    /// few seconds measured. An estimate grows with whatever a probe sent, and a leg sent less
    /// than its estimate keeps it: on a capped path it would promise a layer the path cannot carry.
    func upSwitchBps(nowUs: Int64) -> Double? {
        guard let estimate = estimateBps(nowUs: nowUs) else { return nil }
        guard estimator.lastDecreaseUs != nil else { return estimate }
        guard let last = lastProbe, nowUs - last.atUs < Self.probeValidUs, let measured = last.measuredBps else { return 0 }
        // A probe vouches for no more than it sent.
        return min(estimate, measured, last.targetBps)
    }

    /// How long a probe's measurement vouches for the leg.
    static let probeValidUs: Int64 = 6_000_000

    /// The leg's estimate (bits per second), while feedback keeps coming.
    func estimateBps(nowUs: Int64) -> Double? {
        guard let lastFeedbackUs, nowUs - lastFeedbackUs < Self.staleAfterUs else { return nil }
        return estimator.targetBps
    }
}
