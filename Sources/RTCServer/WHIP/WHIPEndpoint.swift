import Foundation
import LiveKitProtocol
import NIOCore
import NIOHTTP1
import RTCConventions
import RTCTransport
import Signaling

/// An HTTP answer: status, headers, body.
struct HTTPReply: Sendable {
    var status: HTTPResponseStatus
    var contentType = "text/plain"
    var headers: [(String, String)] = []
    var body: String
    /// A binary body, sent instead of `body` when set.
    var bytes: [UInt8]?

    init(status: HTTPResponseStatus, contentType: String = "text/plain", headers: [(String, String)] = [], body: String = "", bytes: [UInt8]? = nil) {
        self.status = status
        self.contentType = contentType
        self.headers = headers
        self.body = body
        self.bytes = bytes
    }

    static func text(_ status: HTTPResponseStatus, _ body: String, headers: [(String, String)] = []) -> HTTPReply {
        HTTPReply(status: status, headers: headers, body: body.hasSuffix("\n") ? body : body + "\n")
    }
}

/// WHIP (RFC 9725): `POST /whip/<room>` with an SDP offer and a bearer token (ours, or a LiveKit
/// token) makes a publishing participant of the token's uid and answers `201 Created` with the SDP
/// answer, its `Location`, an `ETag` and the ICE servers as `Link` headers; `PATCH` takes trickled
/// candidates (`application/trickle-ice-sdpfrag`), `DELETE` ends it, `OPTIONS` and CORS let a page
/// use it. The session is an ordinary participant of the core (``WHIPSession``): others see its
/// tracks, a `<host>_sub` uid is a screen share under the usual rules.
final class WHIPEndpoint: Sendable {
    private let sfu: ShardedSFU
    private let sessions = WHIPSessions()
    private let secret: String
    private let liveKitKeys: [String: String]
    private let maxTokenLifetime: Int64
    private let screenShare: ScreenShareUID

    /// The largest offer taken (a WHIP offer is a few KiB).
    static let maxBodyBytes = 64 * 1024

    init(sfu: ShardedSFU) {
        self.sfu = sfu
        let configuration = sfu.configuration
        secret = configuration.secret
        liveKitKeys = configuration.liveKitKeys
        maxTokenLifetime = configuration.limits.maxTokenLifetimeSeconds
        screenShare = ScreenShareUID(suffix: configuration.screenShareSuffix)
    }

    /// Whether a request target is WHIP's.
    static func handles(_ uri: String) -> Bool {
        let segments = URLQuery.segments(of: uri)
        return (segments.first == "whip" || segments.first == "whep") && (2...3).contains(segments.count)
    }

    /// CORS on every WHIP answer, so a page of another origin can publish.
    static let cors: [(String, String)] = [
        ("Access-Control-Allow-Origin", "*"),
        ("Access-Control-Expose-Headers", "Location, ETag, Link, Accept-Patch"),
    ]

    func handle(method: HTTPMethod, uri: String, headers: HTTPHeaders, body: [UInt8], bodyTooLarge: Bool, loop: EventLoop) -> EventLoopFuture<HTTPReply> {
        let segments = URLQuery.segments(of: uri)
        let room = segments.count > 1 ? segments[1] : ""
        let resource = segments.count > 2 ? segments[2] : nil
        let reply: EventLoopFuture<HTTPReply>
        // WHEP: POST /whep/<room>[/<uid>] watches the room (or that uid); the session's URL takes DELETE and PATCH.
        if segments.first == "whep", method == .POST {
            reply = bodyTooLarge ? loop.makeSucceededFuture(.text(.payloadTooLarge, "an offer of at most \(Self.maxBodyBytes) bytes"))
                : watch(room: room, uid: resource, headers: headers, body: body, loop: loop)
            return reply.map { reply in
                var reply = reply
                reply.headers += Self.cors
                return reply
            }
        }
        switch (method, resource) {
        case (.OPTIONS, _):
            reply = loop.makeSucceededFuture(HTTPReply(status: .noContent, headers: [
                ("Access-Control-Allow-Methods", "POST, PATCH, DELETE, OPTIONS"),
                ("Access-Control-Allow-Headers", "Authorization, Content-Type, If-Match"),
                ("Access-Control-Max-Age", "86400"), ("Accept-Post", "application/sdp"),
            ], body: ""))
        case (.POST, nil):
            reply = bodyTooLarge ? loop.makeSucceededFuture(.text(.payloadTooLarge, "an offer of at most \(Self.maxBodyBytes) bytes"))
                : post(room: room, query: URLQuery.values(of: uri), headers: headers, body: body, loop: loop)
        case (.PATCH, let id?):
            reply = patch(room: room, id: id, headers: headers, body: body, loop: loop)
        case (.DELETE, let id?):
            reply = loop.makeSucceededFuture(delete(room: room, id: id))
        case (.POST, _?):
            reply = loop.makeSucceededFuture(.text(.methodNotAllowed, "a WHIP session takes PATCH and DELETE; POST a new offer to /whip/\(room)",
                                                   headers: [("Allow", "PATCH, DELETE, OPTIONS")]))
        case (_, nil):
            reply = loop.makeSucceededFuture(.text(.methodNotAllowed, "POST an SDP offer here", headers: [("Allow", "POST, OPTIONS")]))
        case (_, _?):
            reply = loop.makeSucceededFuture(.text(.methodNotAllowed, "a WHIP session takes PATCH and DELETE",
                                                   headers: [("Allow", "PATCH, DELETE, OPTIONS")]))
        }
        return reply.map { reply in
            var reply = reply
            reply.headers += Self.cors
            return reply
        }
    }

