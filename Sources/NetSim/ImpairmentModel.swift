/// What the network does to packets, one direction.
public struct ImpairmentProfile: Sendable, Hashable {
    /// Random loss, 0...1 (in the good state of the burst model).
    public var loss: Double = 0
    /// Gilbert-Elliott bursts: probability per packet of going good → bad, and bad → good, and the
    /// loss in the bad state. Zero `enterBurst` turns bursts off.
    public var enterBurst: Double = 0
    public var leaveBurst: Double = 0.5
    public var burstLoss: Double = 1
    /// One-way delay and its jitter (uniform ±), ms.
    public var delayMs: Double = 0
    public var jitterMs: Double = 0
    /// Probability that a packet is held back an extra `reorderMs` (arriving after later ones).
    public var reorder: Double = 0
    public var reorderMs: Double = 20
    public var duplicate: Double = 0
    /// A bottleneck: bits per second (0: none) and its queue (ms of data at that rate; beyond, drop).
    public var bandwidthBps: Double = 0
    public var queueMs: Double = 300
    /// Periods during which everything is dropped, as (start, duration) in seconds from the start.
    public var blackouts: [ClosedRange<Double>] = []

    public init(loss: Double = 0, delayMs: Double = 0, jitterMs: Double = 0) {
        self.loss = loss
        self.delayMs = delayMs
        self.jitterMs = jitterMs
    }
}

/// A seeded, splittable random generator (SplitMix64): the same seed gives the same network.
public struct SeededRandom: RandomNumberGenerator, Sendable {
    private var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func chance(_ probability: Double) -> Bool { probability > 0 && Double.random(in: 0..<1, using: &self) < probability }
}

/// Decides, for each packet, whether and when it arrives: a pure function of the profile, the seed,
/// the packet sizes and the send times, so tests replay it exactly.
public struct ImpairmentModel: Sendable {
    public var profile: ImpairmentProfile
    private var random: SeededRandom
    private var inBurst = false
    /// When the bottleneck finishes sending what is queued, µs.
    private var linkFreeUs: Int64 = 0
    private var startUs: Int64?
    public private(set) var packetsIn = 0
    public private(set) var packetsDropped = 0
    /// When the last delivered packet arrives (no reordering beyond the profile's own).
    private var lastArrivalUs: Int64 = 0
    /// How long the last packet scheduled waited in the bottleneck queue (µs; 0 without a cap, nil
    /// when it was dropped).
    public private(set) var lastQueueUs: Int64?

    public init(profile: ImpairmentProfile, seed: UInt64) {
        self.profile = profile
        random = SeededRandom(seed: seed)
    }

    /// Arrival times (µs) of a packet of `bytes` sent at `nowUs`: empty when lost, two with duplication.
    public mutating func schedule(bytes: Int, nowUs: Int64) -> [Int64] {
        packetsIn += 1
        lastQueueUs = nil
        let start = startUs ?? nowUs
        startUs = start
        let elapsed = Double(nowUs - start) / 1e6
        if profile.blackouts.contains(where: { $0.contains(elapsed) }) { return drop() }
        if profile.enterBurst > 0 {
            if inBurst { if random.chance(profile.leaveBurst) { inBurst = false } } else if random.chance(profile.enterBurst) { inBurst = true }
        }
        if random.chance(inBurst ? profile.burstLoss : profile.loss) { return drop() }
        var departure = nowUs
        lastQueueUs = 0
        if profile.bandwidthBps > 0 {
            let serialization = Int64(Double(bytes * 8) / profile.bandwidthBps * 1e6)
            let queued = max(0, linkFreeUs - nowUs)
            if Double(queued) / 1000 > profile.queueMs {
                lastQueueUs = nil
                return drop()
            }
            lastQueueUs = queued
            linkFreeUs = max(linkFreeUs, nowUs) + serialization
            departure = linkFreeUs
        }
        var delay = profile.delayMs
        if profile.jitterMs > 0 { delay += Double.random(in: -profile.jitterMs...profile.jitterMs, using: &random) }
        var arrival = departure + Int64(max(0, delay) * 1000)
        if random.chance(profile.reorder) {
            arrival += Int64(profile.reorderMs * 1000)
        } else {
            // Jitter alone does not reorder (a queue keeps order): not before the previous arrival.
            arrival = max(arrival, lastArrivalUs)
            lastArrivalUs = arrival
        }
        if random.chance(profile.duplicate) { return [arrival, arrival + 1000] }
        return [arrival]
    }

    private mutating func drop() -> [Int64] {
        packetsDropped += 1
        return []
    }
}
