import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import TLSStream
import NIOWebSocket
import Signaling

/// One client's WebSocket: text frames in go to the SFU as signaling; envelopes out go as text frames.
final class WebSocketPeer: ChannelInboundHandler, SignalingPeer, @unchecked Sendable {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private let sfu: ShardedSFU
    private let logger: Logger
    private let limits: ServerLimits
    private var channel: Channel?
    /// On the channel's loop: what the client may still send, and what waits to be written to it.
    private var messages: TokenBucket
    private var inboundBytes: TokenBucket
    private var queuedBytes = 0
    private var closing = false
    /// With a cluster: where this connection's messages go, decided at its first join or resume.
    private let cluster: ClusterHandle?
    private var route = Route.undecided
    /// The join or resume that started the decision, decoded once (its token's HMAC included).
    private var deciding: InboundMessage?

    private enum Route {
        case undecided
        /// Waiting for Redis to say where the room is: messages queue.
        case deciding([[UInt8]])
        case local
        /// Relayed to the room's node: every message both ways, unread.
        case relaying(RawSignalingLink)
    }

    /// Whether the connection is relayed to another node (it joined there). On the channel's loop.
    var isRelaying: Bool {
        if case .relaying = route { return true }
        if case .deciding = route { return true }
        return false
    }

    /// What the connection speaks: ours (JSON text) or LiveKit's (protobuf).
    private let dialect: SignalingDialect

    init(sfu: ShardedSFU, logger: Logger, limits: ServerLimits, cluster: ClusterHandle? = nil, dialect: SignalingDialect = NativeDialect()) {
        self.sfu = sfu
        self.cluster = cluster
        self.dialect = dialect
        self.logger = logger
        self.limits = limits
        messages = TokenBucket(ratePerSecond: limits.messagesPerSecond, burst: limits.messageBurst)
        inboundBytes = TokenBucket(ratePerSecond: limits.inboundBytesPerSecond, burst: limits.inboundByteBurst)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        channel = context.channel
        // LiveKit's join comes with the upgrade: it is the connection's first message.
        for bytes in dialect.opening() { routeMessage(bytes, context: context) }
    }

    /// What the dialect made of a frame or a core message: messages on to the core, frames to the client.
    private func apply(_ output: DialectOutput, context: ChannelHandlerContext?, channel: Channel) {
        for payload in output.toClient {
            write(WebSocketFrame(fin: true, opcode: output.binary ? .binary : .text, data: channel.allocator.buffer(bytes: payload)), on: channel)
        }
        if let context {
            for bytes in output.toCore { routeMessage(bytes, context: context) }
        } else if !output.toCore.isEmpty, let context = try? channel.pipeline.syncOperations.context(handler: self) {
            for bytes in output.toCore { routeMessage(bytes, context: context) }
        }
        if let reason = output.close {
            connectionLog.notice(logger, "websocket closed", ["reason": "\(reason)", "remote": "\(channel.remoteAddress.map { "\($0)" } ?? "?")"])
            closeAfterWrites(channel, code: output.closeCode, reason: reason)
        }
    }

    private func closeAfterWrites(_ channel: Channel, code: WebSocketErrorCode, reason: String) {
        guard !closing else { return }
        closing = true
        var payload = channel.allocator.buffer(capacity: 2 + reason.utf8.count)
        payload.write(webSocketErrorCode: code)
        payload.writeString(String(reason.utf8.prefix(120)) ?? "")
        channel.writeAndFlush(WebSocketFrame(fin: true, opcode: .connectionClose, data: payload)).whenComplete { _ in
            channel.close(promise: nil)
        }
    }

    /// A client that does not read: stop reading from it until its socket takes writes again.
    func channelWritabilityChanged(context: ChannelHandlerContext) {
        context.channel.setOption(ChannelOptions.autoRead, value: context.channel.isWritable).whenFailure { _ in }
        context.fireChannelWritabilityChanged()
    }

