import RTCTransport
import Synchronization

/// The send side of congestion control for one publisher transport: logs what is sent, feeds the
/// server's transport-wide feedback to a ``BandwidthEstimator`` and turns its estimate into the
/// video encoder's target (the estimate minus what audio needs, within the app's bitrate). Thread
/// safe: packets are logged from the encode threads, feedback arrives on the network loop.
final class SendSideCongestion: Sendable {
    private struct State {
        var log = SendLog()
        var estimator: BandwidthEstimator
        var maximumVideoKbps: Int
        var floorVideoKbps = SendSideCongestion.minimumVideoKbps
        var appliedVideoKbps: Int?
        var appliedAtUs: Int64 = 0
        var lastFeedbackUs: Int64?
        var rttMs = 100.0
        var probes = ProbeRateEstimator()
        var probeController = ProbeController()
        /// A probe the controller asked for, until the pacer takes it.
        var pendingProbe: ProbeCluster?
        /// The server's limit for the slowest subscriber's path (REMB), and when it came.
        var receiverLimit: (bps: Double, atUs: Int64)?

        /// The video target for an estimate, within the receiver limit while it is fresh, the
        /// floor and the app's maximum; nil when it moved by less than 5 % within a second.
        mutating func videoTarget(estimateBps: Double, nowUs: Int64) -> Int? {
            var estimate = estimateBps
            if let limit = receiverLimit, nowUs - limit.atUs < SendSideCongestion.receiverLimitLifetimeUs { estimate = min(estimate, limit.bps) }
            let video = min(max(Int((estimate - SendSideCongestion.audioReserveBps) / 1000), floorVideoKbps), maximumVideoKbps)
            if let applied = appliedVideoKbps, abs(video - applied) * 20 < applied, nowUs - appliedAtUs < 1_000_000 {
                return nil
            }
            appliedVideoKbps = video
            appliedAtUs = nowUs
            return video
        }
    }

    /// A receiver limit not refreshed for this long no longer applies (the server sends one a second).
    static let receiverLimitLifetimeUs: Int64 = 3_000_000

    /// What audio is kept (Opus at 32 kbps plus RTP/UDP/SRTP overhead), bits per second.
    static let audioReserveBps = 48_000.0
    /// The least the video encoder is asked for.
    static let minimumVideoKbps = 60

    private let state: Mutex<State>

    init(videoKbps: Int = 1500) {
        state = Mutex(State(estimator: Self.estimator(videoKbps: videoKbps), maximumVideoKbps: videoKbps))
    }

    private static func estimator(videoKbps: Int) -> BandwidthEstimator {
        let maximum = Double(videoKbps) * 1000 + audioReserveBps
        return BandwidthEstimator(startBps: maximum, minimumBps: Double(minimumVideoKbps) * 1000 + audioReserveBps, maximumBps: maximum)
    }

    /// The least the encoder is asked for at `size` and `frameRate`: about the rate libvpx produces
    /// at its coarsest quantizer. Asked for less, it overshoots anyway and owes the difference,
    /// which it pays back later by dropping frames for seconds or by undershooting a rate that
    /// has recovered. Below it, pushback skips frames instead (the frame rate gives).
    static func encoderFloorKbps(size: VideoSize, frameRate: Int) -> Int {
        max(minimumVideoKbps, size.width * size.height * frameRate / 70_000)
    }

    /// The floor for a track: at the smallest size it may scale down to (half the bounds when the
    /// resolution may give, the bounds themselves otherwise).
    static func encoderFloorKbps(for configuration: VideoEncoderConfiguration) -> Int {
        let divisor = configuration.mayScaleDown ? VideoEncoderConfiguration.maxDownscale : 1
        return encoderFloorKbps(size: configuration.dimensions.scaled(down: divisor), frameRate: configuration.frameRate)
    }

