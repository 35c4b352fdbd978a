import NIOCore
import RTCTransport

/// The receive side of one video stream before the decoder: it collects packets (in any order)
/// into whole frames, hands them out in decode order, and decides when a gap is given up on.
///
/// After a gap is given up on, the frames that follow reference a picture the decoder never saw,
/// so nothing but a keyframe is handed out until one arrives, and a keyframe request (PLI) is
/// raised, throttled. Time is passed in (`nowUs`), so tests drive it without sleeping.
public struct VideoJitterBuffer: Sendable {
    public struct Output: Sendable {
        /// Complete frames to decode, in order.
        public var frames: [AssembledVP8Frame] = []
        /// Ask the sender for a keyframe now.
        public var requestKeyframe = false
    }

    /// How long a gap may stay open before the frames behind it go ahead without it.
    public var maxGapWaitUs: Int64
    /// How long a gap may stay open while its packet is still being asked for (``tick(nowUs:repairing:)``):
    /// a repair on its way is cheaper than a keyframe, above all on a lossy link where the keyframe's
    /// own packets need repairs.
    public var maxRepairWaitUs: Int64 = 1_000_000
    /// Least time between two keyframe requests.
    public var keyframeRequestIntervalUs: Int64
    private var assembler = VP8FrameAssembler()
    /// The oldest missing sequence number and since when it has been missing: a gap is timed on
    /// its own, so steady loss elsewhere does not age it.
    /// What holds frames back: the oldest missing sequence number, or a blocked frame with nothing missing.
    private enum Gap: Equatable { case missing(UInt16), blocked }
    private var gap: Gap?
    private var gapOpenedUs: Int64?
    private var lastKeyframeRequestUs: Int64?
    private var firstPacketUs: Int64?
    /// True until a keyframe is handed out (at the start and after an unrecoverable gap).
    public private(set) var waitingForKeyframe = true
    public private(set) var framesHandedOut = 0
    /// Frames complete but not decodable while waiting for a keyframe, and frames the decoder refused.
    public private(set) var framesDiscarded = 0
    /// Every frame given up on: those, and those skipped over at a gap (lost or incomplete).
    public var framesDropped: Int { framesDiscarded + assembler.framesDropped }
    public private(set) var keyframeRequests = 0

    public init(maxGapWaitUs: Int64 = 150_000, keyframeRequestIntervalUs: Int64 = 300_000) {
        self.maxGapWaitUs = maxGapWaitUs
        self.keyframeRequestIntervalUs = keyframeRequestIntervalUs
    }

    /// The sequence numbers missing now (what a NACK asks for).
    public var missing: [UInt16] { assembler.missingSequenceNumbers }

    /// The oldest missing sequence number, if any (the first of ``missing``).
    public var firstMissing: UInt16? { assembler.firstMissingSequenceNumber }

    /// Adds one packet. Bad payloads are dropped (they count nowhere else).
    public mutating func insert(_ packet: RTPPacket, nowUs: Int64) -> Output {
        if firstPacketUs == nil { firstPacketUs = nowUs }
        // A padding-only packet fills its number (an SFU says so for a packet it left out).
        let frames = packet.payload.readableBytes == 0 && packet.paddingLength > 0
            ? assembler.insertFiller(sequenceNumber: packet.header.sequenceNumber)
            : (try? assembler.insert(sequenceNumber: packet.header.sequenceNumber, timestamp: packet.header.timestamp,
                                     marker: packet.header.marker, payload: packet.payload)) ?? []
        var output = Output()
        emit(frames, into: &output)
        updateGap(nowUs: nowUs)
        return output
    }

    /// Time passing: gives up on an old gap, and asks for a keyframe while none came.
    /// `repairing`: the oldest missing packet is still being asked for (NACK): the gap is then given
    /// up only after ``maxRepairWaitUs``.
    public mutating func tick(nowUs: Int64, repairing: Bool = false) -> Output {
        var output = Output()
        if let opened = gapOpenedUs, nowUs - opened >= maxGapWaitUs, !repairing || nowUs - opened >= maxRepairWaitUs {
            let frames = assembler.skipMissing()
            if !frames.isEmpty || assembler.firstMissingSequenceNumber != nil {
                lostReference(nowUs: nowUs, into: &output)
            }
            emit(frames, into: &output)
            gap = nil
            gapOpenedUs = nil
            updateGap(nowUs: nowUs)
        }
        if waitingForKeyframe, let first = firstPacketUs, nowUs - first >= keyframeRequestIntervalUs {
            requestKeyframe(nowUs: nowUs, into: &output)
        }
        return output
    }

