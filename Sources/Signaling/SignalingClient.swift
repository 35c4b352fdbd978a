#if canImport(Glibc)
import Glibc
#endif
import NIOCore
import NIOHTTP1
import NIOPosix
import TLSStream
import NIOWebSocket

/// Why the signaling client could not do what it was asked.
public struct SignalingClientError: Error, Sendable, Hashable, CustomStringConvertible {
    public let reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { "signaling client: \(reason)" }
}

/// The client side of the signaling protocol over a WebSocket (`ws://host:port/rtc`, or
/// `wss://` over TLS).
///
/// Requests carry an id and ``request(_:)`` returns the reply with that id (a server `error`
/// becomes a thrown ``SignalingError``). Everything else the server sends arrives on ``events``.
/// After `join` it pings at the interval the server gave; if the connection drops, it reconnects
/// and sends `resume` while the server's resume window lasts.
/// What happened to a joined signaling connection.
public enum SignalingConnectionEvent: Sendable, Hashable {
    /// The connection dropped; the client is reconnecting to resume.
    case lost
    /// It resumed within the server's window: same participant, nobody saw it leave.
    case resumed
}

public actor SignalingClient {
    nonisolated public let host: String
    public let port: Int
    public let path: String
    private let group: EventLoopGroup
    /// TLS for `wss://`, nil for `ws://`.
    fileprivate let tls: TLSContext?
    /// A second connection attempt beside a slow first one (nil: one attempt).
    private let backup: BackupConnect?
    private var channel: Channel?
    private var nextID: UInt32 = 0
    private var pending: [UInt32: CheckedContinuation<ServerMessage, any Error>] = [:]
    /// Replies to pipelined requests (``requests(_:)``) that came before they were waited for
    /// (nil: not yet).
    private var early: [UInt32: Result<ServerMessage, any Error>?] = [:]
    private var joined: (token: String, sid: String, pingInterval: Int, resumeWindow: Int)?
    private var closing = false
    /// A resume loop is running (``connectionLost()``): the only one.
    private var resuming = false
    private var pingTask: Task<Void, Never>?
    private let eventsContinuation: AsyncStream<ServerMessage>.Continuation
    /// Server messages that are not replies to a request: offers, participant updates, leave, ...
    public nonisolated let events: AsyncStream<ServerMessage>
    /// How many times the client reconnected and resumed.
    public private(set) var resumes = 0
    private let connectionContinuation: AsyncStream<SignalingConnectionEvent>.Continuation
    /// The joined connection's life: lost, then resumed within the window (or the stream ends).
    public nonisolated let connectionEvents: AsyncStream<SignalingConnectionEvent>

    /// `url` is `ws://host:port/path` or `wss://host:port/path`; `tls` says what the latter trusts
    /// (default: the system's roots; the host name or IP address is always verified).
    /// `backup` opens a second connection beside a first one that has not opened in time (a lost
    /// SYN costs a second); nil makes one attempt.
    public init(url: String, group: EventLoopGroup, tls: TLSClientOptions = TLSClientOptions(),
                backup: BackupConnect? = .standard) throws(SignalingClientError) {
        self.backup = backup
        let secure = url.hasPrefix("wss://")
        guard secure || url.hasPrefix("ws://") else { throw SignalingClientError("expected a ws:// or wss:// URL, got \(url)") }
        do {
            self.tls = secure ? try TLSContext.client(tls) : nil
        } catch {
            throw SignalingClientError("TLS setup failed: \(error)")
        }
        let rest = url.dropFirst(secure ? "wss://".count : "ws://".count)
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        let authority = rest[..<slash]
        guard let (host, port) = Self.hostAndPort(authority) else {
            throw SignalingClientError("expected ws(s)://host:port/path (an IPv6 address in brackets), got \(url)")
        }
        self.host = host
        self.port = port
        path = slash == rest.endIndex ? "/rtc" : String(rest[slash...])
        self.group = group
        (events, eventsContinuation) = AsyncStream.makeStream(of: ServerMessage.self)
        (connectionEvents, connectionContinuation) = AsyncStream.makeStream(of: SignalingConnectionEvent.self)
    }

    /// How long resuming goes on while the server refuses connections.
    static let giveUpUnreachable: Duration = .seconds(1)

    /// Opens the WebSocket (with a backup attempt beside a slow first one).
    public func connect() async throws {
        let (host, port, path, group, tls) = (host, port, path, group, tls)
        let open: @Sendable (Int) async throws -> (channel: Channel, messages: AsyncStream<[UInt8]>) = { _ in
            try await Self.open(host: host, port: port, path: path, group: group, tls: tls)
        }
        let inbound = if let backup {
            try await backup.open(open, release: { $0.channel.close(promise: nil) })
        } else {
            try await open(0)
        }
        channel = inbound.channel
        let stream = inbound.messages
        let opened = inbound.channel
        Task { await self.consume(stream, on: opened) }
    }

    /// `host:port`, or `[IPv6]:port` (RFC 3986 §3.2.2), with the brackets taken off the host; the
    /// port 1...65535. Nil for anything else.
    public static func hostAndPort(_ authority: Substring) -> (String, Int)? {
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            let host = authority[authority.index(after: authority.startIndex)..<close]
            let rest = authority[authority.index(after: close)...]
            guard !host.isEmpty, rest.hasPrefix(":"), let port = Int(rest.dropFirst()), (1...65535).contains(port) else { return nil }
            return (String(host), port)
        }
        let parts = authority.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, let port = Int(parts[1]), (1...65535).contains(port) else { return nil }
        return (String(parts[0]), port)
    }

    fileprivate static func open(host: String, port: Int, path: String, group: EventLoopGroup, tls: TLSContext?) async throws
        -> (channel: Channel, messages: AsyncStream<[UInt8]>)
    {
        let (messages, continuation) = AsyncStream.makeStream(of: [UInt8].self)
        let upgraded = group.next().makePromise(of: Void.self)
        let connecting = ClientBootstrap(group: group).channelInitializer { channel in
            let request = UpgradeRequest(host: host, port: port, path: path, failed: upgraded)
            let upgrader = NIOWebSocketClientUpgrader(maxFrameSize: 1 << 20, automaticErrorHandling: true) { channel, _ in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        NIOWebSocketFrameAggregator(minNonFinalFragmentSize: 0, maxAccumulatedFrameCount: 256,
                                                    maxAccumulatedFrameSize: 1 << 20))
                    try channel.pipeline.syncOperations.addHandler(ClientFrameHandler(continuation: continuation))
                    upgraded.succeed()
                }
            }
            let configuration: NIOHTTPClientUpgradeSendableConfiguration = (upgraders: [upgrader], completionHandler: { context in
                context.pipeline.removeHandler(request, promise: nil)
            })
            let http: @Sendable () -> EventLoopFuture<Void> = {
                channel.pipeline.addHTTPClientHandlers(withClientUpgrade: configuration).flatMap {
                    channel.pipeline.addHandler(request)
                }
            }
            guard let tls else { return http() }
            return channel.eventLoop.makeCompletedFuture {
                // A name is sent as SNI and verified; an IP literal is checked against the certificate's IP entries.
                try channel.pipeline.syncOperations.addHandler(try tls.handler(serverName: host))
            }.flatMap { _ in http() }
        }.connect(host: host, port: port)
        let channel: Channel
        do {
            channel = try await connecting.get()
        } catch {
            // Nobody will complete the upgrade now: settle its promise (and the stream) here.
            upgraded.fail(error)
            continuation.finish()
            throw SignalingClientError("cannot connect to \(host):\(port): \(error)")
        }
        channel.closeFuture.whenComplete { _ in
            continuation.finish()
            upgraded.fail(SignalingClientError("the connection closed before the WebSocket upgrade"))
        }
        try await upgraded.futureResult.get()
        return (channel, messages)
    }

    private func consume(_ stream: AsyncStream<[UInt8]>, on opened: Channel) async {
        for await bytes in stream {
            guard let envelope = try? ServerEnvelope.decode(bytes) else { continue }
            if let id = envelope.requestID, let waiter = pending.removeValue(forKey: id) {
                if case .error(let error) = envelope.message { waiter.resume(throwing: error) } else { waiter.resume(returning: envelope.message) }
                continue
            }
            if let id = envelope.requestID, case .some(.none) = early[id] {
                if case .error(let error) = envelope.message { early[id] = .failure(error) } else { early[id] = .success(envelope.message) }
                continue
            }
            if case .leave = envelope.message { closing = true }
            eventsContinuation.yield(envelope.message)
        }
        // Only the current connection's end is a loss: an earlier attempt's (closed by us, or by
        // the server's join deadline) must not start another round of resuming.
        guard channel == nil || channel === opened else { return }
        await connectionLost()
    }

    private func connectionLost() async {
        channel = nil
        for (_, waiter) in pending { waiter.resume(throwing: SignalingClientError("connection lost")) }
        pending.removeAll()
        for (id, reply) in early where reply == nil { early[id] = .failure(SignalingClientError("connection lost")) }
        // An attempt of the running resume loop ended (the server answered and closed, or the
        // connection dropped): that loop makes the next attempt. Another loop would double the
        // attempts at each close, a flood of connections against a server that refuses them.
        guard !resuming else { return }
        guard !closing, let joined else {
            eventsContinuation.finish()
            connectionContinuation.finish()
            return
        }
        connectionContinuation.yield(.lost)
        resuming = true
        defer { resuming = false }
        // Reconnect and resume inside the window.
        let deadline = ContinuousClock.now + .seconds(joined.resumeWindow)
        // A server that refuses connections for this long is gone (a dead node), not restarting
        // a socket: the owner rejoins, maybe at another node, rather than wait out the window.
        var unreachableSince: ContinuousClock.Instant?
        while ContinuousClock.now < deadline && !closing {
            // The previous attempt's connection, if it opened, goes before the next one.
            if let stale = channel {
                channel = nil
                try? await stale.close()
            }
            do {
                do {
                    try await connect()
                    unreachableSince = nil
                } catch {
                    let since = unreachableSince ?? ContinuousClock.now
                    unreachableSince = since
                    if since.duration(to: .now) > Self.giveUpUnreachable { break }
                    throw error
                }
                if case .resumed(let response) = try await request(.resume(ResumeRequest(token: joined.token, participantSid: joined.sid))) {
                    self.joined = (joined.token, response.participant.sid, response.pingInterval, response.resumeWindow)
                    resumes += 1
                    connectionContinuation.yield(.resumed)
                    return
                }
                // Any other reply: not resumed, tried again after the same pause.
                try? await Task.sleep(for: .milliseconds(250))
            } catch let error as SignalingError where error.code == .resumeFailed || error.code.rawValue / 1000 == 2 {
                // The server does not know the session (it restarted, or the window passed), or
                // will never take this token: stop here, so the owner can join afresh at once.
                break
            } catch {
                try? await Task.sleep(for: .milliseconds(250))
            }
        }
        // The session is over: closing the last attempt's channel ends its reader too, which must
        // not start another round of resuming.
        self.joined = nil
        try? await channel?.close()
        channel = nil
        eventsContinuation.finish()
        connectionContinuation.finish()
    }

    /// Sends a request and waits for the reply with its id.
    public func request(_ message: ClientMessage) async throws -> ServerMessage {
        guard let channel else { throw SignalingClientError("not connected") }
        nextID &+= 1
        let id = nextID
        let bytes = ClientEnvelope(message, requestID: id).encoded()
        let reply: ServerMessage = try await withCheckedThrowingContinuation { continuation in
            pending[id] = continuation
            Self.write(bytes, on: channel)
        }
        if case .join(let request) = message, case .joined(let response) = reply {
            joined = (request.token, response.participant.sid, response.pingInterval, response.resumeWindow)
            startPinging(every: response.pingInterval)
        }
        // A resume after this uses the token the server took last.
        if case .refreshToken(let token) = message, case .tokenRefreshed = reply, let current = joined {
            joined = (token, current.sid, current.pingInterval, current.resumeWindow)
        }
        return reply
    }

    /// Sends requests back to back, in order, without waiting between them (the server reads
    /// them in order), and returns each one's reply or error in the same order: one round trip
    /// for all of them. Throws only when nothing could be sent.
    public func requests(_ messages: [ClientMessage]) async throws -> [Result<ServerMessage, any Error>] {
        guard let channel else { throw SignalingClientError("not connected") }
        var ids: [UInt32] = []
        for message in messages {
            nextID &+= 1
            ids.append(nextID)
            early[nextID] = .some(nil)
            Self.write(ClientEnvelope(message, requestID: nextID).encoded(), on: channel)
        }
        var replies: [Result<ServerMessage, any Error>] = []
        for id in ids {
            if case .some(.some(let reply)) = early.removeValue(forKey: id) {
                replies.append(reply)
                continue
            }
            do {
                replies.append(.success(try await withCheckedThrowingContinuation { pending[id] = $0 }))
            } catch {
                replies.append(.failure(error))
            }
        }
        return replies
    }

    /// Sends a message without waiting for anything.
    public func send(_ message: ClientMessage) throws {
        guard let channel else { throw SignalingClientError("not connected") }
        if case .leave = message { closing = true }
        Self.write(ClientEnvelope(message).encoded(), on: channel)
    }

    /// Sends raw bytes as a text frame (tests of the server's handling of bad input).
    public func sendRaw(_ bytes: [UInt8]) throws {
        guard let channel else { throw SignalingClientError("not connected") }
        Self.write(bytes, on: channel)
    }

    /// Drops the TCP connection without a leave (tests of resume).
    public func dropConnection() async {
        try? await channel?.close()
    }

    private static func write(_ bytes: [UInt8], on channel: Channel) {
        channel.eventLoop.execute {
            channel.writeAndFlush(WebSocketFrame(fin: true, opcode: .text, maskKey: .random(), data: channel.allocator.buffer(bytes: bytes)),
                                  promise: nil)
        }
    }

    /// Milliseconds since 1970 (a ping's timestamp).
    public static func wallMilliseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }

    private func startPinging(every seconds: Int) {
        pingTask?.cancel()
        pingTask = Self.pinging(self, every: seconds)
    }

    /// A channel's keepalive: a ping every `seconds` (at least 1) carrying the wall-clock ms, as
    /// LiveKit's pings do (the server echoes it in the pong), until cancelled or `channel` is gone.
    public static func pinging(_ channel: some SignalingChannel, every seconds: Int) -> Task<Void, Never> {
        Task { [weak channel] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(max(1, seconds)))
                guard let channel else { return }
                try? await channel.send(.ping(timestamp: SignalingClient.wallMilliseconds()))
            }
        }
    }

    /// Leaves (if joined) and closes the connection.
    public func close() async {
        closing = true
        pingTask?.cancel()
        if joined != nil { try? send(.leave(reason: .clientRequest)) }
        // The session is over: closing the last attempt's channel ends its reader too, which must
        // not start another round of resuming.
        self.joined = nil
        try? await channel?.close()
        channel = nil
        eventsContinuation.finish()
        connectionContinuation.finish()
    }
}