    /// What a WHIP or WHEP POST must bring, checked in RFC 9725's order: an SDP body, a room, a
    /// token that may join it, an offer that parses. The refusal is the answer to send.
    private func admit(room: String, headers: HTTPHeaders, body: [UInt8], usage: String)
        -> Result<(token: (ours: String, uid: String), offer: SessionDescription), Refused> {
        guard let type = headers.first(name: "Content-Type"), type.lowercased().hasPrefix("application/sdp") else {
            return .failure(Refused(.text(.unsupportedMediaType, "the offer must be Content-Type: application/sdp",
                                          headers: [("Accept-Post", "application/sdp")])))
        }
        guard !room.isEmpty, room.utf8.count <= 128 else { return .failure(Refused(.text(.notFound, "no room in the URL: POST to \(usage)"))) }
        let token: (ours: String, uid: String)
        switch resolveToken(headers.first(name: "Authorization"), room: room) {
        case .success(let resolved): token = resolved
        case .failure(let refusal): return .failure(Refused(.text(.unauthorized, refusal.reason, headers: [("WWW-Authenticate", "Bearer")])))
        }
        do {
            return .success((token, try SessionDescription(parsing: String(decoding: body, as: UTF8.self))))
        } catch {
            return .failure(Refused(.text(.badRequest, "the body is not an SDP offer: \(error)")))
        }
    }

    private struct Refused: Error {
        let reply: HTTPReply
        init(_ reply: HTTPReply) { self.reply = reply }
    }

    // MARK: POST: a new session

