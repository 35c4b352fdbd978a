internal import COpenSSL
import NIOCore

/// SRTP and SRTCP for one transport ([RFC 3711](https://www.rfc-editor.org/rfc/rfc3711),
/// [RFC 7714](https://www.rfc-editor.org/rfc/rfc7714)) over OpenSSL's EVP: what this side sends
/// is protected with the local keys, what the peer sends is checked and decrypted with the
/// remote ones. Session keys are derived once; each direction keeps one cipher context per
/// packet kind and per SSRC its packet index (rollover counter) and replay window.
///
/// Packets are transformed **in place**, in the buffer's own storage: protecting appends the tag
/// (and the SRTCP index) after the packet, so a sender that leaves ``SRTPProfile/maxTrailer``
/// bytes of room costs no allocation and no copy; unprotecting shortens the packet. A buffer
/// whose storage is shared with another is copied first (ByteBuffer's copy on write).
///
/// Not thread-safe: use it from one thread at a time (a transport's event loop).
public final class SRTPContext {
    public let profile: SRTPProfile
    /// Newest indices remembered per stream for replay checks.
    public let replayWindow: Int
    /// Streams (SSRCs) the peer may have at once; packets of further ones are refused.
    public static let maxStreams = 256

    private let rtpOut: SRTPCipher, rtcpOut: SRTPCipher
    private let rtpIn: SRTPCipher, rtcpIn: SRTPCipher
    /// Highest index sent per SSRC (RTP), and the next SRTCP index per SSRC (from 1, as libsrtp).
    /// The stream sent last is kept apart (`lastSent`) and written back when another one sends:
    /// a leg sends runs of one stream, so most packets cost no dictionary lookup.
    private var sentRTP: [UInt32: UInt64] = [:]
    private var lastSent: (ssrc: UInt32, highest: UInt64)?
    var sentRTCP: [UInt32: UInt32] = [:]
    private var receivedRTP: [UInt32: SRTPReplayWindow] = [:]
    private var receivedRTCP: [UInt32: SRTPReplayWindow] = [:]

    /// Packets dropped as replays (or older than the window), as failing authentication, and as
    /// malformed (too short, not version 2, a stream too many).
    public private(set) var replaysDropped = 0
    public private(set) var authenticationFailures = 0
    public private(set) var malformedDropped = 0

    /// - Parameter replayWindow: indices remembered per stream (RFC 3711 asks at least 64; late
    ///   retransmissions over a long path want more).
    public convenience init(keys: SRTPKeyingMaterial, replayWindow: Int = 1024) throws(SRTPError) {
        let profile = keys.profile
        func split(_ keyAndSalt: [UInt8]) throws(SRTPError) -> SRTPSessionKeys {
            guard keyAndSalt.count == profile.keyLength + profile.saltLength else {
                throw SRTPError(.setup, "\(profile) needs \(profile.keyLength + profile.saltLength) bytes of key and salt, got \(keyAndSalt.count)")
            }
            return try SRTPSessionKeys(profile: profile, masterKey: Array(keyAndSalt.prefix(profile.keyLength)),
                                       masterSalt: Array(keyAndSalt.suffix(profile.saltLength)))
        }
        try self.init(profile: profile, local: split(keys.localKeyAndSalt), remote: split(keys.remoteKeyAndSalt), replayWindow: replayWindow)
    }

    /// From session keys already derived (the RFC 7714 test vectors give those).
    init(profile: SRTPProfile, local: SRTPSessionKeys, remote: SRTPSessionKeys, replayWindow: Int = 1024) throws(SRTPError) {
        self.profile = profile
        self.replayWindow = max(64, replayWindow)
        rtpOut = try SRTPCipher(profile: profile, key: local.rtpKey, salt: local.rtpSalt, authKey: local.rtpAuth, encrypt: true)
        rtcpOut = try SRTPCipher(profile: profile, key: local.rtcpKey, salt: local.rtcpSalt, authKey: local.rtcpAuth, encrypt: true)
        rtpIn = try SRTPCipher(profile: profile, key: remote.rtpKey, salt: remote.rtpSalt, authKey: remote.rtpAuth, encrypt: false)
        rtcpIn = try SRTPCipher(profile: profile, key: remote.rtcpKey, salt: remote.rtcpSalt, authKey: remote.rtcpAuth, encrypt: false)
    }

