import RTCTransport
import Synchronization

/// What both kinds of local track share: an SSRC, a sequence and the counters for sender reports
/// and stats. Encoding threads write the counters, the RTCP timer reads them.
final class SenderState: Sendable {
    struct Counters {
        var packetsSent = 0
        var bytesSent = 0
        var payloadBytesSent = 0
        var framesEncoded = 0
        var framesDropped = 0
        var retransmitted = 0
        var lastRTPTimestamp: UInt32 = 0
        /// Monotonic time of the capture `lastRTPTimestamp` stands for.
        var lastCaptureMonoUs: Int64?
        var width = 0
        var height = 0
        var lossFraction = 0.0
        var roundTripTimeMs: Double?
    }

    let ssrc: UInt32
    let clockRate: Int
    let counters = Mutex(Counters())

    init(ssrc: UInt32, clockRate: Int) {
        self.ssrc = ssrc
        self.clockRate = clockRate
    }

    /// The sender report for now, or nil before the first packet.
    func senderReport(nowMonoUs: Int64, wallUs: Int64) -> SenderReport? {
        counters.withLock { counters in
            guard let capture = counters.lastCaptureMonoUs else { return nil }
            let elapsed = nowMonoUs - capture
            let rtp = counters.lastRTPTimestamp &+ UInt32(truncatingIfNeeded: elapsed * Int64(clockRate) / 1_000_000)
            return SenderReport(ssrc: ssrc, ntpTimestamp: NTPTime.timestamp(unixMicroseconds: UInt64(max(0, wallUs))), rtpTimestamp: rtp,
                                packetCount: UInt32(truncatingIfNeeded: counters.packetsSent),
                                octetCount: UInt32(truncatingIfNeeded: counters.payloadBytesSent))
        }
    }

    /// Takes in a receiver report block about this stream.
    func received(_ report: ReceptionReport, arrivalWallUs: Int64) {
        let arrival = NTPTime.compact(NTPTime.timestamp(unixMicroseconds: UInt64(max(0, arrivalWallUs))))
        counters.withLock { counters in
            counters.lossFraction = Double(report.fractionLost) / 256
            if let rtt = report.roundTripTime(arrivalNTP: arrival) { counters.roundTripTimeMs = rtt * 1000 }
        }
    }
}
