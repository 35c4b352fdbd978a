import ArgumentParser
import Signaling
import ServerCommandLine

#if canImport(Glibc)
import Glibc
#endif

/// Mints an access token and prints it as the last line.
struct TokenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token", abstract: "Mint an HS256 access token for a channel and uid (printed as the last line).")

    @Option(help: "The server's secret.") var secret: String
    @Option(help: "Channel name.") var channel: String
    @Option(help: "User id (a screen share uses <hostUid>_sub).") var uid: String
    @Option(help: "Seconds the token is valid.") var ttl: Int64 = 3600
    @Option(help: "Comma-separated grants: \(TokenGrants.names.joined(separator: ",")). Default: all.") var grants: String?
    @Option(name: .customLong("app-id"), help: "Issuer (app id).") var appID: String = "swift-rtc"

    func validate() throws {
        guard !secret.isEmpty else { throw ValidationError("--secret must not be empty") }
        guard !channel.isEmpty, channel.utf8.count <= 128 else { throw ValidationError("--channel must be 1 to 128 bytes") }
        guard !uid.isEmpty, uid.utf8.count <= 128 else { throw ValidationError("--uid must be 1 to 128 bytes") }
        guard ttl > 0 else { throw ValidationError("--ttl must be positive") }
        if let grants, TokenGrants(list: grants) == nil {
            throw ValidationError("--grants: unknown grant in '\(grants)'; use \(TokenGrants.names.joined(separator: ","))")
        }
    }

    func run() throws {
        let now = Int64(time(nil))
        let token = AccessToken(appID: appID, uid: uid, channel: channel, grants: grants.flatMap(TokenGrants.init(list:)) ?? .all,
                                now: now, ttl: ttl)
        print("token for uid \(uid) in channel \(channel), valid \(ttl) s:")
        print(token.signed(secret: secret))
    }
}
