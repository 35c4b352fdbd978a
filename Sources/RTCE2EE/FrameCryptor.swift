import COpenSSL

/// Encrypts a track's outgoing frames, or decrypts a remote track's incoming ones, in LiveKit's
/// frame format (``EncryptedFrame``) with AES-128-GCM over OpenSSL's EVP. One per track and
/// direction, used from that track's thread only (not thread-safe); its keys come from an
/// ``E2EEKeyProvider`` that any thread may change.
///
/// IVs are unique per key as GCM requires: the stream's SSRC, then a 64-bit counter that starts at
/// a random value and grows by one a frame. (LiveKit's own senders use SSRC, RTP timestamp and a
/// counter; a receiver reads the IV from the trailer, so the two interoperate.)
public final class FrameCryptor {
    /// Where the track stands, as LiveKit's frame cryptors report it.
    public enum State: String, Sendable, Hashable {
        case new, ok, missingKey, decryptionFailed, keyRatcheted, encryptionFailed
    }

    public let codec: E2EECodec
    /// Whose ring: this client's identity (sending) or the remote participant's (receiving); the
    /// shared ring in shared mode.
    public let participant: String?
    public let provider: E2EEKeyProvider
    public private(set) var state: State = .new

    private let context: OpaquePointer
    private var ring = E2EEKeyProvider.Ring()
    private var seenGeneration = -1
    /// The key the cipher context holds now.
    private var contextKey: [UInt8] = []
    /// Indexes whose ratchet window was tried in vain since the ring last changed: they fail fast.
    private var exhausted: UInt32 = 0
    private var counter = UInt64.random(in: 0...UInt64.max)
    private var iv = [UInt8](repeating: 0, count: EncryptedFrame.ivCount)
    private var tag = [UInt8](repeating: 0, count: EncryptedFrame.tagCount)

    public init(codec: E2EECodec, participant: String?, provider: E2EEKeyProvider) throws(E2EEError) {
        guard let context = EVP_CIPHER_CTX_new() else { throw E2EEError(.cipher, "EVP_CIPHER_CTX_new failed") }
        self.context = context
        self.codec = codec
        self.participant = participant
        self.provider = provider
    }

    deinit {
        EVP_CIPHER_CTX_free(context)
    }

    // MARK: Sending

    /// `frame` encrypted with the ring's current key, as sent in an RTP stream with `ssrc`. An
    /// empty frame goes as it is. Throws `missingKey` while no key is set at the current index:
    /// the caller drops the frame (nothing goes out in the clear).
    public func encrypt(_ frame: [UInt8], ssrc: UInt32) throws(E2EEError) -> [UInt8] {
        guard !frame.isEmpty else { return frame }
        refreshRing()
        let index = ring.currentIndex
        guard let keys = ring.keys[index] else {
            state = .missingKey
            throw E2EEError(.missingKey, "encrypting with key index \(index)")
        }
        let clear = codec.clearCount(of: frame)
        makeIV(ssrc: ssrc)
        var out = [UInt8]()
        out.reserveCapacity(frame.count + EncryptedFrame.overhead)
        out.append(contentsOf: frame)
        out.append(contentsOf: tag)  // room for the tag, written below
        let ok = out.withUnsafeMutableBufferPointer { bytes in
            seal(key: keys.key, bytes: bytes.baseAddress!, clear: clear, count: frame.count - clear,
                 tag: bytes.baseAddress! + frame.count, encrypt: true)
        }
        guard ok else {
            state = .encryptionFailed
            throw E2EEError(.cipher, "AES-GCM encryption")
        }
        out.append(contentsOf: iv)
        out.append(UInt8(EncryptedFrame.ivCount))
        out.append(UInt8(index))
        state = .ok
        return out
    }

    // MARK: Receiving