    // MARK: In place

    /// Protects an RTP packet in its own buffer: the payload encrypted, the tag appended.
    public func protectRTP(_ packet: inout ByteBuffer) throws(SRTPError) {
        try transform(&packet, grow: profile.rtpTagLength) { self.protectRTP($0, length: $1) }
    }

    /// Checks and decrypts an SRTP packet in its own buffer, which loses its tag.
    public func unprotectRTP(_ packet: inout ByteBuffer) throws(SRTPError) {
        try transform(&packet, grow: 0) { self.unprotectRTP($0, length: $1) }
    }

    /// Protects an RTCP compound packet in its own buffer: encrypted after the first SSRC, the
    /// E flag and SRTCP index and the tag appended.
    public func protectRTCP(_ packet: inout ByteBuffer) throws(SRTPError) {
        try transform(&packet, grow: profile.rtcpTagLength + 4) { self.protectRTCP($0, length: $1) }
    }

    /// Checks and decrypts an SRTCP packet in its own buffer, which loses its trailer.
    public func unprotectRTCP(_ packet: inout ByteBuffer) throws(SRTPError) {
        try transform(&packet, grow: 0) { self.unprotectRTCP($0, length: $1) }
    }

    // MARK: Copies (for callers that keep the original)

    public func protectRTP(_ packet: ByteBuffer) throws(SRTPError) -> ByteBuffer {
        var copy = packet
        try protectRTP(&copy)
        return copy
    }

    public func unprotectRTP(_ packet: ByteBuffer) throws(SRTPError) -> ByteBuffer {
        var copy = packet
        try unprotectRTP(&copy)
        return copy
    }

    public func protectRTCP(_ packet: ByteBuffer) throws(SRTPError) -> ByteBuffer {
        var copy = packet
        try protectRTCP(&copy)
        return copy
    }

    public func unprotectRTCP(_ packet: ByteBuffer) throws(SRTPError) -> ByteBuffer {
        var copy = packet
        try unprotectRTCP(&copy)
        return copy
    }

    // MARK: The transforms on raw bytes

    /// The outcome of a transform: the packet's new length, or why it was refused.
    private enum Outcome {
        case done(length: Int)
        case replay, tooOld, authentication, malformed(StaticString), failed(StaticString)
    }

    /// Runs `body` on the packet's readable bytes after `grow` bytes of room were added at its
    /// end, and sets its length to what the body says; restores it and throws on a refusal.
    private func transform(_ packet: inout ByteBuffer, grow: Int,
                           _ body: (UnsafeMutablePointer<UInt8>, Int) -> Outcome) throws(SRTPError) {
        let start = packet.readerIndex, length = packet.readableBytes
        guard length >= 8 else {
            malformedDropped += 1
            throw SRTPError(.malformed, "\(length) bytes is too short")
        }
        if grow > 0 { packet.writeRepeatingByte(0, count: grow) }
        let outcome = packet.withUnsafeMutableReadableBytes { raw in
            body(raw.baseAddress!.assumingMemoryBound(to: UInt8.self), length)
        }
        let error: SRTPError
        switch outcome {
        case .done(let newLength):
            packet.moveWriterIndex(to: start + newLength)
            return
        case .replay:
            replaysDropped += 1
            error = SRTPError(.replay, "index seen before")
        case .tooOld:
            replaysDropped += 1
            error = SRTPError(.replay, "index older than the replay window")
        case .authentication:
            authenticationFailures += 1
            error = SRTPError(.authentication, "tag does not match")
        case .malformed(let why):
            malformedDropped += 1
            error = SRTPError(.malformed, "\(why)")
        case .failed(let why):
            error = SRTPError(.setup, "\(why)")
        }
        packet.moveWriterIndex(to: start + length)
        throw error
    }