    private func post(room: String, query: [String: String], headers: HTTPHeaders, body: [UInt8], loop: EventLoop) -> EventLoopFuture<HTTPReply> {
        func refuse(_ status: HTTPResponseStatus, _ reason: String, _ extra: [(String, String)] = []) -> EventLoopFuture<HTTPReply> {
            loop.makeSucceededFuture(.text(status, reason, headers: extra))
        }
        let (token, offer): ((ours: String, uid: String), SessionDescription)
        switch admit(room: room, headers: headers, body: body, usage: "/whip/<room>") {
        case .success(let admitted): (token, offer) = admitted
        case .failure(let refused): return loop.makeSucceededFuture(refused.reply)
        }
        let sending = offer.media.filter { ["audio", "video"].contains($0.mediaLine.kind) && ["sendonly", "sendrecv"].contains($0.direction) }
        guard !sending.isEmpty else { return refuse(.badRequest, "the offer sends no audio or video (WHIP publishes)") }
        let screen = query["source"] == "screen" || screenShare.host(of: token.uid) != nil
        let session = WHIPSession(id: Self.newID(), room: room, uid: token.uid, iceUfrag: offer.media.first?.iceUfrag ?? offer.sessionAttribute("ice-ufrag"),
                                  offer: String(decoding: body, as: UTF8.self), sfu: sfu, registry: sessions)
        guard sessions.insert(session) else {
            return refuse(.conflict, "\(token.uid) already publishes in \(room) over WHIP: DELETE that session first")
        }
        let join = JoinRequest(token: token.ours, channel: room, uid: token.uid, role: .broadcaster, autoSubscribe: false,
                               sdk: SDKInfo(name: "whip", version: "rfc9725"), mediaBound: true)
        return session.request(.join(join), on: loop).flatMap { joined -> EventLoopFuture<(ServerEnvelope, [ICEServer])> in
            guard case .joined(let response) = joined.message else { return loop.makeFailedFuture(Self.error(in: joined)) }
            // Each sending section announced with its source, then the offer.
            let announced = sending.map { section -> EventLoopFuture<ServerEnvelope> in
                let kind: TrackKind = section.mediaLine.kind == "video" ? .video : .audio
                let source: TrackSource = kind == .video ? (screen ? .screen : .camera) : (screen ? .screenAudio : .microphone)
                return session.request(.publishTrack(PublishTrackRequest(kind: kind, source: source, mid: section.mid)), on: loop)
            }
            let answer = session.request(.offer(SessionDescriptionMessage(transport: .publisher, sdp: String(decoding: body, as: UTF8.self))), on: loop)
            return EventLoopFuture.whenAllSucceed(announced, on: loop).flatMap { replies in
                if let refused = replies.first(where: { if case .error = $0.message { true } else { false } }) {
                    return loop.makeFailedFuture(Self.error(in: refused))
                }
                return answer.map { ($0, response.iceServers) }
            }
        }.flatMapThrowing { reply -> HTTPReply in
            let (answer, iceServers) = reply
            guard case .answer(let description) = answer.message else { throw Self.error(in: answer) }
            return HTTPReply(status: .created, contentType: "application/sdp",
                             headers: [("Location", "/whip/\(Self.escaped(room))/\(session.id)"), ("ETag", session.etag),
                                       ("Accept-Patch", "application/trickle-ice-sdpfrag")] + iceServers.flatMap(Self.links),
                             body: description.sdp)
        }.flatMapErrorThrowing { error in
            // Refused: nothing of the session stays.
            session.post(.leave(reason: .clientRequest))
            session.close()
            let refusal = error as? SignalingError ?? SignalingError(.internalError, "\(error)")
            return .text(Self.status(for: refusal.code), refusal.reason)
        }
    }

    // MARK: WHEP: a viewer

    private func watch(room: String, uid: String?, headers: HTTPHeaders, body: [UInt8], loop: EventLoop) -> EventLoopFuture<HTTPReply> {
        func refuse(_ status: HTTPResponseStatus, _ reason: String, _ extra: [(String, String)] = []) -> EventLoopFuture<HTTPReply> {
            loop.makeSucceededFuture(.text(status, reason, headers: extra))
        }
        let (token, offer): ((ours: String, uid: String), SessionDescription)
        switch admit(room: room, headers: headers, body: body, usage: "/whep/<room>[/<uid>]") {
        case .success(let admitted): (token, offer) = admitted
        case .failure(let refused): return loop.makeSucceededFuture(refused.reply)
        }
        guard offer.media.contains(where: { ["audio", "video"].contains($0.mediaLine.kind) && ["recvonly", "sendrecv"].contains($0.direction) }) else {
            return refuse(.badRequest, "the offer receives no audio or video (WHEP watches)")
        }
        let session = WHIPSession(id: Self.newID(), room: room, uid: token.uid, iceUfrag: offer.media.first?.iceUfrag, sfu: sfu, registry: sessions)
        guard sessions.insert(session) else { return refuse(.conflict, "\(token.uid) already has a WHIP or WHEP session in \(room): DELETE it first") }
        let join = JoinRequest(token: token.ours, channel: room, uid: token.uid, role: .audience, autoSubscribe: uid == nil,
                               sdk: SDKInfo(name: "whep", version: "draft"), mediaBound: true)
        return session.request(.join(join), on: loop).flatMap { joined -> EventLoopFuture<(ServerEnvelope, [ICEServer])> in
            guard case .joined(let response) = joined.message else { return loop.makeFailedFuture(Self.error(in: joined)) }
            // One uid's media: pinned (its tracks now and later, even a screen share the filter hides).
            if let uid { session.post(.updateSubscription(SubscriptionUpdate(trackSids: [], subscribe: true, uids: [uid]))) }
            return session.subscriberOffer(on: loop, within: 5).map { ($0, response.iceServers) }
        }.flatMapThrowing { reply -> HTTPReply in
            let (coreOffer, iceServers) = reply
            guard case .offer(let description) = coreOffer.message else { throw Self.error(in: coreOffer) }
            let negotiation: WHEPNegotiation
            do {
                negotiation = try WHEPNegotiation(viewerOffer: offer, coreOffer: try SessionDescription(parsing: description.sdp))
            } catch let failure as WHEPNegotiation.Failure {
                throw SignalingError(.negotiationFailed, failure.reason)
            }
            session.post(.answer(SessionDescriptionMessage(transport: .subscriber, sdp: negotiation.coreAnswer)))
            return HTTPReply(status: .created, contentType: "application/sdp",
                             headers: [("Location", "/whep/\(Self.escaped(room))/\(session.id)"), ("ETag", session.etag)]
                                 + iceServers.flatMap(Self.links),
                             body: negotiation.viewerAnswer)
        }.flatMapErrorThrowing { error in
            session.post(.leave(reason: .clientRequest))
            session.close()
            let refusal = error as? SignalingError ?? SignalingError(.internalError, "\(error)")
            return .text(refusal.code == .trackNotFound ? .notFound : Self.status(for: refusal.code), refusal.reason)
        }
    }

