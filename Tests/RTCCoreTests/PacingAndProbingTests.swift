import NIOCore
import RTCTransport
import Testing
@testable import RTCCore

/// Drives a ``PacingQueue`` in 1 ms steps of a simulated clock.
private struct PacingRun {
    var queue: PacingQueue
    var nowUs: Int64 = 0
    /// (time, packet, probe cluster) of everything released.
    var released: [(atUs: Int64, packet: RTPPacket, cluster: Int?)] = []
    var paddingSize: Int? = nil
    var paddingSequence: UInt16 = 0

    init(pacingBps: Double) { queue = PacingQueue(pacingBps: pacingBps) }

    static func packet(_ sequence: UInt16, bytes: Int = 1200, ssrc: UInt32 = 1) -> RTPPacket {
        let header = RTPHeader(payloadType: 96, sequenceNumber: sequence, timestamp: 0, ssrc: ssrc)
        return RTPPacket(header: header, payload: ByteBuffer(repeating: 0, count: bytes - header.serializedSize))
    }

    mutating func run(untilUs end: Int64) {
        while nowUs <= end {
            let size = paddingSize
            var sequence = paddingSequence
            let (out, _) = queue.release(nowUs: nowUs) {
                guard let size else { return nil }
                defer { sequence &+= 1 }
                return PacingRun.packet(sequence, bytes: size, ssrc: 99)
            }
            paddingSequence = sequence
            released += out.map { (nowUs, $0.packet, $0.probeCluster) }
            nowUs += 1_000
        }
    }

    func bytes(from: Int64, to: Int64) -> Int {
        released.filter { $0.atUs >= from && $0.atUs < to }.reduce(0) { $0 + $1.packet.serializedSize }
    }
}

@Suite("Pacer and bandwidth probing (simulated clock)")
struct PacingAndProbingTests {
    @Test("packets leave at the pacing rate, in bursts of at most 40 ms of it")
    func pacingRate() {
        var run = PacingRun(pacingBps: 1_000_000)
        run.queue.enqueue((0..<20).map { PacingRun.packet($0) }, priority: .video, nowUs: 0)
        run.run(untilUs: 400_000)
        #expect(run.released.count == 20)
        // 24 000 bytes at 1 Mbps, 40 ms of them (5000 bytes) at once: 152 ms.
        let last = run.released.last!.atUs
        #expect(last >= 140_000 && last <= 165_000, "last packet left at \(last) µs")
        #expect(run.bytes(from: 0, to: 1_000) <= 5_000 + 1_200)
        for start in stride(from: Int64(1_000), to: 150_000, by: 10_000) {
            // 10 ms at 1 Mbps is 1250 bytes: never more than that and a packet once the burst is spent.
            #expect(run.bytes(from: start, to: start + 10_000) <= 1_250 + 1_200)
        }
    }

    @Test("a backlog leaves within about 2 s of its oldest packet, whatever the pacing rate")
    func drainLimit() {
        var run = PacingRun(pacingBps: 200_000)
        run.queue.enqueue((0..<200).map { PacingRun.packet($0) }, priority: .video, nowUs: 0)  // 240 kB: 9.6 s at 0.2 Mbps
        run.run(untilUs: 3_000_000)
        #expect(run.released.count == 200)
        let last = run.released.last!.atUs
        #expect(last >= 1_800_000 && last <= 2_050_000, "the backlog took \(last) µs")
        #expect(run.queue.queuedBytes == 0)
    }

    @Test("audio leaves at once; retransmissions go before video")
    func priorities() {
        var run = PacingRun(pacingBps: 100_000)
        run.queue.enqueue((0..<5).map { PacingRun.packet($0) }, priority: .video, nowUs: 0)
        run.queue.enqueue([PacingRun.packet(100, bytes: 200)], priority: .audio, nowUs: 0)
        run.queue.enqueue([PacingRun.packet(50)], priority: .retransmission, nowUs: 0)
        run.run(untilUs: 0)
        #expect(run.released.first?.packet.header.sequenceNumber == 100)
        run.queue.enqueue([PacingRun.packet(101, bytes: 200)], priority: .audio, nowUs: run.nowUs)
        run.run(untilUs: 1_000)
        #expect(run.released.contains { $0.packet.header.sequenceNumber == 101 && $0.atUs == 1_000 })
        run.run(untilUs: 1_000_000)
        let paced = run.released.map(\.packet.header.sequenceNumber).filter { $0 < 100 }
        #expect(paced == [50, 0, 1, 2, 3, 4])
    }

