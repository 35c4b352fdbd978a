/// LiveKit's end-to-end encrypted frame (client-sdk-js `e2ee/`, webrtc-sdk's frame cryptor), the
/// unit being a whole encoded frame (one VP8 frame, one Opus packet), not an RTP packet:
///
/// ```
/// +----------------+---------------------+-----------+---------+--------+-----------+
/// | clear header   | ciphertext          | GCM tag   | IV      | IV len | key index |
/// | (codec's rule) | (rest of the frame) | 16 bytes  | 12 B    | 1 B=12 | 1 B, <16  |
/// +----------------+---------------------+-----------+---------+--------+-----------+
/// ```
///
/// The clear header is also the cipher's additional authenticated data, so it cannot be altered
/// either. This type only locates the parts; ``FrameCryptor`` does the cipher.
public struct EncryptedFrame: Sendable, Hashable {
    /// AES-GCM's tag, appended to the ciphertext.
    public static let tagCount = 16
    /// The IV AES-GCM takes (the trailer carries its length: any other is refused).
    public static let ivCount = 12
    /// IV length and key index.
    public static let trailerCount = 2
    /// What an encrypted frame adds to the plain one.
    public static let overhead = tagCount + ivCount + trailerCount
    /// Keys per participant (four bits' worth, as LiveKit's ring).
    public static let keyRingSize = 16

    /// Bytes at the start left in the clear.
    public let clearCount: Int
    /// The ciphertext, without its tag.
    public let cipherRange: Range<Int>
    public let tagRange: Range<Int>
    public let ivRange: Range<Int>
    public let keyIndex: Int

    /// Locates the parts of `frame` (of `count` bytes, whose last two are `ivLength` and
    /// `keyIndex`), with `clearCount` bytes in the clear by the codec's rule.
    public init(count: Int, ivLength: UInt8, keyIndex: UInt8, clearCount: Int) throws(E2EEError) {
        guard count >= Self.trailerCount else { throw E2EEError(.tooShort, "a frame of \(count) bytes has no trailer") }
        guard Int(ivLength) == Self.ivCount else {
            throw E2EEError(.badIVLength, "the trailer says the IV is \(ivLength) bytes, not \(Self.ivCount)")
        }
        guard Int(keyIndex) < Self.keyRingSize else {
            throw E2EEError(.keyIndexOutOfRange, "key index \(keyIndex) (the ring holds \(Self.keyRingSize))")
        }
        let clear = max(0, clearCount)
        guard count >= clear + Self.overhead else {
            throw E2EEError(.tooShort, "a frame of \(count) bytes cannot hold \(clear) clear bytes, a tag, an IV and the trailer")
        }
        self.clearCount = clear
        ivRange = (count - Self.trailerCount - Self.ivCount)..<(count - Self.trailerCount)
        tagRange = (ivRange.lowerBound - Self.tagCount)..<ivRange.lowerBound
        cipherRange = clear..<tagRange.lowerBound
        self.keyIndex = Int(keyIndex)
    }

    /// Locates the parts of `frame`.
    public init(parsing frame: [UInt8], clearCount: Int) throws(E2EEError) {
        guard frame.count >= Self.trailerCount else { throw E2EEError(.tooShort, "a frame of \(frame.count) bytes has no trailer") }
        try self.init(count: frame.count, ivLength: frame[frame.count - 2], keyIndex: frame[frame.count - 1], clearCount: clearCount)
    }
}

/// The codecs whose frames are encrypted, and how many bytes of each frame stay in the clear so a
/// server can still route on them (LiveKit's rule, which both sides must apply alike):
/// - **VP8**: the frame tag (RFC 6386 §9.1). A keyframe keeps 10 bytes: the 3-byte tag, the start
///   code and the size, which servers read for keyframe detection and layer switches and recorders
///   for the track's dimensions; a delta frame keeps its 3-byte tag (show-frame bit, partition size).
/// - **Opus**: the TOC byte (RFC 6716 §3.1): mode, bandwidth and frame size.
public enum E2EECodec: String, Sendable, Hashable, CaseIterable {
    case vp8, opus

    /// Bytes left in the clear at the start of `frame` (never more than it has). For VP8 the
    /// keyframe bit is the frame tag's lowest bit, 0 for a keyframe, read from the frame itself so
    /// the sender and the receiver apply one rule.
    public func clearCount(of frame: [UInt8]) -> Int {
        switch self {
        case .opus: return min(1, frame.count)
        case .vp8:
            guard let first = frame.first else { return 0 }
            return min(first & 0x01 == 0 ? 10 : 3, frame.count)
        }
    }
}
