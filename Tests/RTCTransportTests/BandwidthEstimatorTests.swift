import Testing
@testable import RTCTransport

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

    /// Screen-like sending instead of a steady flow: frames of this many bytes, as many per
    /// second as the target pays for (at most 15), each paced out at 2.5 times the target.
    var frameBytes: Int?
    private var frameCreditBytes = 0.0
    private var senderQueueBytes = 0
    private var lastFrameUs: Int64 = 0

    init(capacityBps: Double, frameBytes: Int? = nil) {
        self.capacityBps = capacityBps
        self.frameBytes = frameBytes
    }

    /// Runs the path for `seconds` in 1 ms steps.
    mutating func run(seconds: Double) {
        let end = nowUs + Int64(seconds * 1e6)
        while nowUs < end {
            nowUs += 1_000
            if let frameBytes {
                frameCreditBytes = min(frameCreditBytes + estimator.targetBps / 8 / 1000, Double(frameBytes))
                if frameCreditBytes >= Double(frameBytes), nowUs - lastFrameUs >= 66_000 {
                    frameCreditBytes = 0
                    lastFrameUs = nowUs
                    senderQueueBytes += frameBytes
                }
                budgetBytes = min(budgetBytes + 2.5 * estimator.targetBps / 8 / 1000, 6_000)
                while budgetBytes >= 1_200 && senderQueueBytes > 0 {
                    budgetBytes -= 1_200
                    senderQueueBytes -= 1_200
                    send(size: 1_200)
                }
            } else {
                budgetBytes = min(budgetBytes + estimator.targetBps / 8 / 1000, 6_000)
            }
            while frameBytes == nil && budgetBytes >= 1_200 {
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

    /// The figures on the simulated path: under the cap within 2 s of the drop, 85 % within
    /// 10 s of the rise, queueing p95 ≤ 200 ms over the whole run (lost packets count as the worst).
    @Test("capacity steps 2.5 → 0.5 → 2.5 Mbps: under the cap within 2 s, back to 85 % within 10 s, queueing p95 ≤ 200 ms")
    func capacitySteps() {
        var path = SimulatedPath(capacityBps: 2_500_000)
        path.run(seconds: 20)
        path.capacityBps = 500_000
        path.run(seconds: 20)
        path.capacityBps = 2_500_000
        path.run(seconds: 20)
        let down = path.firstTime(from: 20, below: 500_000)
        #expect(down != nil && down! - 20 <= 2, "under 0.5 Mbps \(String(describing: down.map { $0 - 20 })) s after the drop")
        // While capped, it probes around the cap: on average under it, and using most of it.
        let capped = path.targets.filter { $0.0 >= 30_000_000 && $0.0 < 40_000_000 }.map(\.1)
        let low = capped.reduce(0, +) / Double(max(1, capped.count))
        #expect(low <= 500_000 && low >= 300_000, "while capped: \(low) bps on average")
        let up = path.firstTime(from: 40, atLeast: 0.85 * 2_500_000)
        #expect(up != nil && up! - 40 <= 10, "85 % of 2.5 Mbps \(String(describing: up.map { $0 - 40 })) s after the rise")
        // Nothing is lost to the 1 s queue limit once the estimate is under the cap.
        let lostLate = path.queueingMs.suffix(path.queueingMs.count / 3).filter { $0 == nil }.count
        #expect(lostLate == 0, "\(lostLate) packets lost after the rise")
        // Queueing delay over the whole run, lost packets counted as the worst.
        let delays = path.queueingMs.map { $0 ?? .infinity }.sorted()
        let p95 = delays[delays.count * 95 / 100]
        #expect(p95 <= 200, "queueing p95 \(p95) ms over the run")
    }

    /// Large frames (36 kB, a screen's scroll at the coarsest quantizer) as the target pays for,
    /// each paced at 2.5 times the target into a 1 Mbps path: a frame overruns the path and makes
    /// it overuse, but between frames the path idles, so the average it acknowledged is about the
    /// target itself. Cutting from that average spiralled down (the sender sends less, which it
    /// then measured); the cut is from the rate the path delivered while busy.
    @Test("large frames into a 1 Mbps path: an overuse cuts from what the path delivered while busy, not from the idle-diluted average")
    func burstyFrames() {
        var path = SimulatedPath(capacityBps: 1_000_000, frameBytes: 36_000)
        path.run(seconds: 30)
        let late = path.targets.filter { $0.0 >= 10_000_000 }.map(\.1).sorted()
        let median = late[late.count / 2], least = late.first!
        #expect(median >= 600_000 && median <= 1_000_000, "target median \(median) bps over 10-30 s")
        #expect(least >= 400_000, "target fell to \(least) bps")
        #expect(path.estimator.deliveryRateBps.map { $0 >= 800_000 && $0 <= 1_050_000 } == true,
                "delivery rate \(String(describing: path.estimator.deliveryRateBps))")
        // A frame crosses in under a third of a second; nothing is lost to the 1 s queue.
        #expect(!path.queueingMs.contains { $0 == nil })
        let delays = path.queueingMs.compactMap { $0 }.sorted()
        #expect(delays[delays.count * 95 / 100] <= 400, "queueing p95 \(delays[delays.count * 95 / 100]) ms")
    }

    static let busyCases: [(arrivals: [Int64], bps: Double?)] = {
        let train: [Int64] = (0..<10).map { Int64($0) * 10_000 }
        return [
            // 10 packets 10 ms apart, a 400 ms pause, 10 more: 1200 B per 10 ms is 960 kbps.
            (train + train.map { $0 + 490_000 }, 960_000),
            // One packet every 40 ms: never busy (the average alone measures it).
            ((0..<12).map { Int64($0) * 40_000 }, nil),
            // A batch of 12 arrivals within 1 ms: too little busy time to say anything.
            ((0..<12).map { Int64($0) * 80 }, nil),
            // A reordered arrival counts as no gap, and the next gap is from the later one: 9 packets over 85 ms.
            ([0, 10_000, 5_000, 20_000, 30_000, 40_000, 50_000, 60_000, 70_000, 80_000], 1_200 * 8 * 9 / 0.085),
        ]
    }()

    /// (arrival µs, bytes) → busy rate: gaps of 30 ms or more are idle; too little busy time is nil.
    @Test("the rate while busy leaves idle gaps out", arguments: BandwidthEstimatorTests.busyCases)
    func busyRate(arrivals: [Int64], bps: Double?) {
        let measured = BandwidthEstimator.busyRate(arrivals.map { (arrivalUs: $0, bytes: 1_200) })
        if let bps {
            #expect(measured.map { abs($0 - bps) < 1 } == true, "\(String(describing: measured)) bps")
        } else {
            #expect(measured == nil)
        }
    }

    /// Every `lossEvery`-th packet of each 20-packet report lost (shifting per report), with a flat delay.
    static func randomLoss(_ estimator: inout BandwidthEstimator, lossEvery: Int?, steps: Int, nowUs: inout Int64) {
        for step in 0..<steps {
            nowUs += 50_000
            let feedback = (0..<20).map { index -> BandwidthEstimator.PacketResult in
                let sent = nowUs - 70_000 + Int64(index) * 2_500
                let lost = lossEvery.map { (index + step) % $0 == 0 } ?? false
                return .init(sendTimeUs: sent, size: 1_200, arrivalTimeUs: lost ? nil : sent + 20_000)
            }
            estimator.update(feedback: feedback, nowUs: nowUs)
        }
    }

    @Test("random loss with a flat delay: 15 % holds the estimate (NACK repairs it), 33 % cuts it; under 2 % it grows")
    func lossBased() {
        var nowUs: Int64 = 0
        var moderate = BandwidthEstimator(startBps: 1_000_000)
        Self.randomLoss(&moderate, lossEvery: 7, steps: 80, nowUs: &nowUs)  // 3 of 20: 15 %
        #expect(moderate.targetBps >= 1_000_000, "\(moderate.targetBps)")
        var heavy = BandwidthEstimator(startBps: 1_000_000)
        Self.randomLoss(&heavy, lossEvery: 3, steps: 80, nowUs: &nowUs)  // 7 of 20: 35 %
        #expect(heavy.targetBps < 500_000, "\(heavy.targetBps)")
        var clean = BandwidthEstimator(startBps: 500_000)
        Self.randomLoss(&clean, lossEvery: nil, steps: 10, nowUs: &nowUs)
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

/// The send log that matches transport-wide feedback to what was sent (RTCTransport/Congestion).
@Suite("Send log of transport-wide congestion control")
struct SendLogTests {
    @Test("feedback is matched to the send log across the sequence wrap; what it covers leaves flight")
    func sendLogMatchesFeedback() throws {
        var log = SendLog()
        var receiver = TransportFeedbackBuilder()
        // 65530 ... 65535, 0 ... 3: ten packets of 1000 bytes, 10 ms apart; 65534 and 1 are lost.
        let sequences = (0..<10).map { UInt16(truncatingIfNeeded: 65_530 + $0) }
        for (index, sequence) in sequences.enumerated() {
            log.record(sequence: sequence, bytes: 1000, sendUs: Int64(index) * 10_000)
            if sequence != 65_534 && sequence != 1 {
                receiver.record(sequence: sequence, arrivalUs: 1_000_000 + Int64(index) * 10_000 + (sequence == 3 ? 40_000 : 0))
            }
        }
        #expect(log.inFlightBytes == 10_000)
        let made = receiver.makeFeedback(senderSSRC: 1, mediaSSRC: 2)
        let feedback = try #require(made)
        let results = log.results(for: feedback)
        #expect(results.count == 10)
        #expect(results.map(\.sendTimeUs) == (0..<10).map { Int64($0) * 10_000 })
        #expect(results.filter { $0.arrivalTimeUs == nil }.count == 2)
        #expect(results[4].arrivalTimeUs == nil && results[7].arrivalTimeUs == nil)
        // Arrivals keep their spacing on the receiver's clock (250 µs ticks): 10 ms, and 50 ms before the late one.
        let arrivals = results.compactMap(\.arrivalTimeUs)
        #expect(arrivals[1] - arrivals[0] == 10_000)
        #expect(arrivals[7] - arrivals[6] == 50_000)
        #expect(log.inFlightBytes == 0)
        // The same feedback again changes nothing in flight.
        _ = log.results(for: feedback)
        #expect(log.inFlightBytes == 0)
    }

    @Test("a lost feedback report does not keep its packets in flight once a later report arrives")
    func lostFeedback() throws {
        var log = SendLog()
        var receiver = TransportFeedbackBuilder()
        for sequence in UInt16(0)..<20 {
            log.record(sequence: sequence, bytes: 500, sendUs: Int64(sequence) * 5_000)
            receiver.record(sequence: sequence, arrivalUs: 100_000 + Int64(sequence) * 5_000)
            if sequence == 9 { _ = receiver.makeFeedback(senderSSRC: 1, mediaSSRC: 2) }  // lost on the way back
        }
        #expect(log.inFlightBytes == 10_000)
        let made = receiver.makeFeedback(senderSSRC: 1, mediaSSRC: 2)
        let second = try #require(made)
        #expect(log.results(for: second).count == 10)
        #expect(log.inFlightBytes == 0)
    }
}