    private struct Refusal: Error { let reason: String }

    /// The bearer token as one of ours for the room (a LiveKit token is checked with its API key's
    /// secret and re-signed with ours, as the LiveKit front end does) and the uid it names.
    private func resolveToken(_ authorization: String?, room: String) -> Result<(ours: String, uid: String), Refusal> {
        guard let authorization, authorization.lowercased().hasPrefix("bearer ") else {
            return .failure(Refusal(reason: "no Authorization: Bearer <token>"))
        }
        let token = String(authorization.dropFirst("bearer ".count)).trimmingCharacters(in: .whitespaces)
        let ours: Result<AccessToken, TokenError>
        do { ours = .success(try AccessToken.verifySignature(token, secret: secret)) } catch { ours = .failure(error) }
        switch ours {
        case .success(let claims): return .success((token, claims.uid))
        case .failure(let error) where liveKitKeys.isEmpty: return .failure(Refusal(reason: "invalid token: \(error.reason)"))
        case .failure:
            do {
                let claims = try LiveKitClaims.verifySignature(token, keys: liveKitKeys)
                guard claims.room == room else { return .failure(Refusal(reason: "invalid token: it is for room \(claims.room ?? "(none)")")) }
                guard claims.video?.roomJoin == true else { return .failure(Refusal(reason: "the token does not grant roomJoin")) }
                return .success((claims.accessToken(room: room).signed(secret: secret), claims.identity))
            } catch {
                return .failure(Refusal(reason: "invalid token: \(error.reason)"))
            }
        }
    }

    // MARK: PATCH, DELETE

