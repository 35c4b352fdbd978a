import NIOCore

/// The VP8 payload descriptor ([RFC 7741 §4.2](https://www.rfc-editor.org/rfc/rfc7741#section-4.2)).
///
/// ```
///       0 1 2 3 4 5 6 7
///      +-+-+-+-+-+-+-+-+
///      |X|R|N|S|R| PID | (REQUIRED)
///      +-+-+-+-+-+-+-+-+
/// X:   |I|L|T|K| RSV   | (OPTIONAL)
///      +-+-+-+-+-+-+-+-+
/// I:   |M| PictureID   | (OPTIONAL)
///      +-+-+-+-+-+-+-+-+
///      |   PictureID   | (when M = 1: 15-bit PictureID)
///      +-+-+-+-+-+-+-+-+
/// L:   |   TL0PICIDX   | (OPTIONAL)
///      +-+-+-+-+-+-+-+-+
/// T/K: |TID|Y| KEYIDX  | (OPTIONAL)
///      +-+-+-+-+-+-+-+-+
/// ```
public struct VP8PayloadDescriptor: Sendable, Hashable {
    /// N: the frame can be discarded without affecting others.
    public var nonReference: Bool
    /// S: the first packet of a partition.
    public var startOfPartition: Bool
    /// PID: partition index, 0...7.
    public var partitionIndex: UInt8
    /// 7- or 15-bit picture ID.
    public var pictureID: UInt16?
    /// Whether the picture ID uses the two-byte (15-bit) form.
    public var longPictureID: Bool
    public var tl0PictureIndex: UInt8?
    /// Temporal layer index (TID), when T is set.
    public var temporalLayer: UInt8?
    /// Y: this frame depends only on the base layer (a layer sync point).
    public var layerSync: Bool
    /// KEYIDX, when K is set.
    public var keyIndex: UInt8?

    public init(nonReference: Bool = false, startOfPartition: Bool, partitionIndex: UInt8 = 0, pictureID: UInt16? = nil,
                longPictureID: Bool = true, tl0PictureIndex: UInt8? = nil, temporalLayer: UInt8? = nil,
                layerSync: Bool = false, keyIndex: UInt8? = nil) {
        self.nonReference = nonReference
        self.startOfPartition = startOfPartition
        self.partitionIndex = partitionIndex & 0x07
        let long = pictureID != nil && (longPictureID || pictureID! > 0x7F)
        self.longPictureID = long
        self.pictureID = pictureID.map { $0 & (long ? 0x7FFF : 0x7F) }
        self.tl0PictureIndex = tl0PictureIndex
        self.temporalLayer = temporalLayer.map { $0 & 0x03 }
        self.layerSync = layerSync
        self.keyIndex = keyIndex.map { $0 & 0x1F }
    }

    /// Parses the descriptor at the front of `buffer`, consuming it only on success. The layout
    /// (``VP8DescriptorLayout``, the one parser) says where each field is; this reads their values.
    public init(parsing buffer: inout ByteBuffer) throws(ParseError) {
        let base = buffer.readerIndex
        guard let layout = VP8DescriptorLayout(payload: buffer), let first = buffer.getInteger(at: base, as: UInt8.self) else {
            throw ParseError(.truncated, "VP8 payload descriptor")
        }
        var tid: UInt8?, sync = false, key: UInt8?
        if let offset = layout.temporalKeyOffset, let x = buffer.getInteger(at: base + 1, as: UInt8.self),
           let value = buffer.getInteger(at: base + offset, as: UInt8.self) {
            if x & 0x20 != 0 {
                tid = value >> 6
                sync = value & 0x20 != 0
            }
            if x & 0x10 != 0 { key = value & 0x1F }
        }
        self.init(nonReference: first & 0x20 != 0, startOfPartition: first & 0x10 != 0, partitionIndex: first & 0x07,
                  pictureID: layout.pictureID(inPayload: buffer), longPictureID: layout.longPictureID,
                  tl0PictureIndex: layout.tl0PictureIndex(inPayload: buffer), temporalLayer: tid, layerSync: sync, keyIndex: key)
        buffer.moveReaderIndex(forwardBy: layout.length)
    }

    private var hasExtension: Bool { pictureID != nil || tl0PictureIndex != nil || temporalLayer != nil || keyIndex != nil }

    public var serializedSize: Int {
        guard hasExtension else { return 1 }
        var size = 2
        if pictureID != nil { size += longPictureID ? 2 : 1 }
        if tl0PictureIndex != nil { size += 1 }
        if temporalLayer != nil || keyIndex != nil { size += 1 }
        return size
    }

