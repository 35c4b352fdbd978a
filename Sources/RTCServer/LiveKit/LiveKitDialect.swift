import Foundation
import LiveKitProtocol
import Logging
import Signaling

/// Who may open a LiveKit signal connection: the token (signed by a configured API key's secret,
/// inside its time window, granting roomJoin and naming a room), checked at the HTTP upgrade, so a
/// refused client gets an HTTP status and the reason as LiveKit's server gives them (the SDKs show
/// the body of `/rtc/validate`).
struct LiveKitAdmission: Sendable {
    let connect: LiveKitConnectRequest
    let claims: LiveKitClaims
    let room: String

    struct Refusal: Error, Sendable {
        /// 400 for a malformed request, 401 for a token refused.
        let status: Int
        let reason: String
    }

    static func check(uri: String, authorization: String?, keys: [String: String], maxLifetime: Int64, now: Int64)
        -> Result<LiveKitAdmission, Refusal> {
        guard !keys.isEmpty else { return .failure(Refusal(status: 401, reason: "this server has no LiveKit API keys (--api-key, --api-secret)")) }
        let connect: LiveKitConnectRequest
        do { connect = try LiveKitConnectRequest(uri: uri, authorization: authorization) } catch {
            return .failure(Refusal(status: error.reason.hasPrefix("no access_token") ? 401 : 400, reason: error.reason))
        }
        let claims: LiveKitClaims
        do { claims = try LiveKitClaims.verifySignature(connect.token, keys: keys) } catch {
            return .failure(Refusal(status: 401, reason: "invalid token: \(error.reason)"))
        }
        let token = claims.accessToken(room: claims.room ?? "")
        do { try token.checkTime(now: now) } catch { return .failure(Refusal(status: 401, reason: "invalid token: \(error.reason)")) }
        let lifetime = token.expiresAt - max(token.issuedAt, token.notBefore)
        guard lifetime <= maxLifetime else {
            return .failure(Refusal(status: 401, reason: "invalid token: it lives \(lifetime) s; this server takes tokens of at most \(maxLifetime) s"))
        }
        guard let room = claims.room, !room.isEmpty else { return .failure(Refusal(status: 401, reason: "invalid token: it names no room")) }
        guard claims.video?.roomJoin == true else { return .failure(Refusal(status: 401, reason: "permissions denied: the token does not grant roomJoin")) }
        return .success(LiveKitAdmission(connect: connect, claims: claims, room: room))
    }
}

/// A LiveKit client's signal connection: binary frames of `SignalRequest` in, `SignalResponse`
/// out, through a ``LiveKitTranslator``. The join is made at once, with a token of ours for the
/// same holder signed with the server's secret (so a cluster's nodes check it as any other); the
/// server refreshes both tokens before they expire, as LiveKit's does.
final class LiveKitDialect: SignalingDialect {
    private var translator: LiveKitTranslator
    private let secret: String
    private let apiSecret: String
    private let logger: Logger
    private let clock: @Sendable () -> Int64
    /// The current token's lifetime, kept for each refresh.
    private let ttl: Int64
    /// Where this connection's messages are written as a conformance transcript (`--livekit-transcript`).
    private let transcript: FileHandle?

    init(admission: LiveKitAdmission, secret: String, apiSecret: String, logger: Logger, transcriptDirectory: String? = nil,
         clock: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }) {
        translator = LiveKitTranslator(connect: admission.connect, claims: admission.claims, room: admission.room)
        self.secret = secret
        self.apiSecret = apiSecret
        self.logger = logger
        self.clock = clock
        let token = admission.claims.accessToken(room: admission.room)
        ttl = max(60, token.expiresAt - max(token.issuedAt, token.notBefore))
        transcript = transcriptDirectory.flatMap { directory in
            let path = "\(directory)/\(admission.claims.identity.filter { $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" })-\(UInt32.random(in: 0...UInt32.max)).jsonl"
            guard FileManager.default.createFile(atPath: path, contents: nil) else { return nil }
            return FileHandle(forWritingAtPath: path)
        }
    }

    deinit { try? transcript?.close() }

    private func record(_ entry: LiveKitTranscriptEntry?) {
        guard let transcript, let entry else { return }
        transcript.write(Data((entry.line + "\n").utf8))
    }

    private var nowMs: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    func opening() -> [[UInt8]] {
        let token = translator.claims.accessToken(room: translator.room).signed(secret: secret)
        return [translator.start(token: token).encoded()]
    }

    func inbound(_ payload: [UInt8], binary: Bool) -> DialectOutput {
        guard let request = try? LKSignalRequest(serializedBytes: payload) else {
            logger.debug("livekit: undecodable signal request", metadata: ["bytes": "\(payload.count)"])
            return DialectOutput(close: "a signal message that is not a LiveKit SignalRequest (\(payload.count) bytes)",
                                 closeCode: .dataInconsistentWithMessage)
        }
        if let message = request.message { logger.trace("livekit <- \(Self.name(message))") }
        record(LiveKitTranscriptEntry(request: request))
        if case .offer(let offer) = request.message { logger.trace("livekit publisher offer", metadata: ["sdp": "\(offer.sdp)"]) }
        if case .addTrack(let add) = request.message { logger.trace("livekit add track", metadata: ["request": "\(add)"]) }
        return output(translator.translate(request, nowMs: nowMs))
    }

    /// A message's case name, for the trace log.
    private static func name(_ value: some Any) -> String { String(describing: value).prefix { $0 != "(" }.description }

    func outbound(_ envelope: ServerEnvelope) -> DialectOutput {
        if case .tokenWillExpire = envelope.message { return refresh() }
        return output(translator.translate(envelope, nowMs: nowMs))
    }

    private func output(_ out: LiveKitTranslator.Output) -> DialectOutput {
        for response in out.toClient {
            if case .requestResponse(let refused) = response.message, refused.reason != .ok {
                logger.notice("livekit request refused", metadata: ["identity": "\(translator.claims.identity)", "reason": "\(refused.message)"])
            }
        }
        for response in out.toClient {
            record(LiveKitTranscriptEntry(response: response))
            if let message = response.message { logger.trace("livekit -> \(Self.name(message))") }
            if case .offer(let offer) = response.message { logger.trace("livekit subscriber offer", metadata: ["sdp": "\(offer.sdp)"]) }
            if case .answer(let answer) = response.message { logger.trace("livekit publisher answer", metadata: ["sdp": "\(answer.sdp)"]) }
        }
        return DialectOutput(toCore: out.toCore.map { $0.encoded() }, toClient: out.toClient.compactMap { try? $0.serializedBytes() },
                      binary: true, close: out.close)
    }

    /// New tokens for the same holder: ours to the core, LiveKit's to the client (for its reconnects).
    private func refresh() -> DialectOutput {
        let now = clock()
        var claims = translator.claims
        claims.notBefore = Double(now)
        claims.issuedAt = Double(now)
        claims.expiresAt = Double(now + ttl)
        let ours = claims.accessToken(room: translator.room).signed(secret: secret)
        let response = LKSignalResponse.with { $0.refreshToken = claims.signed(secret: apiSecret) }
        return DialectOutput(toCore: [ClientEnvelope(.refreshToken(token: ours)).encoded()],
                             toClient: [(try? response.serializedBytes()) ?? []], binary: true)
    }
}
