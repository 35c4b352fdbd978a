import NIOCore
import NIOPosix
import RedisWire
import Signaling

/// A Redis server's address from `redis://HOST:PORT[/DB]`.
public struct RedisURL: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var database: Int

    public init(parsing text: String) throws(RedisError) {
        guard text.hasPrefix("redis://") else { throw RedisError("\(text): expected redis://HOST:PORT[/DB]") }
        let rest = text.dropFirst("redis://".count)
        let parts = rest.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        var authority = parts[0]
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        guard let (host, port) = SignalingClient.hostAndPort(authority) else {
            throw RedisError("\(text): expected redis://HOST:PORT[/DB] with a port 1...65535")
        }
        self.host = host
        self.port = port
        if parts.count == 2, !parts[1].isEmpty {
            guard let database = Int(parts[1]), (0...255).contains(database) else { throw RedisError("\(text): the database must be 0...255") }
            self.database = database
        } else {
            database = 0
        }
    }

    public var description: String { "redis://\(host.contains(":") ? "[\(host)]" : host):\(port)/\(database)" }
}

public struct RedisError: Error, Sendable, Hashable, CustomStringConvertible {
    public let reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { "redis: \(reason)" }
}

/// One connection to Redis: commands are written in order and their replies matched in order
/// (RESP has no ids), each a future. Closed on any protocol error; every command waiting then fails.
///
/// RediStack, the maintained NIO Redis client, is not among the packages this project can use, so
/// this is a small client of its own over the RESP parser in `RedisWire` (fuzzed). It speaks the
/// few commands the cluster needs and nothing else: no pub/sub, no pipelining API, no pool.
final class RedisConnection: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let channel: Channel
    private var waiting = CircularBuffer<EventLoopPromise<RESPValue>>()
    private var buffered: [UInt8] = []

    private init(channel: Channel) { self.channel = channel }

    /// Connects within `timeout`, and selects the URL's database.
    static func connect(_ url: RedisURL, group: EventLoopGroup, timeout: TimeAmount = .seconds(2)) async throws(RedisError) -> RedisConnection {
        let channel: Channel
        do {
            channel = try await ClientBootstrap(group: group)
                .connectTimeout(timeout)
                .channelOption(.socketOption(.tcp_nodelay), value: 1)
                .connect(host: url.host, port: url.port).get()
        } catch {
            throw RedisError("cannot connect to \(url): \(error)")
        }
        let connection = RedisConnection(channel: channel)
        do {
            try await channel.pipeline.addHandler(connection).get()
            if url.database != 0 { _ = try await connection.command(["SELECT", String(url.database)]) }
            guard case .simpleString("PONG") = try await connection.command(["PING"]) else { throw RedisError("\(url) did not answer PING") }
        } catch let error as RedisError {
            channel.close(promise: nil)
            throw error
        } catch {
            channel.close(promise: nil)
            throw RedisError("\(url): \(error)")
        }
        return connection
    }

    /// Sends one command; its reply, or a thrown ``RedisError`` for an error reply or a lost connection.
    func command(_ arguments: [String], timeout: TimeAmount = .seconds(2)) async throws(RedisError) -> RESPValue {
        let loop = channel.eventLoop
        let promise = loop.makePromise(of: RESPValue.self)
        // No reply in time: the replies can no longer be matched to commands, so the connection goes.
        let timer = loop.scheduleTask(in: timeout) {
            self.failAll(RedisError("no reply to \(arguments.first ?? "") within \(timeout.nanoseconds / 1_000_000) ms"))
            self.channel.close(promise: nil)
        }
        promise.futureResult.whenComplete { _ in timer.cancel() }
        loop.execute {
            guard self.channel.isActive else { return promise.fail(RedisError("the connection is closed")) }
            self.waiting.append(promise)
            self.channel.writeAndFlush(self.channel.allocator.buffer(bytes: RESP.command(arguments)), promise: nil)
        }
        let reply: RESPValue
        do { reply = try await promise.futureResult.get() } catch let error as RedisError { throw error } catch { throw RedisError("\(error)") }
        if case .error(let message) = reply { throw RedisError(message) }
        return reply
    }

    var isActive: Bool { channel.isActive }
    func close() { channel.close(promise: nil) }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var buffer = unwrapInboundIn(data)
        buffered += buffer.readBytes(length: buffer.readableBytes) ?? []
        var index = 0
        do {
            while let (value, next) = try RESP.parse(buffered, from: index) {
                index = next
                guard let promise = waiting.popFirst() else { throw RESPError("a reply to no command") }
                promise.succeed(value)
            }
        } catch {
            failAll(RedisError("\(error)"))
            context.close(promise: nil)
            return
        }
        buffered.removeFirst(index)
    }

    func channelInactive(context: ChannelHandlerContext) {
        failAll(RedisError("the connection closed"))
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        failAll(RedisError("\(error)"))
        context.close(promise: nil)
    }

    private func failAll(_ error: RedisError) {
        while let promise = waiting.popFirst() { promise.fail(error) }
    }
}