    /// The decoder failed on a frame: only a keyframe can help.
    public mutating func decoderFailed(nowUs: Int64) -> Output {
        var output = Output()
        framesDiscarded += 1
        lostReference(nowUs: nowUs, into: &output)
        return output
    }

    private mutating func emit(_ frames: [AssembledVP8Frame], into output: inout Output) {
        for frame in frames {
            if waitingForKeyframe && !frame.isKeyframe {
                framesDiscarded += 1
                continue
            }
            if frame.isKeyframe { waitingForKeyframe = false }
            framesHandedOut += 1
            output.frames.append(frame)
        }
    }

    private mutating func lostReference(nowUs: Int64, into output: inout Output) {
        waitingForKeyframe = true
        requestKeyframe(nowUs: nowUs, into: &output)
    }

    private mutating func requestKeyframe(nowUs: Int64, into output: inout Output) {
        if let last = lastKeyframeRequestUs, nowUs - last < keyframeRequestIntervalUs { return }
        lastKeyframeRequestUs = nowUs
        keyframeRequests += 1
        output.requestKeyframe = true
    }

    /// The gap's clock runs while a sequence number is missing, or while a complete frame is held
    /// behind packets that form no frame (nothing is missing, yet nothing can be given out): a
    /// stream must never stall without a give-up and a keyframe request.
    private mutating func updateGap(nowUs: Int64) {
        let key = assembler.firstMissingSequenceNumber.map(Gap.missing) ?? (assembler.holdsBlockedFrame ? .blocked : nil)
        guard let key else {
            gap = nil
            gapOpenedUs = nil
            return
        }
        if key != gap {
            gap = key
            gapOpenedUs = nowUs
        }
    }
}

/// What the audio jitter buffer wants played for the next 20 ms.
public enum AudioPlayoutDecision: Sendable, Equatable {
    /// Not started (or rebuffering): play silence.
    case silence
    /// Decode this packet.
    case decode([UInt8])
    /// The packet is lost but the next one is here: recover it from the next one's in-band FEC.
    case recover(from: [UInt8])
    /// Lost: conceal it (``LossConcealer`` continues the audio before it).
    case conceal
}

