import NIOCore
import RTCTransport

/// Rewrites what a subscriber is sent of one track into one continuous stream: its own SSRC, and
/// sequence numbers, timestamps and (VP8) picture ids and TL0PICIDX offset from random starting
/// points, so a receiver never sees the publisher's values. When the source changes (a simulcast
/// layer switch, at a keyframe) the offsets are re-based so the output goes on without a jump
/// (``switchSource(to:header:pictureID:tl0:nowUs:clockRate:)``); the earlier sources are kept as
/// segments, so a NACK for a packet sent before the switch still finds its original.
///
/// Packets left out (upper temporal layers, a layer being shed) take no sequence number: each
/// drop starts a segment one lower from the next input on. The placement is by input, so a packet
/// that arrives late (a repair from the publisher, after later ones went out) gets the number its
/// place in the stream had, not the next one: given the next one, it would take a number already
/// sent, and a receiver that assembles frames by sequence would hold a frame that never completes.
/// Positions are kept unwrapped (64-bit), inputs per source and outputs for the whole stream, so
/// no comparison depends on how long ago a segment began.
struct StreamRewriter {
    /// One source's stretch of the output: from unwrapped input `firstInput` (in its source's
    /// numbering) and output `firstOutput` on, output = input + (firstOutput - firstInput).
    struct Segment {
        var layer: Int
        var firstInput: Int64
        var firstOutput: Int64
        var timestampOffset: UInt32
        var pictureIDOffset: UInt16
        var tl0Offset: UInt8
        /// The first segment of a source (the first packet placed, or a switch): inputs before its
        /// `firstInput` belong to no output.
        var startsSource: Bool

        /// Output sequence number = input + this (mod 2^16).
        var sequenceOffset: UInt16 { UInt16(truncatingIfNeeded: firstOutput &- firstInput) }
        func output(ofInput input: Int64) -> Int64 { input &+ (firstOutput &- firstInput) }
    }

    let outputSSRC: UInt32
    /// The payload type the leg's answer numbers the codec with, when it is not the publisher's
    /// (a WHEP viewer's own numbering): every packet sent on the leg carries it.
    var payloadType: UInt8?
    /// The segments, oldest first; the last is the current source. At most ``maxSegments``.
    private(set) var segments: [Segment]
    private(set) var lastOutput: (sequence: UInt16, timestamp: UInt32)?
    private(set) var lastOutputUs: Int64?
    private(set) var lastPictureID: UInt16?
    private(set) var lastTL0: UInt8?
    /// The unwrapped output of ``lastOutput``.
    private var lastOutputPosition: Int64?
    /// The newest input of the current source placed (sent or left out), unwrapped; nil before its first.
    private var highestInput: Int64?
    /// Outputs (unwrapped) of late packets left out (``drop(input:)``): holes a receiver asks for,
    /// answered with padding, never with the packet. The last ``maxFillers``, none more than
    /// ``fillerSpan`` outputs older than the newest.
    private var fillers: [Int64] = []
    /// Enough for NACKs over a few seconds of dropped upper-layer frames (one segment per run of drops).
    static let maxSegments = 64
    static let maxFillers = 64
    static let fillerSpan: Int64 = 0x4000

    init(outputSSRC: UInt32, layer: Int = 0) {
        self.outputSSRC = outputSSRC
        var random = SystemRandomNumberGenerator()
        // The first packet fixes the positions (``placeNext(_:)``); the random offset waits in `firstOutput`.
        segments = [Segment(layer: layer, firstInput: 0, firstOutput: Int64(UInt16.random(in: 0...UInt16.max, using: &random)),
                            timestampOffset: UInt32.random(in: 0...UInt32.max, using: &random),
                            pictureIDOffset: UInt16.random(in: 0...0x7FFF, using: &random), tl0Offset: UInt8.random(in: 0...255, using: &random),
                            startsSource: true)]
    }

    private var current: Segment { segments[segments.count - 1] }
    var sequenceOffset: UInt16 { current.sequenceOffset }
    var timestampOffset: UInt32 { current.timestampOffset }
    /// The layer the current segment forwards.
    var layer: Int { current.layer }

