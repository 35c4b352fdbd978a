import Foundation
import LiveKitProtocol
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import TLSStream
import Signaling
import SwiftProtobuf

/// A Twirp error (https://twitchtv.github.io/twirp/docs/spec_v7.html): its code, HTTP status and message.
struct TwirpError: Error, Equatable {
    var code: String
    var message: String

    static func invalid(_ message: String) -> TwirpError { TwirpError(code: "invalid_argument", message: message) }
    static func malformed(_ message: String) -> TwirpError { TwirpError(code: "malformed", message: message) }
    static func notFound(_ message: String) -> TwirpError { TwirpError(code: "not_found", message: message) }
    static func unauthenticated(_ message: String) -> TwirpError { TwirpError(code: "unauthenticated", message: message) }
    static func denied(_ message: String) -> TwirpError { TwirpError(code: "permission_denied", message: message) }

    var status: HTTPResponseStatus {
        switch code {
        case "invalid_argument", "malformed", "out_of_range", "failed_precondition": .badRequest
        case "not_found", "bad_route": .notFound
        case "unauthenticated": .unauthorized
        case "permission_denied": .forbidden
        case "resource_exhausted": .tooManyRequests
        case "already_exists", "aborted": .conflict
        case "canceled", "deadline_exceeded": .requestTimeout
        case "unimplemented": .notImplemented
        case "unavailable": .serviceUnavailable
        default: .internalServerError
        }
    }

    /// The body: `{"code": …, "msg": …}`.
    var reply: HTTPReply {
        let body = (try? JSONSerialization.data(withJSONObject: ["code": code, "msg": message], options: [.sortedKeys]))
            .flatMap { String(data: $0, encoding: .utf8) } ?? #"{"code":"internal","msg":"error"}"#
        return HTTPReply(status: status, contentType: "application/json", body: body)
    }
}

/// LiveKit's RoomService over Twirp: `POST /twirp/livekit.RoomService/<Method>` with a protobuf
/// (`application/protobuf`) or JSON (`application/json`) body and a LiveKit token carrying admin
/// grants — what LiveKit's server SDKs and its `lk` CLI call (docs/server-api.md). Each method is
/// a call on the core (``ShardedSFU``'s API); the answer is in the request's encoding, an error
/// is Twirp's JSON.
final class RoomServiceAPI: Sendable {
    static let prefix = "/twirp/livekit.RoomService/"
    /// The largest request body taken (a 1 MB metadata is refused whole, with a clear error).
    static let maxBodyBytes = 64 * 1024

    private let sfu: ShardedSFU
    /// A cluster's node (when the server is one): a call about a room on another node is passed there.
    private let cluster: ClusterHandle?
    private let tls: TLSContext?
    private let keys: [String: String]
    private let limits: ServerLimits
    /// Calls per API key, for ``ServerLimits/apiCallsPerSecond``.
    private let buckets = NIOLockedValueBox([String: TokenBucket]())

    /// Marks a call one node passes to another: answered there, never passed on again.
    static let forwardedHeader = "X-RTC-Forwarded"

    init(sfu: ShardedSFU, cluster: ClusterHandle? = nil) {
        self.sfu = sfu
        self.cluster = cluster
        tls = try? TLSContext.client()
        keys = sfu.configuration.liveKitKeys
        limits = sfu.configuration.limits
    }

    /// Every Twirp path: RoomService's methods, and any other service, answered with Twirp's own
    /// `bad_route` (an SDK then reports the reason rather than a bare `unknown`).
    static func handles(_ uri: String) -> Bool { uri.hasPrefix("/twirp/") }