/// The receive side of one audio stream: packets in, one 20 ms decision out per playout tick.
/// Each packet takes the 20 ms slot its RTP timestamp names (960 ticks of the 48 kHz clock per
/// slot), not its sequence number: a sender's padding-only probes (libwebrtc sends them on the
/// audio SSRC) use sequence numbers and carry no audio, so by sequence each would have taken 20 ms
/// of playout and pushed the rest later. Empty payloads (padding only) are dropped on the way in.
/// Without a timestamp, the sequence number names the slot. Packets are 20 ms: the playout
/// conceals any other duration (10, 40 or 60 ms Opus packets are not played).
///
/// Discontinuities: playout (re)starts `targetPackets - 1` slots before the newest packet, not at
/// the oldest (after Opus DTX's one packet per 400 ms, the oldest can be seconds old); a missing
/// slot with the next packet more than `maxConcealed` slots ahead (a talkspurt after DTX, a sender
/// whose timestamp jumped) moves playout to that packet instead of concealing up to it; a packet
/// far behind playout (a sender whose timestamp went back: a restart) re-anchors the timestamps
/// at the playout's position instead of counting as late; trimming past `maxPackets` moves
/// playout past what it dropped.
///
/// Playout starts once `targetPackets` are buffered; a lost packet is recovered from the next
/// one's FEC when that is already here (and `canRecover` says it carries some), else concealed
/// (playout never stops for a burst: 300 ms by default); after `maxConcealed` slots in a row with
/// nothing buffered it rebuffers; past `maxPackets` it drops the oldest to cap delay.
///
/// Adaptive playout delay (when packets come with their arrival times): each packet's transit
/// (arrival minus its slot's place in the stream) over the last 5 s gives the spread late packets
/// need, its 95th percentile above the fastest; the target is that spread in packets plus one,
/// never under the configured `targetPackets` (the floor) nor over half of `maxPackets`. Playout
/// follows the target: a buffer two packets over it drops one packet, one under it plays one
/// concealed frame without advancing (to grow), each at most every 200 ms. Whole 20 ms frames,
/// not time-stretching: a small step, rarely taken.
public struct AudioJitterBuffer: Sendable {
    /// The current playout target (packets): the floor, or more under jitter.
    public private(set) var targetPackets: Int
    public let minimumTargetPackets: Int
    public var maxPackets: Int
    public var maxConcealed: Int
    /// Whether a packet can recover the one before it (its codec's in-band FEC); when not, the
    /// lost one is concealed. Opus: ``AudioPlayout`` asks whether the packet carries LBRR.
    public var canRecover: @Sendable ([UInt8]) -> Bool = { _ in true }
    /// Packets by slot (20 ms steps from the first packet's timestamp, or sequence numbers).
    private var packets: [Int64: [UInt8]] = [:]
    private var next: Int64?
    private var playing = false
    private var concealedInARow = 0
    public private(set) var packetsLate = 0
    public private(set) var packetsConcealed = 0
    public private(set) var packetsRecovered = 0
    /// Packets dropped to shorten the delay, and concealed frames played to lengthen it.
    public private(set) var packetsAccelerated = 0
    public private(set) var framesExpanded = 0
    /// Padding-only packets (no payload) left out.
    public private(set) var packetsEmpty = 0
    /// Times playout moved to a packet past a gap, or re-anchored a sender's timestamps.
    public private(set) var resynchronizations = 0
    // Slots: the last timestamp (or sequence number) seen and its slot.
    private var lastTimestamp: (value: UInt32, slot: Int64)?
    private var lastSequence: (value: UInt16, slot: Int64)?
    // Delay estimation.
    private var transits: [Int64] = []
    private var transitIndex = 0
    private var insertsSinceEstimate = 0
    private var popsSinceAdjust = 0

    static let packetUs: Int64 = 20_000
    /// RTP ticks per slot: 20 ms at 48 kHz.
    public static let ticksPerSlot: Int64 = 960
    /// 5 s of 20 ms packets.
    static let transitWindow = 250
    static let adjustEveryPops = 10

    public init(targetPackets: Int = 3, maxPackets: Int = 25, maxConcealed: Int = 15) {
        self.targetPackets = targetPackets
        minimumTargetPackets = targetPackets
        self.maxPackets = maxPackets
        self.maxConcealed = maxConcealed
    }

    public var bufferedPackets: Int { packets.count }

    /// Takes a packet; `timestamp` (RTP, 48 kHz) places it, `arrivalUs` (monotonic) feeds the
    /// adaptive delay.
    public mutating func insert(sequenceNumber: UInt16, timestamp: UInt32? = nil, payload: [UInt8], arrivalUs: Int64? = nil) {
        guard !payload.isEmpty else {
            packetsEmpty += 1
            return
        }
        var slot: Int64
        if let timestamp { slot = self.slot(timestamp: timestamp) } else { slot = self.slot(sequence: sequenceNumber) }
        if let next, slot < next - Int64(maxPackets) {
            // Far behind playout: the sender's clock went back (not a packet this late). Its
            // timestamps count from here on, at playout's position.
            resynchronizations += 1
            slot = next
            if let timestamp { lastTimestamp = (timestamp, slot) } else { lastSequence = (sequenceNumber, slot) }
            transits.removeAll(keepingCapacity: true)
            transitIndex = 0
        }
        if next == nil, let newest = packets.keys.max(), slot < newest - Int64(maxPackets) {
            // Waiting to start, and the sender's clock went back: what waits is from before.
            resynchronizations += 1
            packets.removeAll(keepingCapacity: true)
            transits.removeAll(keepingCapacity: true)
            transitIndex = 0
        }
        if let arrivalUs { recordTransit(slot, arrivalUs: arrivalUs) }
        if let next, slot < next {
            packetsLate += 1
            return
        }
        packets[slot] = payload
        var trimmed = false
        while packets.count > maxPackets, let oldest = packets.keys.min() {
            packets[oldest] = nil
            trimmed = true
        }
        if trimmed, let next, let oldest = packets.keys.min(), oldest > next { self.next = oldest }
    }

