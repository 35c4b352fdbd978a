internal import COpenSSL

/// The session keys of one direction, derived once from a master key and salt
/// ([RFC 3711 §4.3](https://www.rfc-editor.org/rfc/rfc3711#section-4.3): AES-CM as the PRF,
/// key derivation rate 0; [RFC 6188](https://www.rfc-editor.org/rfc/rfc6188) for 256-bit keys;
/// [RFC 7714 §11](https://www.rfc-editor.org/rfc/rfc7714#section-11) for GCM's 96-bit salts).
struct SRTPSessionKeys: Sendable, Equatable {
    var rtpKey: [UInt8], rtpAuth: [UInt8], rtpSalt: [UInt8]
    var rtcpKey: [UInt8], rtcpAuth: [UInt8], rtcpSalt: [UInt8]

    init(rtpKey: [UInt8], rtpAuth: [UInt8], rtpSalt: [UInt8], rtcpKey: [UInt8], rtcpAuth: [UInt8], rtcpSalt: [UInt8]) {
        self.rtpKey = rtpKey
        self.rtpAuth = rtpAuth
        self.rtpSalt = rtpSalt
        self.rtcpKey = rtcpKey
        self.rtcpAuth = rtcpAuth
        self.rtcpSalt = rtcpSalt
    }

    /// Key derivation labels (RFC 3711 §4.3.2).
    enum Label: UInt8 { case rtpKey = 0, rtpAuth = 1, rtpSalt = 2, rtcpKey = 3, rtcpAuth = 4, rtcpSalt = 5 }

    init(profile: SRTPProfile, masterKey: [UInt8], masterSalt: [UInt8]) throws(SRTPError) {
        guard masterKey.count == profile.keyLength, masterSalt.count == profile.saltLength else {
            throw SRTPError(.setup, "\(profile) needs a \(profile.keyLength)-byte key and a \(profile.saltLength)-byte salt, got \(masterKey.count) and \(masterSalt.count)")
        }
        func derive(_ label: Label, _ length: Int) throws(SRTPError) -> [UInt8] {
            try Self.derive(masterKey: masterKey, masterSalt: masterSalt, label: label.rawValue, length: length)
        }
        rtpKey = try derive(.rtpKey, profile.keyLength)
        rtpAuth = try derive(.rtpAuth, profile.authKeyLength)
        rtpSalt = try derive(.rtpSalt, profile.saltLength)
        rtcpKey = try derive(.rtcpKey, profile.keyLength)
        rtcpAuth = try derive(.rtcpAuth, profile.authKeyLength)
        rtcpSalt = try derive(.rtcpSalt, profile.saltLength)
    }

    /// The PRF's output for one label: the AES-CM keystream under the master key from
    /// IV = (master salt XOR label·2^48)·2^16. A 96-bit salt stands in the top bits of the 112.
    static func derive(masterKey: [UInt8], masterSalt: [UInt8], label: UInt8, length: Int) throws(SRTPError) -> [UInt8] {
        guard length > 0 else { return [] }
        var iv = [UInt8](repeating: 0, count: 16)
        for (index, byte) in masterSalt.prefix(14).enumerated() { iv[index] = byte }
        iv[7] ^= label
        let zeros = [UInt8](repeating: 0, count: length)
        var output = [UInt8](repeating: 0, count: length)
        guard let context = EVP_CIPHER_CTX_new() else { throw SRTPError(.setup, "EVP_CIPHER_CTX_new failed") }
        defer { EVP_CIPHER_CTX_free(context) }
        let cipher = masterKey.count == 32 ? EVP_aes_256_ctr() : EVP_aes_128_ctr()
        var written: Int32 = 0
        guard EVP_EncryptInit_ex(context, cipher, nil, masterKey, iv) == 1,
              EVP_EncryptUpdate(context, &output, &written, zeros, Int32(length)) == 1, written == Int32(length)
        else { throw SRTPError(.setup, "AES-CM key derivation failed") }
        return output
    }
}

