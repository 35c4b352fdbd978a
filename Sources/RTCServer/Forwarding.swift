import NIOCore
import RTCTransport

/// Rewrites one published stream for one subscriber: its own SSRC, and sequence numbers and
/// timestamps offset from random starting points, so a receiver never sees the publisher's values
/// and a later change of source can be spliced in without a jump (``splice(nextSequence:nextTimestamp:)``).
struct StreamRewriter {
    let outputSSRC: UInt32
    private(set) var sequenceOffset: UInt16
    private(set) var timestampOffset: UInt32
    private(set) var lastOutput: (sequence: UInt16, timestamp: UInt32)?

    init(outputSSRC: UInt32) {
        self.outputSSRC = outputSSRC
        var random = SystemRandomNumberGenerator()
        sequenceOffset = UInt16.random(in: 0...UInt16.max, using: &random)
        timestampOffset = UInt32.random(in: 0...UInt32.max, using: &random)
    }

    mutating func rewrite(_ header: inout RTPHeader) {
        header.ssrc = outputSSRC
        header.sequenceNumber &+= sequenceOffset
        header.timestamp &+= timestampOffset
        lastOutput = (header.sequenceNumber, header.timestamp)
    }

    /// The publisher's sender report as this subscriber's stream: its SSRC and the RTP timestamp on
    /// the rewritten clock, the publisher's NTP time unchanged (RFC 3550 §7.2: a translator passes
    /// the sender's wall clock on, so a receiver can still line up audio and video). `packets` and
    /// `octets` are what this subscriber was sent.
    func rewrite(_ report: SenderReport, packets: Int, octets: Int) -> SenderReport {
        SenderReport(ssrc: outputSSRC, ntpTimestamp: report.ntpTimestamp, rtpTimestamp: report.rtpTimestamp &+ timestampOffset,
                     packetCount: UInt32(truncatingIfNeeded: packets), octetCount: UInt32(truncatingIfNeeded: octets))
    }

    /// The publisher's sequence number behind an output sequence number (for NACKs).
    func inputSequence(of output: UInt16) -> UInt16 { output &- sequenceOffset }

    /// Re-bases the offsets so the next input packet continues the output without a jump.
    mutating func splice(nextSequence: UInt16, nextTimestamp: UInt32, timestampStep: UInt32 = 3000) {
        guard let lastOutput else { return }
        sequenceOffset = (lastOutput.sequence &+ 1) &- nextSequence
        timestampOffset = (lastOutput.timestamp &+ timestampStep) &- nextTimestamp
    }
}

/// Lets a request through at most once per interval (per track keyframe requests).
struct Throttle {
    let intervalMs: Int64
    private var last: Int64?

    init(intervalMs: Int) { self.intervalMs = Int64(intervalMs) }

    mutating func allow(nowMs: Int64) -> Bool {
        if let last, nowMs - last < intervalMs { return false }
        last = nowMs
        return true
    }

    /// Milliseconds until the next request would be allowed (0 if now).
    func waitMs(nowMs: Int64) -> Int64 {
        guard let last else { return 0 }
        return max(0, last + intervalMs - nowMs)
    }
}
