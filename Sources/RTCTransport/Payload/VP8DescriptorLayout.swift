import NIOCore

/// Where a VP8 RTP payload keeps what a forwarder reads and rewrites when it switches a receiver
/// between simulcast layers (RFC 7741 §4.2 and RFC 6386 §9.1): the picture id and TL0PICIDX
/// offsets, the temporal layer, and whether the packet starts a keyframe (with the keyframe's size).
/// Read once per packet without copying; a payload too short for what its bits announce gives nil,
/// never a trap. The one parser of the descriptor: ``VP8PayloadDescriptor`` reads its values through
/// it, and its keyframe rule is ``VP8FrameHeader``'s.
public struct VP8DescriptorLayout: Sendable, Hashable {
    /// Offset of the picture id in the payload, nil when the descriptor has none.
    public var pictureIDOffset: Int?
    /// Whether the picture id is the 15-bit (two-byte) form.
    public var longPictureID: Bool
    public var tl0PictureIndexOffset: Int?
    /// Offset of the TID/Y/KEYIDX byte, when the descriptor has one.
    public var temporalKeyOffset: Int?
    public var temporalLayer: UInt8?
    /// The descriptor's length: where the VP8 bytes start.
    public var length: Int
    /// The packet begins a frame (S=1, partition 0).
    public var startsFrame: Bool
    /// The packet begins a frame and that frame is a keyframe: the frame tag's P bit is 0 and the
    /// start code `9d 01 2a` follows (RFC 6386 §9.1, ``VP8FrameHeader/keyframeSize(_:)``).
    public var startsKeyframe: Bool
    /// The keyframe's width and height, when `startsKeyframe`.
    public var keyframeWidth: Int?
    public var keyframeHeight: Int?

    public init?(payload: ByteBuffer) {
        let base = payload.readerIndex
        var at = base
        func byte(_ index: Int) -> UInt8? {
            guard index < payload.writerIndex else { return nil }
            return payload.getInteger(at: index, as: UInt8.self)
        }
        guard let first = byte(at) else { return nil }
        at += 1
        pictureIDOffset = nil
        longPictureID = false
        tl0PictureIndexOffset = nil
        temporalKeyOffset = nil
        temporalLayer = nil
        if first & 0x80 != 0 {
            guard let x = byte(at) else { return nil }
            at += 1
            if x & 0x80 != 0 {
                guard let high = byte(at) else { return nil }
                pictureIDOffset = at - base
                longPictureID = high & 0x80 != 0
                at += longPictureID ? 2 : 1
            }
            if x & 0x40 != 0 {
                guard byte(at) != nil else { return nil }
                tl0PictureIndexOffset = at - base
                at += 1
            }
            if x & 0x30 != 0 {
                guard let value = byte(at) else { return nil }
                temporalKeyOffset = at - base
                if x & 0x20 != 0 { temporalLayer = value >> 6 }
                at += 1
            }
        }
        guard at <= payload.writerIndex else { return nil }
        length = at - base
        let frameStart = first & 0x10 != 0 && first & 0x07 == 0
        startsFrame = frameStart
        startsKeyframe = false
        keyframeWidth = nil
        keyframeHeight = nil
        if frameStart, let size = VP8FrameHeader.keyframeSize({ byte(at + $0) }) {
            startsKeyframe = true
            keyframeWidth = size.width
            keyframeHeight = size.height
        }
    }

    /// Reads the picture id at `offset` (of a serialized payload starting at `payloadStart` in `buffer`).
    public func pictureID(in buffer: ByteBuffer, payloadStart: Int) -> UInt16? {
        guard let offset = pictureIDOffset else { return nil }
        let at = payloadStart + offset
        if longPictureID {
            guard let value = buffer.getInteger(at: at, as: UInt16.self) else { return nil }
            return value & 0x7FFF
        }
        return buffer.getInteger(at: at, as: UInt8.self).map { UInt16($0 & 0x7F) }
    }

    /// Writes `pictureID` (masked to the descriptor's width, the M bit kept) and, when given and
    /// present, `tl0` into a serialized payload starting at `payloadStart` of `buffer`.
    public func write(pictureID: UInt16?, tl0: UInt8?, into buffer: inout ByteBuffer, payloadStart: Int) {
        if let pictureID, let offset = pictureIDOffset {
            let at = payloadStart + offset
            if longPictureID {
                buffer.setInteger(0x8000 | (pictureID & 0x7FFF), at: at)
            } else {
                buffer.setInteger(UInt8(pictureID & 0x7F), at: at)
            }
        }
        if let tl0, let offset = tl0PictureIndexOffset { buffer.setInteger(tl0, at: payloadStart + offset) }
    }

    /// The picture id of the descriptor in `payload` itself.
    public func pictureID(inPayload payload: ByteBuffer) -> UInt16? { pictureID(in: payload, payloadStart: payload.readerIndex) }

    /// TL0PICIDX of the descriptor in `payload` itself.
    public func tl0PictureIndex(inPayload payload: ByteBuffer) -> UInt8? {
        tl0PictureIndexOffset.flatMap { payload.getInteger(at: payload.readerIndex + $0, as: UInt8.self) }
    }
}
