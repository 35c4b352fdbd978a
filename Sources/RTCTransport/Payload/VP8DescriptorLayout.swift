import NIOCore

/// Where a VP8 RTP payload keeps what a forwarder reads and rewrites when it switches a receiver
/// between simulcast layers (RFC 7741 §4.2 and RFC 6386 §9.1): the picture id and TL0PICIDX
/// offsets, the temporal layer, and whether the packet starts a keyframe (with the keyframe's size
/// when its header is in the packet). Read once per packet without copying; a payload too short for
/// what its bits announce gives nil, never a trap.
public struct VP8DescriptorLayout: Sendable, Hashable {
    /// Offset of the picture id in the payload, nil when the descriptor has none.
    public var pictureIDOffset: Int?
    /// Whether the picture id is the 15-bit (two-byte) form.
    public var longPictureID: Bool
    public var tl0PictureIndexOffset: Int?
    public var temporalLayer: UInt8?
    /// The packet begins a frame (S=1, partition 0).
    public var startsFrame: Bool
    /// The packet begins a frame and that frame is a keyframe (the frame tag's P bit is 0).
    public var startsKeyframe: Bool
    /// The keyframe's width and height (RFC 6386 §9.1), when `startsKeyframe` and the header is whole.
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
                if x & 0x20 != 0 { temporalLayer = value >> 6 }
                at += 1
            }
        }
        guard at <= payload.writerIndex else { return nil }
        let frameStart = first & 0x10 != 0 && first & 0x07 == 0
        startsFrame = frameStart
        startsKeyframe = false
        keyframeWidth = nil
        keyframeHeight = nil
        if frameStart, let tag = byte(at), tag & 0x01 == 0 {
            startsKeyframe = true
            // Frame tag (3 bytes), start code 9d 01 2a, then 14-bit width and height, little-endian.
            if byte(at + 3) == 0x9D, byte(at + 4) == 0x01, byte(at + 5) == 0x2A,
               let w0 = byte(at + 6), let w1 = byte(at + 7), let h0 = byte(at + 8), let h1 = byte(at + 9) {
                keyframeWidth = Int(UInt16(w1 & 0x3F) << 8 | UInt16(w0))
                keyframeHeight = Int(UInt16(h1 & 0x3F) << 8 | UInt16(h0))
            }
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
