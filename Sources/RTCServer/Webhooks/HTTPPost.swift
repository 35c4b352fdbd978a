import NIOCore
import NIOHTTP1
import NIOPosix
import TLSStream

/// One HTTP/1.1 POST over SwiftNIO, for webhooks and `rtc-cli room`: the answer's status and body
/// (at most 1 MiB kept), or an error (no connection, no answer within the timeout). `https` goes
/// through TLS (``TLSStream``, over OpenSSL) with the system's roots.
public enum HTTPPost {
    public struct Target: Sendable, Hashable, CustomStringConvertible {
        public var secure: Bool
        public var host: String
        public var port: Int
        public var path: String

        public var description: String { "\(secure ? "https" : "http")://\(host.contains(":") ? "[\(host)]" : host):\(port)\(path)" }
    }

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    public struct Response: Sendable {
        public var status: Int
        public var body: [UInt8]
    }

    /// `path` on the HTTP side of a server given as its signaling URL or origin: `ws://H:P/rtc`,
    /// `wss://…`, `http://H:P` or `https://…` (the server API's callers: a node passing a call on,
    /// `rtc-cli room`).
    public static func target(server: String, path: String) throws(Failure) -> Target {
        var base = server
        for (from, to) in [("ws://", "http://"), ("wss://", "https://")] where base.lowercased().hasPrefix(from) {
            base = to + base.dropFirst(from.count)
        }
        while base.hasSuffix("/") { base.removeLast() }
        if base.hasSuffix("/rtc") { base.removeLast(4) }
        return try target(base + path)
    }

    /// `http://host[:port][/path]` or `https://…`; anything else is a clear error.
    public static func target(_ url: String) throws(Failure) -> Target {
        let secure: Bool
        let rest: Substring
        if url.lowercased().hasPrefix("http://") { secure = false; rest = url.dropFirst(7) }
        else if url.lowercased().hasPrefix("https://") { secure = true; rest = url.dropFirst(8) }
        else { throw Failure(description: "'\(url.prefix(80))' is not an http:// or https:// URL") }
        let authority = rest.prefix { $0 != "/" && $0 != "?" }
        var path = String(rest.dropFirst(authority.count))
        if path.isEmpty || path.hasPrefix("?") { path = "/" + path }
        var host = String(authority)
        var port = secure ? 443 : 80
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { throw Failure(description: "'\(url.prefix(80))': an IPv6 host needs its ]") }
            let after = host[host.index(after: close)...]
            if after.hasPrefix(":") {
                guard let number = Int(after.dropFirst()), (1...65535).contains(number) else { throw Failure(description: "'\(url.prefix(80))': a bad port") }
                port = number
            }
            host = String(host[host.index(after: host.startIndex)..<close])
        } else if let colon = host.lastIndex(of: ":") {
            guard let number = Int(host[host.index(after: colon)...]), (1...65535).contains(number) else {
                throw Failure(description: "'\(url.prefix(80))': a bad port")
            }
            port = number
            host = String(host[..<colon])
        }
        guard !host.isEmpty else { throw Failure(description: "'\(url.prefix(80))' names no host") }
        return Target(secure: secure, host: host, port: port, path: path)
    }

    /// One request (a POST unless `method` says otherwise), its answer's status and body.
    public static func send(_ target: Target, method: HTTPMethod = .POST, headers extra: [(String, String)], body: [UInt8], on loop: EventLoop,
                            tls: TLSContext?, timeout: TimeAmount) -> EventLoopFuture<Response> {
        let promise = loop.makePromise(of: Response.self)
        if target.secure && tls == nil {
            // Never plain text to an https:// target.
            promise.fail(Failure(description: "\(target): https needs TLS, which could not be set up"))
            return promise.futureResult
        }
        let bootstrap = ClientBootstrap(group: loop)
            .connectTimeout(timeout)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if target.secure, let tls {
                        try channel.pipeline.syncOperations.addHandler(try tls.handler(serverName: target.host))
                    }
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    try channel.pipeline.syncOperations.addHandler(StatusReader(promise: promise))
                }
            }
        let deadline = loop.scheduleTask(in: timeout) { promise.fail(Failure(description: "no answer within \(timeout.nanoseconds / 1_000_000) ms")) }
        bootstrap.connect(host: target.host, port: target.port).whenComplete { result in
            switch result {
            case .failure(let error):
                promise.fail(Failure(description: "no connection: \(error)"))
            case .success(let channel):
                var head = HTTPRequestHead(version: .http1_1, method: method, uri: target.path)
                head.headers.add(name: "Host", value: target.port == (target.secure ? 443 : 80) ? target.host : "\(target.host):\(target.port)")
                head.headers.add(name: "Content-Length", value: String(body.count))
                head.headers.add(name: "Connection", value: "close")
                for (name, value) in extra { head.headers.add(name: name, value: value) }
                channel.write(HTTPClientRequestPart.head(head), promise: nil)
                channel.write(HTTPClientRequestPart.body(.byteBuffer(channel.allocator.buffer(bytes: body))), promise: nil)
                channel.writeAndFlush(HTTPClientRequestPart.end(nil), promise: nil)
                promise.futureResult.whenComplete { _ in channel.close(promise: nil) }
            }
        }
        promise.futureResult.whenComplete { _ in deadline.cancel() }
        return promise.futureResult
    }

    /// Takes the answer's status and body (its first MiB) at its end.
    private final class StatusReader: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = HTTPClientResponsePart
        private let promise: EventLoopPromise<Response>
        private var status: Int?
        private var body: [UInt8] = []

        init(promise: EventLoopPromise<Response>) { self.promise = promise }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let head): status = Int(head.status.code)
            case .body(var chunk):
                if body.count < 1 << 20 { body += chunk.readBytes(length: min(chunk.readableBytes, (1 << 20) - body.count)) ?? [] }
            case .end: if let status { promise.succeed(Response(status: status, body: body)) }
            }
        }

        func channelInactive(context: ChannelHandlerContext) {
            promise.fail(Failure(description: "the connection closed before an answer"))
            context.fireChannelInactive()
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            promise.fail(Failure(description: "\(error)"))
            context.close(promise: nil)
        }
    }
}
