/// When each transport-wide sequence number went out and how big its packet was: what the
/// receiver's transport-wide feedback is matched against (the send side of TWCC). A ring of the
/// last 4096 packets, several seconds at any rate this SDK sends.
public struct SendLog: Sendable {
    private struct Entry {
        var sequence: UInt16
        var sendUs: Int64
        var bytes: Int32
        var valid: Bool
        /// Bytes sent up to and including this packet.
        var cumulativeBytes: Int
        /// The probe cluster it was sent in, -1 for none.
        var probeCluster: Int32
    }

    public static let capacity = 4096
    /// Made on the first packet logged (160 KB): a leg that never sends costs nothing.
    private var entries: [Entry] = []
    private var sentBytes = 0
    /// `cumulativeBytes` of the latest-sent packet any feedback covered.
    private var reportedBytes = 0

    public init() {}

    /// Bytes sent after the latest packet feedback covered. Packets whose feedback was itself
    /// lost stop counting once feedback covers a later one, so a lossy return path cannot hold
    /// bytes "in flight" for good.
    public var inFlightBytes: Int { sentBytes - reportedBytes }

    public mutating func record(sequence: UInt16, bytes: Int, sendUs: Int64, probeCluster: Int? = nil) {
        sentBytes += bytes
        if entries.isEmpty {
            entries = [Entry](repeating: Entry(sequence: 0, sendUs: 0, bytes: 0, valid: false, cumulativeBytes: 0, probeCluster: -1),
                              count: Self.capacity)
        }
        entries[Int(sequence) % Self.capacity] = Entry(sequence: sequence, sendUs: sendUs, bytes: Int32(clamping: bytes), valid: true,
                                                       cumulativeBytes: sentBytes, probeCluster: Int32(clamping: probeCluster ?? -1))
    }

    /// The feedback's packets, in sequence order, with their send times and sizes; arrivals on the
    /// receiver's clock (reference time plus deltas). Packets no longer (or never) logged are left
    /// out. The packets it covers, and all sent before them, stop counting as in flight.
    public mutating func results(for feedback: TransportFeedback) -> [BandwidthEstimator.PacketResult] {
        guard !entries.isEmpty else { return [] }
        var arrivalUs = Int64(feedback.referenceTime) * Int64(TransportFeedback.referenceTickUs)
        var results: [BandwidthEstimator.PacketResult] = []
        results.reserveCapacity(feedback.packets.count)
        for (offset, packet) in feedback.packets.enumerated() {
            let sequence = feedback.baseSequenceNumber &+ UInt16(truncatingIfNeeded: offset)
            var arrival: Int64?
            if packet.status != .notReceived {
                arrivalUs += Int64(packet.delta) * Int64(TransportFeedback.deltaTickUs)
                arrival = arrivalUs
            }
            let entry = entries[Int(sequence) % Self.capacity]
            guard entry.valid, entry.sequence == sequence else { continue }
            reportedBytes = max(reportedBytes, entry.cumulativeBytes)
            results.append(BandwidthEstimator.PacketResult(sendTimeUs: entry.sendUs, size: Int(entry.bytes), arrivalTimeUs: arrival,
                                                           probeCluster: entry.probeCluster >= 0 ? Int(entry.probeCluster) : nil))
        }
        return results
    }
}