    /// Writes a frame unless the connection already has `maxOutboundBytes` waiting, in which case
    /// it is closed: one client that never reads cannot make the server hold its replies forever.
    private func write(_ frame: WebSocketFrame, on channel: Channel) {
        guard !closing else { return }
        let size = frame.length
        guard queuedBytes + size <= limits.maxOutboundBytes else {
            closing = true
            connectionLog.notice(logger, "websocket closed", ["reason": "not reading: \(queuedBytes) bytes queued",
                                                             "remote": "\(channel.remoteAddress.map { "\($0)" } ?? "?")"])
            sfu.countLimitRefusal()
            channel.close(promise: nil)
            return
        }
        queuedBytes += size
        channel.writeAndFlush(frame).whenComplete { _ in self.queuedBytes -= size }
    }

    /// Past the message or byte budget: 4004, then close (1008).
    private func refuseFlood(_ context: ChannelHandlerContext, reason: String) {
        closing = true
        sfu.countLimitRefusal()
        let error = ServerEnvelope(.error(SignalingError(.limitExceeded, reason)))
        context.write(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .text, data: context.channel.allocator.buffer(bytes: error.encoded()))),
                      promise: nil)
        StrictWebSocketFraming.fail(context, code: .policyViolation, reason: reason, logger: logger)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .text, .binary:
            var data = frame.unmaskedData
            let bytes = data.readBytes(length: data.readableBytes) ?? []
            // RFC 6455 §8.1: a text message that is not UTF-8 fails the connection (1007).
            if frame.opcode == .text, String(validating: bytes, as: UTF8.self) == nil {
                closing = true
                return StrictWebSocketFraming.fail(context, code: .dataInconsistentWithMessage, reason: "text frames must be UTF-8",
                                                   logger: logger)
            }
            guard !closing else { return }
            let nowNs = NIODeadline.now().uptimeNanoseconds
            guard messages.take(1, nowNs: nowNs) else {
                return refuseFlood(context, reason: "over \(Int(limits.messagesPerSecond)) messages a second")
            }
            guard inboundBytes.take(Double(bytes.count), nowNs: nowNs) else {
                return refuseFlood(context, reason: "over \(Int(limits.inboundBytesPerSecond)) bytes a second")
            }
            apply(dialect.inbound(bytes, binary: frame.opcode == .binary), context: context, channel: context.channel)
        case .ping:
            guard !closing else { return }
            // Pings spend the same budget as messages: a ping flood is a reply flood.
            let nowNs = NIODeadline.now().uptimeNanoseconds
            guard messages.take(1, nowNs: nowNs), inboundBytes.take(Double(frame.length), nowNs: nowNs) else {
                return refuseFlood(context, reason: "over \(Int(limits.messagesPerSecond)) messages a second")
            }
            write(WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData), on: context.channel)
        case .connectionClose:
            var payload = context.channel.allocator.buffer(capacity: 2)
            payload.write(webSocketErrorCode: .normalClosure)
            let close = WebSocketFrame(fin: true, opcode: .connectionClose, data: payload)
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(close)).whenComplete { _ in channel.close(promise: nil) }
        default:
            break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if case .relaying(let link) = route { link.close() }
        sfu.disconnected(self)
        context.fireChannelInactive()
    }

    // MARK: Cluster routing

    /// Alone (no cluster), every message goes to this node's SFU. In a cluster, the first join or
    /// resume asks where its room lives: here, or another node, to which the connection is then
    /// relayed whole (the client's media goes to that node's addresses, which its answers carry).
    private func routeMessage(_ bytes: [UInt8], context: ChannelHandlerContext) {
        switch route {
        case .local: sfu.received(bytes, from: self)
        case .relaying(let link): link.send(bytes)
        case .deciding(let queued): route = .deciding(queued + [bytes])
        case .undecided:
            guard let node = cluster?.node else {
                route = .local
                return sfu.received(bytes, from: self)
            }
            let message = InboundMessage(bytes, secret: sfu.configuration.secret)
            // Before a join (a ping, bad input): answered here.
            guard message.isJoinOrResume, let channel = message.channel else { return sfu.received(bytes, from: self) }
            route = .deciding([bytes])
            deciding = message
            let loop = context.eventLoop
            Task {
                let placement = await node.place(channel)
                loop.execute { self.decided(placement, room: channel, placer: node, loop: loop) }
            }
        }
    }

    private func decided(_ placement: RoomPlacement, room: String, placer: any RoomPlacer, loop: EventLoop) {
        guard case .deciding(let queued) = route, let channel, channel.isActive else {
            if case .remote = placement { placer.released(room, from: placement) }
            return
        }
        let first = deciding
        deciding = nil
        switch placement {
        case .local:
            route = .local
            if let first { sfu.deliver(first, from: self) }
            for bytes in queued.dropFirst(first == nil ? 0 : 1) { sfu.received(bytes, from: self) }
        case .refused(let reason):
            // As the SFU refuses a join at a limit: the error, then the connection closes.
            let id = (try? first?.decoded.get())?.requestID
            sfu.countLimitRefusal()
            send(ServerEnvelope(.error(SignalingError(.limitExceeded, reason, requestID: id)), requestID: id))
            route = .undecided
            close()
        case .remote(let node, let url):
            Task {
                do {
                    let link = try await RawSignalingLink.open(url: url, group: loop)
                    loop.execute {
                        // Everything queued so far, including what came while the link opened.
                        guard channel.isActive, case .deciding(let pending) = self.route else { return link.close() }
                        self.route = .relaying(link)
                        for bytes in pending { link.send(bytes) }
                    }
                    for await bytes in link.messages {
                        loop.execute { self.relayed(bytes, channel: channel) }
                    }
                    // The room's node closed the link (it left us, or it is gone): so does the client's connection.
                    placer.released(room, from: placement)
                    loop.execute { channel.close(promise: nil) }
                } catch {
                    placer.released(room, from: placement)
                    connectionLog.notice(self.logger, "relay failed", ["node": "\(node)", "url": "\(url)", "error": "\(error)"])
                    loop.execute {
                        // Not `resumeFailed`: the session may live on there; the client tries again.
                        let id = (try? first?.decoded.get())?.requestID
                        self.send(ServerEnvelope(.error(SignalingError(.internalError, "the room's node \(node) cannot be reached", requestID: id)),
                                                 requestID: id))
                        self.route = .undecided
                        // After the error (queued first on this loop): a close frame, then the close.
                        self.close()
                    }
                }
            }
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        logger.debug("websocket error", metadata: ["error": "\(error)"])
        context.close(promise: nil)
    }

    /// A message from the room's node: as it is for our clients, translated for LiveKit's.
    private func relayed(_ bytes: [UInt8], channel: Channel) {
        if dialect is NativeDialect {
            return write(WebSocketFrame(fin: true, opcode: .text, data: channel.allocator.buffer(bytes: bytes)), on: channel)
        }
        guard let envelope = try? ServerEnvelope.decode(bytes) else { return }
        apply(dialect.outbound(envelope), context: nil, channel: channel)
    }

    // SignalingPeer: called on the SFU's loop.
    func send(_ envelope: ServerEnvelope) {
        guard let channel else { return }
        channel.eventLoop.execute {
            self.apply(self.dialect.outbound(envelope), context: nil, channel: channel)
        }
    }

    /// Closes a WebSocket that did not join in time (policy violation, 1008).
    func closeUnjoined(reason: String) {
        guard let channel else { return }
        connectionLog.notice(logger, "websocket closed", ["reason": "\(reason)", "remote": "\(channel.remoteAddress.map { "\($0)" } ?? "?")"])
        sfu.countClosedUnjoined()
        channel.eventLoop.execute {
            var payload = channel.allocator.buffer(capacity: 2 + reason.utf8.count)
            payload.write(webSocketErrorCode: .policyViolation)
            payload.writeString(reason)
            channel.writeAndFlush(WebSocketFrame(fin: true, opcode: .connectionClose, data: payload)).whenComplete { _ in
                channel.close(promise: nil)
            }
        }
    }

    func close() {
        guard let channel else { return }
        channel.eventLoop.execute {
            var payload = channel.allocator.buffer(capacity: 2)
            payload.write(webSocketErrorCode: .normalClosure)
            channel.writeAndFlush(WebSocketFrame(fin: true, opcode: .connectionClose, data: payload)).whenComplete { _ in
                channel.close(promise: nil)
            }
        }
    }
}