    @Test("a probe sends its cluster at the probe rate, padding when no media waits, then stops")
    func probeCluster() {
        var run = PacingRun(pacingBps: 300_000)
        run.paddingSize = 1_200
        let cluster = ProbeCluster(id: 7, bps: 2_000_000)
        #expect(cluster.minBytes == 10_000 && cluster.minPackets == 5)
        run.queue.startProbe(cluster)
        run.run(untilUs: 300_000)
        let probe = run.released.filter { $0.cluster == 7 }
        #expect(probe.count == run.released.count, "nothing but the probe was sent")
        #expect(probe.reduce(0) { $0 + $1.packet.serializedSize } >= 10_000 && probe.count >= 5)
        #expect(probe.reduce(0) { $0 + $1.packet.serializedSize } <= 10_000 + 2 * 1_200)
        // 10 kB at 2 Mbps: 40 ms.
        let span = probe.last!.atUs - probe.first!.atUs
        #expect(span >= 30_000 && span <= 50_000, "the probe took \(span) µs")
        #expect(!run.queue.isProbing)
    }

    @Test("a probe with nothing to send ends at once")
    func probeWithoutPadding() {
        var queue = PacingQueue(pacingBps: 300_000)
        queue.startProbe(ProbeCluster(id: 1, bps: 1_000_000))
        let (out, next) = queue.release(nowUs: 0) { nil }
        #expect(out.isEmpty && next == nil && !queue.isProbing)
    }

    /// A cluster of `count` 1200-byte packets sent at `sendBps` and arriving at `arrivalBps`
    /// (nil: all at once), every `lostEvery`th lost.
    static func cluster(id: Int, count: Int, sendBps: Double, arrivalBps: Double?, lostEvery: Int? = nil) -> [BandwidthEstimator.PacketResult] {
        (0..<count).map { index in
            let send = Int64(Double(index * 1200 * 8) / sendBps * 1e6)
            let arrival = 20_000 + (arrivalBps.map { Int64(Double(index * 1200 * 8) / $0 * 1e6) } ?? 0)
            let lost = lostEvery.map { index % $0 == $0 - 1 } ?? false
            return .init(sendTimeUs: send, size: 1200, arrivalTimeUs: lost ? nil : arrival, probeCluster: id)
        }
    }

    @Test("a probe's rate: what a free path delivers, a little under what a narrow one does", arguments: [
        ("free path", 8, 2_000_000.0, 2_000_000.0 as Double?, nil as Int?, 2_000_000.0 as Double?),
        ("narrow path", 8, 2_000_000, 1_000_000, nil, 950_000),
        ("lost packets are not delivered bytes", 9, 2_000_000, 2_000_000, 4, 1_500_000),
        ("too few packets", 3, 2_000_000, 2_000_000, nil, nil),
        ("arrivals squeezed together", 8, 2_000_000, nil, nil, nil),
        ("arrivals far faster than sent", 8, 1_000_000, 4_000_000, nil, nil),
    ] as [(String, Int, Double, Double?, Int?, Double?)])
    func probeRate(name: String, count: Int, sendBps: Double, arrivalBps: Double?, lostEvery: Int?, expected: Double?) {
        var estimator = ProbeRateEstimator()
        let result = estimator.update(feedback: Self.cluster(id: 1, count: count, sendBps: sendBps, arrivalBps: arrivalBps, lostEvery: lostEvery),
                                      nowUs: 100_000)
        if let expected {
            #expect(result.map { abs($0 - expected) / expected < 0.03 } == true, "\(name): \(String(describing: result))")
        } else {
            #expect(result == nil, "\(name)")
        }
    }

