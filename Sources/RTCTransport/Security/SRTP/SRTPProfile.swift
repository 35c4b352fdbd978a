/// The SRTP protection profiles this SDK implements, by their DTLS `use_srtp` ids
/// ([RFC 5764 §4.1.2](https://www.rfc-editor.org/rfc/rfc5764#section-4.1.2),
/// [RFC 7714 §14.2](https://www.rfc-editor.org/rfc/rfc7714#section-14.2)).
public enum SRTPProfile: UInt16, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// AES-128 in counter mode, HMAC-SHA1 tags of 80 bits (RFC 3711).
    case aes128CmSha1_80 = 0x0001
    /// As above with 32-bit SRTP tags (SRTCP keeps 80 bits, RFC 5764 §4.1.2).
    case aes128CmSha1_32 = 0x0002
    /// AES-128-GCM with 16-byte tags (RFC 7714).
    case aeadAes128Gcm = 0x0007
    /// AES-256-GCM with 16-byte tags (RFC 7714).
    case aeadAes256Gcm = 0x0008

    /// The OpenSSL name, as `SSL_CTX_set_tlsext_use_srtp` takes it.
    public var openSSLName: String {
        switch self {
        case .aes128CmSha1_80: "SRTP_AES128_CM_SHA1_80"
        case .aes128CmSha1_32: "SRTP_AES128_CM_SHA1_32"
        case .aeadAes128Gcm: "SRTP_AEAD_AES_128_GCM"
        case .aeadAes256Gcm: "SRTP_AEAD_AES_256_GCM"
        }
    }

    public var description: String { openSSLName }

    /// Whether the profile is an AEAD (RFC 7714): one pass encrypts and authenticates.
    public var isAEAD: Bool { self == .aeadAes128Gcm || self == .aeadAes256Gcm }
    /// Master (and session) key bytes.
    public var keyLength: Int { self == .aeadAes256Gcm ? 32 : 16 }
    /// Master (and session) salt bytes: 112 bits for counter mode, 96 for GCM.
    public var saltLength: Int { isAEAD ? 12 : 14 }
    /// Bytes of the authentication tag an SRTP packet carries.
    public var rtpTagLength: Int {
        switch self {
        case .aes128CmSha1_80: 10
        case .aes128CmSha1_32: 4
        case .aeadAes128Gcm, .aeadAes256Gcm: 16
        }
    }
    /// Bytes of the authentication tag an SRTCP packet carries (80 bits for both counter-mode profiles).
    public var rtcpTagLength: Int { isAEAD ? 16 : 10 }
    /// Bytes of HMAC-SHA1 session authentication key (none for AEAD profiles).
    var authKeyLength: Int { isAEAD ? 0 : 20 }
    /// Bytes of keying material DTLS exports for both directions.
    public var keyingMaterialLength: Int { 2 * (keyLength + saltLength) }
    /// The most bytes protection adds to an RTP or RTCP packet of this profile (tag, SRTCP index).
    public var maxTrailer: Int { rtcpTagLength + 4 }
    /// The most bytes any profile adds: room a sender leaves after a packet so that it is
    /// protected in its own buffer.
    public static let maxTrailer = 20
}

/// Master keys and salts for both directions, from the DTLS exporter
/// (`client key | server key | client salt | server salt`, RFC 5764 §4.2).
public struct SRTPKeyingMaterial: Sendable, Hashable {
    public var profile: SRTPProfile
    /// Key followed by salt, for what this side sends.
    public var localKeyAndSalt: [UInt8]
    /// Key followed by salt, for what the peer sends.
    public var remoteKeyAndSalt: [UInt8]

    public init(profile: SRTPProfile, localKeyAndSalt: [UInt8], remoteKeyAndSalt: [UInt8]) {
        self.profile = profile
        self.localKeyAndSalt = localKeyAndSalt
        self.remoteKeyAndSalt = remoteKeyAndSalt
    }

    /// Splits exported material; `isClient` says which half is ours.
    public init?(profile: SRTPProfile, exported: [UInt8], isClient: Bool) {
        let k = profile.keyLength, s = profile.saltLength
        guard exported.count == profile.keyingMaterialLength else { return nil }
        let clientKey = exported[0..<k], serverKey = exported[k..<(2 * k)]
        let clientSalt = exported[(2 * k)..<(2 * k + s)], serverSalt = exported[(2 * k + s)..<(2 * k + 2 * s)]
        let client = Array(clientKey + clientSalt), server = Array(serverKey + serverSalt)
        self.init(profile: profile, localKeyAndSalt: isClient ? client : server, remoteKeyAndSalt: isClient ? server : client)
    }
}

/// Why SRTP refused a packet, or could not be set up.
public struct SRTPError: Error, Sendable, Hashable, CustomStringConvertible {
    public struct Kind: Hashable, Sendable {
        let name: String
        /// The packet was seen before, or is older than the replay window: dropped
        /// ([RFC 3711 §3.3.2](https://www.rfc-editor.org/rfc/rfc3711#section-3.3.2)).
        public static let replay = Kind(name: "replayed packet")
        /// The authentication tag did not match.
        public static let authentication = Kind(name: "authentication failed")
        /// Too short for its header and trailer, or not RTP version 2.
        public static let malformed = Kind(name: "malformed packet")
        /// Keys of the wrong length, or the cipher library refused.
        public static let setup = Kind(name: "srtp setup failed")
    }

    public let kind: Kind
    /// What was wrong, for a log line.
    public let detail: String

    public init(_ kind: Kind, _ detail: String) {
        self.kind = kind
        self.detail = detail
    }

    public var description: String { "\(kind.name): \(detail)" }
}
