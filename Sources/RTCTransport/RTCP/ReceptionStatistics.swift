/// Receiver-side bookkeeping for one RTP source, producing report blocks with the loss and jitter
/// arithmetic of [RFC 3550 Appendix A.3 and A.8](https://www.rfc-editor.org/rfc/rfc3550#appendix-A.3).
///
/// Has no clock: every call takes the arrival time, so it is fully deterministic in tests.
public struct ReceptionStatistics: Sendable {
    public let ssrc: UInt32
    /// RTP clock rate of the stream (90000 for video, 48000 for Opus).
    public let clockRate: Int

    private var started = false
    private var baseSequence: UInt32 = 0
    private var maxSequence: UInt16 = 0
    private var cycles: UInt32 = 0
    public private(set) var packetsReceived: UInt64 = 0
    private var expectedPrior: UInt32 = 0
    private var receivedPrior: UInt64 = 0
    /// Jitter estimate in RTP timestamp units, scaled by 16 as in A.8.
    private var jitterQ4: Int64 = 0
    private var lastTransit: Int64?
    private var lastSR: (compactNTP: UInt32, arrivalUs: Int64)?

    public init(ssrc: UInt32, clockRate: Int) {
        self.ssrc = ssrc
        self.clockRate = clockRate
    }

    /// Records a packet that arrived at `arrivalUs` (microseconds, any epoch).
    public mutating func record(sequenceNumber: UInt16, rtpTimestamp: UInt32, arrivalUs: Int64) {
        if !started {
            started = true
            baseSequence = UInt32(sequenceNumber)
            maxSequence = sequenceNumber
        } else {
            let delta = sequenceNumber &- maxSequence
            if delta != 0 && delta < 0x8000 {
                if sequenceNumber < maxSequence { cycles &+= 1 << 16 }
                maxSequence = sequenceNumber
            }
        }
        packetsReceived += 1
        // Interarrival jitter: D = (Rj − Ri) − (Sj − Si) in timestamp units; J += (|D| − J) / 16.
        let arrival = arrivalUs * Int64(clockRate) / 1_000_000
        let transit = arrival - Int64(rtpTimestamp)
        if let lastTransit {
            var d = transit - lastTransit
            // RTP timestamps wrap at 2^32: take the shortest distance.
            if d > Int64(UInt32.max / 2) { d -= Int64(UInt32.max) + 1 }
            if d < -Int64(UInt32.max / 2) { d += Int64(UInt32.max) + 1 }
            jitterQ4 += abs(d) - ((jitterQ4 + 8) >> 4)
        }
        lastTransit = transit
    }

    /// Records an SR from this source, for the LSR/DLSR fields.
    public mutating func recordSenderReport(compactNTP: UInt32, arrivalUs: Int64) {
        lastSR = (compactNTP, arrivalUs)
    }

    /// Highest sequence number seen, extended with the wrap count.
    public var extendedHighestSequence: UInt32 { cycles | UInt32(maxSequence) }

    /// Packets expected since the first one.
    public var expected: UInt32 { started ? extendedHighestSequence &- baseSequence &+ 1 : 0 }

    /// Packets lost since the first one (can be negative with duplicates).
    public var cumulativeLost: Int64 { Int64(expected) - Int64(packetsReceived) }

    /// Interarrival jitter in RTP timestamp units.
    public var jitter: UInt32 { UInt32(clamping: jitterQ4 >> 4) }

    /// Makes the report block for this source at `nowUs`, and starts a new reporting interval.
    public mutating func makeReport(nowUs: Int64) -> ReceptionReport {
        let expectedInterval = Int64(expected &- expectedPrior)
        let receivedInterval = Int64(packetsReceived - receivedPrior)
        expectedPrior = expected
        receivedPrior = packetsReceived
        let lostInterval = expectedInterval - receivedInterval
        let fraction: UInt8 = expectedInterval <= 0 || lostInterval <= 0 ? 0 : UInt8(min(255, (lostInterval << 8) / expectedInterval))
        var lsr: UInt32 = 0, dlsr: UInt32 = 0
        if let lastSR {
            lsr = lastSR.compactNTP
            dlsr = UInt32(clamping: (nowUs - lastSR.arrivalUs) * 65536 / 1_000_000)
        }
        return ReceptionReport(ssrc: ssrc, fractionLost: fraction,
                               cumulativeLost: Int32(clamping: cumulativeLost),
                               extendedHighestSequence: extendedHighestSequence, jitter: jitter,
                               lastSenderReport: lsr, delaySinceLastSenderReport: dlsr)
    }
}

/// NTP time helpers for sender reports.
public enum NTPTime {
    /// Seconds from 1900 (NTP epoch) to 1970 (Unix epoch).
    public static let unixEpochOffset: UInt64 = 2_208_988_800

    /// 64-bit NTP timestamp of a Unix time in microseconds.
    /// (Swift puts shifts above multiplication and division: every product or quotient that a
    /// shift applies to is in parentheses here.)
    public static func timestamp(unixMicroseconds: UInt64) -> UInt64 {
        let seconds = unixMicroseconds / 1_000_000 + unixEpochOffset
        let fraction = ((unixMicroseconds % 1_000_000) << 32) / 1_000_000
        return (seconds << 32) | fraction
    }

    /// The Unix time in microseconds of a 64-bit NTP timestamp (negative before 1970), to the
    /// nearest microsecond, so ``timestamp(unixMicroseconds:)`` and this round-trip exactly.
    public static func unixMicroseconds(_ ntp: UInt64) -> Int64 {
        let seconds = Int64(ntp >> 32) - Int64(unixEpochOffset)
        // Without the parentheses the shift binds first (1_000_000 shifted right by 32 is zero) and
        // every fraction of a second was read as zero.
        let fraction = Int64(((ntp & 0xFFFF_FFFF) * 1_000_000 + (1 << 31)) >> 32)
        return seconds * 1_000_000 + fraction
    }

    /// The middle 32 bits (16.16 seconds), as LSR carries it.
    public static func compact(_ ntp: UInt64) -> UInt32 { UInt32(truncatingIfNeeded: ntp >> 16) }
}
