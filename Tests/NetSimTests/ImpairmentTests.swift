import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NetSim
import TestKit
import Testing

@Suite("Impairment model and proxy")
struct ImpairmentTests {
    /// Sends `count` packets of `bytes` every `intervalUs`; returns each packet's arrivals.
    static func run(_ profile: ImpairmentProfile, seed: UInt64 = 7, count: Int = 10_000, bytes: Int = 1200,
                    intervalUs: Int64 = 1000) -> [[Int64]] {
        var model = ImpairmentModel(profile: profile, seed: seed)
        return (0..<count).map { model.schedule(bytes: bytes, nowUs: Int64($0) * intervalUs) }
    }

    @Test("the same seed gives the same network; another seed another")
    func deterministic() {
        var profile = ImpairmentProfile(loss: 0.1, delayMs: 30, jitterMs: 10)
        profile.reorder = 0.05
        #expect(Self.run(profile, seed: 1) == Self.run(profile, seed: 1))
        #expect(Self.run(profile, seed: 1) != Self.run(profile, seed: 2))
    }

    @Test("random loss hits its rate", arguments: [0.01, 0.1, 0.3])
    func randomLoss(rate: Double) {
        let lost = Self.run(ImpairmentProfile(loss: rate)).filter(\.isEmpty).count
        #expect(abs(Double(lost) / 10_000 - rate) < 0.015, "\(lost) lost")
    }

    @Test("Gilbert-Elliott loss comes in bursts")
    func burstLoss() {
        var profile = ImpairmentProfile()
        profile.enterBurst = 0.05
        profile.leaveBurst = 0.25  // mean burst 4 packets, ~17 % in bursts
        let lost = Self.run(profile).map(\.isEmpty)
        let rate = Double(lost.filter { $0 }.count) / Double(lost.count)
        var runs: [Int] = [], current = 0
        for isLost in lost {
            if isLost { current += 1 } else if current > 0 { runs.append(current); current = 0 }
        }
        let meanRun = Double(runs.reduce(0, +)) / Double(max(1, runs.count))
        #expect((0.12...0.22).contains(rate), "loss \(rate)")
        #expect(meanRun > 2.5, "mean burst \(meanRun) packets")
    }

    @Test("delay and jitter stay in bounds and keep order unless reordering is asked for")
    func delayJitterReorder() {
        let arrivals = Self.run(ImpairmentProfile(delayMs: 30, jitterMs: 10))
        let delays = arrivals.enumerated().map { Double($1[0] - Int64($0) * 1000) / 1000 }
        #expect(delays.allSatisfy { $0 >= 20 && $0 <= 41 })
        #expect(zip(arrivals.dropFirst(), arrivals).allSatisfy { $0[0] >= $1[0] }, "jitter alone keeps order")
        var profile = ImpairmentProfile(delayMs: 30)
        profile.reorder = 0.05
        let reordered = Self.run(profile)
        #expect(zip(reordered.dropFirst(), reordered).contains { $0[0] < $1[0] })
    }

    @Test("a bandwidth cap paces packets and drops past its queue")
    func bandwidthCap() {
        var profile = ImpairmentProfile()
        profile.bandwidthBps = 1_000_000
        profile.queueMs = 200
        // 1200-byte packets every 1 ms = 9.6 Mbps into a 1 Mbps link.
        let arrivals = Self.run(profile, count: 5000)
        let delivered = arrivals.compactMap(\.first)
        let seconds = Double(delivered.last! - delivered.first!) / 1e6
        let rate = Double(delivered.count * 1200 * 8) / seconds
        #expect(abs(rate - 1_000_000) < 50_000, "delivered at \(rate) bps")
        let queueing = arrivals.enumerated().compactMap { index, times in times.first.map { Double($0 - Int64(index) * 1000) / 1000 } }
        #expect((queueing.max() ?? 0) <= 215, "queue delay \(queueing.max() ?? 0) ms")
    }

    @Test("blackouts drop everything inside their window only")
    func blackout() {
        var profile = ImpairmentProfile()
        profile.blackouts = [2.0...5.0]
        let arrivals = Self.run(profile, count: 8000)
        let before = arrivals[1000...1999].allSatisfy { !$0.isEmpty }
        let during = arrivals[2001...4999].allSatisfy { $0.isEmpty }
        let after = arrivals[5001...7999].allSatisfy { !$0.isEmpty }
        #expect(before && during && after)
    }

    @Test("the proxy relays UDP both ways and applies its profile")
    func proxyRelays() async throws {
        let group = MultiThreadedEventLoopGroup.singleton
        let received = NIOLockedBox()
        // An echo server as the target.
        let echo = try await DatagramBootstrap(group: group).channelInitializer { channel in
            channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(Echo()) }
        }.bind(host: "127.0.0.1", port: 0).get()
        var down = ImpairmentProfile(delayMs: 20)
        down.loss = 0
        let proxy = try await ImpairmentProxy.start(target: echo.localAddress!, upstream: ImpairmentProfile(loss: 0.5), downstream: down,
                                                    seed: 3, group: group)
        let client = try await DatagramBootstrap(group: group).channelInitializer { channel in
            channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(Count(received)) }
        }.bind(host: "127.0.0.1", port: 0).get()
        for index in 0..<200 {
            try await client.writeAndFlush(AddressedEnvelope(remoteAddress: proxy.address, data: ByteBuffer(bytes: [UInt8(index % 256)])))
        }
        // Every datagram through the proxy, and every echo of one it forwarded back (20 ms down):
        // waited for, not slept through.
        #expect(await eventually {
            let stats = proxy.statistics  // one snapshot for both counts
            return stats.up == 200 && received.value == 200 - stats.upDropped
        })
        let stats = proxy.statistics
        #expect(stats.up == 200)
        #expect((70...130).contains(stats.upDropped), "\(stats.upDropped) dropped upstream")
        #expect(received.value == 200 - stats.upDropped, "every echo of a forwarded packet came back")
        await proxy.close()
        try await client.close()
        try await echo.close()
    }
}

final class NIOLockedBox: @unchecked Sendable {
    private let lock = NIOLock()
    private var count = 0
    func add() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}

private final class Echo: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    typealias OutboundOut = AddressedEnvelope<ByteBuffer>
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        context.writeAndFlush(wrapOutboundOut(unwrapInboundIn(data)), promise: nil)
    }
}

private final class Count: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    let box: NIOLockedBox
    init(_ box: NIOLockedBox) { self.box = box }
    func channelRead(context: ChannelHandlerContext, data: NIOAny) { box.add() }
}