/// One direction's cipher state for one kind of packet (RTP or RTCP): an `EVP_CIPHER_CTX` keyed
/// once (AES-CTR or AES-GCM) and given a new IV per packet, the session salt, and for counter
/// mode the HMAC-SHA1 key states. The transforms work on the packet's own bytes; nothing here
/// allocates per packet. Not thread-safe: one owner at a time.
final class SRTPCipher {
    let profile: SRTPProfile
    private let context: OpaquePointer
    /// Session salt (14 or 12 bytes), then room for a 16-byte IV and a 20-byte digest.
    private let scratch: UnsafeMutablePointer<UInt8>
    private let hmac: UnsafeMutablePointer<rtc_hmac_sha1_key>?
    static let ivOffset = 16, digestOffset = 32, scratchSize = 64

    init(profile: SRTPProfile, key: [UInt8], salt: [UInt8], authKey: [UInt8], encrypt: Bool) throws(SRTPError) {
        self.profile = profile
        guard let context = EVP_CIPHER_CTX_new() else { throw SRTPError(.setup, "EVP_CIPHER_CTX_new failed") }
        let cipher = switch profile {
        case .aes128CmSha1_80, .aes128CmSha1_32: EVP_aes_128_ctr()
        case .aeadAes128Gcm: EVP_aes_128_gcm()
        case .aeadAes256Gcm: EVP_aes_256_gcm()
        }
        guard EVP_CipherInit_ex(context, cipher, nil, key, nil, encrypt ? 1 : 0) == 1 else {
            EVP_CIPHER_CTX_free(context)
            throw SRTPError(.setup, "EVP_CipherInit_ex refused the \(profile) key")
        }
        self.context = context
        scratch = .allocate(capacity: Self.scratchSize)
        scratch.initialize(repeating: 0, count: Self.scratchSize)
        for (index, byte) in salt.enumerated() { scratch[index] = byte }
        if profile.isAEAD {
            hmac = nil
        } else {
            let state = UnsafeMutablePointer<rtc_hmac_sha1_key>.allocate(capacity: 1)
            authKey.withUnsafeBufferPointer { rtc_hmac_sha1_init(state, $0.baseAddress, $0.count) }
            hmac = state
        }
    }

    deinit {
        EVP_CIPHER_CTX_free(context)
        scratch.update(repeating: 0, count: Self.scratchSize)
        scratch.deallocate()
        if let hmac {
            hmac.withMemoryRebound(to: UInt8.self, capacity: MemoryLayout<rtc_hmac_sha1_key>.size) {
                $0.update(repeating: 0, count: MemoryLayout<rtc_hmac_sha1_key>.size)
            }
            hmac.deallocate()
        }
    }

    private var iv: UnsafeMutablePointer<UInt8> { scratch + Self.ivOffset }

    // MARK: Counter mode (RFC 3711 §4.1.1, §4.2)

    /// The salt's first 8 bytes and the 8 after them (the last 2 zero, or 4 for GCM's 12-byte
    /// salt), big-endian: an IV is two XORs and two stores.
    private var saltHigh: UInt64 { loadBigEndian64(scratch) }
    private var saltLow: UInt64 { loadBigEndian64(scratch + 8) }

    /// Sets the AES-CM IV: (salt·2^16) XOR (SSRC·2^64) XOR (index·2^16).
    private func counterIV(ssrc: UInt32, index: UInt64) {
        // Bytes 0-7: salt 0-7 with the SSRC over 4-7; bytes 8-15: salt 8-13 with the 48-bit index, then 00 00.
        storeBigEndian64(saltHigh ^ UInt64(ssrc), iv)
        storeBigEndian64((saltLow ^ (index << 16)) & ~0xFFFF, iv + 8)
    }

    /// XORs the keystream for (ssrc, index) over `count` bytes at `bytes` (encrypts or decrypts).
    func counterMode(_ bytes: UnsafeMutablePointer<UInt8>, count: Int, ssrc: UInt32, index: UInt64) -> Bool {
        counterIV(ssrc: ssrc, index: index)
        guard EVP_EncryptInit_ex(context, nil, nil, nil, iv) == 1 else { return false }
        guard count > 0 else { return true }
        var written: Int32 = 0
        return EVP_EncryptUpdate(context, bytes, &written, bytes, Int32(count)) == 1 && written == Int32(count)
    }

