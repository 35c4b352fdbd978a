import ArgumentParser
import LiveKitProtocol
import Signaling
import ServerCommandLine

#if canImport(Glibc)
import Glibc
#endif

/// Mints an access token and prints it as the last line.
struct TokenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token", abstract: "Mint an HS256 access token for a channel and uid (printed as the last line).")

    @Option(help: "The server's secret (or give --api-key and --api-secret for a LiveKit token).") var secret: String?
    @Option(name: .customLong("api-key"),
            help: "Mint a LiveKit token (docs/livekit.md) with this API key instead (without --secret: default $LIVEKIT_API_KEY).")
    var apiKeyOption: String?
    @Option(name: .customLong("api-secret"), help: "The secret of --api-key (default $LIVEKIT_API_SECRET).") var apiSecretOption: String?

    /// The LiveKit key pair: the flags, else (without --secret) the environment `lk` reads.
    var apiKey: String? { apiKeyOption ?? (secret == nil ? LiveKitEnvironment.apiKey : nil) }
    var apiSecret: String? { apiSecretOption ?? (secret == nil ? LiveKitEnvironment.apiSecret : nil) }
    @Option(help: "Channel name.") var channel: String
    @Option(help: "User id (a screen share uses <hostUid>_sub).") var uid: String
    @Option(help: "Seconds the token is valid.") var ttl: Int64 = 3600
    @Option(help: "Comma-separated grants: \(TokenGrants.names.joined(separator: ",")). Default: all.") var grants: String?
    @Option(name: .customLong("app-id"), help: "Issuer (app id).") var appID: String = "swift-rtc"

    func validate() throws {
        switch (secret, apiKey, apiSecret) {
        case (let secret?, nil, nil): guard !secret.isEmpty else { throw ValidationError("--secret must not be empty") }
        case (nil, let key?, let apiSecret?):
            guard !key.isEmpty, !apiSecret.isEmpty else { throw ValidationError("--api-key and --api-secret must not be empty") }
        default:
            throw ValidationError("give --secret (our token) or --api-key with --api-secret (a LiveKit token; or set LIVEKIT_API_KEY and LIVEKIT_API_SECRET)")
        }
        guard !channel.isEmpty, channel.utf8.count <= 128 else { throw ValidationError("--channel must be 1 to 128 bytes") }
        guard !uid.isEmpty, uid.utf8.count <= 128 else { throw ValidationError("--uid must be 1 to 128 bytes") }
        guard ttl > 0 else { throw ValidationError("--ttl must be positive") }
        if let grants, TokenGrants(list: grants) == nil {
            throw ValidationError("--grants: unknown grant in '\(grants)'; use \(TokenGrants.names.joined(separator: ","))")
        }
    }

    func run() throws {
        let now = Int64(time(nil))
        let grants = grants.flatMap(TokenGrants.init(list:)) ?? .all
        if let apiKey, let apiSecret {
            // LiveKit's grant: canPublishSources names what our grants allow.
            var sources: [String] = []
            if grants.publishVideo { sources.append("camera") }
            if grants.publishAudio { sources.append("microphone") }
            if grants.publishScreen { sources += ["screen_share", "screen_share_audio"] }
            let video = LiveKitVideoGrant(roomJoin: grants.join, room: channel, canPublish: !sources.isEmpty, canSubscribe: grants.subscribe,
                                          canPublishData: grants.publishData ?? true, canPublishSources: sources)
            print("LiveKit token for identity \(uid) in room \(channel), valid \(ttl) s:")
            print(LiveKitClaims(apiKey: apiKey, identity: uid, video: video, now: now, ttl: ttl).signed(secret: apiSecret))
            return
        }
        let secret = secret ?? ""
        let token = AccessToken(appID: appID, uid: uid, channel: channel, grants: grants, now: now, ttl: ttl)
        print("token for uid \(uid) in channel \(channel), valid \(ttl) s:")
        print(token.signed(secret: secret))
    }
}
