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
    /// Least time between two keyframe requests.
    public var keyframeRequestIntervalUs: Int64
    private var assembler = VP8FrameAssembler()
    /// The oldest missing sequence number and since when it has been missing: a gap is timed on
    /// its own, so steady loss elsewhere does not age it.
    private var gapSequence: UInt16?
    private var gapOpenedUs: Int64?
    private var lastKeyframeRequestUs: Int64?
    private var firstPacketUs: Int64?
    /// True until a keyframe is handed out (at the start and after an unrecoverable gap).
    public private(set) var waitingForKeyframe = true
    public private(set) var framesHandedOut = 0
    /// Frames given up on: skipped over by a gap, or not decodable while waiting for a keyframe.
    public private(set) var framesDiscarded = 0
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
        let frames = (try? assembler.insert(sequenceNumber: packet.header.sequenceNumber, timestamp: packet.header.timestamp,
                                            marker: packet.header.marker, payload: packet.payload)) ?? []
        var output = Output()
        emit(frames, into: &output)
        updateGap(nowUs: nowUs)
        return output
    }

    /// Time passing: gives up on an old gap, and asks for a keyframe while none came.
    public mutating func tick(nowUs: Int64) -> Output {
        var output = Output()
        if let opened = gapOpenedUs, nowUs - opened >= maxGapWaitUs {
            let frames = assembler.skipMissing()
            if !frames.isEmpty || assembler.firstMissingSequenceNumber != nil {
                lostReference(nowUs: nowUs, into: &output)
            }
            emit(frames, into: &output)
            gapSequence = nil
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
        framesDiscarded += 1
        waitingForKeyframe = true
        requestKeyframe(nowUs: nowUs, into: &output)
    }

    private mutating func requestKeyframe(nowUs: Int64, into output: inout Output) {
        if let last = lastKeyframeRequestUs, nowUs - last < keyframeRequestIntervalUs { return }
        lastKeyframeRequestUs = nowUs
        keyframeRequests += 1
        output.requestKeyframe = true
    }

    private mutating func updateGap(nowUs: Int64) {
        guard let oldest = assembler.firstMissingSequenceNumber else {
            gapSequence = nil
            gapOpenedUs = nil
            return
        }
        if oldest != gapSequence {
            gapSequence = oldest
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
    /// Lost: let the decoder conceal it.
    case conceal
}

/// The receive side of one audio stream: packets in by sequence number, one 20 ms decision out per
/// playout tick. Playout starts once `targetPackets` are buffered; a lost packet is recovered
/// from the next one's FEC when that is already here, else concealed (playout never stops for a
/// burst: 300 ms by default); after `maxConcealed` packets in a row with nothing buffered it
/// rebuffers; past `maxPackets` it drops the oldest to cap delay.
public struct AudioJitterBuffer: Sendable {
    public var targetPackets: Int
    public var maxPackets: Int
    public var maxConcealed: Int
    private var packets: [UInt16: [UInt8]] = [:]
    private var next: UInt16?
    private var playing = false
    private var concealedInARow = 0
    public private(set) var packetsLate = 0
    public private(set) var packetsConcealed = 0
    public private(set) var packetsRecovered = 0

    public init(targetPackets: Int = 3, maxPackets: Int = 25, maxConcealed: Int = 15) {
        self.targetPackets = targetPackets
        self.maxPackets = maxPackets
        self.maxConcealed = maxConcealed
    }

    public var bufferedPackets: Int { packets.count }

    public mutating func insert(sequenceNumber: UInt16, payload: [UInt8]) {
        if let next, Int16(bitPattern: sequenceNumber &- next) < 0 {
            packetsLate += 1
            return
        }
        packets[sequenceNumber] = payload
        while packets.count > maxPackets, let oldest = oldest {
            packets[oldest] = nil
            if let next, oldest == next { self.next = next &+ 1 }
        }
    }

    private var oldest: UInt16? {
        guard let reference = next ?? packets.keys.first else { return nil }
        return packets.keys.min { Int16(bitPattern: $0 &- reference) < Int16(bitPattern: $1 &- reference) }
    }

    /// The next 20 ms.
    public mutating func pop() -> AudioPlayoutDecision {
        if !playing {
            guard packets.count >= targetPackets, let start = oldest else { return .silence }
            playing = true
            next = start
            concealedInARow = 0
        }
        guard let sequence = next else { return .silence }
        next = sequence &+ 1
        if let packet = packets.removeValue(forKey: sequence) {
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
        concealedInARow = 0
        if let following = packets[sequence &+ 1] {
            packetsRecovered += 1
            return .recover(from: following)
        }
        packetsConcealed += 1
        return .conceal
    }
}
