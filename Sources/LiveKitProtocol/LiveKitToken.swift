#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Signaling

/// The `video` grant of a LiveKit access token (camelCase JSON keys, every one optional: LiveKit's
/// own SDKs leave out what they do not set). What the server reads is mapped onto ``TokenGrants``
/// by ``LiveKitClaims/grants``.
public struct LiveKitVideoGrant: Codable, Sendable, Hashable {
    public var roomJoin: Bool?
    public var room: String?
    public var roomCreate: Bool?
    public var roomList: Bool?
    public var roomAdmin: Bool?
    public var roomRecord: Bool?
    public var canPublish: Bool?
    public var canSubscribe: Bool?
    public var canPublishData: Bool?
    /// `camera`, `microphone`, `screen_share`, `screen_share_audio`; absent or empty: all.
    public var canPublishSources: [String]?
    public var canUpdateOwnMetadata: Bool?
    public var hidden: Bool?

    public init(roomJoin: Bool? = nil, room: String? = nil, roomCreate: Bool? = nil, roomList: Bool? = nil, roomAdmin: Bool? = nil,
                canPublish: Bool? = nil, canSubscribe: Bool? = nil, canPublishData: Bool? = nil, canPublishSources: [String]? = nil,
                hidden: Bool? = nil) {
        self.roomJoin = roomJoin
        self.room = room
        self.roomCreate = roomCreate
        self.roomList = roomList
        self.roomAdmin = roomAdmin
        self.canPublish = canPublish
        self.canSubscribe = canSubscribe
        self.canPublishData = canPublishData
        self.canPublishSources = canPublishSources
        self.hidden = hidden
    }

    /// The source names LiveKit tokens use.
    public static let sourceNames = ["camera", "microphone", "screen_share", "screen_share_audio"]
}

/// The claims of a LiveKit access token: an HS256 JWT whose issuer is an API key and whose subject
/// is the participant's identity.
public struct LiveKitClaims: Codable, Sendable, Hashable {
    /// The API key (`iss`): which secret signed it.
    public var apiKey: String
    /// The identity (`sub`).
    public var identity: String
    public var name: String?
    public var metadata: String?
    public var attributes: [String: String]?
    public var video: LiveKitVideoGrant?
    /// Seconds since 1970 (LiveKit's SDKs may write them as numbers with a fraction).
    public var notBefore: Double?
    public var expiresAt: Double?
    public var issuedAt: Double?

    enum CodingKeys: String, CodingKey {
        case apiKey = "iss", identity = "sub", name, metadata, attributes, video, notBefore = "nbf", expiresAt = "exp", issuedAt = "iat"
    }

    public init(apiKey: String, identity: String, video: LiveKitVideoGrant, now: Int64, ttl: Int64 = 3600, name: String? = nil) {
        self.apiKey = apiKey
        self.identity = identity
        self.video = video
        self.name = name
        notBefore = Double(now)
        issuedAt = Double(now)
        expiresAt = Double(now + ttl)
    }

    /// The signed JWT.
    public func signed(secret: String) -> String { JWT.sign(self, secret: secret) }

    /// Checks the form, finds the secret of the token's API key in `keys`, checks the signature
    /// and returns the claims (the time window is the server's to check, as for its own tokens).
    public static func verifySignature(_ token: String, keys: [String: String]) throws(TokenError) -> LiveKitClaims {
        let jwt = try JWT(token)
        guard let claims = try? JSONDecoder().decode(LiveKitClaims.self, from: Data(jwt.claims)) else {
            throw TokenError(.malformed, "the JWT claims are not a LiveKit access token (iss and sub are required)")
        }
        guard let secret = keys[claims.apiKey] else { throw TokenError(.badSignature, "unknown API key \(claims.apiKey)") }
        try jwt.checkSignature(secret: secret)
        return claims
    }

    /// The claims as a client reads them (identity, room, expiry), without the signature, which
    /// only the server that holds the secret can check.
    public static func unverified(_ token: String) throws(TokenError) -> LiveKitClaims {
        let jwt = try JWT(token)
        guard let claims = try? JSONDecoder().decode(LiveKitClaims.self, from: Data(jwt.claims)) else {
            throw TokenError(.malformed, "the JWT claims are not a LiveKit access token (iss and sub are required)")
        }
        return claims
    }

    /// The room the token is for, when it names one.
    public var room: String? { video?.room }

    /// The grants in our terms. LiveKit's defaults hold for what the token leaves out: publish,
    /// subscribe allowed, every source; data as our tokens say when left out (a screen share
    /// sends none unless granted); `roomJoin` must be said.
    public var grants: TokenGrants {
        let video = video ?? LiveKitVideoGrant()
        let publish = video.canPublish ?? true
        let sources = Set((video.canPublishSources ?? []).map { $0.lowercased() })
        func allows(_ source: String) -> Bool { publish && (sources.isEmpty || sources.contains(source)) }
        return TokenGrants(join: video.roomJoin ?? false, publishAudio: allows("microphone"), publishVideo: allows("camera"),
                           publishScreen: allows("screen_share") || allows("screen_share_audio"),
                           subscribe: video.canSubscribe ?? true, publishData: video.canPublishData,
                           updateMetadata: video.canUpdateOwnMetadata)
    }

    /// The same holder as one of our tokens (for `room`), with the same time window, so the rest
    /// of the server checks it like any other: the signaling front end signs it with the server's
    /// own secret once the LiveKit signature has been checked.
    public func accessToken(room: String) -> AccessToken {
        let now = Int64(issuedAt ?? notBefore ?? 0)
        var token = AccessToken(appID: apiKey, uid: identity, channel: room, grants: grants, now: now)
        token.issuedAt = Int64((issuedAt ?? notBefore ?? 0).rounded(.down))
        token.notBefore = Int64((notBefore ?? 0).rounded(.down))
        token.expiresAt = Int64((expiresAt ?? 0).rounded(.down))
        token.name = name
        token.metadata = metadata
        token.attributes = attributes
        return token
    }
}
