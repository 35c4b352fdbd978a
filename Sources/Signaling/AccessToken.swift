#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
internal import COpenSSL

/// What a token allows its holder to do in a channel.
public struct TokenGrants: Codable, Sendable, Hashable {
    public var join: Bool
    public var publishAudio: Bool
    public var publishVideo: Bool
    public var publishScreen: Bool
    public var subscribe: Bool
    /// Sending data channel messages (LiveKit's canPublishData). Absent (nil) means allowed, except
    /// for a screen-share uid (`<host>_sub`), which sends data only when its token says so.
    public var publishData: Bool?
    /// Setting its own name, metadata and attributes (LiveKit's canUpdateOwnMetadata); absent: not allowed.
    public var updateMetadata: Bool?

    public init(join: Bool = true, publishAudio: Bool = true, publishVideo: Bool = true, publishScreen: Bool = true,
                subscribe: Bool = true, publishData: Bool? = nil, updateMetadata: Bool? = nil) {
        self.updateMetadata = updateMetadata
        self.join = join
        self.publishAudio = publishAudio
        self.publishVideo = publishVideo
        self.publishScreen = publishScreen
        self.subscribe = subscribe
        self.publishData = publishData
    }

    /// Whether these grants let `uid` send data (``publishData``, its default by kind).
    public func maySendData(screenShare: Bool) -> Bool { publishData ?? !screenShare }

    /// Everything.
    public static let all = TokenGrants()

    /// The names `rtc-cli token --grants` takes.
    public static let names = ["join", "publishAudio", "publishVideo", "publishScreen", "subscribe", "publishData", "updateMetadata"]

    /// Parses a comma-separated list of grant names; nil for an unknown name.
    public init?(list: String) {
        self.init(join: false, publishAudio: false, publishVideo: false, publishScreen: false, subscribe: false, publishData: false)
        for part in list.split(separator: ",") {
            let name = part.filter { $0 != " " }
            if name.isEmpty { continue }
            switch name {
            case "join": join = true
            case "publishAudio": publishAudio = true
            case "publishVideo": publishVideo = true
            case "publishScreen": publishScreen = true
            case "subscribe": subscribe = true
            case "publishData": publishData = true
            case "updateMetadata": updateMetadata = true
            default: return nil
            }
        }
    }
}

/// The claims of an access token: an HS256-signed JWT ([RFC 7519](https://www.rfc-editor.org/rfc/rfc7519)).
public struct AccessToken: Codable, Sendable, Hashable {
    /// The app (`iss`).
    public var appID: String
    /// The uid (`sub`).
    public var uid: String
    public var channel: String
    public var grants: TokenGrants
    /// Seconds since 1970: issued at, not before, expires.
    public var issuedAt: Int64
    public var notBefore: Int64
    public var expiresAt: Int64
    /// What the participant starts with (protocol 1.6): a display name, metadata, attributes.
    public var name: String?
    public var metadata: String?
    public var attributes: [String: String]?

    enum CodingKeys: String, CodingKey {
        case appID = "iss", uid = "sub", channel, grants, issuedAt = "iat", notBefore = "nbf", expiresAt = "exp", name, metadata, attributes
    }

    public init(appID: String = "swift-rtc", uid: String, channel: String, grants: TokenGrants = .all, now: Int64,
                ttl: Int64 = 3600) {
        self.appID = appID
        self.uid = uid
        self.channel = channel
        self.grants = grants
        issuedAt = now
        notBefore = now
        expiresAt = now + ttl
    }

    /// The signed JWT.
    public func signed(secret: String) -> String {
        JWT.sign(self, secret: secret)
    }

    /// Verifies the signature and the time window, and returns the claims.
    public static func verify(_ token: String, secret: String, now: Int64, leeway: Int64 = 5) throws(TokenError) -> AccessToken {
        let claims = try verifySignature(token, secret: secret)
        try claims.checkTime(now: now, leeway: leeway)
        return claims
    }

    /// Verifies the form and the signature only (the costly part: a server does it where the
    /// message arrives, not on its media loop) and returns the claims; ``checkTime(now:leeway:)``
    /// is the rest of ``verify(_:secret:now:leeway:)``.
    public static func verifySignature(_ token: String, secret: String) throws(TokenError) -> AccessToken {
        let jwt = try JWT(token)
        try jwt.checkSignature(secret: secret)
        guard let claims = try? JSONDecoder().decode(AccessToken.self, from: Data(jwt.claims)) else {
            throw TokenError(.malformed, "the JWT claims are not a valid access token")
        }
        return claims
    }