    public func write(to buffer: inout ByteBuffer) {
        buffer.writeInteger((hasExtension ? 0x80 : 0) | (nonReference ? 0x20 : 0) | (startOfPartition ? 0x10 : 0) | partitionIndex)
        guard hasExtension else { return }
        var x: UInt8 = 0
        if pictureID != nil { x |= 0x80 }
        if tl0PictureIndex != nil { x |= 0x40 }
        if temporalLayer != nil { x |= 0x20 }
        if keyIndex != nil { x |= 0x10 }
        buffer.writeInteger(x)
        if let pictureID {
            if longPictureID {
                buffer.writeInteger(0x8000 | pictureID)
            } else {
                buffer.writeInteger(UInt8(pictureID))
            }
        }
        if let tl0PictureIndex { buffer.writeInteger(tl0PictureIndex) }
        if temporalLayer != nil || keyIndex != nil {
            buffer.writeInteger((temporalLayer ?? 0) << 6 | (layerSync ? 0x20 : 0) | (keyIndex ?? 0))
        }
    }
}

/// Facts from the first bytes of a VP8 frame ([RFC 6386 §9.1](https://www.rfc-editor.org/rfc/rfc6386#section-9.1)).
public struct VP8FrameHeader: Sendable, Hashable {
    public var isKeyframe: Bool
    /// Size of the first partition.
    public var firstPartitionSize: Int
    /// Present on keyframes.
    public var width: Int?
    public var height: Int?

    /// Reads the 3-byte frame tag and, for keyframes, the start code and size. Nil when too short
    /// or when a keyframe lacks the start code.
    public init?(_ bytes: some Collection<UInt8>) {
        let head = Array(bytes.prefix(10))
        guard head.count >= 3 else { return nil }
        isKeyframe = head[0] & 0x01 == 0
        firstPartitionSize = Int(head[0] >> 5) | Int(head[1]) << 3 | Int(head[2]) << 11
        if isKeyframe {
            guard let size = Self.keyframeSize({ $0 < head.count ? head[$0] : nil }) else { return nil }
            width = size.width
            height = size.height
        }
    }

    /// The keyframe rule (RFC 6386 §9.1), one for the client and the server: a frame tag with
    /// P = 0, then the start code `9d 01 2a`, then the 14-bit width and height (little-endian).
    /// `byte(i)` gives the frame's byte `i` (nil past its end); nil when the bytes do not start a
    /// whole keyframe header. No allocation: the forwarding path reads it in place.
    public static func keyframeSize(_ byte: (Int) -> UInt8?) -> (width: Int, height: Int)? {
        guard let tag = byte(0), tag & 0x01 == 0, byte(3) == 0x9D, byte(4) == 0x01, byte(5) == 0x2A,
              let w0 = byte(6), let w1 = byte(7), let h0 = byte(8), let h1 = byte(9) else { return nil }
        return (Int(w0) | Int(w1 & 0x3F) << 8, Int(h0) | Int(h1 & 0x3F) << 8)
    }
}

/// Splits VP8 frames into RTP payloads no larger than `maxPayloadSize`, each with a descriptor that
/// carries the 15-bit PictureID, and TL0PICIDX/TID when temporal layers are on.
public struct VP8Packetizer: Sendable {
    public var maxPayloadSize: Int
    /// The PictureID the next frame gets (15 bits, wraps).
    public private(set) var pictureID: UInt16
    /// The TL0PICIDX of the latest base layer frame.
    public private(set) var tl0PictureIndex: UInt8

    public init(maxPayloadSize: Int = 1200, initialPictureID: UInt16 = 0, initialTL0PictureIndex: UInt8 = 0) {
        self.maxPayloadSize = max(maxPayloadSize, 8)
        pictureID = initialPictureID & 0x7FFF
        tl0PictureIndex = initialTL0PictureIndex
    }

    /// Payloads for one frame, in order; the caller sets the RTP marker bit on the last one.
    /// `temporalLayer` (0...3) adds TL0PICIDX and TID; `layerSync` sets Y.
    public mutating func packetize(_ frame: ByteBuffer, temporalLayer: UInt8? = nil, layerSync: Bool = false,
                                   nonReference: Bool = false) -> [ByteBuffer] {
        if temporalLayer == 0 { tl0PictureIndex &+= 1 }
        var descriptor = VP8PayloadDescriptor(
            nonReference: nonReference, startOfPartition: true, partitionIndex: 0, pictureID: pictureID, longPictureID: true,
            tl0PictureIndex: temporalLayer == nil ? nil : tl0PictureIndex, temporalLayer: temporalLayer,
            layerSync: temporalLayer == nil ? false : layerSync)
        pictureID = (pictureID &+ 1) & 0x7FFF
        let room = maxPayloadSize - descriptor.serializedSize
        var remaining = frame
        var payloads: [ByteBuffer] = []
        // Equal-sized packets: ⌈size / room⌉ packets of nearly the same size.
        let count = max(1, (remaining.readableBytes + room - 1) / room)
        let base = remaining.readableBytes / count, extra = remaining.readableBytes % count
        for index in 0..<count {
            let size = base + (index < extra ? 1 : 0)
            var payload = ByteBufferAllocator().buffer(capacity: descriptor.serializedSize + size)
            descriptor.write(to: &payload)
            var chunk = remaining.readSlice(length: size)!
            payload.writeBuffer(&chunk)
            payloads.append(payload)
            descriptor.startOfPartition = false
        }
        return payloads
    }
}