    private func protectRTP(_ p: UnsafeMutablePointer<UInt8>, length: Int) -> Outcome {
        guard let header = rtpHeaderLength(p, length: length) else { return .malformed("not an RTP packet") }
        let ssrc = read32(p + 8), sequence = read16(p + 2)
        let highest: UInt64?
        if let last = lastSent, last.ssrc == ssrc {
            highest = last.highest
        } else {
            if let last = lastSent { sentRTP[last.ssrc] = last.highest }
            highest = sentRTP[ssrc]
        }
        let index = srtpEstimateIndex(sequence: sequence, highest: highest)
        lastSent = (ssrc, max(index, highest ?? 0))
        let roc = UInt32(truncatingIfNeeded: index >> 16)
        if profile.isAEAD {
            guard rtpOut.gcm(p + header, count: length - header, aad: p, aadCount: header, tag: p + length, encrypt: true,
                             ssrc: ssrc, high: roc, low: sequence)
            else { return .failed("AES-GCM encryption failed") }
            return .done(length: length + 16)
        }
        guard rtpOut.counterMode(p + header, count: length - header, ssrc: ssrc, index: index) else {
            return .failed("AES-CM encryption failed")
        }
        let tag = profile.rtpTagLength
        (p + length).update(from: rtpOut.authenticate(p, count: length, rolloverCounter: roc), count: tag)
        return .done(length: length + tag)
    }

    private func unprotectRTP(_ p: UnsafeMutablePointer<UInt8>, length: Int) -> Outcome {
        let tag = profile.rtpTagLength
        guard let header = rtpHeaderLength(p, length: length - tag) else { return .malformed("not an SRTP packet") }
        let ssrc = read32(p + 8), sequence = read16(p + 2)
        let window = receivedRTP[ssrc]
        guard window != nil || receivedRTP.count < Self.maxStreams else { return .malformed("too many streams") }
        let index = srtpEstimateIndex(sequence: sequence, highest: window?.highest)
        switch window?.check(index) ?? .fresh {
        case .fresh: break
        case .replay: return .replay
        case .tooOld: return .tooOld
        }
        let roc = UInt32(truncatingIfNeeded: index >> 16)
        let body = length - tag
        if profile.isAEAD {
            guard rtpIn.gcm(p + header, count: body - header, aad: p, aadCount: header, tag: p + body, encrypt: false,
                            ssrc: ssrc, high: roc, low: sequence)
            else {
                // GCM decrypts as it goes and checks the tag last: the keystream applied once more
                // gives the packet back as it came.
                _ = rtpIn.gcm(p + header, count: body - header, aad: p, aadCount: header, tag: p + body, encrypt: false,
                              ssrc: ssrc, high: roc, low: sequence)
                return .authentication
            }
        } else {
            let digest = rtpIn.authenticate(p, count: body, rolloverCounter: roc)
            guard srtpTagsEqual(digest, p + body, count: tag) else { return .authentication }
            guard rtpIn.counterMode(p + header, count: body - header, ssrc: ssrc, index: index) else {
                return .failed("AES-CM decryption failed")
            }
        }
        receivedRTP[ssrc, default: SRTPReplayWindow(size: replayWindow)].accept(index)
        return .done(length: body)
    }

    private func protectRTCP(_ p: UnsafeMutablePointer<UInt8>, length: Int) -> Outcome {
        guard p[0] >> 6 == 2 else { return .malformed("not an RTCP packet") }
        let ssrc = read32(p + 4)
        let index = (sentRTCP[ssrc] ?? 1) & 0x7FFF_FFFF
        sentRTCP[ssrc] = (index + 1) & 0x7FFF_FFFF
        let flagAndIndex = 0x8000_0000 | index
        if profile.isAEAD {
            // header | encrypted | tag (16) | E + index: the E word is authenticated as AAD.
            write32(flagAndIndex, to: p + length + 16)
            guard rtcpOut.gcm(p + 8, count: length - 8, aad: p, aadCount: 8, aad2: p + length + 16, aad2Count: 4,
                              tag: p + length, encrypt: true, ssrc: ssrc, high: index >> 16, low: UInt16(truncatingIfNeeded: index))
            else { return .failed("AES-GCM encryption failed") }
            return .done(length: length + 20)
        }
        guard rtcpOut.counterMode(p + 8, count: length - 8, ssrc: ssrc, index: UInt64(index)) else {
            return .failed("AES-CM encryption failed")
        }
        write32(flagAndIndex, to: p + length)
        let tag = profile.rtcpTagLength
        (p + length + 4).update(from: rtcpOut.authenticate(p, count: length + 4, rolloverCounter: nil), count: tag)
        return .done(length: length + 4 + tag)
    }

