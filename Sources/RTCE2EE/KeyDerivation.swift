import COpenSSL

/// One key of a ring: the material it was set from (a passphrase's bytes, or a ratchet's output)
/// and the AES-128-GCM key derived from it.
public struct E2EEKeySet: Sendable, Hashable {
    public let material: [UInt8]
    public let key: [UInt8]

    /// Derives the key from `material` (PBKDF2, as ``E2EEKeyDerivation/frameKey(from:salt:)``).
    public init(material: [UInt8], salt: [UInt8]) throws(E2EEError) {
        self.material = material
        key = try E2EEKeyDerivation.frameKey(from: material, salt: salt)
    }
}

/// How LiveKit turns key material into frame keys, and ratchets it (webrtc-sdk's frame cryptor;
/// client-sdk-js derives the same with WebCrypto): PBKDF2-HMAC-SHA256 over the material with the
/// ratchet salt and 100 000 iterations, 128 bits for the AES-GCM key and 256 bits for the next
/// material when ratcheting. Each derivation costs tens of milliseconds by design: they happen
/// when a key is set or ratcheted, never per frame.
public enum E2EEKeyDerivation {
    /// LiveKit's default ratchet salt, which every SDK uses unless told otherwise.
    public static let defaultSalt: [UInt8] = Array("LKFrameEncryptionKey".utf8)
    public static let iterations: Int32 = 100_000

    /// The 16-byte AES-128-GCM key for `material`.
    public static func frameKey(from material: [UInt8], salt: [UInt8] = defaultSalt) throws(E2EEError) -> [UInt8] {
        try pbkdf2(material, salt: salt, bytes: 16)
    }

    /// The material that follows `material` in a ratchet (32 bytes).
    public static func ratchet(_ material: [UInt8], salt: [UInt8] = defaultSalt) throws(E2EEError) -> [UInt8] {
        try pbkdf2(material, salt: salt, bytes: 32)
    }

    static func pbkdf2(_ password: [UInt8], salt: [UInt8], bytes: Int) throws(E2EEError) -> [UInt8] {
        guard !password.isEmpty else { throw E2EEError(.invalidKey, "an empty key") }
        var out = [UInt8](repeating: 0, count: bytes)
        let ok = password.withUnsafeBufferPointer { pass in
            salt.withUnsafeBufferPointer { salt in
                out.withUnsafeMutableBufferPointer { out in
                    pass.baseAddress!.withMemoryRebound(to: CChar.self, capacity: pass.count) { passChars in
                        PKCS5_PBKDF2_HMAC(passChars, Int32(pass.count), salt.baseAddress, Int32(salt.count), iterations,
                                          EVP_sha256(), Int32(bytes), out.baseAddress)
                    }
                }
            }
        }
        guard ok == 1 else { throw E2EEError(.cipher, "PBKDF2 failed") }
        return out
    }
}
