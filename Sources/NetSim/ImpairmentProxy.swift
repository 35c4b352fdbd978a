import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// A UDP relay on loopback that impairs traffic both ways: clients send to `address`, the proxy
/// forwards to `target` from a socket of its own per client (so the target sees distinct peers),
/// and answers come back the same way. Each direction has its own ``ImpairmentModel``; the profiles
/// can be changed while it runs (capacity steps, blackouts).
public final class ImpairmentProxy: @unchecked Sendable {
    public let target: SocketAddress
    private let group: EventLoopGroup
    private var front: Channel!
    private let loop: EventLoop
    /// Each client's socket toward the target (a bind in flight counts: datagrams queue behind it).
    private var clients: [SocketAddress: EventLoopFuture<Channel>] = [:]
    private var upstream: ImpairmentModel
    private var downstream: ImpairmentModel
    private let counters = NIOLockedValueBox((up: 0, down: 0, upDropped: 0, downDropped: 0))

    /// `host` and `port`: where clients send (loopback and a free port unless told; `rtc-cli proxy`
    /// listens on a network's address). Each client's socket toward the target binds to the
    /// target's side: loopback for a loopback target, any address otherwise.
    public static func start(target: SocketAddress, upstream: ImpairmentProfile = ImpairmentProfile(),
                             downstream: ImpairmentProfile = ImpairmentProfile(), seed: UInt64 = 1,
                             group: EventLoopGroup, host: String = "127.0.0.1", port: Int = 0) async throws -> ImpairmentProxy {
        let proxy = ImpairmentProxy(target: target, upstream: upstream, downstream: downstream, seed: seed, group: group)
        proxy.front = try await DatagramBootstrap(group: proxy.loop)
            .channelOption(.socketOption(.so_rcvbuf), value: 4 << 20)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(Relay { [weak proxy] envelope in proxy?.fromClient(envelope) })
                }
            }
            .bind(host: host, port: port).get()
        return proxy
    }

    private init(target: SocketAddress, upstream: ImpairmentProfile, downstream: ImpairmentProfile, seed: UInt64, group: EventLoopGroup) {
        self.target = target
        self.group = group
        loop = group.next()
        self.upstream = ImpairmentModel(profile: upstream, seed: seed)
        self.downstream = ImpairmentModel(profile: downstream, seed: seed &+ 0x5EED)
    }

    /// Where clients send.
    public var address: SocketAddress { front.localAddress! }

    /// Changes the profiles from now on.
    public func setProfiles(upstream: ImpairmentProfile? = nil, downstream: ImpairmentProfile? = nil) {
        loop.execute {
            if let upstream { self.upstream.profile = upstream }
            if let downstream { self.downstream.profile = downstream }
        }
    }

    /// When the first packet passed (monotonic µs, the clock `MediaClock` and NIO share): blackout
    /// windows count from it.
    public var firstPacketUs: Int64? { first.withLockedValue { $0 } }
    private let first = NIOLockedValueBox<Int64?>(nil)

    /// One packet as the proxy saw it: when it came in, its size, and how long it waited in
    /// the bottleneck queue (nil when it was dropped by any impairment).
    public struct TracedPacket: Sendable, Hashable {
        public var atUs: Int64
        public var bytes: Int
        public var queueUs: Int64?

        /// The rate a trace sent into the bottleneck per window of `windowUs` (bits per second),
        /// by window end in seconds from `originUs`; windows with no packet are left out.
        public static func rates(_ trace: [TracedPacket], originUs: Int64, windowUs: Int64 = 500_000) -> [(endS: Double, bps: Double)] {
            var bytes: [Int: Int] = [:]
            for packet in trace { bytes[Int((packet.atUs - originUs) / windowUs), default: 0] += packet.bytes }
            let windowS = Double(windowUs) / 1e6
            return bytes.keys.sorted().map { (Double($0 + 1) * windowS, Double(bytes[$0]!) * 8 / windowS) }
        }
    }

    /// Starts (or stops) recording every upstream packet, for send-rate and queueing figures.
    public func traceUpstream(_ on: Bool) { trace.withLockedValue { $0 = on ? [] : nil } }
    /// The upstream packets recorded since `traceUpstream(true)`.
    public var upstreamTrace: [TracedPacket] { trace.withLockedValue { $0 ?? [] } }
    private let trace = NIOLockedValueBox<[TracedPacket]?>(nil)
    /// The same for downstream packets (server to clients).
    public func traceDownstream(_ on: Bool) { downTrace.withLockedValue { $0 = on ? [] : nil } }
    public var downstreamTrace: [TracedPacket] { downTrace.withLockedValue { $0 ?? [] } }
    private let downTrace = NIOLockedValueBox<[TracedPacket]?>(nil)

    /// Packets seen and dropped each way.
    public var statistics: (up: Int, down: Int, upDropped: Int, downDropped: Int) { counters.withLockedValue { $0 } }

    public func close() async {
        try? await loop.submit { self.clients.values.forEach { $0.whenSuccess { $0.close(promise: nil) } } }.get()
        try? await front.close()
    }

    private static func nowUs() -> Int64 { Int64(NIODeadline.now().uptimeNanoseconds / 1000) }

    private func fromClient(_ envelope: AddressedEnvelope<ByteBuffer>) {
        let client = envelope.remoteAddress
        let now = Self.nowUs()
        first.withLockedValue { $0 = $0 ?? now }
        let arrivals = upstream.schedule(bytes: envelope.data.readableBytes, nowUs: now)
        let queueUs = arrivals.isEmpty ? nil : upstream.lastQueueUs
        trace.withLockedValue { $0?.append(TracedPacket(atUs: now, bytes: envelope.data.readableBytes, queueUs: queueUs)) }
        counters.withLockedValue {
            $0.up += 1
            if arrivals.isEmpty { $0.upDropped += 1 }
        }
        guard !arrivals.isEmpty else { return }
        let channel = clients[client] ?? socket(for: client)
        clients[client] = channel
        channel.whenSuccess { [self] channel in
            for arrival in arrivals {
                deliver(at: arrival) { channel.writeAndFlush(AddressedEnvelope(remoteAddress: self.target, data: envelope.data), promise: nil) }
            }
        }
    }

    /// A new client's socket of its own toward the target.
    private func socket(for client: SocketAddress) -> EventLoopFuture<Channel> {
        DatagramBootstrap(group: loop)
            .channelOption(.socketOption(.so_rcvbuf), value: 4 << 20)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(Relay { [weak self] answer in self?.fromTarget(answer, to: client) })
                }
            }
            .bind(host: target.ipAddress?.hasPrefix("127.") == true ? "127.0.0.1" : "0.0.0.0", port: 0)
    }

    private func fromTarget(_ envelope: AddressedEnvelope<ByteBuffer>, to client: SocketAddress) {
        let now = Self.nowUs()
        let arrivals = downstream.schedule(bytes: envelope.data.readableBytes, nowUs: now)
        let queueUs = arrivals.isEmpty ? nil : downstream.lastQueueUs
        downTrace.withLockedValue { $0?.append(TracedPacket(atUs: now, bytes: envelope.data.readableBytes, queueUs: queueUs)) }
        counters.withLockedValue {
            $0.down += 1
            if arrivals.isEmpty { $0.downDropped += 1 }
        }
        for arrival in arrivals {
            deliver(at: arrival) { self.front.writeAndFlush(AddressedEnvelope(remoteAddress: client, data: envelope.data), promise: nil) }
        }
    }

    private func deliver(at arrivalUs: Int64, _ body: @escaping @Sendable () -> Void) {
        let wait = arrivalUs - Self.nowUs()
        if wait <= 0 { body() } else { loop.scheduleTask(in: .microseconds(wait), body) }
    }
}

private final class Relay: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    let onDatagram: (AddressedEnvelope<ByteBuffer>) -> Void
    init(_ onDatagram: @escaping (AddressedEnvelope<ByteBuffer>) -> Void) { self.onDatagram = onDatagram }
    func channelRead(context: ChannelHandlerContext, data: NIOAny) { onDatagram(unwrapInboundIn(data)) }
}
