import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket
import Signaling

/// A signaling server that follows a script instead of running an SFU: for each request it is
/// given, `answer` says what to reply (or nothing) and whether to close the connection after it,
/// and when. It stands in for servers in states the real one passes through too quickly to test:
/// one whose room's node just died, one that takes a join and then goes away.
public final class ScriptedSignalingServer: Sendable {
    /// What the server does with one request.
    public struct Answer: Sendable {
        public var reply: ServerMessage?
        /// Close the connection this long after the reply (nil: keep it open).
        public var closeAfter: TimeAmount?
        public init(reply: ServerMessage?, closeAfter: TimeAmount? = nil) {
            self.reply = reply
            self.closeAfter = closeAfter
        }
    }

    /// Connections accepted so far.
    public var accepted: Int { counts.withLockedValue { $0.connections } }
    /// Requests seen so far, by type (`join`, `resume`, ...).
    public func requests(_ type: String) -> Int { counts.withLockedValue { $0.requests[type, default: 0] } }

    private let counts = NIOLockedValueBox<(connections: Int, requests: [String: Int])>((0, [:]))
    private let children = NIOLockedValueBox<[Channel]>([])
    private let channel: Channel

    /// Listens on 127.0.0.1:`port` (0: any free port).
    public init(group: EventLoopGroup, port: Int = 0, answer: @escaping @Sendable (ClientEnvelope) -> Answer) async throws {
        let counts = self.counts, children = self.children
        channel = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                counts.withLockedValue { $0.connections += 1 }
                children.withLockedValue { $0.append(channel) }
                let upgrader = NIOWebSocketServerUpgrader(
                    shouldUpgrade: { channel, _ in channel.eventLoop.makeSucceededFuture(HTTPHeaders()) },
                    upgradePipelineHandler: { channel, _ in
                        channel.eventLoop.makeCompletedFuture {
                            try channel.pipeline.syncOperations.addHandler(Script(counts: counts, answer: answer))
                        }
                    })
                return channel.pipeline.configureHTTPServerPipeline(withServerUpgrade: (upgraders: [upgrader], completionHandler: { _ in }))
            }
            .bind(host: "127.0.0.1", port: port).get()
    }

    public var url: String { "ws://127.0.0.1:\(channel.localAddress!.port!)/rtc" }

    /// Stops listening and closes the connections it accepted.
    public func stop() async {
        try? await channel.close()
        for child in children.withLockedValue({ $0 }) { try? await child.close() }
    }

    private final class Script: ChannelInboundHandler, Sendable {
        typealias InboundIn = WebSocketFrame
        typealias OutboundOut = WebSocketFrame
        let counts: NIOLockedValueBox<(connections: Int, requests: [String: Int])>
        let answer: @Sendable (ClientEnvelope) -> Answer

        init(counts: NIOLockedValueBox<(connections: Int, requests: [String: Int])>, answer: @escaping @Sendable (ClientEnvelope) -> Answer) {
            self.counts = counts
            self.answer = answer
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let frame = unwrapInboundIn(data)
            let channel = context.channel
            if frame.opcode == .connectionClose { return channel.close(promise: nil) }
            guard frame.opcode == .text, let request = try? ClientEnvelope.decode(Array(frame.unmaskedData.readableBytesView)) else { return }
            counts.withLockedValue { $0.requests[request.message.type, default: 0] += 1 }
            let answer = answer(request)
            let written: EventLoopFuture<Void>
            if let reply = answer.reply {
                let bytes = ServerEnvelope(reply, requestID: request.requestID).encoded()
                written = context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .text, data: channel.allocator.buffer(bytes: bytes))))
            } else {
                written = channel.eventLoop.makeSucceededVoidFuture()
            }
            guard let closeAfter = answer.closeAfter else { return }
            written.whenComplete { _ in channel.eventLoop.scheduleTask(in: closeAfter) { channel.close(promise: nil) } }
        }
    }
}