/// A whole VP8 frame put back together from RTP packets.
public struct AssembledVP8Frame: Sendable, Hashable {
    public var data: ByteBuffer
    public var rtpTimestamp: UInt32
    public var firstSequenceNumber: UInt16
    public var lastSequenceNumber: UInt16
    public var isKeyframe: Bool
    /// Width and height, from a keyframe's header.
    public var width: Int?
    public var height: Int?
    public var pictureID: UInt16?
    public var temporalLayer: UInt8?
    /// Byte offsets in `data` where a partition starts (S=1 packets), first partition at 0.
    public var partitionOffsets: [Int]
}

/// Collects VP8 RTP packets, possibly out of order, and returns each frame once all its packets
/// (from the S=1, PID=0 start to the marker) are in. Frames left incomplete when a later frame
/// completes are given up on and counted, and their missing sequence numbers can be asked for.
public struct VP8FrameAssembler: Sendable {
    private struct Fragment: Sendable {
        var descriptor: VP8PayloadDescriptor
        var data: ByteBuffer
        var marker: Bool
        var timestamp: UInt32
    }

    private var fragments: [UInt16: Fragment] = [:]
    /// Sequence numbers that carry nothing (padding-only packets, ``insertFiller(sequenceNumber:)``).
    private var fillers: Set<UInt16> = []
    /// The sequence number after the last packet of the last frame given out.
    private var nextExpected: UInt16?
    /// Frames given up on because a later frame completed first (or the gap before it was given up).
    public private(set) var framesDropped = 0
    /// Most packets held while waiting; older ones are dropped beyond it.
    public let capacity: Int

    public init(capacity: Int = 512) { self.capacity = capacity }

    /// Adds one packet; returns the frames it completes, oldest first.
    public mutating func insert(sequenceNumber: UInt16, timestamp: UInt32, marker: Bool, payload: ByteBuffer)
        throws(ParseError) -> [AssembledVP8Frame]
    {
        var body = payload
        let descriptor = try VP8PayloadDescriptor(parsing: &body)
        if let nextExpected, sequenceNumber &- nextExpected >= 0x8000 { return [] }  // late duplicate of a done frame
        if !fillers.isEmpty { fillers.remove(sequenceNumber) }  // a real packet wins over padding
        fragments[sequenceNumber] = Fragment(descriptor: descriptor, data: body, marker: marker, timestamp: timestamp)
        if fragments.count > capacity { dropOldest() }
        return collect()
    }

    /// A padding-only packet (RFC 3550 §5.1): its number carries nothing, so frames after it do
    /// not wait for it (an SFU fills the number of a packet it left out this way). Returns the
    /// frames that were waiting for it.
    public mutating func insertFiller(sequenceNumber: UInt16) -> [AssembledVP8Frame] {
        guard let nextExpected, sequenceNumber &- nextExpected < 0x8000, fragments[sequenceNumber] == nil,
              fillers.count < capacity
        else { return [] }
        fillers.insert(sequenceNumber)
        return collect()
    }

    /// Sequence numbers between the oldest held packet (or the end of the last frame) and the
    /// newest, that have not arrived: what a NACK should ask for.
    public var missingSequenceNumbers: [UInt16] {
        guard let newest = newestSequence, let start = nextExpected ?? oldestSequence else { return [] }
        let span = Int(newest &- start)
        guard span < 0x8000 else { return [] }
        return (0...span).compactMap { offset in
            let sequence = start &+ UInt16(offset)
            return fragments[sequence] == nil && !fillers.contains(sequence) ? sequence : nil
        }
    }

    /// The first of ``missingSequenceNumbers``, without building the list (asked on every packet).
    public var firstMissingSequenceNumber: UInt16? {
        guard let newest = newestSequence, let start = nextExpected ?? oldestSequence else { return nil }
        let span = Int(newest &- start)
        guard span < 0x8000 else { return nil }
        for offset in 0...span {
            let sequence = start &+ UInt16(offset)
            if fragments[sequence] == nil && !fillers.contains(sequence) { return sequence }
        }
        return nil
    }

    /// Whether a complete frame is held that could not be given out: something before it (a gap,
    /// or packets that form no frame) blocks it. After ``insert`` nothing else holds one.
    public var holdsBlockedFrame: Bool {
        // Before the first frame is given out, frames wait for a keyframe, not behind anything.
        // A complete frame ends in a marker: without one held (a frame on its way), no search.
        nextExpected != nil && fragments.values.contains(where: \.marker) && nextCompleteFrame(where: { _ in true }) != nil
    }