    @Test("a cluster reported over two feedback packets is measured as one; packets of no cluster are ignored")
    func probeRateAcrossReports() {
        var estimator = ProbeRateEstimator()
        let packets = Self.cluster(id: 3, count: 10, sendBps: 1_500_000, arrivalBps: 1_500_000)
        let media = BandwidthEstimator.PacketResult(sendTimeUs: 0, size: 1200, arrivalTimeUs: 900_000)
        #expect(estimator.update(feedback: Array(packets.prefix(3)) + [media], nowUs: 100_000) == nil)
        let result = estimator.update(feedback: Array(packets.dropFirst(3)), nowUs: 200_000)
        #expect(result.map { abs($0 - 1_500_000) < 30_000 } == true)
    }

    @Test("the controller probes a calm path every 3 s while the estimate is under the maximum, at twice the estimate")
    func periodicProbes() {
        var controller = ProbeController()
        func next(_ estimate: Double, at seconds: Double, queue: Double = 0, overusing: Bool = false, cut: Double? = nil,
                  result: Double? = nil) -> ProbeCluster? {
            controller.next(estimateBps: estimate, maximumBps: 3_000_000, queueDelayMs: queue, overusing: overusing,
                            lastDecreaseUs: cut.map { Int64($0 * 1e6) }, probeResult: result, nowUs: Int64(seconds * 1e6))
        }
        #expect(next(2_900_000, at: 10) == nil)  // at 97 % of the maximum: nothing to find
        #expect(next(500_000, at: 10, queue: 40) == nil)  // a standing queue
        #expect(next(500_000, at: 10, overusing: true) == nil)
        #expect(next(500_000, at: 10, cut: 9.5) == nil)  // cut half a second ago
        let first = next(500_000, at: 10, cut: 8)
        #expect(first?.bps == 1_000_000)
        #expect(next(500_000, at: 12) == nil)  // within 3 s
        let second = next(500_000, at: 13.1)
        #expect(second?.bps == 1_000_000 && second?.id != first?.id)
        #expect(next(2_000_000, at: 16.2)?.bps == 3_000_000)  // capped at the maximum
    }