    /// The unwrapped position of `input` of the current source (nil before its first): up to
    /// ``lateWindow`` behind its newest input it is a late packet, anything else is ahead (a long
    /// stretch not forwarded, such as a subscriber's transport down for minutes, is a jump forward,
    /// never a packet from long ago).
    func extended(_ input: UInt16) -> Int64? {
        guard let highestInput else { return nil }
        let ahead = input &- UInt16(truncatingIfNeeded: highestInput)
        return ahead > UInt16.max - UInt16(Self.lateWindow) ? highestInput &- Int64(UInt16.max - ahead) &- 1 : highestInput &+ Int64(ahead)
    }

    /// How far behind the newest input a packet is still placed as late (a publisher keeps a few
    /// hundred packets for repairs).
    static let lateWindow = 0x4000

    /// Whether the packet at `position` (``extended(_:)``) comes at or before one placed already (a repair).
    func isLate(_ position: Int64?) -> Bool {
        guard let highestInput, let position else { return false }
        return position <= highestInput
    }

    /// Whether packet `input` of the current source comes at or before one placed already.
    func isLate(_ input: UInt16) -> Bool { isLate(extended(input)) }

    /// The unwrapped position of output number `output`, the one nearest the newest number held.
    private func outputPosition(_ output: UInt16) -> Int64? {
        guard let top = reservedTop ?? lastOutputPosition else { return nil }
        return top &+ Int64(Int16(bitPattern: output &- UInt16(truncatingIfNeeded: top)))
    }

    /// The highest output number that belongs to a placed input (sent, filled, or a hole kept for
    /// a late packet); a new source starts after it.
    private var reservedTop: Int64? {
        guard let highestInput else { return nil }
        return current.output(ofInput: highestInput &+ 1) &- 1
    }

    /// Places the next input of the current source (at `position`, its ``extended(_:)``); the
    /// first fixes the positions of its first segment.
    private mutating func placeNext(_ input: UInt16, at position: Int64?) -> Int64 {
        guard let position else {
            let position = Int64(input)
            let last = segments.count - 1
            segments[last].firstOutput = segments[last].firstOutput &- segments[last].firstInput &+ position
            segments[last].firstInput = position
            segments[last].startsSource = true
            highestInput = position
            return position
        }
        highestInput = position
        return position
    }

    private mutating func append(_ segment: Segment) {
        segments.append(segment)
        if segments.count > Self.maxSegments { segments.removeFirst() }
    }

    /// The segment of the current source an earlier input was placed in; nil when it comes from
    /// before the source began (or before the segments kept).
    private func segment(ofInput input: Int64) -> Segment? {
        var newer: Segment?
        for segment in segments.reversed() {
            if segment.firstInput <= input {
                // Its number went to the next packet sent: it was left out in order (a copy of a
                // dropped packet), and has no place.
                if let newer, segment.output(ofInput: input) >= newer.firstOutput { return nil }
                return segment
            }
            if segment.startsSource { return nil }
            newer = segment
        }
        return nil
    }

    /// Leaves packet `input` of the current source out. In order, it takes no sequence number (the
    /// outputs after it move one down). Late, its number was kept for it: returns that number, a
    /// hole the caller fills with padding (nil when the packet is from before the source began).
    @discardableResult
    mutating func drop(input: UInt16) -> UInt16? {
        let position = extended(input)
        if isLate(position), let position {
            guard let segment = segment(ofInput: position) else { return nil }
            let output = segment.output(ofInput: position)
            fillers.removeAll { $0 == output || output &- $0 > Self.fillerSpan }
            fillers.append(output)
            if fillers.count > Self.maxFillers { fillers.removeFirst() }
            return UInt16(truncatingIfNeeded: output)
        }
        let wasStarted = highestInput != nil
        let placed = placeNext(input, at: position)
        if wasStarted, current.firstInput == placed, !current.startsSource {
            // The run of drops goes on (nothing placed in this segment yet): it begins one later.
            segments[segments.count - 1].firstInput = placed &+ 1
            return nil
        }
        var segment = current
        segment.firstOutput = segment.output(ofInput: placed)
        segment.firstInput = placed &+ 1
        segment.startsSource = false
        append(segment)
        return nil
    }

    /// Whether output `output` is a hole left by a late packet that was not sent (``drop(input:)``).
    func isFiller(_ output: UInt16) -> Bool {
        guard !fillers.isEmpty, let position = outputPosition(output) else { return false }
        return fillers.contains(position)
    }

