import NIOCore
import Testing
@testable import RTCServer

@Suite("Pacing a leg after its link collapsed")
struct LegPacerTests {
    @Test("the pace: half the link, at most 1.5 times the layer or 250 kbit/s, at least 1.2 times the layer and 64 kbit/s", arguments: [
        // (share of the link, the layer's rate, the pace)
        (600_000.0, 200_000.0, 300_000.0),  // a link share far above: the keyframe spread at 1.5x the layer
        // A switch before the estimate fell (half of 955 kbit/s) on a 400 kbit/s link: under the
        // link with the audio (it was 430 kbit/s at 2.5x, and lost packets to the full queue).
        (478_000.0, 180_000.0, 270_000.0),
        (400_000.0, 130_000.0, 250_000.0),  // a small layer: 250 kbit/s
        (400_000.0, 67_000.0, 250_000.0),  // a layer measured low (just resumed): 250 kbit/s
        (200_000.0, 130_000.0, 200_000.0),  // in between: the share
        (100_000.0, 130_000.0, 156_000.0),  // under the layer: 1.2x the layer still goes through
        (0.0, 0.0, 64_000.0),  // nothing known: the floor
    ])
    func rate(share: Double, layer: Double, pace: Double) {
        #expect(abs(LegPacer.rate(share: share, layerBps: layer) - pace) < 1e-6)
    }

    func item(_ size: Int) -> LegPacer.Item {
        LegPacer.Item(packet: ByteBuffer(repeating: 0, count: size), payloadBytes: size - 12, sequenceAt: nil)
    }

    @Test("packets go in order at the pace: the first at once, then one each 1200 bytes' time")
    func paced() {
        // 320 kbit/s: 1200 bytes every 30 ms.
        let pacer = LegPacer(bps: 320_000, nowUs: 0)
        for size in [1200, 1200, 1200, 1200, 600] { #expect(pacer.enqueue(item(size))) }
        var sent: [(us: Int64, size: Int)] = []
        var now: Int64 = 0
        while !pacer.isEmpty, now <= 200_000 {
            pacer.drain(nowUs: now) { sent.append((now, $0.packet.readableBytes)) }
            now += 5_000
        }
        #expect(sent.map(\.size) == [1200, 1200, 1200, 1200, 600])
        #expect(sent.map(\.us) == [0, 30_000, 60_000, 90_000, 105_000], "\(sent.map(\.us))")  // the last is half the size
    }

    @Test("it holds 256 packets at most (more are refused), and at its end everything left goes at once, in order")
    func capacityAndEnd() {
        let pacer = LegPacer(bps: 64_000, nowUs: 0)
        for index in 0..<LegPacer.capacity { #expect(pacer.enqueue(item(100 + index % 50))) }
        #expect(!pacer.enqueue(item(100)))
        #expect(pacer.drain(nowUs: 0) { _ in } >= 1)
        var sizes: [Int] = []
        let left = pacer.drainAll { sizes.append($0.packet.readableBytes) }
        #expect(left == sizes.count && pacer.isEmpty)
        #expect(sizes == Array((LegPacer.capacity - left)..<LegPacer.capacity).map { 100 + $0 % 50 })
        #expect(pacer.untilUs == LegPacer.durationUs)
        #expect(pacer.giveUpUs == LegPacer.maximumDurationUs)
    }

    /// An RTP packet of `size` bytes, with the marker bit when it ends a frame.
    func packet(_ size: Int, marker: Bool) -> LegPacer.Item {
        var bytes = [UInt8](repeating: 0, count: size)
        bytes[0] = 0x80
        bytes[1] = (marker ? 0x80 : 0) | 96
        return LegPacer.Item(packet: ByteBuffer(bytes: bytes), payloadBytes: size - 12, sequenceAt: nil)
    }

    @Test("the pace holds until the keyframe (the first frame held) is out, then follows the leg's feedback, never above where it started")
    func retune() {
        let pacer = LegPacer(bps: 320_000, steadyLayerBps: 130_000, nowUs: 0)
        for index in 0..<4 { #expect(pacer.enqueue(packet(1000, marker: index == 2))) }
        pacer.retune(to: 150_000)
        #expect(pacer.bps == 320_000 && !pacer.keyframeSent)  // the keyframe is still held
        var sent = 0
        var now: Int64 = 0
        while !pacer.keyframeSent, now < 1_000_000 {
            sent += pacer.drain(nowUs: now) { _ in }
            now += 5_000
        }
        #expect(sent == 3, "the keyframe's last packet is the third")
        pacer.retune(to: 150_000)
        #expect(pacer.bps == 150_000)
        pacer.retune(to: 900_000)
        #expect(pacer.bps == 320_000)
    }

    @Test("the layer rate kept room for: the steady rate from before for the layer's first second, then the larger of it and what is measured", arguments: [
        // (µs since the pacing began, the layer's rate measured now, the rate kept room for)
        (200_000 as Int64, 260_000.0, 130_000.0),  // the keyframe inflates the measure: the steady rate
        (999_999, 260_000.0, 130_000.0),
        (1_000_000, 180_000.0, 180_000.0),  // past the keyframe: the layer as it runs
        (1_500_000, 90_000.0, 130_000.0),  // a dip: never under the steady rate
    ])
    func layerRate(sinceUs: Int64, measured: Double, expected: Double) {
        let pacer = LegPacer(bps: 320_000, steadyLayerBps: 130_000, nowUs: 5_000_000)
        #expect(pacer.layerBps(measured: measured, nowUs: 5_000_000 + sinceUs) == expected)
    }

    @Test("the marker bit is read from the packet's second byte; a packet too short to have one has none", arguments: [
        ([0x80, 0xE0] as [UInt8], true),
        ([0x80, 0x60], false),
        ([0x80], false),
        ([], false),
    ])
    func endsFrame(bytes: [UInt8], marker: Bool) {
        #expect(LegPacer.endsFrame(ByteBuffer(bytes: bytes)) == marker)
    }
}
