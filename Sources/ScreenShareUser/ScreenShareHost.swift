import NIOConcurrencyHelpers
import RTCCore

#if canImport(Glibc)
import Glibc
#endif

/// The host app's end of the screen-share link (the app-group + socket pattern of the seeds): it
/// listens on a Unix-domain socket in a shared directory, (optionally) launches the sharer process,
/// hands it the setup, starts, pauses and force-stops it, and reports what the sharer says. A sharer
/// that dies is noticed at once (its socket closes with it) and reported as `finished(error)`.
///
/// In relay mode the host's own process publishes the sharer's frames as `<host>_sub`.
public final class ScreenShareHost: @unchecked Sendable {
    public let linkPath: String
    public let events: AsyncStream<ScreenShareEvent>
    private let continuation: AsyncStream<ScreenShareEvent>.Continuation
    private let listener: LinkListener
    private let lock = NIOLock()
    private var link: LinkConnection?
    private var finished = false
    private var process: pid_t?
    private var ring: FrameRing?
    /// Relay mode: the session that publishes the sharer's frames from this process.
    public private(set) var relaySession: ScreenShareSession?
    public let version: Int

    /// Listens at `linkPath` (a socket file in a directory both processes can reach).
    public init(linkPath: String, version: Int = screenShareLinkVersion) throws(LinkError) {
        self.linkPath = linkPath
        self.version = version
        listener = try LinkListener(path: linkPath)
        (events, continuation) = AsyncStream.makeStream(of: ScreenShareEvent.self)
    }

    deinit { listener.close() }

    /// Starts a sharer process (for example `rtc-cli share --link <linkPath>`); returns its pid.
    @discardableResult
    public func launchSharer(executable: String, arguments: [String]) throws(LinkError) -> pid_t {
        var pid: pid_t = 0
        var argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) }
        argv.append(nil)
        defer { for pointer in argv { free(pointer) } }
        let status = posix_spawn(&pid, executable, nil, nil, argv, environ)
        guard status == 0 else { throw LinkError("cannot start \(executable): \(String(cString: strerror(status)))") }
        lock.withLock { process = pid }
        return pid
    }

    /// The sharer process this host launched, if any.
    public var sharerProcess: pid_t? { lock.withLock { process } }

    /// Waits for the sharer to connect, checks versions, hands over `setup` and starts the share.
    /// Returns once the sharer reported `started` (or throws with why not).
    public func start(_ setup: ScreenShareSetup, acceptTimeoutMs: Int32 = 15_000) async throws {
        let link = try listener.accept(timeoutMs: acceptTimeoutMs)
        lock.withLock { self.link = link }
        let (replies, replyContinuation) = AsyncStream.makeStream(of: LinkMessage.self)
        link.start(onMessage: { [weak self] message in
            replyContinuation.yield(message)
            self?.received(message)
        }, onClose: { [weak self] error in
            replyContinuation.finish()
            self?.linkClosed(error)
        })
        try link.send(.hello(version: version))
        var iterator = replies.makeAsyncIterator()
        guard case .hello(let theirs)? = await iterator.next() else {
            throw LinkError("the sharer closed the link before saying its version")
        }
        guard theirs == version else {
            try? link.send(.finished(reason: .versionMismatch))
            end(.versionMismatch)
            link.close()
            throw LinkError("the sharer speaks link version \(theirs), the host \(version)")
        }
        var setup = setup
        if setup.mode == .relay {
            let ringPath = linkPath + ".frames"
            let ring = try FrameRing.create(path: ringPath, maxWidth: setup.configuration.policy.maxWidth,
                                            maxHeight: setup.configuration.policy.maxHeight)
            setup.frameRingPath = ringPath
            let session = ScreenShareSession(configuration: setup.configuration)
            lock.withLock {
                self.ring = ring
                relaySession = session
            }
            try await session.start()
            let forwarding = Task { [weak self] in
                for await event in session.events {
                    guard let self else { return }
                    switch event {
                    case .stats(let stats): self.continuation.yield(.stats(stats))
                    case .finished(let reason): self.end(reason)
                    default: break
                    }
                }
            }
            _ = forwarding
        }
        try link.send(.configure(setup))
        try link.send(.start)
        while let message = await iterator.next() {
            switch message {
            case .started: return
            case .finished(let reason): throw LinkError("the sharer finished before starting: \(reason)")
            default: continue
            }
        }
        throw LinkError("the sharer closed the link before starting")
    }

    /// Force-stops the share; `finished(requestedByHost)` follows.
    public func stop() async {
        let (link, session) = lock.withLock { (self.link, relaySession) }
        try? link?.send(.stop)
        if let session { await session.stop(reason: .requestedByHost) }
    }

    public func pause() async throws {
        try lock.withLock { link }?.send(.pause)
        try await lock.withLock { relaySession }?.pause()
    }

    public func resume() async throws {
        try lock.withLock { link }?.send(.resume)
        try await lock.withLock { relaySession }?.resume()
    }

    private func received(_ message: LinkMessage) {
        switch message {
        case .started: continuation.yield(.started)
        case .paused: continuation.yield(.paused)
        case .resumed: continuation.yield(.resumed)
        case .stats(let stats): if lock.withLock({ relaySession }) == nil { continuation.yield(.stats(stats)) }
        case .finished(let reason): end(reason)
        case .frame(let slot, _, let width, let height, let timestamp):
            let (ring, session) = lock.withLock { (self.ring, relaySession) }
            guard let ring, let session, let frame = try? ring.read(slot: slot, width: width, height: height, timestampUs: timestamp) else { return }
            session.pushVideoFrame(frame)
        default:
            break
        }
    }

    private func linkClosed(_ error: LinkError?) {
        // No `finished` first: the sharer process died or was killed.
        let pid = lock.withLock { process }
        var detail = "the sharer process ended without finishing"
        if let pid {
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid {
                lock.withLock { process = nil }
                detail += (status & 0x7F) != 0 ? " (signal \(status & 0x7F))" : " (exit \((status >> 8) & 0xFF))"
            }
        }
        if let error { detail += ": \(error.message)" }
        end(.error(detail))
        if let session = lock.withLock({ relaySession }) { Task { await session.stop(reason: .error(detail)) } }
    }

    private func end(_ reason: ScreenShareFinishReason) {
        guard lock.withLock({ () -> Bool in defer { finished = true }; return !finished }) else { return }
        continuation.yield(.finished(reason))
        continuation.finish()
        lock.withLock { ring }?.remove()
    }

    /// Reaps a launched sharer (waits for it to exit).
    public func waitForSharer() {
        guard let pid = lock.withLock({ process }) else { return }
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        lock.withLock { process = nil }
    }
}