    /// The plain frame inside `frame`, or a typed error: a frame too short for a trailer, a wrong
    /// IV length, a key index outside the ring, no key at that index (``State/missingKey``), or a
    /// tag that matches neither the key nor its next ``E2EEKeyProvider/Options/ratchetWindowSize``
    /// ratchets (``State/decryptionFailed``). An empty frame comes back as it is.
    public func decrypt(_ frame: [UInt8]) throws(E2EEError) -> [UInt8] {
        guard !frame.isEmpty else { return frame }
        let layout: EncryptedFrame
        do {
            layout = try EncryptedFrame(parsing: frame, clearCount: codec.clearCount(of: frame))
        } catch {
            state = .decryptionFailed
            throw error
        }
        refreshRing()
        let index = layout.keyIndex
        guard let keys = ring.keys[index] else {
            state = .missingKey
            throw E2EEError(.missingKey, "decrypting with key index \(index)")
        }
        if let plain = open(frame, layout: layout, key: keys.key) {
            exhausted &= ~(1 << UInt32(index))
            state = .ok
            return plain
        }
        guard exhausted & (1 << UInt32(index)) == 0 else {
            state = .decryptionFailed
            throw E2EEError(.authenticationFailed, "decrypting with key index \(index)")
        }
        // The sender may have ratcheted: try the window once for this key.
        var material = keys.material
        for _ in 0..<provider.options.ratchetWindowSize {
            guard let next = try? E2EEKeyDerivation.ratchet(material, salt: provider.options.ratchetSalt),
                  let ratcheted = try? E2EEKeySet(material: next, salt: provider.options.ratchetSalt) else { break }
            material = next
            if let plain = open(frame, layout: layout, key: ratcheted.key) {
                provider.adopt(ratcheted, replacing: keys, index: index, participant: participant)
                ring.keys[index] = ratcheted
                state = .keyRatcheted
                return plain
            }
        }
        exhausted |= 1 << UInt32(index)
        state = .decryptionFailed
        throw E2EEError(.authenticationFailed, "decrypting with key index \(index)")
    }

    // MARK: Cipher

    private func refreshRing() {
        let generation = provider.generation
        guard generation != seenGeneration else { return }
        seenGeneration = generation
        ring = provider.ring(for: participant)
        exhausted = 0
    }

    private func open(_ frame: [UInt8], layout: EncryptedFrame, key: [UInt8]) -> [UInt8]? {
        for (i, byte) in frame[layout.ivRange].enumerated() { iv[i] = byte }
        for (i, byte) in frame[layout.tagRange].enumerated() { tag[i] = byte }
        var plain = Array(frame[0..<layout.cipherRange.upperBound])
        let ok = plain.withUnsafeMutableBufferPointer { bytes in
            tag.withUnsafeMutableBufferPointer { tag in
                seal(key: key, bytes: bytes.baseAddress!, clear: layout.clearCount, count: layout.cipherRange.count,
                     tag: tag.baseAddress!, encrypt: false)
            }
        }
        return ok ? plain : nil
    }

    /// GCM in place over `count` bytes after `clear` clear ones (the additional data), with the
    /// tag written to (encrypting) or checked against (decrypting) `tag`.
    private func seal(key: [UInt8], bytes: UnsafeMutablePointer<UInt8>, clear: Int, count: Int,
                      tag: UnsafeMutablePointer<UInt8>, encrypt: Bool) -> Bool {
        if key != contextKey {
            guard EVP_CipherInit_ex(context, EVP_aes_128_gcm(), nil, key, nil, encrypt ? 1 : 0) == 1 else {
                contextKey = []
                return false
            }
            contextKey = key
        }
        var written: Int32 = 0
        let ivSet = iv.withUnsafeBufferPointer { EVP_CipherInit_ex(context, nil, nil, nil, $0.baseAddress, encrypt ? 1 : 0) == 1 }
        guard ivSet else { return false }
        if clear > 0, EVP_CipherUpdate(context, nil, &written, bytes, Int32(clear)) != 1 { return false }
        if count > 0, EVP_CipherUpdate(context, bytes + clear, &written, bytes + clear, Int32(count)) != 1 { return false }
        var final: Int32 = 0
        if encrypt {
            return iv.withUnsafeMutableBufferPointer { scratch in
                // Final writes nothing for GCM; the scratch is only somewhere to point.
                EVP_CipherFinal_ex(context, scratch.baseAddress, &final) == 1
            } && rtc_gcm_get_tag(context, tag, Int32(EncryptedFrame.tagCount)) == 1
        }
        guard rtc_gcm_set_tag(context, tag, Int32(EncryptedFrame.tagCount)) == 1 else { return false }
        return iv.withUnsafeMutableBufferPointer { EVP_CipherFinal_ex(context, $0.baseAddress, &final) == 1 }
    }

    private func makeIV(ssrc: UInt32) {
        counter &+= 1
        for i in 0..<4 { iv[i] = UInt8(truncatingIfNeeded: ssrc >> (24 - 8 * UInt32(i))) }
        for i in 0..<8 { iv[4 + i] = UInt8(truncatingIfNeeded: counter >> (56 - 8 * UInt64(i))) }
    }
}
