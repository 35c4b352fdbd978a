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
    /// The signaling connections open now (a drain waits for them to close).
    private let connections: ConnectionsPerIP
    private let webhooks: WebhookNotifier?

    public static func start(configuration: ServerConfiguration, group: EventLoopGroup,
                             logger: Logger = Logger(label: "rtc.server")) async throws -> RTCServerApp {
        var tls: TLSContext?
        if let certificatePath = configuration.tlsCertificatePath, let keyPath = configuration.tlsKeyPath {
            tls = try TLSContext.server(certificateChainFile: certificatePath, privateKeyFile: keyPath)
        }
        // A wrong Redis URL is refused before anything binds.
        let redisURL = try configuration.redisURL.map { text throws(RedisError) in try RedisURL(parsing: text) }
        let sfu = try await ShardedSFU.start(configuration: configuration, group: group, logger: logger)
        if let path = configuration.stateFilePath {
            // The rooms a drained server left: they wait here for their participants.
            do {
                if let state = try RoomStateFile(path: path).take() {
                    sfu.restore(state)
                    logger.info("rooms taken over from the state file", metadata: ["path": "\(path)", "rooms": "\(state.rooms.count)"])
                }
            } catch {
                logger.error("the state file is not taken up: rooms start afresh", metadata: ["error": "\(error)"])
            }
        }
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
        let connections = ConnectionsPerIP(limit: configuration.limits.maxConnectionsPerIP)
        let channel = try await bindSignaling(
            host: configuration.signalingHost ?? configuration.host, port: configuration.signalingPort, group: group, sfu: sfu,
            cluster: handle, logger: logger, tls: tls,
            web: configuration.webRoot.map(WebRoot.init(directory:)),
            devTokens: configuration.mintsDevTokens ? DevTokenMinter(secret: configuration.secret) : nil,
            limits: configuration.limits, perIP: connections,
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
                                                      group: group, logger: logger, hasRoom: { sfu.serves($0) },
                                                      adopt: { sfu.restore($0) }) {
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
                            otherMetrics: otherMetrics, connections: connections, webhooks: webhooks)
    }

    private init(sfu: ShardedSFU, signalingChannel: Channel, metrics: ServerMetrics, logger: Logger, cluster: ClusterNode?,
                 placement: ClusterHandle, otherMetrics: NIOLockedValueBox<(@Sendable () async -> [String])?>,
                 connections: ConnectionsPerIP, webhooks: WebhookNotifier?) {
        self.connections = connections
        self.webhooks = webhooks
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

    /// Closes the signaling port: no new connection reaches this server (the first step of
    /// ``shutdown(drainTimeout:)``, taken early by a front whose media processes drain first).
    public func stopAccepting() async {
        try? await signalingChannel.close()
    }

    /// Graceful shutdown, a drain as operators expect of a rolling restart (docs/server.md):
    /// 1. the signaling port closes, so no join reaches this server any more (the next server, or
    ///    the cluster's other nodes, take them: the port is free for a new process at once);
    /// 2. the rooms' state (settings, metadata, each participant's) is saved for whoever takes them
    ///    (``RoomState``: the state file, Redis); a cluster node leaves the registry, so its rooms
    ///    are placed on another node;
    /// 3. every participant of every dialect is told to join again (our `leave{serverShutdown}`,
    ///    LiveKit's `LeaveRequest` with action `RECONNECT`) and the media ports close;
    /// 4. it waits, at most `drainTimeout`, for those connections to close and for queued
    ///    webhooks to go out; what is left then is dropped.
    /// Returns what was left undone at the deadline.
    @discardableResult
    public func shutdown(drainTimeout: Duration = .seconds(10)) async -> (connections: Int, webhooks: Int) {
        logger.info("draining", metadata: ["participants": "\(sfu.participantsPerShard.reduce(0, +))",
                                           "connections": "\(connections.total)", "drainTimeoutSeconds": "\(drainTimeout.components.seconds)"])
        await stopAccepting()
        if cluster != nil || sfu.configuration.stateFilePath != nil {
            let state = await sfu.roomState()
            if let path = sfu.configuration.stateFilePath {
                do { try RoomStateFile(path: path).save(state) } catch { logger.error("room state not saved", metadata: ["error": "\(error)"]) }
            }
            await cluster?.handOver(state)
        }
        await cluster?.stop()
        await sfu.shutdown()
        let clock = ContinuousClock()
        let deadline = clock.now + drainTimeout
        // Idle HTTP keep-alives (a page's, an API client's) have nothing to wait for: closed now.
        // The participants' WebSockets close as their leave goes out; any still open after a
        // short grace (a relay to another node, a peer slow to close) is closed then.
        connections.closeAll(httpOnly: true)
        let grace = min(deadline, clock.now + .seconds(1))
        while connections.webSocketCount > 0, clock.now < grace { try? await Task.sleep(for: .milliseconds(10)) }
        connections.closeAll()
        var left = (connections: connections.total, webhooks: webhooks?.counters.queued ?? 0)
        while left.connections + left.webhooks > 0, clock.now < deadline {
            try? await Task.sleep(for: .milliseconds(20))
            left = (connections.total, webhooks?.counters.queued ?? 0)
        }
        if left.connections + left.webhooks > 0 {
            logger.warning("drain timed out", metadata: ["connections": "\(left.connections)", "webhooks": "\(left.webhooks)"])
        } else {
            logger.info("drained")
        }
        return left
    }
}
