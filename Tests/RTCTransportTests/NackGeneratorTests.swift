import RTCTransport
import Testing

@Suite("NACK generator")
struct NackGeneratorTests {
    @Test("a gap is asked for at once, retried at 1.5 × RTT, and forgotten once the packet comes")
    func retries() {
        var nack = NackGenerator(roundTrip: 40_000)
        nack.received(65534, nowUs: 0)
        nack.received(2, nowUs: 1000)  // 65535, 0, 1 missing across the wrap
        var due = nack.due(nowUs: 1000)
        #expect(due == [65535, 0, 1])
        #expect(nack.due(nowUs: 50_000).isEmpty, "not before 60 ms")
        nack.received(0, nowUs: 55_000)
        #expect(nack.recovered == 1)
        due = nack.due(nowUs: 62_000)
        #expect(due == [65535, 1])
        #expect(nack.missingCount == 2)
    }

    @Test("retries stop after the limit, and old gaps are given up")
    func limits() {
        var nack = NackGenerator(maxRetries: 3, minRetryUs: 10_000, maxAgeUs: 1_000_000)
        nack.roundTripUs = 10_000
        nack.received(10, nowUs: 0)
        nack.received(12, nowUs: 0)
        var sends = 0
        #expect(nack.isAsking(for: 11) && !nack.isAsking(for: 10) && !nack.isAsking(for: 12))
        for step in 0..<2 { sends += nack.due(nowUs: Int64(step) * 20_000).count }
        #expect(nack.isAsking(for: 11), "two of three sent")
        sends += nack.due(nowUs: 40_000).count
        #expect(!nack.isAsking(for: 11), "the last retry is out: no longer asked for")
        for step in 3..<20 { sends += nack.due(nowUs: Int64(step) * 20_000).count }
        #expect(sends == 3)
        #expect(nack.givenUp == 1)
        nack.received(20, nowUs: 500_000)
        #expect(nack.due(nowUs: 500_000).count == 7)
        #expect(nack.due(nowUs: 1_600_000).isEmpty, "older than a second: given up")
    }

    @Test("duplicates, reordering and huge jumps do not invent gaps")
    func noFalseGaps() {
        var nack = NackGenerator()
        for sequence: UInt16 in [5, 6, 6, 8, 7, 9] { nack.received(sequence, nowUs: 0) }
        #expect(nack.due(nowUs: 0).isEmpty)
        nack.received(30_000, nowUs: 0)  // a restart, not 29 991 losses
        #expect(nack.missingCount == 0)
        nack.received(30_003, nowUs: 0)
        nack.drop(before: 30_003)
        #expect(nack.missingCount == 0)
    }
}