    /// Whether a request's body is JSON (true) or protobuf (false) by its Content-Type as Twirp
    /// reads it (the media type before any `;` parameters, case-insensitive); nil for anything else
    /// or none, which Twirp refuses with `bad_route` (before, a `text/plain` body or one without a
    /// type was read as protobuf).
    static func isJSON(contentType: String?) -> Bool? {
        guard let contentType else { return nil }
        let media = contentType.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false).first
            .map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
        switch media {
        case "application/json": return true
        case "application/protobuf": return false
        default: return nil
        }
    }

    func handle(method: HTTPMethod, uri: String, headers: HTTPHeaders, body: [UInt8], bodyTooLarge: Bool, loop: EventLoop)
        -> EventLoopFuture<HTTPReply> {
        func fail(_ error: TwirpError) -> EventLoopFuture<HTTPReply> { loop.makeSucceededFuture(error.reply) }
        let path = String(uri.prefix { $0 != "?" })
        guard path.hasPrefix(Self.prefix) else {
            return fail(TwirpError(code: "bad_route", message: "no handler for path \(path): this server serves livekit.RoomService only"))
        }
        let name = String(path.dropFirst(Self.prefix.count))
        guard method == .POST else { return fail(TwirpError(code: "bad_route", message: "Twirp calls are POST requests")) }
        let contentType = headers.first(name: "Content-Type")
        guard let json = Self.isJSON(contentType: contentType) else {
            return fail(TwirpError(code: "bad_route", message: contentType.map { "unexpected Content-Type: \($0) (application/json or application/protobuf)" }
                                                                    ?? "no Content-Type: application/json or application/protobuf"))
        }
        guard !bodyTooLarge else { return fail(.invalid("the request body is larger than \(Self.maxBodyBytes) bytes")) }
        let call: Call
        do { call = Call(request: try RoomServiceRequest(method: name, body: body, json: json)) } catch {
            return fail(TwirpError(code: error.code, message: error.message))
        }
        let claims: LiveKitClaims
        switch authorize(headers.first(name: "Authorization"), for: call.request.grant) {
        case .success(let found): claims = found
        case .failure(let error): return fail(error)
        }
        let allowed = buckets.withLockedValue { buckets in
            var bucket = buckets[claims.apiKey] ?? TokenBucket(ratePerSecond: limits.apiCallsPerSecond, burst: limits.apiCallBurst)
            defer { buckets[claims.apiKey] = bucket }
            return bucket.take(1, nowNs: NIODeadline.now().uptimeNanoseconds)
        }
        guard allowed else {
            return fail(TwirpError(code: "resource_exhausted", message: "more than \(Int(limits.apiCallsPerSecond)) calls a second with API key \(claims.apiKey)"))
        }
        let forwarded = headers.first(name: Self.forwardedHeader) != nil
        if !forwarded, let node = cluster?.node as? any RoomLocator {
            switch call.request {
            case .listRooms:
                return listRoomsAcrossNodes(node, request: call, body: body, headers: headers, json: json, loop: loop)
            case .createRoom(let request):
                // A room that lives elsewhere is answered there; one made here is kept here, so a
                // join arriving at another node or process comes to its settings.
                guard !sfu.serves(request.name) else { break }
                let promise = loop.makePromise(of: HTTPReply.self)
                promise.completeWithTask {
                    if let owner = await node.remoteOwner(of: request.name) {
                        return try await self.pass(method: "POST", path: Self.prefix + name, to: owner.signalingURL, body: body, headers: headers, loop: loop)
                    }
                    let reply = try await self.answer(call, json: json, loop: loop).get()
                    if reply.status == .ok { await node.keep(request.name) }
                    return reply
                }
                return promise.futureResult
            default:
                if case .admin(let room) = call.request.grant, !sfu.serves(room) {
                    return forwardIfElsewhere(node, room: room, method: name, body: body, headers: headers, loop: loop) {
                        self.answer(call, json: json, loop: loop)
                    }
                }
                if case .deleteRoom(let request) = call.request, !sfu.serves(request.room) {
                    return forwardIfElsewhere(node, room: request.room, method: name, body: body, headers: headers, loop: loop) {
                        self.answer(call, json: json, loop: loop)
                    }
                }
            }
        }
        return answer(call, json: json, loop: loop)
    }

    /// Beside LiveKit's API, our own: `GET /debug/forwarded?room=R&identity=U` answers the RTP
    /// packets this server forwarded to participant U of room R, by sender and kind, as JSON
    /// (`{"room", "identity", "forwarded": [{"from", "kind", "packets"}]}`), for a token of the
    /// same API keys granting roomAdmin for R. The server-side proof that a filtered stream (a
    /// host's own screen share) never reached a participant: what `rtc-cli demo` prints.
    static let forwardedPath = "/debug/forwarded"

    static func handlesForwarded(_ uri: String) -> Bool {
        uri == forwardedPath || uri.hasPrefix(forwardedPath + "?")
    }

    func forwarded(method: HTTPMethod, uri: String, headers: HTTPHeaders, loop: EventLoop) -> EventLoopFuture<HTTPReply> {
        func fail(_ error: TwirpError) -> EventLoopFuture<HTTPReply> { loop.makeSucceededFuture(error.reply) }
        guard method == .GET else { return fail(TwirpError(code: "bad_route", message: "\(Self.forwardedPath) is a GET request")) }
        let query = URLComponents(string: uri)?.queryItems ?? []
        func value(_ name: String) -> String? { query.first { $0.name == name }?.value.flatMap { $0.isEmpty ? nil : $0 } }
        guard let room = value("room"), let identity = value("identity") else {
            return fail(.invalid("\(Self.forwardedPath) needs ?room=ROOM&identity=IDENTITY"))
        }
        if case .failure(let error) = authorize(headers.first(name: "Authorization"), for: .admin(room: room)) { return fail(error) }
        guard sfu.shard(of: room) != nil else {
            // A room on another node or media process answers there.
            guard headers.first(name: Self.forwardedHeader) == nil, let node = cluster?.node as? any RoomLocator else {
                return fail(.notFound("no room '\(room)' on this server"))
            }
            let promise = loop.makePromise(of: HTTPReply.self)
            promise.completeWithTask {
                guard let owner = await node.remoteOwner(of: room) else { return TwirpError.notFound("no room '\(room)' on this server").reply }
                return try await self.pass(method: "GET", path: uri, to: owner.signalingURL, body: [], headers: headers, loop: loop, json: true)
            }
            return promise.futureResult
        }
        let sfu = self.sfu
        return sfu.participants(in: room).flatMap { participants -> EventLoopFuture<[ForwardedStream: Int]?> in
            guard participants.contains(where: { $0.uid == identity }) else { return loop.makeSucceededFuture(nil) }
            return sfu.packetsForwarded(to: identity, in: room).map { $0 }
        }.hop(to: loop).map { counts -> HTTPReply in
            guard let counts else { return TwirpError.notFound("no participant '\(identity)' in room '\(room)'").reply }
            let rows: [[String: Any]] = counts.sorted { ($0.key.uid, $0.key.kind.rawValue) < ($1.key.uid, $1.key.kind.rawValue) }.map {
                ["from": $0.key.uid, "kind": $0.key.kind.rawValue, "packets": $0.value]
            }
            let object: [String: Any] = ["room": room, "identity": identity, "forwarded": rows]
            guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), let body = String(data: data, encoding: .utf8)
            else { return TwirpError(code: "internal", message: "the answer could not be encoded").reply }
            return HTTPReply(status: .ok, contentType: "application/json", body: body)
        }
    }

    /// Runs the call here and encodes its answer (or its error).
    private func answer(_ call: Call, json: Bool, loop: EventLoop) -> EventLoopFuture<HTTPReply> {
        call.run(on: sfu).hop(to: loop).map { message in
            do {
                if json {
                    return HTTPReply(status: .ok, contentType: "application/json", body: try message.jsonString())
                }
                return HTTPReply(status: .ok, contentType: "application/protobuf", bytes: try message.serializedBytes())
            } catch {
                return TwirpError(code: "internal", message: "the answer could not be encoded").reply
            }
        }.flatMapErrorThrowing { error in
            switch error {
            case AdminError.notFound(let message): return TwirpError.notFound(message).reply
            case AdminError.invalid(let message): return TwirpError.invalid(message).reply
            case let error as TwirpError: return error.reply
            default: return TwirpError(code: "internal", message: "\(error)").reply
            }
        }
    }

    /// A room that lives on another node of the cluster: the call goes there whole (its token and
    /// body), and its answer comes back as it is; a room that is nowhere else is answered here.
    private func forwardIfElsewhere(_ node: any RoomLocator, room: String, method: String, body: [UInt8], headers: HTTPHeaders, loop: EventLoop,
                                    here: @escaping @Sendable () -> EventLoopFuture<HTTPReply>) -> EventLoopFuture<HTTPReply> {
        let promise = loop.makePromise(of: HTTPReply.self)
        promise.completeWithTask {
            guard let owner = await node.remoteOwner(of: room) else { return try await here().get() }
            return try await self.pass(method: "POST", path: Self.prefix + method, to: owner.signalingURL, body: body, headers: headers, loop: loop)
        }
        return promise.futureResult
    }

    /// The call passed whole to the server at `signalingURL` (marked as passed on), and its answer
    /// as it came: JSON for an error, for a JSON call, or when `json`.
    private func pass(method: String, path: String, to signalingURL: String, body: [UInt8], headers: HTTPHeaders, loop: EventLoop,
                      json: Bool = false) async throws -> HTTPReply {
        let target = try HTTPPost.target(server: signalingURL, path: path)
        var passed: [(String, String)] = [(Self.forwardedHeader, "1")]
        for name in ["Authorization", "Content-Type"] { if let value = headers.first(name: name) { passed.append((name, value)) } }
        let response = try await HTTPPost.send(target, method: method == "GET" ? .GET : .POST, headers: passed, body: body, on: loop, tls: tls,
                                               timeout: .seconds(10)).get()
        let isJSON = json || response.status != 200 || Self.isJSON(contentType: headers.first(name: "Content-Type")) == true
        return HTTPReply(status: HTTPResponseStatus(statusCode: response.status), contentType: isJSON ? "application/json" : "application/protobuf",
                         bytes: response.body)
    }

    /// ListRooms over the cluster: this node's rooms and every other live node's, each asked once.
    private func listRoomsAcrossNodes(_ node: any RoomLocator, request call: Call, body: [UInt8], headers: HTTPHeaders, json: Bool,
                                      loop: EventLoop) -> EventLoopFuture<HTTPReply> {
        let promise = loop.makePromise(of: HTTPReply.self)
        promise.completeWithTask {
            guard case .listRooms(let request) = call.request else { return try await self.answer(call, json: json, loop: loop).get() }
            var rooms = try await self.sfu.listRooms(names: request.names).get().map(RoomServiceMapping.room)
            for url in await node.otherNodeURLs() {
                // Asked in protobuf whatever the caller used; a node that does not answer is left out.
                var asked = headers
                asked.replaceOrAdd(name: "Content-Type", value: "application/protobuf")
                guard let reply = try? await self.pass(method: "POST", path: Self.prefix + "ListRooms", to: url, body: try request.serializedBytes(), headers: asked, loop: loop),
                      reply.status == .ok, let listed = try? LKListRoomsResponse(serializedBytes: reply.bytes ?? []) else { continue }
                rooms += listed.rooms.filter { room in !rooms.contains { $0.name == room.name } }
            }
            let message = LKListRoomsResponse.with { $0.rooms = rooms.sorted { $0.name < $1.name } }
            return json ? HTTPReply(status: .ok, contentType: "application/json", body: try message.jsonString())
                : HTTPReply(status: .ok, contentType: "application/protobuf", bytes: try message.serializedBytes())
        }
        return promise.futureResult
    }

    /// The bearer token, checked: a LiveKit token of one of the server's API keys, in its time
    /// window, granting what the call needs (roomList; roomCreate; roomAdmin for the call's room).
    private func authorize(_ header: String?, for grant: RoomServiceRequest.Grant) -> Result<LiveKitClaims, TwirpError> {
        guard !keys.isEmpty else { return .failure(.unauthenticated("this server has no API keys (--api-key, --api-secret)")) }
        guard let header, header.lowercased().hasPrefix("bearer "), case let token = String(header.dropFirst(7)), !token.isEmpty else {
            return .failure(.unauthenticated("no Authorization: Bearer token"))
        }
        let claims: LiveKitClaims
        do { claims = try LiveKitClaims.verifySignature(token, keys: keys) } catch {
            return .failure(.unauthenticated("invalid token: \(error.reason)"))
        }
        do { try claims.accessToken(room: "").checkTime(now: Int64(Date().timeIntervalSince1970)) } catch {
            return .failure(.unauthenticated("invalid token: \(error.reason)"))
        }
        let video = claims.video ?? LiveKitVideoGrant()
        switch grant {
        case .list:
            guard video.roomList == true else { return .failure(.denied("the token does not grant roomList")) }
        case .create:
            guard video.roomCreate == true else { return .failure(.denied("the token does not grant roomCreate")) }
        case .admin(let room):
            guard video.roomAdmin == true else { return .failure(.denied("the token does not grant roomAdmin")) }
            guard video.room == room else {
                return .failure(.denied("the token is for room \(video.room.map { "'\($0)'" } ?? "none"), not '\(room)'"))
            }
        }
        return .success(claims)
    }

    /// One method's request, read (``RoomServiceRequest``), and run on the core.
    private struct Call {
        let request: RoomServiceRequest

        func run(on sfu: ShardedSFU) -> EventLoopFuture<any SwiftProtobuf.Message> {
            switch request {
            case .createRoom(let request):
                return sfu.createRoom(request.name, metadata: request.metadata, maxParticipants: Int(request.maxParticipants),
                                      emptyTimeout: Int(request.emptyTimeout), requireEncryption: request.requireEncryption).map { RoomServiceMapping.room($0) }
            case .listRooms(let request):
                return sfu.listRooms(names: request.names).map { rooms in LKListRoomsResponse.with { $0.rooms = rooms.map(RoomServiceMapping.room) } }
            case .deleteRoom(let request):
                return sfu.deleteRoom(request.room).map { LKDeleteRoomResponse() }
            case .listParticipants(let request):
                return sfu.listParticipants(in: request.room).map { views in
                    LKListParticipantsResponse.with { $0.participants = views.map(RoomServiceMapping.participant) }
                }
            case .getParticipant(let request):
                return sfu.getParticipant(request.identity, in: request.room).map { RoomServiceMapping.participant($0) }
            case .removeParticipant(let request):
                return sfu.removeParticipant(request.identity, in: request.room).map { LKRemoveParticipantResponse() }
            case .mutePublishedTrack(let request):
                return sfu.muteTrack(request.trackSid, of: request.identity, in: request.room, muted: request.muted).map { track in
                    LKMuteRoomTrackResponse.with { $0.track = LiveKitMapping.track(track) }
                }
            case .updateParticipant(let request):
                var change = ParticipantChange()
                if !request.metadata.isEmpty { change.metadata = request.metadata }
                if !request.name.isEmpty { change.name = request.name }
                if !request.attributes.isEmpty { change.attributes = request.attributes }
                if request.hasPermission { change.grants = RoomServiceMapping.grants(request.permission) }
                return sfu.updateParticipant(request.identity, in: request.room, change).map { RoomServiceMapping.participant($0) }
            case .updateSubscriptions(let request):
                let sids = request.trackSids + request.participantTracks.flatMap(\.trackSids)
                return sfu.updateSubscriptions(of: request.identity, in: request.room, trackSids: sids, subscribe: request.subscribe)
                    .map { LKUpdateSubscriptionsResponse() }
            case .sendData(let request):
                return sfu.sendData([UInt8](request.data), in: request.room, reliable: request.kind == .reliable, topic: request.topic,
                                    destinations: request.destinationIdentities).map { _ in LKSendDataResponse() }
            case .updateRoomMetadata(let request):
                return sfu.updateRoomMetadata(request.room, metadata: request.metadata).map { RoomServiceMapping.room($0) }
            case .performRpc(let request):
                guard !request.destinationIdentity.isEmpty else {
                    return sfu.anyLoop.makeFailedFuture(TwirpError.invalid("destination_identity is required"))
                }
                // LiveKit's default of 10 s when none is given; at most a minute of held state.
                let timeoutMs = request.responseTimeoutMs == 0 ? 10_000 : min(Int64(request.responseTimeoutMs), 60_000)
                return sfu.performRPC(room: request.room, identity: request.destinationIdentity, method: request.method,
                                      payload: request.payload, timeoutMs: timeoutMs)
                    .map { payload -> any SwiftProtobuf.Message in LKPerformRpcResponse.with { $0.payload = payload } }
                    .flatMapErrorThrowing { error in
                        guard let failure = error as? RPCFailure else { throw error }
                        throw TwirpError(code: RoomServiceMapping.twirpCode(of: failure), message: failure.description)
                    }
            }
        }
    }
}