    private var reference: UInt16? { nextExpected ?? fragments.keys.first }

    private var oldestSequence: UInt16? {
        guard let reference else { return nil }
        return fragments.keys.min { ($0 &- reference) &+ 0x8000 < ($1 &- reference) &+ 0x8000 }
    }

    private var newestSequence: UInt16? {
        guard let reference else { return nil }
        return fragments.keys.max { ($0 &- reference) &+ 0x8000 < ($1 &- reference) &+ 0x8000 }
    }

    private mutating func dropOldest() {
        if let oldest = oldestSequence { fragments[oldest] = nil }
    }

    /// Emits complete frames in sequence order. A frame after a gap waits for the gap to fill,
    /// unless it is a keyframe (which needs nothing before it): then the older packets are dropped.
    /// The very first frame given out is a keyframe, since nothing can be decoded before one.
    private mutating func collect() -> [AssembledVP8Frame] {
        var frames: [AssembledVP8Frame] = []
        passFillers()
        while let frame = nextCompleteFrame(where: { first in first == nextExpected || startsKeyframe(first) }) {
            if let nextExpected, frame.first != nextExpected { skip(to: frame.first) }
            frames.append(assemble(from: frame.first, to: frame.last))
            nextExpected = frame.last &+ 1
            passFillers()
        }
        return frames
    }

    /// Moves the next expected number past fillers.
    private mutating func passFillers() {
        guard !fillers.isEmpty else { return }
        while let next = nextExpected, fillers.remove(next) != nil { nextExpected = next &+ 1 }
    }

    private func startsKeyframe(_ sequence: UInt16) -> Bool {
        fragments[sequence].flatMap { VP8FrameHeader($0.data.readableBytesView) }?.isKeyframe ?? false
    }

    /// Gives up on the gap before the next complete frame, keyframe or not, and returns it and the
    /// frames that follow (the decoder needs a keyframe if a lost frame was a reference: ask for one).
    public mutating func skipMissing() -> [AssembledVP8Frame] {
        guard let frame = nextCompleteFrame(where: { _ in true }) else { return [] }
        if let nextExpected, frame.first != nextExpected { skip(to: frame.first) }
        nextExpected = frame.first
        return collect()
    }

    /// Drops what is held before `first`: a frame for each timestamp among it (one at least, the
    /// frame the gap belongs to when none of its packets came).
    private mutating func skip(to first: UInt16) {
        guard let nextExpected else { return }
        var timestamps: Set<UInt32> = []
        for (sequence, fragment) in fragments where (sequence &- nextExpected) < (first &- nextExpected) {
            timestamps.insert(fragment.timestamp)
            fragments[sequence] = nil
        }
        fillers = fillers.filter { ($0 &- nextExpected) >= (first &- nextExpected) }
        framesDropped += max(1, timestamps.count)
    }

    /// The earliest (by sequence) start-to-marker run with no gaps and one timestamp whose first
    /// packet satisfies `eligible`.
    private func nextCompleteFrame(where eligible: (UInt16) -> Bool) -> (first: UInt16, last: UInt16)? {
        guard let reference = nextExpected ?? oldestSequence else { return nil }
        let starts = fragments.filter { $0.value.descriptor.startOfPartition && $0.value.descriptor.partitionIndex == 0 }
            .keys.sorted { ($0 &- reference) < ($1 &- reference) }
        for first in starts where eligible(first) {
            guard let timestamp = fragments[first]?.timestamp else { continue }
            var sequence = first
            while let fragment = fragments[sequence], fragment.timestamp == timestamp {
                if fragment.marker { return (first, sequence) }
                sequence &+= 1
                if sequence == first { break }
            }
        }
        return nil
    }

    private mutating func assemble(from first: UInt16, to last: UInt16) -> AssembledVP8Frame {
        var data = ByteBufferAllocator().buffer(capacity: 0)
        var partitions: [Int] = []
        var sequence = first
        let head = fragments[first]!
        while true {
            var fragment = fragments.removeValue(forKey: sequence)!
            if fragment.descriptor.startOfPartition { partitions.append(data.readableBytes) }
            data.writeBuffer(&fragment.data)
            if sequence == last { break }
            sequence &+= 1
        }
        let header = VP8FrameHeader(data.readableBytesView)
        return AssembledVP8Frame(
            data: data, rtpTimestamp: head.timestamp, firstSequenceNumber: first, lastSequenceNumber: last,
            isKeyframe: header?.isKeyframe ?? false, width: header?.width, height: header?.height,
            pictureID: head.descriptor.pictureID, temporalLayer: head.descriptor.temporalLayer,
            partitionOffsets: partitions)
    }
}