    private func unprotectRTCP(_ p: UnsafeMutablePointer<UInt8>, length: Int) -> Outcome {
        let tag = profile.rtcpTagLength
        guard length >= 8 + 4 + tag, p[0] >> 6 == 2 else { return .malformed("not an SRTCP packet") }
        let ssrc = read32(p + 4)
        // Counter mode: ... | E + index | tag. GCM: ... | tag | E + index.
        let wordAt = profile.isAEAD ? length - 4 : length - tag - 4
        let word = read32(p + wordAt)
        let encrypted = word & 0x8000_0000 != 0, index = word & 0x7FFF_FFFF
        let window = receivedRTCP[ssrc]
        guard window != nil || receivedRTCP.count < Self.maxStreams else { return .malformed("too many streams") }
        switch window?.check(UInt64(index)) ?? .fresh {
        case .fresh: break
        case .replay: return .replay
        case .tooOld: return .tooOld
        }
        let newLength: Int
        if profile.isAEAD {
            let tagAt = length - 4 - tag
            // Unencrypted SRTCP (E = 0): the whole packet is additional data (RFC 7714 §9.2).
            let run = {
                encrypted
                    ? self.rtcpIn.gcm(p + 8, count: tagAt - 8, aad: p, aadCount: 8, aad2: p + wordAt, aad2Count: 4, tag: p + tagAt,
                                      encrypt: false, ssrc: ssrc, high: index >> 16, low: UInt16(truncatingIfNeeded: index))
                    : self.rtcpIn.gcm(p + tagAt, count: 0, aad: p, aadCount: tagAt, aad2: p + wordAt, aad2Count: 4, tag: p + tagAt,
                                      encrypt: false, ssrc: ssrc, high: index >> 16, low: UInt16(truncatingIfNeeded: index))
            }
            guard run() else {
                _ = run()  // the keystream once more: the packet as it came
                return .authentication
            }
            newLength = tagAt
        } else {
            let digest = rtcpIn.authenticate(p, count: wordAt + 4, rolloverCounter: nil)
            guard srtpTagsEqual(digest, p + wordAt + 4, count: tag) else { return .authentication }
            if encrypted, !rtcpIn.counterMode(p + 8, count: wordAt - 8, ssrc: ssrc, index: UInt64(index)) {
                return .failed("AES-CM decryption failed")
            }
            newLength = wordAt
        }
        receivedRTCP[ssrc, default: SRTPReplayWindow(size: replayWindow)].accept(UInt64(index))
        return .done(length: newLength)
    }
}

/// The length of the RTP header at `p` (fixed part, CSRCs, extension) when it is version 2 and
/// fits in `length` bytes; nil otherwise.
@inline(__always)
func rtpHeaderLength(_ p: UnsafePointer<UInt8>, length: Int) -> Int? {
    guard length >= 12, p[0] >> 6 == 2 else { return nil }
    var header = 12 + 4 * Int(p[0] & 0x0F)
    if p[0] & 0x10 != 0 {
        guard length >= header + 4 else { return nil }
        header += 4 + 4 * (Int(p[header + 2]) << 8 | Int(p[header + 3]))
    }
    return header <= length ? header : nil
}

@inline(__always)
private func read16(_ p: UnsafePointer<UInt8>) -> UInt16 { UInt16(p[0]) << 8 | UInt16(p[1]) }

@inline(__always)
private func read32(_ p: UnsafePointer<UInt8>) -> UInt32 {
    UInt32(p[0]) << 24 | UInt32(p[1]) << 16 | UInt32(p[2]) << 8 | UInt32(p[3])
}

@inline(__always)
private func write32(_ value: UInt32, to p: UnsafeMutablePointer<UInt8>) {
    p[0] = UInt8(truncatingIfNeeded: value >> 24)
    p[1] = UInt8(truncatingIfNeeded: value >> 16)
    p[2] = UInt8(truncatingIfNeeded: value >> 8)
    p[3] = UInt8(truncatingIfNeeded: value)
}