/// The core's views as LiveKit's API messages.
enum RoomServiceMapping {
    /// The Twirp code a failed RPC answers with, as LiveKit's server maps its RPC errors: an
    /// application error or a failed send `internal`, a timeout `canceled`, a recipient gone
    /// `unavailable`, an unsupported method `invalid_argument`, a payload too large `malformed`.
    static func twirpCode(of failure: RPCFailure) -> String {
        switch failure.code {
        case RPCFailure.connectionTimeout, RPCFailure.responseTimeout: "canceled"
        case RPCFailure.recipientDisconnected: "unavailable"
        case RPCFailure.unsupportedMethod: "invalid_argument"
        case RPCFailure.requestPayloadTooLarge: "malformed"
        case 1504: "malformed"
        case 1401: "not_found"
        case 1403, 1404: "unimplemented"
        default: "internal"
        }
    }

    static func room(_ view: RoomView) -> LKRoom {
        .with {
            $0.sid = view.sid
            $0.name = view.name
            $0.metadata = view.metadata
            $0.numParticipants = UInt32(clamping: view.participants)
            $0.numPublishers = UInt32(clamping: view.publishers)
            $0.maxParticipants = UInt32(clamping: view.maxParticipants)
            $0.emptyTimeout = UInt32(clamping: view.emptyTimeout)
            $0.requireEncryption = view.requireEncryption
            $0.creationTime = view.createdAt
            $0.creationTimeMs = view.createdAt * 1000
            $0.enabledCodecs = [.with { $0.mime = "video/VP8" }, .with { $0.mime = "audio/opus" }]
        }
    }

