/// How much a sender may spend on retransmissions: a bucket refilled at a share of the bandwidth
/// estimate and holding at most a window of it. On a path over its capacity, repairs for the
/// losses would otherwise add to the overload (a burst of NACKs after a congestion loss sending a
/// second burst into the same queue).
///
/// Used by the SFU per downstream leg (a quarter of the leg's estimate, 200 ms) and meant for the
/// client's video sender too (half its estimate, 400 ms, never under 16 kB, full at first). No
/// clock and no lock: the owner passes the time and confines the value.
public struct RetransmissionBudget: Sendable {
    /// The share of the estimate retransmissions may take (0.25: a quarter).
    public let share: Double
    /// The most the bucket holds, as time at the refill rate (µs).
    public let windowUs: Int64
    /// The least the bucket may hold when full, whatever the estimate (bytes).
    public let floorBytes: Int
    private var bits: Double
    private var refilledAtUs: Int64?

    /// `startsFull`: the first refill fills the bucket (otherwise it starts empty and fills from
    /// the first call on).
    public init(share: Double, windowUs: Int64, floorBytes: Int = 0, startsFull: Bool = false) {
        self.share = share
        self.windowUs = windowUs
        self.floorBytes = floorBytes
        bits = startsFull ? .infinity : 0
    }

    /// Whether a retransmission of `bytes` fits now; if so it is spent. Without an estimate
    /// (`estimateBps` nil) everything fits and nothing is spent.
    public mutating func mayRetransmit(bytes: Int, estimateBps: Double?, nowUs: Int64) -> Bool {
        guard let estimateBps else { return true }
        let rate = estimateBps * share
        let capacity = max(rate * Double(windowUs) / 1e6, Double(floorBytes * 8))
        let elapsed = refilledAtUs.map { Double(nowUs - $0) } ?? 0
        bits = min(capacity, bits + rate * elapsed / 1e6)
        refilledAtUs = nowUs
        guard bits >= Double(bytes * 8) else { return false }
        bits -= Double(bytes * 8)
        return true
    }

    /// What the bucket holds (bits), as of the last call.
    public var availableBits: Double { bits }
}
