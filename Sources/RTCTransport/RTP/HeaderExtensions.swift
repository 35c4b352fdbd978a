import NIOCore

/// The URIs of the header extensions this SDK negotiates (SDP `a=extmap`).
public enum RTPExtensionURI {
    public static let absSendTime = "http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time"
    public static let transportWideSequence = "http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01"
    public static let mid = "urn:ietf:params:rtp-hdrext:sdes:mid"
    public static let videoOrientation = "urn:3gpp:video-orientation"
    public static let audioLevel = "urn:ietf:params:rtp-hdrext:ssrc-audio-level"
    /// RFC 8852 stream ids: which simulcast layer a packet belongs to (and which one an RTX packet repairs).
    public static let rtpStreamID = "urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id"
    public static let repairedRTPStreamID = "urn:ietf:params:rtp-hdrext:sdes:repaired-rtp-stream-id"
}

/// abs-send-time: send time as 6.18 fixed-point seconds in 24 bits (wraps every 64 s).
public struct AbsSendTime: Sendable, Hashable {
    public var value: UInt32  // 24 bits

    public init(value: UInt32) { self.value = value & 0xFF_FFFF }

    /// From a time in microseconds.
    public init(microseconds: UInt64) {
        self.init(value: UInt32(truncatingIfNeeded: (microseconds << 18) / 1_000_000))
    }

    public init(parsing data: ByteBuffer) throws(ParseError) {
        guard data.readableBytes == 3, let bytes = data.getBytes(at: data.readerIndex, length: 3) else {
            throw ParseError(.invalid, "abs-send-time must be 3 bytes")
        }
        self.init(value: UInt32(bytes[0]) << 16 | UInt32(bytes[1]) << 8 | UInt32(bytes[2]))
    }

    public var data: ByteBuffer { ByteBuffer(bytes: [UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]) }

    /// Microseconds within the 64 s wrap.
    public var microseconds: UInt64 { (UInt64(value) * 1_000_000) >> 18 }
}

/// Transport-wide sequence number (draft-holmer-rmcat-transport-wide-cc-extensions-01 §2).
public struct TransportSequenceNumber: Sendable, Hashable {
    public var value: UInt16

    public init(_ value: UInt16) { self.value = value }

    public init(parsing data: ByteBuffer) throws(ParseError) {
        guard data.readableBytes == 2, let value = data.getInteger(at: data.readerIndex, as: UInt16.self) else {
            throw ParseError(.invalid, "transport-wide sequence number must be 2 bytes")
        }
        self.value = value
    }

    public var data: ByteBuffer {
        var buffer = ByteBuffer()
        buffer.writeInteger(value)
        return buffer
    }
}

/// The media identification (RFC 8843 §15, `sdes:mid`): the `a=mid` of the m-section.
public struct SDESMid: Sendable, Hashable {
    public var mid: String

    public init(_ mid: String) { self.mid = mid }

    public init(parsing data: ByteBuffer) throws(ParseError) {
        guard data.readableBytes > 0, let text = data.getString(at: data.readerIndex, length: data.readableBytes) else {
            throw ParseError(.invalid, "empty sdes:mid")
        }
        mid = text
    }

    public var data: ByteBuffer { ByteBuffer(string: mid) }
}

/// Coordination of video orientation (3GPP TS 26.114 §7.4.5): `0 0 0 0 C F R1 R0`.
public struct VideoOrientation: Sendable, Hashable {
    /// Clockwise rotation in degrees: 0, 90, 180 or 270.
    public var rotation: Int
    /// Front-facing camera.
    public var frontCamera: Bool
    /// Horizontal flip.
    public var flip: Bool

    public init(rotation: Int, frontCamera: Bool = false, flip: Bool = false) {
        self.rotation = ((rotation % 360) + 360) % 360 / 90 * 90
        self.frontCamera = frontCamera
        self.flip = flip
    }

    public init(parsing data: ByteBuffer) throws(ParseError) {
        guard data.readableBytes >= 1, let byte = data.getInteger(at: data.readerIndex, as: UInt8.self) else {
            throw ParseError(.invalid, "empty video-orientation")
        }
        self.init(rotation: Int(byte & 0x03) * 90, frontCamera: byte & 0x08 != 0, flip: byte & 0x04 != 0)
    }

    public var data: ByteBuffer {
        ByteBuffer(bytes: [(frontCamera ? 0x08 : 0) | (flip ? 0x04 : 0) | UInt8(rotation / 90 & 0x03)])
    }
}

/// Client-to-mixer audio level (RFC 6464): voice activity flag and level in -dBov (0 loudest, 127 silence).
public struct AudioLevel: Sendable, Hashable {
    public var voiceActivity: Bool
    /// 0...127, in -dBov.
    public var level: UInt8

    public init(voiceActivity: Bool, level: UInt8) {
        self.voiceActivity = voiceActivity
        self.level = min(level, 127)
    }

    public init(parsing data: ByteBuffer) throws(ParseError) {
        guard data.readableBytes >= 1, let byte = data.getInteger(at: data.readerIndex, as: UInt8.self) else {
            throw ParseError(.invalid, "empty ssrc-audio-level")
        }
        self.init(voiceActivity: byte & 0x80 != 0, level: byte & 0x7F)
    }

    public var data: ByteBuffer { ByteBuffer(bytes: [(voiceActivity ? 0x80 : 0) | level]) }
}