    /// The HMAC-SHA1 of `count` bytes and an optional 4-byte big-endian trailer (SRTP's ROC),
    /// left in the scratch digest; returns its address.
    func authenticate(_ bytes: UnsafePointer<UInt8>, count: Int, rolloverCounter: UInt32?) -> UnsafePointer<UInt8> {
        let digest = scratch + Self.digestOffset
        if let rolloverCounter {
            var roc = rolloverCounter.bigEndian
            withUnsafeBytes(of: &roc) { rtc_hmac_sha1(hmac, bytes, count, $0.baseAddress, 4, digest) }
        } else {
            rtc_hmac_sha1(hmac, bytes, count, nil, 0, digest)
        }
        return UnsafePointer(digest)
    }

    // MARK: GCM (RFC 7714 §8, §9)

    /// Sets the 12-byte GCM IV: salt XOR (00 00 | SSRC | `high` | `low`) where `high`/`low` are
    /// the ROC and sequence number (SRTP) or 00 00 and the SRTCP index (SRTCP).
    private func gcmIV(ssrc: UInt32, high: UInt32, low: UInt16) {
        // Bytes 0-7: salt 0-7 with the SSRC over 2-5 and the top half of `high` over 6-7;
        // bytes 8-11: salt 8-11 with the low half of `high`, then `low` (bytes 12-15 are not read).
        storeBigEndian64(saltHigh ^ (UInt64(ssrc) << 16 | UInt64(high >> 16)), iv)
        storeBigEndian64(saltLow ^ (UInt64(high & 0xFFFF) << 48 | UInt64(low) << 32), iv + 8)
    }

    /// GCM over `count` bytes at `bytes` in place, with additional data `aad` (then `aad2`), and
    /// the 16-byte tag written to (encrypting) or checked against (decrypting) `tag`. Returns
    /// false when the tag does not match or the library fails.
    func gcm(_ bytes: UnsafeMutablePointer<UInt8>, count: Int, aad: UnsafePointer<UInt8>, aadCount: Int,
             aad2: UnsafePointer<UInt8>? = nil, aad2Count: Int = 0, tag: UnsafeMutablePointer<UInt8>,
             encrypt: Bool, ssrc: UInt32, high: UInt32, low: UInt16) -> Bool {
        gcmIV(ssrc: ssrc, high: high, low: low)
        var written: Int32 = 0
        guard EVP_CipherInit_ex(context, nil, nil, nil, iv, -1) == 1,
              EVP_CipherUpdate(context, nil, &written, aad, Int32(aadCount)) == 1
        else { return false }
        if let aad2, aad2Count > 0, EVP_CipherUpdate(context, nil, &written, aad2, Int32(aad2Count)) != 1 { return false }
        if count > 0, EVP_CipherUpdate(context, bytes, &written, bytes, Int32(count)) != 1 { return false }
        if encrypt {
            guard EVP_CipherFinal_ex(context, iv, &written) == 1 else { return false }
            return rtc_gcm_get_tag(context, tag, 16) == 1
        }
        guard rtc_gcm_set_tag(context, tag, 16) == 1 else { return false }
        return EVP_CipherFinal_ex(context, iv, &written) == 1
    }
}

@inline(__always)
private func loadBigEndian64(_ p: UnsafePointer<UInt8>) -> UInt64 {
    UInt64(bigEndian: UnsafeRawPointer(p).loadUnaligned(as: UInt64.self))
}

@inline(__always)
private func storeBigEndian64(_ value: UInt64, _ p: UnsafeMutablePointer<UInt8>) {
    UnsafeMutableRawPointer(p).storeBytes(of: value.bigEndian, as: UInt64.self)
}

/// Compares two tags in constant time.
func srtpTagsEqual(_ a: UnsafePointer<UInt8>, _ b: UnsafePointer<UInt8>, count: Int) -> Bool {
    CRYPTO_memcmp(a, b, count) == 0
}
