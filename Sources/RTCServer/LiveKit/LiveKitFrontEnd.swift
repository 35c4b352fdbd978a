import Foundation
import LiveKitProtocol
import Logging
import NIOHTTP1
import Signaling

/// Which signaling a request to the signaling port asks for.
enum SignalPath: Equatable {
    /// `/rtc` without a token in the URL: our JSON signaling (the token comes in the join).
    case ours
    /// `/rtc` with `access_token` (or a bearer token, or `protocol=`): LiveKit's.
    case liveKit
    /// Anything else: plain HTTP.
    case other

    init(_ head: HTTPRequestHead) {
        let path = head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? head.uri
        guard path == "/rtc" || path == "/rtc/" else {
            self = .other
            return
        }
        self = LiveKitConnectRequest.isLiveKit(uri: head.uri, authorization: head.headers.first(name: "Authorization")) ? .liveKit : .ours
    }
}

/// LiveKit's signal protocol on the signaling port: admission of its tokens (by the configured
/// API keys) and the dialect of its connections.
struct LiveKitFrontEnd: Sendable {
    let keys: [String: String]
    let secret: String
    let maxTokenLifetime: Int64
    let transcriptDirectory: String?

    init(configuration: ServerConfiguration) {
        transcriptDirectory = configuration.liveKitTranscriptDirectory
        keys = configuration.liveKitKeys
        secret = configuration.secret
        maxTokenLifetime = configuration.limits.maxTokenLifetimeSeconds
    }

    var isEnabled: Bool { !keys.isEmpty }

    func admit(_ head: HTTPRequestHead) -> Result<LiveKitAdmission, LiveKitAdmission.Refusal> {
        LiveKitAdmission.check(uri: head.uri, authorization: head.headers.first(name: "Authorization"), keys: keys,
                               maxLifetime: maxTokenLifetime, now: Int64(Date().timeIntervalSince1970))
    }

    func dialect(for head: HTTPRequestHead, logger: Logger) throws -> LiveKitDialect {
        let admission = try admit(head).get()
        return LiveKitDialect(admission: admission, secret: secret, apiSecret: keys[admission.claims.apiKey] ?? "", logger: logger,
                              transcriptDirectory: transcriptDirectory)
    }
}