/// Sends the HTTP upgrade request once connected.
private final class UpgradeRequest: ChannelInboundHandler, RemovableChannelHandler, @unchecked Sendable {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart
    let host: String, port: Int, path: String
    let failed: EventLoopPromise<Void>

    init(host: String, port: Int, path: String, failed: EventLoopPromise<Void>) {
        self.host = host
        self.port = port
        self.path = path
        self.failed = failed
    }

    func channelActive(context: ChannelHandlerContext) {
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)")
        headers.add(name: "Content-Length", value: "0")
        context.write(wrapOutboundOut(.head(HTTPRequestHead(version: .http1_1, method: .GET, uri: path, headers: headers))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // A response that is not the upgrade: the server refused it.
        if case .head(let head) = unwrapInboundIn(data) {
            failed.fail(SignalingClientError("WebSocket upgrade refused: HTTP \(head.status.code)"))
            context.close(promise: nil)
        }
    }

    /// A failure before the upgrade (a TLS handshake that refused the server's certificate) is
    /// the reason the connect fails with.
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        failed.fail(SignalingClientError("\(error)"))
        context.close(promise: nil)
    }
}

/// Hands text frames to the client in order; answers pings; closes on close.
private final class ClientFrameHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame
    let continuation: AsyncStream<[UInt8]>.Continuation

    init(continuation: AsyncStream<[UInt8]>.Continuation) { self.continuation = continuation }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .text, .binary:
            var data = frame.unmaskedData
            continuation.yield(data.readBytes(length: data.readableBytes) ?? [])
        case .ping:
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, maskKey: .random(), data: frame.unmaskedData)),
                                  promise: nil)
        case .connectionClose:
            context.close(promise: nil)
        default:
            break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        continuation.finish()
        context.fireChannelInactive()
    }
}

