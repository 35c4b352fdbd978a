import NIOCore
import NIOPosix

/// Keeps a media UDP socket open: binds it again, on the same address and port, when it closes on
/// its own.
///
/// NIO closes a datagram channel on any send error but EMSGSIZE and EHOSTUNREACH. A host firewall
/// that rejects a datagram in its OUTPUT chain makes `sendto` fail with EPERM (EACCES for some
/// rules), so one rejected datagram would otherwise end every session on the socket for good: a
/// client's media, or the server's whole media port. On the same port, nothing above notices but
/// the datagrams lost meanwhile: the peers' addresses, candidates, ICE, DTLS and SRTP all stay. A
/// socket that cannot be bound again is tried again every second. On the socket's event loop.
final class SocketKeeper: @unchecked Sendable {
    private let host: String
    private let port: Int
    private let loop: EventLoop
    private let paths: MediaPaths
    private weak var router: DatagramRouter?
    private var stopped = false
    /// Sockets bound again so far.
    private(set) var rebinds = 0
    static let firstRetry: TimeAmount = .milliseconds(100)
    static let laterRetry: TimeAmount = .seconds(1)

    init(host: String, port: Int, loop: EventLoop, paths: MediaPaths, router: DatagramRouter) {
        self.host = host
        self.port = port
        self.loop = loop
        self.paths = paths
        self.router = router
    }

    /// Rebinds when `channel` (the paths' UDP socket) closes unless ``stop()`` came first.
    func watch(_ channel: Channel) {
        channel.closeFuture.whenComplete { [weak self] _ in
            guard let self else { return }
            self.loop.execute {
                guard !self.stopped, self.paths.udp === channel else { return }
                self.loop.scheduleTask(in: Self.firstRetry) { self.rebind() }
            }
        }
    }

    /// The owner closes the socket itself from now on.
    func stop() {
        loop.preconditionInEventLoop()
        stopped = true
    }

    private func rebind() {
        guard !stopped else { return }
        let handler = InboundHandler()
        handler.router = router
        let (host, port, loop) = (self.host, self.port, self.loop)
        Task {
            let socket = try? await bindMediaSocket(host: host, port: port, group: loop, handler: handler)
            loop.execute {
                guard let socket else {
                    if !self.stopped { self.loop.scheduleTask(in: Self.laterRetry) { self.rebind() } }
                    return
                }
                guard !self.stopped else {
                    socket.channel.close(promise: nil)
                    return
                }
                self.paths.replaceUDP(socket)
                self.rebinds += 1
                self.watch(socket.channel)
            }
        }
    }
}