/// RFC 6455 framing as a server must require it, before frames are aggregated: every client frame
/// masked (§5.1), no reserved bits without an extension (§5.2), no reserved opcodes (§5.2). A frame
/// that breaks it fails the connection with 1002.
final class StrictWebSocketFraming: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = WebSocketFrame
    typealias InboundOut = WebSocketFrame

    private let logger: Logger
    private static let known: [WebSocketOpcode] = [.continuation, .text, .binary, .connectionClose, .ping, .pong]

    /// Failed once: what follows until the close is read and dropped.
    private var failed = false

    init(logger: Logger) { self.logger = logger }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !failed else { return }
        let frame = unwrapInboundIn(data)
        let problem: String? = if frame.maskKey == nil {
            "client frames must be masked"
        } else if frame.rsv1 || frame.rsv2 || frame.rsv3 {
            "reserved bits set without an extension"
        } else if !Self.known.contains(frame.opcode) {
            "reserved opcode \(frame.opcode)"
        } else {
            nil
        }
        if let problem {
            failed = true
            return Self.fail(context, code: .protocolError, reason: problem, logger: logger)
        }
        context.fireChannelRead(data)
    }

    /// Sends a close frame with `code` and closes, logging why (notice level, rate-limited).
    ///
    /// The close is graceful (RFC 6455 §7.1.1): the server's side is shut (FIN after the close
    /// frame) and what the client still sends is read and dropped until it closes too, or for 2 s.
    /// Closing at once with the flood still unread makes the kernel reset the connection, and the
    /// client loses the error and the close frame it was owed.
    static func fail(_ context: ChannelHandlerContext, code: WebSocketErrorCode, reason: String, logger: Logger) {
        connectionLog.notice(logger, "websocket closed", ["reason": "\(reason)", "remote": "\(context.remoteAddress.map { "\($0)" } ?? "?")"])
        var payload = context.channel.allocator.buffer(capacity: 2 + reason.utf8.count)
        payload.write(webSocketErrorCode: code)
        payload.writeString(reason)
        let channel = context.channel
        context.writeAndFlush(NIOAny(WebSocketFrame(fin: true, opcode: .connectionClose, data: payload))).whenComplete { _ in
            channel.close(mode: .output, promise: nil)
            channel.setOption(ChannelOptions.autoRead, value: true).whenFailure { _ in }
            channel.eventLoop.scheduleTask(in: .seconds(2)) { channel.close(promise: nil) }
        }
    }
}