    /// Trickled candidates (`204`; an ICE-lite server needs none), or an ICE restart (new
    /// credentials in the fragment): a new offer to the core with them, `200` with the server's
    /// new credentials and candidates, and a new ETag (RFC 9725 §4.3).
    private func patch(room: String, id: String, headers: HTTPHeaders, body: [UInt8], loop: EventLoop) -> EventLoopFuture<HTTPReply> {
        guard let session = sessions.session(id: id, room: room) else { return loop.makeSucceededFuture(.text(.notFound, "no session \(id) in \(room)")) }
        guard let type = headers.first(name: "Content-Type"), type.lowercased().hasPrefix("application/trickle-ice-sdpfrag") else {
            return loop.makeSucceededFuture(.text(.unsupportedMediaType, "a PATCH takes Content-Type: application/trickle-ice-sdpfrag",
                                                  headers: [("Accept-Patch", "application/trickle-ice-sdpfrag")]))
        }
        if let match = headers.first(name: "If-Match"), match != "*", match != session.etag {
            return loop.makeSucceededFuture(.text(.preconditionFailed, "the session's ETag is \(session.etag)"))
        }
        let fragment = String(decoding: body, as: UTF8.self).split(whereSeparator: \.isNewline).map { String($0) }
        func value(_ name: String) -> String? { fragment.first { $0.hasPrefix("a=\(name):") }.map { String($0.dropFirst(name.count + 3)) } }
        guard let ufrag = value("ice-ufrag"), let current = session.iceUfrag, ufrag != current else {
            return loop.makeSucceededFuture(HTTPReply(status: .noContent, headers: [("ETag", session.etag)], body: ""))
        }
        guard let pwd = value("ice-pwd"), let offer = session.offer else {
            return loop.makeSucceededFuture(.text(session.offer == nil ? .methodNotAllowed : .badRequest,
                                                  session.offer == nil ? "a WHEP session does not restart ICE: DELETE it and POST again"
                                                      : "an ICE restart needs a=ice-ufrag and a=ice-pwd"))
        }
        // The kept offer with the new credentials: the core restarts the publisher transport's ICE.
        let restarted = offer.split(separator: "\n", omittingEmptySubsequences: false).map { line -> String in
            if line.hasPrefix("a=ice-ufrag:") { return "a=ice-ufrag:" + ufrag + (line.hasSuffix("\r") ? "\r" : "") }
            if line.hasPrefix("a=ice-pwd:") { return "a=ice-pwd:" + pwd + (line.hasSuffix("\r") ? "\r" : "") }
            return String(line)
        }.joined(separator: "\n")
        return session.request(.offer(SessionDescriptionMessage(transport: .publisher, sdp: restarted)), on: loop).flatMapThrowing { answer in
            guard case .answer(let description) = answer.message else { throw Self.error(in: answer) }
            session.restarted(ufrag: ufrag, offer: restarted)
            let lines = description.sdp.split(whereSeparator: \.isNewline)
            var reply = lines.filter { $0.hasPrefix("a=ice-lite") }.map(String.init)
            if let first = lines.firstIndex(where: { $0.hasPrefix("m=") }) {
                let section = lines[first...]
                reply += section.filter { $0.hasPrefix("a=ice-ufrag:") || $0.hasPrefix("a=ice-pwd:") }.prefix(2).map(String.init)
                reply += section.filter { $0.hasPrefix("m=") || $0.hasPrefix("a=mid:") }.prefix(2).map(String.init)
                reply += section.filter { $0.hasPrefix("a=candidate:") || $0.hasPrefix("a=end-of-candidates") }.map(String.init)
            }
            return HTTPReply(status: .ok, contentType: "application/trickle-ice-sdpfrag", headers: [("ETag", session.etag)],
                             body: reply.joined(separator: "\r\n") + "\r\n")
        }.flatMapErrorThrowing { error in
            let refusal = error as? SignalingError ?? SignalingError(.internalError, "\(error)")
            return .text(Self.status(for: refusal.code), refusal.reason)
        }
    }

    private func delete(room: String, id: String) -> HTTPReply {
        guard let session = sessions.session(id: id, room: room) else { return .text(.notFound, "no WHIP session \(id) in \(room)") }
        session.post(.leave(reason: .clientRequest))
        session.close()
        return .text(.ok, "ended")
    }

    // MARK: Helpers

    static func newID() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<16).map { _ in String(UInt8.random(in: 0...255, using: &generator), radix: 16).leftPadded(to: 2) }.joined()
    }

    static func escaped(_ room: String) -> String {
        room.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed.subtracting(CharacterSet(charactersIn: "/?#"))) ?? room
    }

    /// RFC 9725 §4.6: one `Link` header per ICE server URL.
    static func links(_ server: ICEServer) -> [(String, String)] {
        server.urls.map { url in
            var value = "<\(url)>; rel=\"ice-server\""
            if let username = server.username, let credential = server.credential {
                value += "; username=\"\(username)\"; credential=\"\(credential)\"; credential-type=\"password\""
            }
            return ("Link", value)
        }
    }

    static func error(in envelope: ServerEnvelope) -> SignalingError {
        if case .error(let error) = envelope.message { return error }
        return SignalingError(.internalError, "unexpected reply \(envelope.message)")
    }

    /// Our error codes as the HTTP statuses RFC 9725 clients act on.
    static func status(for code: SignalingError.Code) -> HTTPResponseStatus {
        switch code {
        case .tokenMissing, .tokenInvalid, .tokenExpired, .tokenNotYetValid, .tokenWrongChannel, .tokenWrongUID: .unauthorized
        case .permissionDenied: .forbidden
        case .screenShareOwnerAbsent, .uidInUse: .conflict
        case .limitExceeded: .tooManyRequests
        case .negotiationFailed, .invalidUID, .malformedMessage: .badRequest
        case .shuttingDown: .serviceUnavailable
        default: .internalServerError
        }
    }
}

private extension String {
    func leftPadded(to width: Int) -> String { count >= width ? self : String(repeating: "0", count: width - count) + self }
}

private extension SessionDescription {
    func sessionAttribute(_ name: String) -> String? {
        sessionLines.compactMap { line in line.attribute.flatMap { $0.name == name ? $0.value : nil } }.first
    }
}
