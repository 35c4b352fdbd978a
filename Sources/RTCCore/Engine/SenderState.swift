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

/// The one clock a publisher's tracks are captured on. Apps stamp pushed frames with capture
/// times (`timestampUs`) on a clock of their own choosing; the first frame of any track fixes its
/// offset to the local monotonic clock, and every track of the transport uses that same offset.
/// So an audio and a video source stamped from one clock keep their relation in RTP and in the
/// sender reports (RFC 3550 §6.4.1), whichever track's first frame came first: lip sync at the
/// receiver, and in recordings, starts here.
final class CaptureClock: Sendable {
    private let offsetUs = Mutex<Int64?>(nil)

    /// The local monotonic time of a capture timestamp.
    func monotonicUs(ofCapture timestampUs: Int64) -> Int64 {
        offsetUs.withLock { offset in
            if offset == nil { offset = MediaClock.monotonicUs() - timestampUs }
            return timestampUs + offset!
        }
    }
}