/// A token bucket: `burst` at most, refilled at `ratePerSecond`.
struct TokenBucket {
    let ratePerSecond: Double
    let burst: Double
    private var tokens: Double
    private var lastNs: UInt64?

    init(ratePerSecond: Double, burst: Double) {
        self.ratePerSecond = ratePerSecond
        self.burst = burst
        tokens = burst
    }

    /// Takes `amount` if there is that much; false (taking nothing) if not.
    mutating func take(_ amount: Double, nowNs: UInt64) -> Bool {
        if let lastNs, nowNs > lastNs { tokens = min(burst, tokens + Double(nowNs - lastNs) / 1e9 * ratePerSecond) }
        lastNs = nowNs
        guard tokens >= amount else { return false }
        tokens -= amount
        return true
    }
}

/// Notice-level lines about refused and closed connections, at most `perSecond` a second, so a
/// flood cannot flood the log; what was held back is counted in the next line let through.
final class RateLimitedLog: Sendable {
    private let state = NIOLockedValueBox<(second: Int64, lines: Int, suppressed: Int)>((0, 0, 0))
    let perSecond: Int

    init(perSecond: Int) { self.perSecond = perSecond }

    func notice(_ logger: Logger, _ message: String, _ metadata: Logger.Metadata) {
        let now = Int64(NIODeadline.now().uptimeNanoseconds / 1_000_000_000)
        let suppressed: Int? = state.withLockedValue { state in
            if state.second != now { state = (now, 0, state.suppressed) }
            guard state.lines < perSecond else {
                state.suppressed += 1
                return nil
            }
            state.lines += 1
            defer { state.suppressed = 0 }
            return state.suppressed
        }
        guard let suppressed else { return }
        var metadata = metadata
        if suppressed > 0 { metadata["suppressedBefore"] = "\(suppressed)" }
        logger.notice("\(message)", metadata: metadata)
    }
}

