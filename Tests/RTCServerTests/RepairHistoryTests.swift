import Testing
@testable import RTCServer

@Suite("One repair per packet while it can still be on its way")
struct RepairHistoryTests {
    @Test("a packet repaired within the hold is not sent again; after it, or another packet, it is", arguments: [
        // (sequence repaired at 0, sequence asked for, µs later, hold µs, repaired lately)
        (100 as UInt16, 100 as UInt16, 50_000 as Int64, 100_000 as Int64, true),
        (100, 100, 99_999, 100_000, true),
        (100, 100, 100_000, 100_000, false),  // its hold is over: it may go again
        (100, 101, 10_000, 100_000, false),  // another packet
        (100, 228, 10_000, 100_000, false),  // another packet in the same slot (128 apart)
        (65_535, 65_535, 10_000, 700_000, true),  // the top of the sequence space
    ])
    func hold(repaired: UInt16, asked: UInt16, afterUs: Int64, holdUs: Int64, lately: Bool) {
        var history = RepairHistory()
        #expect(!history.repairedLately(repaired, nowUs: 0, holdUs: holdUs), "nothing repaired yet")
        history.record(repaired, nowUs: 0)
        #expect(history.repairedLately(asked, nowUs: afterUs, holdUs: holdUs) == lately)
    }

    @Test("the hold is the leg's standing queue plus 50 ms", arguments: [
        (0.0, 50_000 as Int64), (600.0, 650_000), (-5.0, 50_000),
    ])
    func holdFromQueue(queueMs: Double, holdUs: Int64) {
        #expect(RepairHistory.holdUs(queueDelayMs: queueMs) == holdUs)
    }
}
