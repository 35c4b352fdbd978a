import Foundation
import LiveKitProtocol
import Logging
@testable import RTCServer
import Signaling
import Testing

/// The LiveKit front end's own part: admission at the upgrade and the token refresh it does
/// itself (docs/livekit.md); the translation is LiveKitProtocolTests'.
@Suite("LiveKit front end: admission and token refresh")
struct LiveKitDialectTests {
    static let keys = ["APIkey": "api-secret-0123456789"]
    static let now = Int64(Date().timeIntervalSince1970)

    static func token(ttl: Int64 = 600, video: LiveKitVideoGrant = LiveKitVideoGrant(roomJoin: true, room: "r"), key: String = "APIkey",
                      secret: String = "api-secret-0123456789") -> String {
        LiveKitClaims(apiKey: key, identity: "alice", video: video, now: now - 10, ttl: ttl).signed(secret: secret)
    }

    @Test("admission: the refusals LiveKit's SDKs show, with their status", arguments: [
        (Self.token(secret: "other-secret-01234"), 401, "signature does not match"),
        (Self.token(key: "nobody"), 401, "unknown API key"),
        (Self.token(ttl: 5), 401, "token expired"),
        (Self.token(video: LiveKitVideoGrant(room: "r")), 401, "does not grant roomJoin"),
        (Self.token(video: LiveKitVideoGrant(roomJoin: true)), 401, "names no room"),
        (Self.token(ttl: 30 * 86400), 401, "this server takes tokens of at most"),
        ("garbage", 401, "not a JWT"),
    ])
    func refused(_ token: String, _ status: Int, _ reason: String) {
        let result = LiveKitAdmission.check(uri: "/rtc?protocol=16", authorization: "Bearer " + token, keys: Self.keys, maxLifetime: 86400,
                                            now: Self.now)
        guard case .failure(let refusal) = result else { Issue.record("admitted"); return }
        #expect(refusal.status == status && refusal.reason.contains(reason), "\(refusal)")
    }

    @Test("admission with no keys configured, or a malformed query, says so")
    func noKeys() {
        guard case .failure(let none) = LiveKitAdmission.check(uri: "/rtc?access_token=\(Self.token())", authorization: nil, keys: [:],
                                                               maxLifetime: 86400, now: Self.now) else { Issue.record("admitted"); return }
        #expect(none.reason.contains("no LiveKit API keys"))
        guard case .failure(let bad) = LiveKitAdmission.check(uri: "/rtc?access_token=\(Self.token())&protocol=x", authorization: nil,
                                                              keys: Self.keys, maxLifetime: 86400, now: Self.now) else { Issue.record("admitted"); return }
        #expect(bad.status == 400)
    }

    @Test("the join at the upgrade carries a token of ours for the same holder; before expiry both tokens are refreshed with the same lifetime")
    func refresh() throws {
        guard case .success(let admission) = LiveKitAdmission.check(uri: "/rtc?protocol=16", authorization: "Bearer " + Self.token(), keys: Self.keys,
                                                                    maxLifetime: 86400, now: Self.now) else { Issue.record("refused"); return }
        let later = Self.now + 590
        let dialect = LiveKitDialect(admission: admission, secret: "our-secret", apiSecret: Self.keys["APIkey"]!, logger: Logger(label: "test"),
                                     clock: { later })
        let join = try ClientEnvelope.decode(try #require(dialect.opening().first))
        guard case .join(let request) = join.message else { Issue.record("\(join)"); return }
        let ours = try AccessToken.verify(request.token, secret: "our-secret", now: Self.now)
        #expect(ours.uid == "alice" && ours.channel == "r" && ours.expiresAt == Self.now + 590)

        let out = dialect.outbound(ServerEnvelope(.tokenWillExpire(expiresAt: Self.now + 590)))
        let refresh = try ClientEnvelope.decode(try #require(out.toCore.first))
        guard case .refreshToken(let renewed) = refresh.message else { Issue.record("\(refresh)"); return }
        let claims = try AccessToken.verify(renewed, secret: "our-secret", now: later)
        #expect(claims.expiresAt == later + 600 && claims.uid == "alice")
        let response = try LKSignalResponse(serializedBytes: try #require(out.toClient.first))
        guard case .refreshToken(let liveKitToken) = response.message else { Issue.record("\(response)"); return }
        let refreshed = try LiveKitClaims.verifySignature(liveKitToken, keys: Self.keys)
        #expect(refreshed.identity == "alice" && refreshed.room == "r" && refreshed.expiresAt == Double(later + 600))
    }
}