let connectionLog = RateLimitedLog(perSecond: 10)

/// Open connections per remote IP address; a connection over `maxConnectionsPerIP` is closed at once.
/// It also keeps every open connection, for a drain to close what is left.
final class ConnectionsPerIP: Sendable {
    private struct State {
        var perIP: [String: Int] = [:]
        var channels: [ObjectIdentifier: Channel] = [:]
        /// Those upgraded to a WebSocket (a participant's signaling, a relay); the rest are HTTP.
        var webSockets: Set<ObjectIdentifier> = []
    }
    private let state = NIOLockedValueBox(State())
    let limit: Int

    init(limit: Int) { self.limit = limit }

    /// Connections open now, of every address.
    var total: Int { state.withLockedValue { $0.channels.count } }
    /// WebSocket connections open now.
    var webSocketCount: Int { state.withLockedValue { $0.webSockets.count } }

    /// `channel` is a WebSocket from now on (a drain waits for those to close, not for HTTP).
    func upgraded(_ channel: Channel) {
        let id = ObjectIdentifier(channel)
        state.withLockedValue { state in if state.channels[id] != nil { state.webSockets.insert(id) } }
    }

    /// Counts `channel` for its address until it closes; false (counting nothing) when the
    /// address already has `limit` open.
    func admit(_ channel: Channel) -> Bool {
        let ip = channel.remoteAddress?.ipAddress
        let id = ObjectIdentifier(channel)
        let admitted = state.withLockedValue { state -> Bool in
            if let ip {
                guard state.perIP[ip, default: 0] < limit else { return false }
                state.perIP[ip, default: 0] += 1
            }
            state.channels[id] = channel
            return true
        }
        if admitted {
            channel.closeFuture.whenComplete { _ in
                self.state.withLockedValue { state in
                    state.channels[id] = nil
                    state.webSockets.remove(id)
                    guard let ip else { return }
                    state.perIP[ip, default: 1] -= 1
                    if state.perIP[ip] == 0 { state.perIP[ip] = nil }
                }
            }
        }
        return admitted
    }

    /// Closes every connection still open (a drain's last step: relays, WebSockets slow to close),
    /// or with `httpOnly` those that are not WebSockets (idle HTTP keep-alives: nothing to wait for).
    func closeAll(httpOnly: Bool = false) {
        let open = state.withLockedValue { state in state.channels.filter { !httpOnly || !state.webSockets.contains($0.key) }.map(\.value) }
        for channel in open { channel.close(promise: nil) }
    }
}

/// Closes a connection that has not joined (or resumed) within the deadline: one that never
/// finished the WebSocket upgrade, or a WebSocket that never sent a good `join`. Plain HTTP
/// requests (`/healthz`, `/metrics`, the web client) are answered long before it.
enum JoinDeadline {
    static func arm(_ channel: Channel, seconds: Int, sfu: ShardedSFU, logger: Logger) {
        channel.eventLoop.scheduleTask(in: .seconds(Int64(seconds))) {
            guard channel.isActive else { return }
            let peer = try? channel.pipeline.syncOperations.handler(type: WebSocketPeer.self)
            guard let peer else {
                // Plain HTTP: a keep-alive connection (page loads, scrapes) stays while it makes
                // requests, and goes after `seconds` without one.
                if let endpoints = try? channel.pipeline.syncOperations.handler(type: HTTPEndpoints.self),
                   let last = endpoints.lastRequestNs, NIODeadline.now().uptimeNanoseconds - last < UInt64(seconds) * 1_000_000_000 {
                    return arm(channel, seconds: seconds, sfu: sfu, logger: logger)
                }
                close(channel, reason: "no WebSocket within \(seconds) s", sfu: sfu, logger: logger)
                return
            }
            guard !peer.isRelaying else { return }
            sfu.hasJoined(peer).whenSuccess { joined in
                if !joined { peer.closeUnjoined(reason: "no join within \(seconds) s") }
            }
        }
    }

    static func close(_ channel: Channel, reason: String, sfu: ShardedSFU, logger: Logger) {
        connectionLog.notice(logger, "connection closed", ["reason": "\(reason)",
                                                           "remote": "\(channel.remoteAddress.map { "\($0)" } ?? "?")"])
        sfu.countClosedUnjoined()
        channel.close(promise: nil)
    }
}