    /// Rewrites a packet of the current source. Returns false when it must not be sent: a late
    /// packet from before the source began (its place in the output belongs to another source).
    @discardableResult
    mutating func rewrite(_ header: inout RTPHeader, nowUs: Int64? = nil) -> Bool {
        let input = header.sequenceNumber
        let extendedInput = extended(input)
        let placed: Segment
        let position: Int64
        if isLate(extendedInput), let late = extendedInput {
            guard let found = segment(ofInput: late) else { return false }
            placed = found
            position = late
        } else {
            position = placeNext(input, at: extendedInput)
            placed = current
        }
        let output = placed.output(ofInput: position)
        header.ssrc = outputSSRC
        if let payloadType { header.payloadType = payloadType }
        header.sequenceNumber = UInt16(truncatingIfNeeded: output)
        header.timestamp &+= placed.timestampOffset
        lastRewriteAdvanced = lastOutputPosition.map { output > $0 } ?? true
        if lastRewriteAdvanced {
            lastOutputPosition = output
            lastOutput = (header.sequenceNumber, header.timestamp)
            if let nowUs { lastOutputUs = nowUs }
        }
        return true
    }

    /// Whether the last ``rewrite(_:nowUs:)`` moved the output forward (not a late packet).
    private var lastRewriteAdvanced = true

    /// The output picture id and TL0PICIDX of a VP8 packet of the current source (nil: none in it).
    mutating func rewriteVP8(pictureID: UInt16?, tl0: UInt8?) -> (pictureID: UInt16?, tl0: UInt8?) {
        let picture = pictureID.map { ($0 &+ current.pictureIDOffset) & 0x7FFF }
        let index = tl0.map { $0 &+ current.tl0Offset }
        // A late packet's ids are older: the next switch continues from the newest.
        if lastRewriteAdvanced {
            if let picture { lastPictureID = picture }
            if let index { lastTL0 = index }
        }
        return (picture, index)
    }

    /// Makes `layer` the source from the packet `header` on (a keyframe's first packet, with its
    /// picture id and TL0PICIDX): it continues the output one sequence number, one picture and one
    /// TL0 index after the last, and the timestamp by the time elapsed since the last packet sent.
    mutating func switchSource(to layer: Int, header: RTPHeader, pictureID: UInt16?, tl0: UInt8?, nowUs: Int64, clockRate: Int) {
        guard let lastOutput, let top = reservedTop else {
            segments[segments.count - 1].layer = layer
            highestInput = nil
            return
        }
        let elapsedUs = max(0, nowUs - (lastOutputUs ?? nowUs))
        let step = UInt32(clamping: max(1, elapsedUs * Int64(clockRate) / 1_000_000))
        var segment = current
        segment.layer = layer
        // After every number the old source holds (sent, filled with padding, or kept for a late
        // packet): the new source never reuses one. Its inputs are numbered afresh.
        segment.firstOutput = top &+ 1
        segment.firstInput = Int64(header.sequenceNumber)
        segment.timestampOffset = (lastOutput.timestamp &+ step) &- header.timestamp
        segment.startsSource = true
        if let pictureID, let last = lastPictureID { segment.pictureIDOffset = (last &+ 1 &- pictureID) & 0x7FFF }
        if let tl0, let last = lastTL0 { segment.tl0Offset = last &+ 1 &- tl0 }
        append(segment)
        // The switch packet is the source's first: what came before it of this layer is not sent.
        highestInput = segment.firstInput &- 1
    }

    /// The publisher's sender report as this subscriber's stream: its SSRC and the RTP timestamp on
    /// the rewritten clock, the publisher's NTP time unchanged (RFC 3550 §7.2: a translator passes
    /// the sender's wall clock on, so a receiver can still line up audio and video). `packets` and
    /// `octets` are what this subscriber was sent.
    func rewrite(_ report: SenderReport, packets: Int, octets: Int) -> SenderReport {
        SenderReport(ssrc: outputSSRC, ntpTimestamp: report.ntpTimestamp, rtpTimestamp: report.rtpTimestamp &+ current.timestampOffset,
                     packetCount: UInt32(truncatingIfNeeded: packets), octetCount: UInt32(truncatingIfNeeded: octets))
    }

    /// The segment an output sequence number was sent in (the newest that began at or before it).
    func segment(of output: UInt16) -> Segment {
        guard let position = outputPosition(output) else { return current }
        for segment in segments.reversed() where segment.firstOutput <= position { return segment }
        return segments[0]
    }

    /// The publisher's layer and sequence number behind an output sequence number (for NACKs).
    func source(of output: UInt16) -> (layer: Int, sequence: UInt16) {
        let segment = segment(of: output)
        return (segment.layer, output &- segment.sequenceOffset)
    }