    static func participant(_ view: ParticipantView) -> LKParticipantInfo {
        var info = LiveKitMapping.participant(view.info, state: view.connected ? .active : .disconnected)
        info.joinedAt = view.joinedAt
        info.joinedAtMs = view.joinedAt * 1000
        info.permission = permission(view.grants)
        return info
    }

    static func permission(_ grants: TokenGrants) -> LKParticipantPermission {
        .with {
            $0.canSubscribe = grants.subscribe
            $0.canPublish = grants.publishAudio || grants.publishVideo || grants.publishScreen
            $0.canPublishData = grants.publishData ?? true
            var sources: [LKTrackSource] = []
            if grants.publishVideo { sources.append(.camera) }
            if grants.publishAudio { sources.append(.microphone) }
            if grants.publishScreen { sources += [.screenShare, .screenShareAudio] }
            if sources.count < 4 && $0.canPublish { $0.canPublishSources = sources }
        }
    }

    /// LiveKit's permission as our grants (publishing sources as it lists them; none listed: all).
    static func grants(_ permission: LKParticipantPermission) -> TokenGrants {
        let sources = Set(permission.canPublishSources)
        func allows(_ source: LKTrackSource) -> Bool { permission.canPublish && (sources.isEmpty || sources.contains(source)) }
        return TokenGrants(join: true, publishAudio: allows(.microphone), publishVideo: allows(.camera),
                           publishScreen: allows(.screenShare) || allows(.screenShareAudio), subscribe: permission.canSubscribe,
                           publishData: permission.canPublishData)
    }
}
