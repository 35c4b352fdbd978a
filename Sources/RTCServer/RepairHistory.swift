/// When each of a subscription's recent packets was last sent again, so that a subscriber asking
/// for the same packet faster than a repair can reach it gets one repair, not one per NACK. A
/// receiver retries at its own idea of the round trip, and a collapsed link queues for far longer
/// (measured: NACKs for one packet every 20 ms through 600 ms of queue, each repair adding to that
/// queue). Fixed slots by sequence number: no allocation on the repair path.
struct RepairHistory {
    private var sequences = [UInt16](repeating: 0, count: RepairHistory.slots)
    private var times = [Int64](repeating: .min, count: RepairHistory.slots)
    static let slots = 128

    /// Whether output packet `sequence` was sent again within `holdUs` of now.
    func repairedLately(_ sequence: UInt16, nowUs: Int64, holdUs: Int64) -> Bool {
        let slot = Int(sequence) % Self.slots
        return sequences[slot] == sequence && times[slot] != .min && nowUs - times[slot] < holdUs
    }

    /// Records that output packet `sequence` was sent again now.
    mutating func record(_ sequence: UInt16, nowUs: Int64) {
        let slot = Int(sequence) % Self.slots
        sequences[slot] = sequence
        times[slot] = nowUs
    }

    /// How long a repair is given to arrive before the same packet is sent again: the leg's
    /// standing queue plus 50 ms (a receiver retries at 1.5 times its round trip at the soonest,
    /// so a repair lost on a short path is still asked for again within a retry or two).
    static func holdUs(queueDelayMs: Double) -> Int64 {
        50_000 + Int64(max(0, queueDelayMs) * 1000)
    }
}