    /// The publisher's sequence number behind an output sequence number, on the current source.
    func inputSequence(of output: UInt16) -> UInt16 { output &- current.sequenceOffset }

    /// A repair of output `output` (its original `header` from the cache) as it was first sent.
    func rewriteRepair(_ header: inout RTPHeader, output: UInt16) -> Segment {
        let segment = segment(of: output)
        header.ssrc = outputSSRC
        if let payloadType { header.payloadType = payloadType }
        header.sequenceNumber &+= segment.sequenceOffset
        header.timestamp &+= segment.timestampOffset
        return segment
    }
}

/// The highest temporal layer a subscriber is sent (nil: all) and its last change. A late packet
/// (a repair from the publisher) is judged by the cap in force at its place, not by today's: its
/// frame was forwarded whole or left out whole, and a part of it sent or left out alone makes a
/// frame that never completes.
struct TemporalCap: Sendable, Equatable {
    struct Change: Sendable, Equatable {
        /// Where (an unwrapped input of ``StreamRewriter``) a cap took effect, and the one before it.
        var at: Int64
        var before: UInt8?
    }

    private(set) var current: UInt8?
    /// The last changes, oldest first (at most ``kept``): enough for any repair still to come.
    private(set) var changes: [Change] = []
    static let kept = 4

    /// Sets the cap from input `position` on (an in-order frame start). Returns whether it changed.
    mutating func set(_ cap: UInt8?, from position: Int64) -> Bool {
        guard cap != current else { return false }
        changes.append(Change(at: position, before: current))
        if changes.count > Self.kept { changes.removeFirst() }
        current = cap
        return true
    }

    /// The cap for the packet at input `position`: the one in force there.
    func cap(at position: Int64) -> UInt8? {
        var cap = current
        for change in changes.reversed() {
            guard position < change.at else { break }
            cap = change.before
        }
        return cap
    }
}

/// Lets keyframe requests for one stream through: at most one per interval while the last one is
/// unanswered. Once its keyframe has arrived (``answered()``) one more may go early, 100 ms after
/// the last, at most once per interval: a keyframe that went out while a new subscriber's transport
/// was still connecting does not hold that subscriber's own request back for the whole interval,
/// and a subscriber asking again and again gets the publisher to send at most two keyframes per
/// interval (four a second).
struct Throttle {
    let intervalMs: Int64
    static let answeredFloorMs: Int64 = 100
    private var last: Int64?
    private var lastEarly: Int64?
    /// A request went out and no keyframe has come since.
    private(set) var outstanding = false

    init(intervalMs: Int) { self.intervalMs = Int64(intervalMs) }

    private func earlyAllowed(nowMs: Int64) -> Bool {
        !outstanding && (lastEarly.map { nowMs - $0 >= intervalMs } ?? true)
    }

    /// `newSubscriber`: the request is for a subscriber that has had no keyframe yet (its transport
    /// just connected). It goes at once unless a keyframe is already on its way (that one will
    /// reach it too), whatever the interval: viewers joining together each get their first frame
    /// without waiting behind the others' (it costs one keyframe per new subscriber at most, and
    /// no more than one per request's round trip to the publisher, as those on their way are
    /// shared; a subscriber asking again is held as before). It used to wait for 100 ms after the
    /// last: a viewer whose transport connected just after another's keyframe got its first frame
    /// 100-170 ms later than it could.
    mutating func allow(nowMs: Int64, newSubscriber: Bool = false) -> Bool {
        if newSubscriber, let last, nowMs - last < intervalMs {
            guard !outstanding else { return false }
            self.last = nowMs
            outstanding = true
            return true
        }
        if let last, nowMs - last < intervalMs {
            guard earlyAllowed(nowMs: nowMs), nowMs - last >= Self.answeredFloorMs else { return false }
            lastEarly = nowMs
        }
        last = nowMs
        outstanding = true
        return true
    }

    /// The keyframe asked for arrived.
    mutating func answered() { outstanding = false }

    /// Milliseconds until the next request would be allowed (0 if now).
    func waitMs(nowMs: Int64) -> Int64 {
        guard let last else { return 0 }
        let full = max(0, last + intervalMs - nowMs)
        guard earlyAllowed(nowMs: nowMs) else { return full }
        return min(full, max(0, last + Self.answeredFloorMs - nowMs))
    }
}
