/// Receiver side of transport-wide congestion control: records the arrival time of each
/// transport-wide sequence number and turns them into ``TransportFeedback`` packets
/// (draft-holmer-rmcat-transport-wide-cc-extensions-01 §3.1). No clock: arrival times are passed in.
public struct TransportFeedbackBuilder: Sendable {
    /// Arrival times (µs) by unwrapped sequence number, since the last feedback.
    private var arrivals: [Int64: Int64] = [:]
    private var lastUnwrapped: Int64?
    /// The first sequence number the next feedback covers.
    private var nextBase: Int64?
    private var feedbackCount: UInt8 = 0
    /// Most packets one feedback covers; more are left for the next one.
    public let maxPacketsPerFeedback: Int

    public init(maxPacketsPerFeedback: Int = 1000) { self.maxPacketsPerFeedback = maxPacketsPerFeedback }

    /// Records one packet's transport-wide sequence number and arrival time. A packet from before
    /// the last feedback is ignored (it was reported lost), unless it is so far before it
    /// (``resetDistance``) that the numbering itself moved (the sender started again, or one bogus
    /// number ran the window ahead): then the window starts again at it.
    public mutating func record(sequence: UInt16, arrivalUs: Int64) {
        let unwrapped: Int64
        if let last = lastUnwrapped {
            let delta = Int64(Int16(bitPattern: sequence &- UInt16(truncatingIfNeeded: last)))
            unwrapped = last + delta
        } else {
            unwrapped = Int64(sequence)
        }
        if let base = nextBase, unwrapped < base {
            guard base - unwrapped > Int64(resetDistance) else { return }  // already reported
            arrivals.removeAll()
            nextBase = unwrapped
            lastUnwrapped = unwrapped
        }
        if lastUnwrapped.map({ unwrapped > $0 }) ?? true { lastUnwrapped = unwrapped }
        if nextBase == nil { nextBase = unwrapped }
        arrivals[unwrapped] = arrivalUs
    }

    /// How far before the window a packet must be for the window to start again at it, rather
    /// than the packet being ignored as late.
    public var resetDistance: Int { maxPacketsPerFeedback }

    /// True when there is something to report.
    public var hasPending: Bool { !arrivals.isEmpty }

    /// Feedback for everything recorded since the last call: received packets with their deltas,
    /// the gaps as lost, up to the newest arrival within ``maxPacketsPerFeedback`` numbers of the
    /// first one reported (numbers beyond it are left for the next feedback, never called lost
    /// before they could arrive). A gap of that many numbers or more with nothing received (a
    /// long outage) is skipped rather than reported, and reporting goes on after it. Nil when
    /// nothing arrived.
    public mutating func makeFeedback(senderSSRC: UInt32, mediaSSRC: UInt32) -> TransportFeedback? {
        guard var base = nextBase, let lowest = arrivals.keys.min() else { return nil }
        if lowest - base >= Int64(maxPacketsPerFeedback) { base = lowest }
        let limit = base + Int64(maxPacketsPerFeedback) - 1
        guard let end = arrivals.keys.lazy.filter({ $0 <= limit }).max() else { return nil }
        let arrivals = self.arrivals
        guard let firstArrival = (base...end).lazy.compactMap({ arrivals[$0] }).first else { return nil }
        let referenceTicks = firstArrival / Int64(TransportFeedback.referenceTickUs)
        var previous = referenceTicks * Int64(TransportFeedback.referenceTickUs)
        var results: [TransportFeedback.PacketResult] = []
        for sequence in base...end {
            guard let arrival = arrivals[sequence] else {
                results.append(.lost)
                continue
            }
            let ticks = (arrival - previous) / Int64(TransportFeedback.deltaTickUs)
            results.append(.received(delta: Int16(clamping: ticks)))
            previous += Int64(Int16(clamping: ticks)) * Int64(TransportFeedback.deltaTickUs)
        }
        nextBase = end + 1
        self.arrivals = arrivals.filter { $0.key > end }
        defer { feedbackCount &+= 1 }
        return TransportFeedback(senderSSRC: senderSSRC, mediaSSRC: mediaSSRC,
                                 baseSequenceNumber: UInt16(truncatingIfNeeded: base),
                                 referenceTime: Int32(truncatingIfNeeded: referenceTicks & 0x7F_FFFF),
                                 feedbackPacketCount: feedbackCount, packets: results)
    }
}