/// Plain HTTP: `GET /healthz`, `GET /metrics`, in `--dev` mode `GET /dev-token`, and the web
/// client's files (``WebRoot``) for any other `GET`; anything else is 404.
final class HTTPEndpoints: ChannelInboundHandler, RemovableChannelHandler, @unchecked Sendable {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let metrics: @Sendable () -> EventLoopFuture<String>
    private let web: WebRoot?
    private let devTokens: DevTokenMinter?
    private let liveKit: LiveKitFrontEnd?
    private let whip: WHIPEndpoint?
    private let roomService: RoomServiceAPI?
    private var head: HTTPRequestHead?
    /// A WHIP request's body (at most `WHIPEndpoint.maxBodyBytes`; past it, only that it was larger).
    private var body: [UInt8] = []
    private var bodyTooLarge = false
    /// When the latest request arrived (monotonic ns), for the idle deadline.
    private(set) var lastRequestNs: UInt64?
    /// Response bytes written but not yet taken by the socket, and the most allowed: a client that
    /// pipelines requests and reads no responses is not read from while its socket is full, and is
    /// closed past the bound.
    private var queuedBytes = 0
    private let maxQueuedBytes: Int
    private let logger: Logger

    init(metrics: @escaping @Sendable () -> EventLoopFuture<String>, web: WebRoot?, devTokens: DevTokenMinter?, liveKit: LiveKitFrontEnd? = nil,
         whip: WHIPEndpoint? = nil, roomService: RoomServiceAPI? = nil, maxQueuedBytes: Int = ServerLimits().maxOutboundBytes,
         logger: Logger = Logger(label: "rtc.server")) {
        self.logger = logger
        self.roomService = roomService
        self.liveKit = liveKit
        self.whip = whip
        self.metrics = metrics
        self.web = web
        self.devTokens = devTokens
        self.maxQueuedBytes = maxQueuedBytes
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        context.channel.setOption(ChannelOptions.autoRead, value: context.channel.isWritable).whenFailure { _ in }
        context.fireChannelWritabilityChanged()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            body = []
            bodyTooLarge = false
            lastRequestNs = NIODeadline.now().uptimeNanoseconds
        case .body(var chunk):
            // Only WHIP and the server API read bodies; others are dropped as they come.
            guard let head, WHIPEndpoint.handles(head.uri) || RoomServiceAPI.handles(head.uri), !bodyTooLarge else { return }
            if body.count + chunk.readableBytes > max(WHIPEndpoint.maxBodyBytes, RoomServiceAPI.maxBodyBytes) {
                bodyTooLarge = true
                body = []
            } else {
                body += chunk.readBytes(length: chunk.readableBytes) ?? []
            }
        case .end:
            guard let head else { return }
            self.head = nil
            let answer: EventLoopFuture<HTTPReply>? =
                if let whip, WHIPEndpoint.handles(head.uri) {
                    whip.handle(method: head.method, uri: head.uri, headers: head.headers, body: body, bodyTooLarge: bodyTooLarge,
                                loop: context.eventLoop)
                } else if let roomService, RoomServiceAPI.handles(head.uri) {
                    roomService.handle(method: head.method, uri: head.uri, headers: head.headers, body: body, bodyTooLarge: bodyTooLarge,
                                       loop: context.eventLoop)
                } else if let roomService, RoomServiceAPI.handlesForwarded(head.uri) {
                    roomService.forwarded(method: head.method, uri: head.uri, headers: head.headers, loop: context.eventLoop)
                } else {
                    nil
                }
            if let answer {
                let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
                answer.whenComplete { result in
                    let (handler, context) = loopBound.value
                    let reply = (try? result.get()) ?? .text(.internalServerError, "the request failed")
                    let buffer = reply.bytes.map { context.channel.allocator.buffer(bytes: $0) } ?? context.channel.allocator.buffer(string: reply.body)
                    handler.respond(context, head, status: reply.status, type: reply.contentType, body: buffer, headers: reply.headers)
                }
                body = []
                return
            }
            let parts = head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
            switch (head.method, parts.first ?? head.uri) {
            case (.GET, "/rtc/v1"):
                // LiveKit's single-PeerConnection mode: its SDKs fall back to /rtc on a 404.
                respond(context, head, status: .notFound, type: "text/plain",
                        body: "single PeerConnection signaling (/rtc/v1) is not supported here: use /rtc\n")
            case (.GET, "/rtc/validate"), (.GET, "/rtc"):
                // LiveKit's SDKs ask why a connect failed; a refused connect is answered so too.
                guard let liveKit, liveKit.isEnabled || SignalPath(head) == .liveKit else {
                    return respond(context, head, status: .badRequest, type: "text/plain", body: "a WebSocket upgrade is expected at /rtc\n")
                }
                switch liveKit.admit(head) {
                case .success: respond(context, head, status: .ok, type: "text/plain", body: "success")
                case .failure(let refusal):
                    respond(context, head, status: HTTPResponseStatus(statusCode: refusal.status), type: "text/plain", body: refusal.reason)
                }
            case (.GET, "/dev-token"):
                guard let devTokens else {
                    return respond(context, head, status: .notFound, type: "text/plain", body: "tokens are minted here only in --dev mode\n")
                }
                switch devTokens.token(query: parts.count > 1 ? parts[1] : "") {
                case .success(let token): respond(context, head, status: .ok, type: "text/plain", body: token)
                case .failure(let error): respond(context, head, status: .badRequest, type: "text/plain", body: error.reason + "\n")
                }
            case (.GET, "/healthz"):
                respond(context, head, status: .ok, type: "text/plain", body: "ok\n")
            case (.GET, "/metrics"):
                let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
                metrics().hop(to: context.eventLoop).whenComplete { result in
                    let (handler, context) = loopBound.value
                    switch result {
                    case .success(let text):
                        handler.respond(context, head, status: .ok, type: "text/plain; version=0.0.4", body: text)
                    case .failure:
                        handler.respond(context, head, status: .internalServerError, type: "text/plain", body: "metrics unavailable\n")
                    }
                }
            case (.GET, let path), (.HEAD, let path):
                guard let web else {
                    return respond(context, head, status: .notFound, type: "text/plain", body: "not found (no web root: --web-root DIR)\n")
                }
                guard let file = web.file(forPath: path) else {
                    return respond(context, head, status: .notFound, type: "text/plain", body: "not found\n")
                }
                respond(context, head, status: .ok, type: file.contentType, body: context.channel.allocator.buffer(bytes: file.bytes),
                        headOnly: head.method == .HEAD)
            default:
                respond(context, head, status: .notFound, type: "text/plain", body: "not found\n")
            }
        }
    }

    private func respond(_ context: ChannelHandlerContext, _ request: HTTPRequestHead, status: HTTPResponseStatus, type: String,
                         body: String) {
        respond(context, request, status: status, type: type, body: context.channel.allocator.buffer(string: body))
    }

    private func respond(_ context: ChannelHandlerContext, _ request: HTTPRequestHead, status: HTTPResponseStatus, type: String,
                         body: ByteBuffer, headOnly: Bool = false, headers extra: [(String, String)] = []) {
        let size = body.readableBytes + 256  // the head, roughly
        guard queuedBytes + size <= maxQueuedBytes else {
            connectionLog.notice(logger, "http connection closed",
                                 ["reason": "not reading: \(queuedBytes) bytes of responses queued"])
            context.close(promise: nil)
            return
        }
        queuedBytes += size
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: type)
        headers.add(name: "Content-Length", value: String(body.readableBytes))
        headers.add(name: "Cache-Control", value: "no-cache")
        for (name, value) in extra { headers.add(name: name, value: value) }
        if !request.isKeepAlive { headers.add(name: "Connection", value: "close") }
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: request.version, status: status, headers: headers))), promise: nil)
        if !headOnly { context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil) }
        if request.isKeepAlive {
            context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in self.queuedBytes -= size }
        } else {
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
        }
    }
}

