/// Decides which lost RTP packets to ask for again (RFC 4585 generic NACK), and when: a gap is
/// asked for at once, then again every `max(minRetryUs, rtt × 1.5)` while it stays open, up to
/// `maxRetries` times; a packet older than `maxAgeUs` is given up. Time is passed in.
public struct NackGenerator: Sendable {
    private struct Pending: Sendable {
        var firstMissedUs: Int64
        var lastSentUs: Int64?
        var retries: Int
    }

    public var maxRetries: Int
    public var minRetryUs: Int64
    public var maxAgeUs: Int64
    /// The round-trip time, µs (from RTCP or STUN); 100 ms until known.
    public var roundTripUs: Int64 = 100_000
    private var pending: [UInt16: Pending] = [:]
    private var highest: UInt16?
    public private(set) var nacksSent = 0
    public private(set) var recovered = 0
    public private(set) var givenUp = 0

    public init(maxRetries: Int = 10, minRetryUs: Int64 = 20_000, maxAgeUs: Int64 = 1_000_000) {
        self.maxRetries = maxRetries
        self.minRetryUs = minRetryUs
        self.maxAgeUs = maxAgeUs
    }

    /// A fresh generator that keeps a known round-trip time.
    public init(roundTrip: Int64) {
        self.init()
        roundTripUs = roundTrip
    }

    /// Records a received sequence number; a jump forward opens gaps for the numbers skipped.
    public mutating func received(_ sequence: UInt16, nowUs: Int64) {
        guard let highest else {
            self.highest = sequence
            return
        }
        let ahead = sequence &- highest
        if ahead == 0 { return }
        if ahead < 0x8000 {
            // Forward: everything between is missing (bounded, a huge jump is a restart).
            if ahead > 1 && ahead < 1000 {
                var missing = highest &+ 1
                while missing != sequence {
                    pending[missing] = Pending(firstMissedUs: nowUs, lastSentUs: nil, retries: 0)
                    missing &+= 1
                }
            }
            self.highest = sequence
        } else if pending.removeValue(forKey: sequence) != nil {
            recovered += 1
        }
    }

    /// The sequence numbers to NACK now.
    public mutating func due(nowUs: Int64) -> [UInt16] {
        guard !pending.isEmpty else { return [] }
        let interval = max(minRetryUs, roundTripUs * 3 / 2)
        var out: [UInt16] = []
        var expired: [UInt16] = []
        // Entries are updated in place through their index (writing by key while iterating would
        // copy the whole dictionary); expired ones are removed after the walk.
        var index = pending.startIndex
        while index != pending.endIndex {
            let (sequence, entry) = pending[index]
            if nowUs - entry.firstMissedUs > maxAgeUs || entry.retries >= maxRetries {
                expired.append(sequence)
            } else if entry.lastSentUs.map({ nowUs - $0 >= interval }) ?? true {
                pending.values[index].lastSentUs = nowUs
                pending.values[index].retries += 1
                out.append(sequence)
            }
            pending.formIndex(after: &index)
        }
        for sequence in expired { pending[sequence] = nil }
        givenUp += expired.count
        nacksSent += out.count
        guard let highest else { return out }
        return out.sorted { (highest &- $0) > (highest &- $1) }
    }

    /// Forgets gaps older than `sequence` (the jitter buffer gave up on them).
    public mutating func drop(before sequence: UInt16) {
        for key in pending.keys where (sequence &- key) > 0 && (sequence &- key) < 0x8000 { pending[key] = nil }
    }

    public var missingCount: Int { pending.count }

    /// Whether `sequence` is missing and still asked for (not given up: retries and age left).
    public func isAsking(for sequence: UInt16) -> Bool {
        guard let entry = pending[sequence] else { return false }
        return entry.retries < maxRetries
    }
}