/// A WebSocket to a signaling URL that carries messages as bytes, neither parsed nor answered:
/// what a server node uses to relay a client's connection to the node its room lives on, and
/// what a client whose protocol frames its own messages (LiveKit's protobuf) talks over.
public final class RawSignalingLink: Sendable {
    /// Every text or binary message from the far end, in order; finishes when the link closes.
    public let messages: AsyncStream<[UInt8]>
    private let channel: Channel

    private init(channel: Channel, messages: AsyncStream<[UInt8]>) {
        self.channel = channel
        self.messages = messages
    }

    /// Opens `url` (`ws://host:port/path?query`, or `wss://` verified as `tls` says).
    public static func open(url: String, group: EventLoopGroup, tls: TLSClientOptions = TLSClientOptions()) async throws -> RawSignalingLink {
        let client = try SignalingClient(url: url, group: group, tls: tls, backup: nil)
        let opened = try await SignalingClient.open(host: client.host, port: client.port, path: client.path, group: group, tls: client.tls)
        return RawSignalingLink(channel: opened.channel, messages: opened.messages)
    }

    /// Sends one message: a text frame, or a binary one (`binary`).
    public func send(_ bytes: [UInt8], binary: Bool = false) {
        let channel = channel
        channel.eventLoop.execute {
            channel.writeAndFlush(WebSocketFrame(fin: true, opcode: binary ? .binary : .text, maskKey: .random(),
                                                 data: channel.allocator.buffer(bytes: bytes)),
                                  promise: nil)
        }
    }

    public var isActive: Bool { channel.isActive }

    public func close() { channel.close(promise: nil) }
}

extension SignalingClient {
    static func openRaw(host: String, port: Int, path: String, group: EventLoopGroup) async throws -> (channel: Channel, messages: AsyncStream<[UInt8]>) {
        try await open(host: host, port: port, path: path, group: group, tls: nil)
    }
}
