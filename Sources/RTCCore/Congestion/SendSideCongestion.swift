import RTCTransport
import Synchronization

/// When each transport-wide sequence number went out and how big its packet was: what the
/// receiver's transport-wide feedback is matched against (the send side of TWCC). A ring of the
/// last 4096 packets, several seconds at any rate this SDK sends.
struct SendLog: Sendable {
    private struct Entry {
        var sequence: UInt16
        var sendUs: Int64
        var bytes: Int32
        var valid: Bool
        /// Bytes sent up to and including this packet.
        var cumulativeBytes: Int
        /// The probe cluster it was sent in, -1 for none.
        var probeCluster: Int32
    }

    static let capacity = 4096
    private var entries = [Entry](repeating: Entry(sequence: 0, sendUs: 0, bytes: 0, valid: false, cumulativeBytes: 0, probeCluster: -1),
                                  count: SendLog.capacity)
    private var sentBytes = 0
    /// `cumulativeBytes` of the latest-sent packet any feedback covered.
    private var reportedBytes = 0

    /// Bytes sent after the latest packet feedback covered. Packets whose feedback was itself
    /// lost stop counting once feedback covers a later one, so a lossy return path cannot hold
    /// bytes "in flight" for good.
    var inFlightBytes: Int { sentBytes - reportedBytes }

    mutating func record(sequence: UInt16, bytes: Int, sendUs: Int64, probeCluster: Int? = nil) {
        sentBytes += bytes
        entries[Int(sequence) % Self.capacity] = Entry(sequence: sequence, sendUs: sendUs, bytes: Int32(clamping: bytes), valid: true,
                                                       cumulativeBytes: sentBytes, probeCluster: Int32(clamping: probeCluster ?? -1))
    }

    /// The feedback's packets, in sequence order, with their send times and sizes; arrivals on the
    /// receiver's clock (reference time plus deltas). Packets no longer (or never) logged are left
    /// out. The packets it covers, and all sent before them, stop counting as in flight.
    mutating func results(for feedback: TransportFeedback) -> [BandwidthEstimator.PacketResult] {
        var arrivalUs = Int64(feedback.referenceTime) * Int64(TransportFeedback.referenceTickUs)
        var results: [BandwidthEstimator.PacketResult] = []
        results.reserveCapacity(feedback.packets.count)
        for (offset, packet) in feedback.packets.enumerated() {
            let sequence = feedback.baseSequenceNumber &+ UInt16(truncatingIfNeeded: offset)
            var arrival: Int64?
            if packet.status != .notReceived {
                arrivalUs += Int64(packet.delta) * Int64(TransportFeedback.deltaTickUs)
                arrival = arrivalUs
            }
            let entry = entries[Int(sequence) % Self.capacity]
            guard entry.valid, entry.sequence == sequence else { continue }
            reportedBytes = max(reportedBytes, entry.cumulativeBytes)
            results.append(BandwidthEstimator.PacketResult(sendTimeUs: entry.sendUs, size: Int(entry.bytes), arrivalTimeUs: arrival,
                                                           probeCluster: entry.probeCluster >= 0 ? Int(entry.probeCluster) : nil))
        }
        return results
    }
}

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
    }

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
        let divisor = LocalVideoSender.mayScale(configuration) ? LocalVideoSender.maxDownscale : 1
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
            let video = min(max(Int((estimate - Self.audioReserveBps) / 1000), state.floorVideoKbps), state.maximumVideoKbps)
            if let applied = state.appliedVideoKbps, abs(video - applied) * 20 < applied, nowUs - state.appliedAtUs < 1_000_000 {
                return nil
            }
            state.appliedVideoKbps = video
            state.appliedAtUs = nowUs
            return video
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