    /// Whether `now` (seconds) is inside the token's `nbf`…`exp` window, give or take `leeway`.
    public func checkTime(now: Int64, leeway: Int64 = 5) throws(TokenError) {
        guard now + leeway >= notBefore else { throw TokenError(.notYetValid, "token valid from \(notBefore)") }
        guard now - leeway < expiresAt else { throw TokenError(.expired, "token expired at \(expiresAt)") }
    }
}

/// Why a token was refused.
public struct TokenError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Kind: String, Sendable, Hashable {
        case malformed, badSignature, expired, notYetValid
    }

    public let kind: Kind
    public let reason: String

    public init(_ kind: Kind, _ reason: String) {
        self.kind = kind
        self.reason = reason
    }

    public var description: String { "\(kind.rawValue): \(reason)" }
}

/// An HS256 JSON Web Token taken apart (RFC 7519): its claims' JSON, not yet trusted, and what
/// checking its signature needs. Our tokens and LiveKit's share it; each decodes its own claims.
package struct JWT: Sendable {
    /// The claims' JSON bytes.
    package let claims: [UInt8]
    private let signingInput: String
    private let signature: [UInt8]

    /// The form only: three base64url parts, a header saying HS256, at most 8 KiB.
    package init(_ token: String) throws(TokenError) {
        guard token.utf8.count <= 8192 else { throw TokenError(.malformed, "token longer than 8 KiB") }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = Base64URL.decode(String(parts[0])),
              let claimBytes = Base64URL.decode(String(parts[1])), let signature = Base64URL.decode(String(parts[2]))
        else { throw TokenError(.malformed, "not a JWT (three base64url parts)") }
        guard let header = try? JSONDecoder().decode([String: String].self, from: Data(headerBytes)), header["alg"] == "HS256"
        else { throw TokenError(.malformed, "the JWT header must say alg HS256") }
        claims = claimBytes
        signingInput = parts[0] + "." + parts[1]
        self.signature = signature
    }

    /// Compares the signature with HMAC-SHA256 under `secret`, in constant time.
    package func checkSignature(secret: String) throws(TokenError) {
        let expected = HMACSHA256.mac(key: Array(secret.utf8), data: Array(signingInput.utf8))
        guard signature.count == expected.count, zip(signature, expected).reduce(0, { $0 | ($1.0 ^ $1.1) }) == 0 else {
            throw TokenError(.badSignature, "signature does not match this server's secret")
        }
    }

    /// `claims` as an HS256 JWT signed with `secret` (keys sorted, so the same claims sign the same).
    package static func sign(_ claims: some Encodable, secret: String) -> String {
        let header = Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8))
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let body = Base64URL.encode(Array((try? encoder.encode(claims)) ?? Data()))
        let input = header + "." + body
        return input + "." + Base64URL.encode(HMACSHA256.mac(key: Array(secret.utf8), data: Array(input.utf8)))
    }
}

/// Base64url without padding (RFC 4648 §5), as JWTs use it (ours and LiveKit's).
package enum Base64URL {
    package static func encode(_ bytes: [UInt8]) -> String {
        String(Data(bytes).base64EncodedString().compactMap { character -> Character? in
            switch character {
            case "+": "-"
            case "/": "_"
            case "=": nil
            default: character
            }
        })
    }

    package static func decode(_ text: String) -> [UInt8]? {
        guard text.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }) else { return nil }
        var base64 = String(text.map { $0 == "-" ? "+" : $0 == "_" ? "/" : $0 })
        while base64.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64).map(Array.init)
    }
}

/// HMAC-SHA256 from OpenSSL.
package enum HMACSHA256 {
    package static func mac(key: [UInt8], data: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 32
        _ = HMAC(EVP_sha256(), key, Int32(key.count), data, data.count, &out, &length)
        return out
    }
}

/// SHA-256 from OpenSSL (a webhook's body digest).
package enum SHA256Digest {
    package static func digest(_ data: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        _ = SHA256(data, data.count, &out)
        return out
    }
}
