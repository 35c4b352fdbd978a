internal import COpenSSL
import TLSStream

/// An ECDSA P-256 key and a self-signed certificate, made per session as WebRTC does; peers
/// authenticate it by the SHA-256 fingerprint exchanged in SDP (RFC 8122, RFC 8827 §6.5).
public final class DTLSCertificate: @unchecked Sendable {
    let key: OpaquePointer
    let certificate: OpaquePointer
    /// `a=fingerprint:sha-256 ...` of this certificate.
    public let fingerprint: SDPFingerprint

    /// Generates a key pair and a certificate valid from a day ago for 30 days.
    public init(commonName: String = "swift-rtc") throws(DTLSError) {
        guard let key = rtc_ec_p256_key() else { throw DTLSError.fromOpenSSL("P-256 key generation") }
        guard let certificate = X509_new() else {
            EVP_PKEY_free(key)
            throw DTLSError.fromOpenSSL("certificate allocation")
        }
        var serial: UInt64 = 0
        _ = withUnsafeMutableBytes(of: &serial) { RAND_bytes($0.baseAddress!.assumingMemoryBound(to: UInt8.self), 8) }
        var ok = X509_set_version(certificate, 2) == 1
        ok = ok && ASN1_INTEGER_set(X509_get_serialNumber(certificate), Int(serial >> 2)) == 1
        ok = ok && X509_gmtime_adj(X509_getm_notBefore(certificate), -86400) != nil
        ok = ok && X509_gmtime_adj(X509_getm_notAfter(certificate), 30 * 86400) != nil
        ok = ok && X509_set_pubkey(certificate, key) == 1
        let name = X509_get_subject_name(certificate)
        ok = ok && X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, commonName, -1, -1, 0) == 1
        ok = ok && X509_set_issuer_name(certificate, name) == 1
        ok = ok && X509_sign(certificate, key, EVP_sha256()) > 0
        guard ok, let digest = Self.sha256(of: certificate) else {
            X509_free(certificate)
            EVP_PKEY_free(key)
            throw DTLSError.fromOpenSSL("self-signed certificate")
        }
        self.key = key
        self.certificate = certificate
        fingerprint = SDPFingerprint(algorithm: "sha-256", digest: digest)
    }

    deinit {
        X509_free(certificate)
        EVP_PKEY_free(key)
    }

    static func sha256(of certificate: OpaquePointer) -> [UInt8]? {
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        guard X509_digest(certificate, EVP_sha256(), &digest, &length) == 1 else { return nil }
        return Array(digest[..<Int(length)])
    }
}

/// Why a DTLS handshake or session failed.
public struct DTLSError: Error, Sendable, Hashable, CustomStringConvertible {
    public struct Kind: Hashable, Sendable {
        let name: String
        /// The peer's certificate does not match the fingerprint from its SDP.
        public static let fingerprintMismatch = Kind(name: "fingerprint mismatch")
        /// The peer sent a fatal alert, or OpenSSL rejected the handshake.
        public static let handshake = Kind(name: "handshake failed")
        /// No SRTP profile in common, or keys could not be exported.
        public static let srtp = Kind(name: "SRTP negotiation failed")
        /// The handshake did not finish within the retransmission budget.
        public static let timeout = Kind(name: "handshake timed out")
        /// OpenSSL could not set up the session.
        public static let setup = Kind(name: "setup failed")
    }

    public let kind: Kind
    public let reason: String

    public init(_ kind: Kind, _ reason: String) {
        self.kind = kind
        self.reason = reason
    }

    public var description: String { "DTLS \(kind.name): \(reason)" }

    static let noDetail = "no OpenSSL detail"

    /// Drains OpenSSL's error queue into a reason.
    static func openSSLQueue() -> String {
        let reasons = OpenSSLErrors.drain()
        return reasons.isEmpty ? noDetail : reasons.joined(separator: "; ")
    }

    static func fromOpenSSL(_ what: String) -> DTLSError { DTLSError(.setup, "\(what): \(openSSLQueue())") }
}