/// Largest WebSocket frame accepted: bigger frames close the connection (1009); inside it, the
/// signaling limit (64 KiB) is answered with error 1003.
let maxWebSocketFrame = 1 << 20

/// Binds the signaling port: `/rtc` upgrades to a WebSocket, the rest is plain HTTP.
func bindSignaling(host: String, port: Int, group: EventLoopGroup, sfu: ShardedSFU, cluster: ClusterHandle?, logger: Logger, tls: TLSContext?,
                   web: WebRoot?, devTokens: DevTokenMinter?, limits: ServerLimits, perIP: ConnectionsPerIP,
                   metrics: @escaping @Sendable () -> EventLoopFuture<String>) async throws -> Channel {
    let liveKit = LiveKitFrontEnd(configuration: sfu.configuration)
    let whip = WHIPEndpoint(sfu: sfu)
    let roomService = RoomServiceAPI(sfu: sfu, cluster: cluster)
    return try await ServerBootstrap(group: group)
        .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
        // A burst of connects (a thousand at once) must wait in the kernel, not be dropped: with
        // NIO's default backlog of 256 the overflow's handshakes stall on SYN-ACK retries.
        .serverChannelOption(.backlog, value: 4096)
        .childChannelInitializer { channel in
            guard perIP.admit(channel) else {
                connectionLog.notice(logger, "connection refused", ["reason": "over \(limits.maxConnectionsPerIP) connections from this address",
                                                                    "remote": "\(channel.remoteAddress.map { "\($0)" } ?? "?")"])
                sfu.countLimitRefusal()
                return channel.close()
            }
            JoinDeadline.arm(channel, seconds: limits.joinDeadlineSeconds, sfu: sfu, logger: logger)
            let endpoints = HTTPEndpoints(metrics: metrics, web: web, devTokens: devTokens, liveKit: liveKit, whip: whip,
                                          roomService: roomService, maxQueuedBytes: limits.maxOutboundBytes, logger: logger)
            let upgrader = NIOWebSocketServerUpgrader(
                maxFrameSize: maxWebSocketFrame,
                shouldUpgrade: { channel, head in
                    // `/rtc` only: ours, or LiveKit's with a token it admits. Anything else (a
                    // refused LiveKit token, `/rtc/v1`, `/rtc/validate`) is plain HTTP's to answer.
                    let upgrade = switch SignalPath(head) {
                    case .ours: true
                    case .liveKit: (try? liveKit.admit(head).get()) != nil
                    default: false
                    }
                    return channel.eventLoop.makeSucceededFuture(upgrade ? HTTPHeaders() : nil)
                },
                upgradePipelineHandler: { channel, head in
                    perIP.upgraded(channel)
                    return channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(StrictWebSocketFraming(logger: logger))
                        try channel.pipeline.syncOperations.addHandler(
                            NIOWebSocketFrameAggregator(minNonFinalFragmentSize: 0, maxAccumulatedFrameCount: 256,
                                                        maxAccumulatedFrameSize: maxWebSocketFrame))
                        let dialect: SignalingDialect = switch SignalPath(head) {
                        case .liveKit: try liveKit.dialect(for: head, logger: logger)
                        default: NativeDialect()
                        }
                        try channel.pipeline.syncOperations.addHandler(WebSocketPeer(sfu: sfu, logger: logger, limits: limits, cluster: cluster,
                                                                                     dialect: dialect))
                    }
                })
            let http: @Sendable () -> EventLoopFuture<Void> = {
                channel.pipeline.configureHTTPServerPipeline(
                    withServerUpgrade: (upgraders: [upgrader], completionHandler: { context in
                        context.pipeline.removeHandler(endpoints, promise: nil)
                    })
                ).flatMap { channel.pipeline.addHandler(endpoints) }
            }
            guard let tls else { return http() }
            return channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(try tls.handler())
            }.flatMap { _ in http() }
        }
        .bind(host: host, port: port).get()
}

/// Where rooms are placed: the cluster node, set once it has registered (after the signaling port
/// is bound, since its URL names that port), or the media processes of this server.
final class ClusterHandle: Sendable {
    private let box = NIOLockedValueBox<(any RoomPlacer)?>(nil)
    var node: (any RoomPlacer)? {
        get { box.withLockedValue { $0 } }
        set { box.withLockedValue { $0 = newValue } }
    }
}
