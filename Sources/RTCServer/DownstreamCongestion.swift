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
    private(set) var estimator = BandwidthEstimator(startBps: DownstreamCongestion.maximumBps, minimumBps: 100_000,
                                                    maximumBps: DownstreamCongestion.maximumBps)
    private(set) var lastFeedbackUs: Int64?
    private(set) var feedbackReports = 0
    /// What probe clusters sent on the leg measured (simulcast up-switches need capacity the
    /// layer being sent does not show).
    private var probes = ProbeRateEstimator()
    private var nextProbeCluster = 1
    /// The latest probe result (bits per second), for tests and stats.
    private(set) var lastProbeBps: Double?

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
    mutating func stamp(_ packet: inout ByteBuffer, at: (id: UInt8, offset: Int)?, nowUs: Int64, probeCluster: Int? = nil) {
        guard let at, at.id == extensionID else { return }
        packet.setInteger(nextSequence, at: packet.readerIndex + at.offset)
        log.record(sequence: nextSequence, bytes: packet.readableBytes, sendUs: nowUs, probeCluster: probeCluster)
        nextSequence &+= 1
    }

    /// A new probe cluster's id.
    mutating func makeProbeCluster() -> Int {
        defer { nextProbeCluster += 1 }
        return nextProbeCluster
    }

    /// Whether the leg is calm enough to probe: feedback flows, no overuse, no standing queue, no
    /// cut in the last second (a probe into a queue measures its drain rate, not spare capacity).
    func mayProbe(nowUs: Int64) -> Bool {
        guard estimateBps(nowUs: nowUs) != nil, estimator.usage != .overusing, estimator.queueDelayMs < 20 else { return false }
        return nowUs - (estimator.lastDecreaseUs ?? .min / 2) >= 1_000_000
    }

    /// Takes the subscriber's transport-wide feedback.
    mutating func received(_ feedback: TransportFeedback, nowUs: Int64, rttMs: Double) {
        let results = log.results(for: feedback)
        guard !results.isEmpty else { return }
        estimator.update(feedback: results, nowUs: nowUs, rttMs: rttMs)
        if let measured = probes.update(feedback: results, nowUs: nowUs) {
            lastProbeBps = measured
            estimator.applyProbe(bps: measured)
        }
        lastFeedbackUs = nowUs
        feedbackReports += 1
    }

    /// Retransmissions may spend a quarter of the estimate (a bucket of up to 200 ms of it): on a
    /// leg that is over its capacity, repairs for the losses would otherwise add to the overload.
    private var retransmissions = RetransmissionBudget(share: 0.25, windowUs: 200_000)

    /// Whether a repair of `bytes` fits the leg's budget now (always, without an estimate).
    mutating func mayRetransmit(bytes: Int, nowUs: Int64) -> Bool {
        retransmissions.mayRetransmit(bytes: bytes, estimateBps: estimateBps(nowUs: nowUs), nowUs: nowUs)
    }

    /// The estimate the latest limit to publishers was computed from: a fall of 10 % below it sends
    /// the limits at once rather than at the next second.
    var reportedBps: Double?

    /// The leg's estimate (bits per second), while feedback keeps coming.
    func estimateBps(nowUs: Int64) -> Double? {
        guard let lastFeedbackUs, nowUs - lastFeedbackUs < Self.staleAfterUs else { return nil }
        return estimator.targetBps
    }
}