    /// The app's video bitrate: the ceiling of the estimate, and where it starts (the app chose it
    /// for its content; the estimate falls within a second or two when the path cannot carry it).
    func setMaximumVideo(kbps: Int, floorKbps: Int = SendSideCongestion.minimumVideoKbps) {
        state.withLock { state in
            state.floorVideoKbps = min(floorKbps, kbps)
            guard state.maximumVideoKbps != kbps else { return }
            state.maximumVideoKbps = kbps
            state.estimator = Self.estimator(videoKbps: kbps)
            state.appliedVideoKbps = nil
        }
    }

    /// Logs packets (transport-wide number, bytes, probe cluster) as sent now, under one lock.
    func sent(_ packets: [(sequence: UInt16, bytes: Int, probeCluster: Int?)], nowUs: Int64 = MediaClock.monotonicUs()) {
        state.withLock { state in
            for packet in packets {
                state.log.record(sequence: packet.sequence, bytes: packet.bytes, sendUs: nowUs, probeCluster: packet.probeCluster)
            }
        }
    }

    /// Takes one feedback packet; returns a new video target (kbps) when it moved by 5 % or more,
    /// or a second passed since the last one. With `probing`, a probe may become due
    /// (``takeProbe()``).
    func received(_ feedback: TransportFeedback, rttMs: Double?, probing: Bool = false, nowUs: Int64 = MediaClock.monotonicUs()) -> Int? {
        state.withLock { state in
            let results = state.log.results(for: feedback)
            guard !results.isEmpty else { return nil }
            state.lastFeedbackUs = nowUs
            state.rttMs = rttMs ?? state.rttMs
            var estimate = state.estimator.update(feedback: results, nowUs: nowUs, rttMs: state.rttMs)
            let probeResult = state.probes.update(feedback: results, nowUs: nowUs)
            if let probeResult {
                state.estimator.applyProbe(bps: probeResult)
                estimate = state.estimator.targetBps
            }
            if probing {
                state.pendingProbe = state.probeController.next(
                    estimateBps: estimate, maximumBps: state.estimator.maximumBps, queueDelayMs: state.estimator.queueDelayMs,
                    overusing: state.estimator.usage == .overusing, lastDecreaseUs: state.estimator.lastDecreaseUs, probeResult: probeResult, nowUs: nowUs) ?? state.pendingProbe
            }
            return state.videoTarget(estimateBps: estimate, nowUs: nowUs)
        }
    }

    /// The server's limit (REMB) for what the slowest subscriber's path carries: the video target
    /// stays under it (less the audio reserve) for a few seconds after each. Returns a new video
    /// target when it moved.
    func limit(toBps bps: Double, nowUs: Int64 = MediaClock.monotonicUs()) -> Int? {
        state.withLock { state in
            state.receiverLimit = (bps, nowUs)
            return state.videoTarget(estimateBps: state.estimator.targetBps, nowUs: nowUs)
        }
    }

    /// Congestion-window pushback: true while more bytes are in flight than the estimate carries in
    /// a round trip plus 400 ms (the server's 100 ms feedback interval and a frame burst's slack),
    /// so that the video sender skips frames until the queue the path built drains, instead of
    /// waiting for its encoder's rate control to catch up with a cut.
    /// Only while feedback flows (a second without any turns it off: no feedback path, or a
    /// blackout in which nothing would ever be acknowledged).
    func shouldPushBack(nowUs: Int64 = MediaClock.monotonicUs()) -> Bool {
        state.withLock { state in
            guard let last = state.lastFeedbackUs, nowUs - last < 1_000_000 else { return false }
            let window = max(state.estimator.targetBps / 8 * (state.rttMs + 400) / 1000, 8_000)
            return Double(state.log.inFlightBytes) > window
        }
    }

    /// The current estimate, bits per second.
    var targetBps: Double { state.withLock { $0.estimator.targetBps } }

    /// The probe that became due, once.
    func takeProbe() -> ProbeCluster? {
        state.withLock { state in
            defer { state.pendingProbe = nil }
            return state.pendingProbe
        }
    }
}