    @Test("a probe the path carried is followed at once by one at twice the new estimate, up to the maximum")
    func furtherProbes() {
        var controller = ProbeController()
        func next(_ estimate: Double, at seconds: Double, result: Double? = nil) -> ProbeCluster? {
            controller.next(estimateBps: estimate, maximumBps: 3_000_000, queueDelayMs: 0, overusing: false, lastDecreaseUs: nil,
                            probeResult: result, nowUs: Int64(seconds * 1e6))
        }
        #expect(next(400_000, at: 10)?.bps == 800_000)
        #expect(next(800_000, at: 10.2, result: 790_000)?.bps == 1_600_000)  // carried: further
        #expect(next(1_600_000, at: 10.4, result: 1_580_000)?.bps == 3_000_000)
        #expect(next(2_400_000, at: 10.6, result: 2_400_000) == nil)  // the one at the maximum was the last
        var other = ProbeController()
        _ = other.next(estimateBps: 400_000, maximumBps: 3_000_000, queueDelayMs: 0, overusing: false, lastDecreaseUs: nil,
                       probeResult: nil, nowUs: 10_000_000)
        // Only half the probe got through: wait for the next period.
        #expect(other.next(estimateBps: 400_000, maximumBps: 3_000_000, queueDelayMs: 0, overusing: false, lastDecreaseUs: nil,
                           probeResult: 400_000, nowUs: 10_200_000) == nil)
    }

    @Test("a probe result raises the estimate (within the maximum), never lowers it")
    func applyProbe() {
        var estimator = BandwidthEstimator(startBps: 400_000, minimumBps: 50_000, maximumBps: 2_000_000)
        estimator.applyProbe(bps: 300_000)
        #expect(estimator.targetBps == 400_000)
        estimator.applyProbe(bps: 1_200_000)
        #expect(estimator.targetBps == 1_200_000)
        estimator.applyProbe(bps: 5_000_000)
        #expect(estimator.targetBps == 2_000_000)
    }

    @Test("a probe result is ignored while the path is overusing")
    func probeIgnoredWhenOverusing() {
        var estimator = BandwidthEstimator(startBps: 400_000, minimumBps: 50_000, maximumBps: 2_000_000)
        // One-way delay growing 2 ms per 10 ms group: a filling queue.
        var now: Int64 = 0
        for group in 0..<80 {
            let send = Int64(group) * 10_000
            now = send + 30_000 + Int64(group) * 2_000
            estimator.update(feedback: [.init(sendTimeUs: send, size: 1200, arrivalTimeUs: now)], nowUs: now)
        }
        #expect(estimator.usage == .overusing)
        let before = estimator.targetBps
        estimator.applyProbe(bps: 1_500_000)
        #expect(estimator.targetBps == before)
    }

    @Test("stamping as a packet leaves writes the same bytes as rebuilding its header", arguments: [
        ("one-byte block", [UInt32](), false), ("with CSRCs", [7, 8], false), ("two-byte block", [], true),
    ] as [(String, [UInt32], Bool)])
    func stampInPlace(name: String, csrcs: [UInt32], twoByte: Bool) throws {
        var extensions = RTPHeader.pacedExtensions
        extensions.insert(RTPHeaderExtension(id: RTPExtensionID.audioLevel, bytes: [0x7f]), at: 0)
        // A 17-byte element forces the two-byte form.
        if twoByte { extensions.append(RTPHeaderExtension(id: 9, bytes: [UInt8](repeating: 1, count: 17))) }
        let header = RTPHeader(marker: true, payloadType: 96, sequenceNumber: 5, timestamp: 9, ssrc: 3, csrcs: csrcs, extensions: extensions)
        #expect(header.extensionProfile == (twoByte ? .twoByte : .oneByte))
        let packet = RTPPacket(header: header, payload: ByteBuffer(bytes: [1, 2, 3]))
        let time = AbsSendTime(microseconds: 123_456_789).data
        var rebuilt = packet
        rebuilt.header.stamp(transportSequence: 0xBEEF, absSendTime: time)
        let inPlace = Pacer.serialize(packet, transportSequence: 0xBEEF, absSendTime: time)
        #expect(inPlace == rebuilt.serialized, "\(name)")
        let parsed = try RTPPacket(parsing: inPlace)
        #expect(try TransportSequenceNumber(parsing: #require(parsed.header.extensionData(id: RTPExtensionID.transportWideSequence))).value == 0xBEEF)
    }

    @Test("an answer that dropped audio level and moved transport-cc: packets go out in its ids, without what it dropped")
    func negotiatedExtensions() throws {
        var extensions = RTPHeader.pacedExtensions
        extensions.insert(RTPHeaderExtension(id: RTPExtensionID.audioLevel, bytes: [0x7f]), at: 0)
        let packet = RTPPacket(header: RTPHeader(payloadType: 111, sequenceNumber: 1, timestamp: 2, ssrc: 3, extensions: extensions),
                               payload: ByteBuffer(bytes: [1]))
        let offered = Dictionary(uniqueKeysWithValues: SDPCodecs.extensions.map { ($0.id, $0.uri) })
        let kept: [String: UInt8] = [RTPExtensionURI.transportWideSequence: 7, RTPExtensionURI.absSendTime: RTPExtensionID.absSendTime]
        let map = ExtensionIDMap(source: offered, target: kept, carried: Set(offered.values))
        let parsed = try RTPPacket(parsing: Pacer.serialize(packet, transportSequence: 42, absSendTime: AbsSendTime(microseconds: 5).data,
                                                           extensions: map))
        #expect(parsed.header.extensions.map(\.id).sorted() == [RTPExtensionID.absSendTime, 7])
        #expect(try TransportSequenceNumber(parsing: #require(parsed.header.extensionData(id: 7))).value == 42)
    }
}