    /// The slot of a timestamp: the nearest 20 ms step from the last one's (wrapping as RTP does).
    private mutating func slot(timestamp: UInt32) -> Int64 {
        guard let last = lastTimestamp else {
            lastTimestamp = (timestamp, 0)
            return 0
        }
        let ticks = Int64(Int32(bitPattern: timestamp &- last.value))
        let steps = ticks >= 0 ? (ticks + Self.ticksPerSlot / 2) / Self.ticksPerSlot : -((-ticks + Self.ticksPerSlot / 2) / Self.ticksPerSlot)
        let slot = last.slot + steps
        // Follow the newest (and a jump back past the buffer: the sender restarted its clock).
        if steps > 0 || steps < -Int64(maxPackets) { lastTimestamp = (timestamp, slot) }
        return slot
    }

    private mutating func slot(sequence: UInt16) -> Int64 {
        guard let last = lastSequence else {
            lastSequence = (sequence, 0)
            return 0
        }
        let slot = last.slot + Int64(Int16(bitPattern: sequence &- last.value))
        if slot > last.slot || slot < last.slot - Int64(maxPackets) { lastSequence = (sequence, slot) }
        return slot
    }

    private mutating func recordTransit(_ slot: Int64, arrivalUs: Int64) {
        let transit = arrivalUs - slot * Self.packetUs
        if transits.count < Self.transitWindow {
            transits.append(transit)
        } else {
            transits[transitIndex] = transit
            transitIndex = (transitIndex + 1) % Self.transitWindow
        }
        insertsSinceEstimate += 1
        // Re-estimated every 5 packets (100 ms): a sort of at most 250 values.
        guard insertsSinceEstimate >= 5 || transits.count < 20 else { return }
        insertsSinceEstimate = 0
        let sorted = transits.sorted()
        let spread = sorted[(sorted.count - 1) * 95 / 100] - sorted[0]
        let needed = Int((spread + Self.packetUs - 1) / Self.packetUs) + 1
        targetPackets = min(max(needed, minimumTargetPackets), max(minimumTargetPackets, maxPackets / 2))
    }

    /// The next 20 ms.
    public mutating func pop() -> AudioPlayoutDecision {
        if !playing {
            guard packets.count >= targetPackets, let oldest = packets.keys.min(), let newest = packets.keys.max() else { return .silence }
            // From the oldest; but packets spread wider than the buffer (sparse: DTX's one per
            // 400 ms) start the target's delay behind the newest, not seconds behind.
            let start = newest - oldest >= Int64(maxPackets) ? newest - Int64(targetPackets - 1) : oldest
            for stale in packets.keys where stale < start { packets[stale] = nil }
            playing = true
            next = start
            concealedInARow = 0
            popsSinceAdjust = 0
        }
        guard var slot = next else { return .silence }
        popsSinceAdjust += 1
        if !transits.isEmpty, popsSinceAdjust >= Self.adjustEveryPops {
            if packets.count > targetPackets + 2, packets[slot] != nil {
                // Too much delay: skip a packet.
                packets[slot] = nil
                slot += 1
                packetsAccelerated += 1
                popsSinceAdjust = 0
            } else if !packets.isEmpty, packets.count + 1 < targetPackets {
                // Too little for the jitter seen: play a concealed frame and keep the packet.
                framesExpanded += 1
                popsSinceAdjust = 0
                return .conceal
            }
        }
        next = slot + 1
        if let packet = packets.removeValue(forKey: slot) {
            concealedInARow = 0
            return .decode(packet)
        }
        if packets.isEmpty {
            concealedInARow += 1
            if concealedInARow > maxConcealed {
                playing = false
                next = nil
                return .silence
            }
            packetsConcealed += 1
            return .conceal
        }
        if let upcoming = packets.keys.min(), upcoming - slot > Int64(maxConcealed) {
            // The next packet is further ahead than concealment reaches: a new talkspurt (after
            // DTX) or a jump in the sender's timestamps. Play it now rather than conceal up to it.
            resynchronizations += 1
            concealedInARow = 0
            next = upcoming + 1
            return .decode(packets.removeValue(forKey: upcoming)!)
        }
        concealedInARow = 0
        if let following = packets[slot + 1], canRecover(following) {
            packetsRecovered += 1
            return .recover(from: following)
        }
        packetsConcealed += 1
        return .conceal
    }
}
