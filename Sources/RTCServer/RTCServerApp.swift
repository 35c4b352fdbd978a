import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import TLSStream
import Signaling

/// The whole server: signaling (WebSocket + HTTP) on one TCP port and the SFU on one UDP port.
///
/// Signaling uses SwiftNIO's own HTTP/1 and WebSocket handlers rather than Hummingbird: the
/// server needs only `/rtc`, `/healthz` and `/metrics`, and the client side (which a screen-share
/// process links, under a hard memory budget) can then share the same small NIO stack.
public final class RTCServerApp: Sendable {
    /// The media plane: one SFU per media thread (`configuration.mediaThreads`).
    public let sfu: ShardedSFU
    public let signalingChannel: Channel
    private let metrics: ServerMetrics
    public let logger: Logger
    /// With `redisURL`: this node of the cluster.
    public let cluster: ClusterNode?
    /// Where joins' rooms are placed (the cluster node, or media processes).
    private let placement: ClusterHandle
    /// The `/metrics` pages of this server's other processes, added to its own (``PrometheusSum``).
    private let otherMetrics: NIOLockedValueBox<(@Sendable () async -> [String])?>

    public static func start(configuration: ServerConfiguration, group: EventLoopGroup,
                             logger: Logger = Logger(label: "rtc.server")) async throws -> RTCServerApp {
        var tls: TLSContext?
        if let certificatePath = configuration.tlsCertificatePath, let keyPath = configuration.tlsKeyPath {
            tls = try TLSContext.server(certificateChainFile: certificatePath, privateKeyFile: keyPath)
        }
        // A wrong Redis URL is refused before anything binds.
        let redisURL = try configuration.redisURL.map { text throws(RedisError) in try RedisURL(parsing: text) }
        let sfu = try await ShardedSFU.start(configuration: configuration, group: group, logger: logger)
        let webhooks: WebhookNotifier?
        do {
            let key = configuration.webhookAPIKey ?? ""
            webhooks = try WebhookNotifier(urls: configuration.webhookURLs, apiKey: key, secret: configuration.liveKitKeys[key] ?? "",
                                           queueLimit: configuration.webhookQueueLimit, group: group, logger: logger)
        } catch {
            await sfu.shutdown()
            throw error
        }
        if let webhooks { try await sfu.setEventSink { webhooks.post($0) } }
        let handle = ClusterHandle()
        let metrics = ServerMetrics()
        let otherMetrics = NIOLockedValueBox<(@Sendable () async -> [String])?>(nil)
        let channel = try await bindSignaling(
            host: configuration.signalingHost ?? configuration.host, port: configuration.signalingPort, group: group, sfu: sfu,
            cluster: handle, logger: logger, tls: tls,
            web: configuration.webRoot.map(WebRoot.init(directory:)),
            devTokens: configuration.mintsDevTokens ? DevTokenMinter(secret: configuration.secret) : nil,
            limits: configuration.limits,
            metrics: {
                let own = sfu.counterSnapshot.map { metrics.scrape($0) + (webhooks?.prometheus ?? "") }
                guard let others = otherMetrics.withLockedValue({ $0 }) else { return own }
                return own.flatMap { text in own.eventLoop.makeFutureWithTask { PrometheusSum.sum([text] + (await others())) } }
            })
        var cluster: ClusterNode?
        if let redisURL {
            let port = channel.localAddress?.port ?? configuration.signalingPort
            let host = configuration.announceAddresses.first ?? configuration.host
            let url = configuration.nodeSignalingURL ?? "ws://\(host.contains(":") ? "[\(host)]" : host):\(port)/rtc"
            do {
                cluster = try await ClusterNode.start(nodeID: configuration.nodeID ?? "node-\(port)", signalingURL: url, redisURL: redisURL,
                                                      group: group, logger: logger, hasRoom: { sfu.serves($0) }) {
                    // Rooms made by CreateRoom are kept too: their joins come here, to their settings.
                    (sfu.participantsPerShard.reduce(0, +), sfu.roomNames + sfu.waitingRoomNames)
                }
            } catch {
                await sfu.shutdown()
                try? await channel.close()
                throw error
            }
            handle.node = cluster
        }
        logger.info("server listening", metadata: [
            "signaling": "\(channel.localAddress.map { "\($0)" } ?? "?")", "media": "\(sfu.mediaAddresses.map { "\($0)" }.joined(separator: ", "))",
        ])
        return RTCServerApp(sfu: sfu, signalingChannel: channel, metrics: metrics, logger: logger, cluster: cluster, placement: handle,
                            otherMetrics: otherMetrics)
    }

    private init(sfu: ShardedSFU, signalingChannel: Channel, metrics: ServerMetrics, logger: Logger, cluster: ClusterNode?,
                 placement: ClusterHandle, otherMetrics: NIOLockedValueBox<(@Sendable () async -> [String])?>) {
        self.cluster = cluster
        self.placement = placement
        self.otherMetrics = otherMetrics
        self.sfu = sfu
        self.signalingChannel = signalingChannel
        self.metrics = metrics
        self.logger = logger
    }

    /// Places joins' rooms with `placer` from now on (media processes: ``ProcessPlacer``). Not
    /// with a cluster, whose node places them.
    public func placeRooms(with placer: any RoomPlacer) {
        precondition(cluster == nil, "a cluster node places this server's rooms")
        placement.node = placer
    }

    /// From now on `/metrics` adds up this process's page and the pages `others` returns (the
    /// media processes' pages at the front of `--media-processes`): one scrape, the whole server.
    public func sumMetrics(with others: @escaping @Sendable () async -> [String]) {
        otherMetrics.withLockedValue { $0 = others }
    }

    /// The signaling (TCP) address; `ws://<it>/rtc` for clients.
    public var signalingAddress: SocketAddress? { signalingChannel.localAddress }
    public var mediaAddress: SocketAddress? { sfu.mediaAddress }

    /// Graceful shutdown: every participant is told `serverShutdown`, then the ports close.
    public func shutdown() async {
        logger.info("shutting down")
        await cluster?.stop()
        await sfu.shutdown()
        try? await signalingChannel.close()
    }
}
