import NIOCore
import Signaling
import SwiftProtobuf
import TLSStream

/// Our engine's signaling over LiveKit's signal protocol (docs/livekit.md, "Our SDK in a LiveKit
/// room"): the `/rtc` WebSocket with the token and options in its query, protobuf
/// `SignalRequest`s and `SignalResponse`s in binary frames, our messages in and out through a
/// ``LiveKitClientTranslator``. Joining is opening the socket: the first response is the
/// `JoinResponse` (or a `LeaveRequest` saying why not).
///
/// A lost connection ends the session (its streams finish) and the engine joins again in full,
/// as LiveKit's SDKs do when a resume is not possible; `resume` (reconnect=1) is not made here.
public actor LiveKitSignalingClient: SignalingChannel {
    nonisolated public let host: String
    /// `ws://host:port/rtc` (or `wss://`), without the query.
    public let baseURL: String
    private let group: EventLoopGroup
    private let tls: TLSClientOptions
    private let sdkVersion: String
    private var link: RawSignalingLink?
    private var translator: LiveKitClientTranslator?
    private var waiting: [LiveKitClientTranslator.Reply: [(id: Int, continuation: CheckedContinuation<ServerMessage, any Error>)]] = [:]
    private var pingTask: Task<Void, Never>?
    private var closing = false
    private var resuming = false
    /// The newest token the server gave (`refresh_token`): a resume's.
    public private(set) var refreshedToken: String?
    /// The joined session a lost connection resumes: its token, participant sid and options.
    private var session: (token: String, sid: String, autoSubscribe: Bool)?
    /// How many times the connection was lost and resumed.
    public private(set) var resumes = 0
    /// How long resuming is tried before the session is given up (the engine then joins again):
    /// LiveKit's servers hold a departed participant this long and more.
    public static let resumeWindow: Duration = .seconds(10)
    private let eventsContinuation: AsyncStream<ServerMessage>.Continuation
    public nonisolated let events: AsyncStream<ServerMessage>
    private let connectionContinuation: AsyncStream<SignalingConnectionEvent>.Continuation
    public nonisolated let connectionEvents: AsyncStream<SignalingConnectionEvent>

    /// `url` is a LiveKit server's: `ws://host:port` (or `wss://`, or with `/rtc`).
    public init(url: String, group: EventLoopGroup, tls: TLSClientOptions = TLSClientOptions(), sdkVersion: String = "0.1")
        throws(SignalingClientError) {
        var base = url
        while base.hasSuffix("/") { base.removeLast() }
        if !base.hasSuffix("/rtc") { base += "/rtc" }
        // The URL's form (scheme, host, port) is checked as our own client checks it.
        let parsed = try SignalingClient(url: base, group: group, tls: tls, backup: nil)
        host = parsed.host
        baseURL = base
        self.group = group
        self.tls = tls
        self.sdkVersion = sdkVersion
        (events, eventsContinuation) = AsyncStream.makeStream(of: ServerMessage.self)
        (connectionEvents, connectionContinuation) = AsyncStream.makeStream(of: SignalingConnectionEvent.self)
    }

    /// Nothing to open yet: LiveKit's socket carries the join in its URL (``request(_:)`` with `join`).
    public func connect() async throws {}

    public func request(_ message: ClientMessage) async throws -> ServerMessage {
        if case .join(let join) = message { return try await self.join(join) }
        guard let reply = try await sendTranslated(message) else {
            throw SignalingClientError("LiveKit's protocol has no reply to \(message)")
        }
        return try await wait(for: reply)
    }

    public func requests(_ messages: [ClientMessage]) async throws -> [Result<ServerMessage, any Error>] {
        guard link != nil else { throw SignalingClientError("not connected") }
        // Sent in order without waiting, except that an offer goes only once the tracks announced
        // before it are published (AddTrack → TrackPublished, then the offer, as LiveKit's SDKs
        // do); a refused track's offer is not sent at all.
        var results: [Result<ServerMessage, any Error>?] = Array(repeating: nil, count: messages.count)
        var pending: [(index: Int, reply: LiveKitClientTranslator.Reply)] = []
        for (index, message) in messages.enumerated() {
            if case .offer = message {
                for (earlier, reply) in pending {
                    do { results[earlier] = .success(try await wait(for: reply)) } catch { results[earlier] = .failure(error) }
                }
                pending.removeAll()
                if results.contains(where: { result in result.map { (try? $0.get()) == nil } ?? false }) {
                    results[index] = .failure(SignalingError(.negotiationFailed, "the offer was not sent: a track of it was refused"))
                    continue
                }
            }
            do {
                if let reply = try await sendTranslated(message) {
                    pending.append((index, reply))
                } else {
                    results[index] = .failure(SignalingClientError("LiveKit's protocol has no reply to this request"))
                }
            } catch {
                results[index] = .failure(error)
            }
        }
        for (index, reply) in pending {
            do { results[index] = .success(try await wait(for: reply)) } catch { results[index] = .failure(error) }
        }
        return results.map { $0 ?? .failure(SignalingClientError("no reply")) }
    }

    public func send(_ message: ClientMessage) async throws {
        if case .leave = message { closing = true }
        _ = try await sendTranslated(message)
    }

    public func dropConnection() async {
        link?.close()
    }

    public func close() async {
        guard !closing || link != nil else { return }
        if link != nil, !closing { try? await send(.leave(reason: .clientRequest)) }
        closing = true
        pingTask?.cancel()
        link?.close()
        link = nil
        finish(SignalingClientError("closed"))
    }

    // MARK: Inside

    private func join(_ request: JoinRequest) async throws -> ServerMessage {
        let claims: LiveKitClaims
        do { claims = try LiveKitClaims.unverified(request.token) } catch {
            throw SignalingError(.tokenInvalid, "not a LiveKit access token: \(error)")
        }
        translator = LiveKitClientTranslator(identity: claims.identity)
        let connect = LiveKitConnectRequest(token: request.token, autoSubscribe: request.autoSubscribe, sdk: "swift",
                                            sdkVersion: sdkVersion, adaptiveStream: false)
        let opened: RawSignalingLink
        do {
            opened = try await RawSignalingLink.open(url: baseURL + "?" + connect.query, group: group, tls: tls)
        } catch let error as SignalingClientError where error.reason.contains("HTTP 401") || error.reason.contains("HTTP 403") {
            throw SignalingError(.tokenInvalid, "the LiveKit server refused the token (\(error.reason))")
        } catch let error as SignalingClientError where error.reason.contains("HTTP 404") {
            throw SignalingError(.protocolVersionMismatch,
                                 "\(baseURL) does not serve LiveKit's /rtc signal WebSocket (\(error.reason)): not a LiveKit server, or one that speaks only /rtc/v1")
        }
        link = opened
        Task { await self.consume(opened) }
        let reply = try await wait(for: .join)
        if case .joined(let joined) = reply {
            session = (request.token, joined.participant.sid, request.autoSubscribe)
            startPinging(every: joined.pingInterval)
        }
        return reply
    }

    /// Opens the socket again with `reconnect=1&sid=…` while the window lasts; on LiveKit's
    /// `ReconnectResponse` sends `SyncState` and says `.resumed` (the session then re-offers its
    /// publisher with new ICE credentials, as LiveKit's SDKs do). A server that refuses (it lost
    /// the session, the token is gone) ends the session at once: the engine joins again in full.
    private func resume(_ session: (token: String, sid: String, autoSubscribe: Bool)) async -> Bool {
        let deadline = ContinuousClock.now + Self.resumeWindow
        var pause = Duration.milliseconds(250)
        while ContinuousClock.now < deadline, !closing {
            let connect = LiveKitConnectRequest(token: refreshedToken ?? session.token, autoSubscribe: session.autoSubscribe, sdk: "swift",
                                                sdkVersion: sdkVersion, reconnect: true, participantSid: session.sid)
            do {
                let opened = try await RawSignalingLink.open(url: baseURL + "?" + connect.query, group: group, tls: tls)
                link = opened
                Task { await self.consume(opened) }
                _ = try await wait(for: .reconnect)
                if let translator, let bytes: [UInt8] = try? translator.syncState(autoSubscribe: session.autoSubscribe).serializedBytes() {
                    opened.send(bytes, binary: true)
                }
                resumes += 1
                return true
            } catch let error as SignalingError {
                // Refused: the server does not know the session any more.
                _ = error
                return false
            } catch let error as SignalingClientError where error.reason.contains("HTTP 4") {
                return false
            } catch {
                try? await Task.sleep(for: pause)
                pause = min(pause * 2, .seconds(2))
            }
        }
        return false
    }

    /// Sends what `message` becomes; returns the reply it waits for (an immediate one is queued).
    private func sendTranslated(_ message: ClientMessage) async throws -> LiveKitClientTranslator.Reply? {
        guard let link, var translator else { throw SignalingClientError("not connected") }
        let (requests, reply) = try translator.translate(message)
        self.translator = translator
        for request in requests {
            let bytes: [UInt8]
            do { bytes = try request.serializedBytes() } catch { throw SignalingClientError("cannot encode \(message): \(error)") }
            link.send(bytes, binary: true)
        }
        return reply
    }

    private var early: [LiveKitClientTranslator.Reply: [Result<ServerMessage, SignalingError>]] = [:]
    /// How long a reply is waited for: a server that never answers fails the request, it does not hang it.
    public static let replyTimeout: Duration = .seconds(15)
    private var nextWaiter = 0

    private func wait(for reply: LiveKitClientTranslator.Reply) async throws -> ServerMessage {
        if case .immediate(let message) = reply { return message }
        if var arrived = early[reply], !arrived.isEmpty {
            let first = arrived.removeFirst()
            early[reply] = arrived.isEmpty ? nil : arrived
            return try first.get()
        }
        guard link != nil else { throw SignalingClientError("connection lost") }
        nextWaiter += 1
        let id = nextWaiter
        let timeout = Task { [weak self] in
            try? await Task.sleep(for: Self.replyTimeout)
            await self?.expire(reply, id: id)
        }
        defer { timeout.cancel() }
        return try await withCheckedThrowingContinuation { waiting[reply, default: []].append((id, $0)) }
    }

    private func expire(_ reply: LiveKitClientTranslator.Reply, id: Int) {
        guard var waiters = waiting[reply], let index = waiters.firstIndex(where: { $0.id == id }) else { return }
        let waiter = waiters.remove(at: index).continuation
        waiting[reply] = waiters.isEmpty ? nil : waiters
        waiter.resume(throwing: SignalingError(.negotiationFailed, "no reply from the LiveKit server within \(Self.replyTimeout) (\(reply))"))
    }

    private func consume(_ opened: RawSignalingLink) async {
        for await bytes in opened.messages {
            guard var translator else { break }
            // A message that is not a SignalResponse is skipped (counted by nobody: LiveKit sends none).
            guard let response = try? LKSignalResponse(serializedBytes: bytes) else { continue }
            let inbound = translator.translate(response)
            self.translator = translator
            for item in inbound { deliver(item) }
        }
        guard link === opened else { return }
        link = nil
        // Replies the old socket owed will not come: their requests fail now.
        for (_, waiters) in waiting { for waiter in waiters { waiter.continuation.resume(throwing: SignalingClientError("connection lost")) } }
        waiting.removeAll()
        guard !closing, !resuming, let session else {
            if resuming { return }  // the resume loop goes on with its next attempt
            pingTask?.cancel()
            finish(SignalingClientError(closing ? "closed" : "connection lost"))
            return
        }
        resuming = true
        connectionContinuation.yield(.lost)
        let resumed = await resume(session)
        resuming = false
        if resumed {
            connectionContinuation.yield(.resumed)
        } else {
            self.session = nil
            link?.close()
            link = nil
            pingTask?.cancel()
            finish(SignalingClientError("connection lost and not resumed"))
        }
    }

    private func deliver(_ item: LiveKitClientTranslator.Inbound) {
        switch item {
        case .reply(var key, let result):
            if case .answer(let id) = key {
                // An answer without the offer's id (an older server): the oldest offer waiting.
                if id == 0, waiting[key] == nil, let oldest = waiting.keys.compactMap({ key -> UInt32? in
                    if case .answer(let offer) = key { return offer }
                    return nil
                }).min() { key = .answer(offerID: oldest) }
            }
            if var waiters = waiting[key], !waiters.isEmpty {
                let waiter = waiters.removeFirst().continuation
                waiting[key] = waiters.isEmpty ? nil : waiters
                waiter.resume(with: result.mapError { $0 as any Error })
            } else {
                early[key, default: []].append(result)
            }
        case .event(let message):
            // The round trip a pong measures goes with the next ping (LiveKit's `rtt`).
            if case .pong(let sent) = message, sent > 0 { translator?.roundTripMs = max(0, SignalingClient.wallMilliseconds() - sent) }
            // A leave before a resume's ReconnectResponse: the server does not take the resume.
            if case .leave(let reason) = message, let waiters = waiting.removeValue(forKey: .reconnect) {
                for waiter in waiters {
                    waiter.continuation.resume(throwing: SignalingError(.resumeFailed, "the LiveKit server did not resume the session (\(reason.rawValue))"))
                }
                return
            }
            if case .leave = message { closing = true }
            eventsContinuation.yield(message)
        case .token(let token):
            refreshedToken = token
        case .request(let request):
            if let bytes: [UInt8] = try? request.serializedBytes() { link?.send(bytes, binary: true) }
        }
    }

    private func finish(_ error: any Error) {
        for (_, waiters) in waiting { for waiter in waiters { waiter.continuation.resume(throwing: error) } }
        waiting.removeAll()
        eventsContinuation.finish()
        connectionContinuation.finish()
    }

    private func startPinging(every seconds: Int) {
        pingTask?.cancel()
        pingTask = SignalingClient.pinging(self, every: seconds)
    }
}

extension LiveKitConnectRequest {
    /// The query a client opens `/rtc` with (the inverse of ``init(uri:authorization:)``).
    public var query: String {
        var pairs = [("access_token", token), ("auto_subscribe", autoSubscribe ? "1" : "0"), ("sdk", sdk), ("version", sdkVersion),
                     ("protocol", String(protocolVersion)), ("adaptive_stream", adaptiveStream ? "1" : "0")]
        if reconnect, let participantSid { pairs += [("reconnect", "1"), ("sid", participantSid)] }
        return pairs.map { "\($0.0)=\(URLQuery.escape($0.1))" }.joined(separator: "&")
    }
}
