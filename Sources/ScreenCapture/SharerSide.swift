import RTCMedia
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The sharer's side of the link before sharing starts: both say hello (a version mismatch ends it),
/// the host configures, then starts. A pure state machine, so that the async sharer (standalone and
/// relay, `rtc-sharer`) and the blocking relay-only one (`rtc-capture`) behave the same.
public struct SharerHandshake: Sendable {
    public enum Step: Sendable, Hashable {
        case waiting
        case ready(ScreenShareSetup)
        case finish(ScreenShareFinishReason)
    }

    public let version: Int
    private var greeted = false
    private var setup: ScreenShareSetup?

    public init(version: Int = screenShareLinkVersion) { self.version = version }

    /// Takes the next message (nil: the link ended) and says what to do.
    public mutating func receive(_ message: LinkMessage?) -> Step {
        guard let message else { return .finish(.hostLeft) }
        guard greeted else {
            guard case .hello(let theirs) = message else { return .finish(.hostLeft) }
            guard theirs == version else { return .finish(.versionMismatch) }
            greeted = true
            return .waiting
        }
        switch message {
        case .stop: return .finish(.requestedByHost)
        case .configure(let received) where setup == nil:
            setup = received
            return .waiting
        case .start:
            guard let setup else { return .waiting }
            return .ready(setup)
        default: return .waiting
        }
    }
}

/// `pattern` (1920x1080), `x11` or `x11:DISPLAY`, a Y4M path, or `-` (raw BGRA on stdin, of the
/// setup's raw size).
public func makeScreenSource(for setup: ScreenShareSetup) throws(ScreenSourceError) -> ScreenSource {
    let spec = setup.source
    if spec == "pattern" { return try PatternScreenSource() }
    if spec == "x11" { return try X11ScreenSource() }
    if spec.hasPrefix("x11:") { return try X11ScreenSource(display: String(spec.dropFirst(4))) }
    if spec == "-" {
        guard let size = setup.rawSize else { throw ScreenSourceError("raw frames on stdin need a size") }
        return try RawFrameSource(format: .bgra, size: size)
    }
    return try Y4MScreenSource(path: spec)
}

/// Relay mode's work in the sharer: capture → frame-rate cap (by timestamp) → fit, scaling before
/// converting → a ring slot → a `frame` note on the link. No codec and no network of its own.
public final class RelayCapture: @unchecked Sendable {
    private struct State {
        var paused = false
        var sequence = 0
        var limiter: FrameRateLimiter
        var failure: String?
    }
    private final class Shared: Sendable {
        let state: Mutex<State>
        init(_ state: State) { self.state = Mutex(state) }
    }
    private let shared: Shared
    private var capturer: ScreenCapturer?

    /// Opens the host's frame ring and starts capturing.
    public init(setup: ScreenShareSetup, source: ScreenSource, link: LinkConnection) throws(LinkError) {
        guard let ringPath = setup.frameRingPath else { throw LinkError("relay mode without a frame ring") }
        let ring = try FrameRing.open(path: ringPath)
        let policy = setup.configuration.policy
        let shared = Shared(State(limiter: FrameRateLimiter(maxFramesPerSecond: Double(policy.framesPerSecond))))
        self.shared = shared
        let converter = FrameConverter()
        capturer = ScreenCapturer(source: source, framesPerSecond: policy.framesPerSecond, deliver: { frame in
            let sequence: Int? = shared.state.withLock { current in
                guard !current.paused, current.limiter.admit(timestampUs: frame.timestampUs) else { return nil }
                defer { current.sequence += 1 }
                return current.sequence
            }
            guard let sequence else { return }
            let size = policy.fittedSize(width: frame.width, height: frame.height)
            do {
                let scaled = try converter.fitI420(frame, into: size)
                let slot = sequence % ring.slotCount
                try ring.write(scaled, slot: slot)
                try link.send(.frame(slot: slot, sequence: sequence, width: scaled.width, height: scaled.height, timestampUs: frame.timestampUs))
            } catch {
                shared.state.withLock { $0.failure = $0.failure ?? "\(error)" }
            }
        }, failed: { error in shared.state.withLock { $0.failure = $0.failure ?? error.message } })
    }

    public func pause() { shared.state.withLock { $0.paused = true } }
    public func resume() { shared.state.withLock { $0.paused = false } }

    /// One message from the host while relaying (nil: the link ended). Pause and resume are done
    /// and answered; stop and the end of the link stop capturing and return why the share ends
    /// (a capture failure, if the host simply went away). Nil: go on.
    public func handle(_ message: LinkMessage?, link: LinkConnection) -> ScreenShareFinishReason? {
        var reason: ScreenShareFinishReason
        switch message {
        case .stop?: reason = .requestedByHost
        case nil: reason = .hostLeft
        case .pause?:
            pause()
            try? link.send(.paused)
            return nil
        case .resume?:
            resume()
            try? link.send(.resumed)
            return nil
        default: return nil
        }
        if let failure = stop(), reason == .hostLeft { reason = .error(failure) }
        return reason
    }

    /// Stops capturing; returns what went wrong, if anything did.
    @discardableResult
    public func stop() -> String? {
        capturer?.stop()
        capturer = nil
        return shared.state.withLock { $0.failure }
    }
}

/// The relay-only sharer (`rtc-capture`): the handshake and the relay loop on plain threads, no
/// Swift concurrency, codec or network, so the whole process stays small. A standalone setup is
/// refused with an error that names `rtc-sharer`.
public enum RelaySharer {
    public static func run(linkPath: String, version: Int = screenShareLinkVersion,
                           makeSource: (ScreenShareSetup) throws(ScreenSourceError) -> ScreenSource = makeScreenSource) -> ScreenShareFinishReason {
        let link: LinkConnection
        do {
            link = try LinkConnection.connect(path: linkPath)
        } catch {
            return .error(error.message)
        }
        let inbox = BlockingQueue<LinkMessage?>()
        link.start(onMessage: { inbox.put($0) }, onClose: { _ in inbox.put(nil) })
        try? link.send(.hello(version: version))
        var handshake = SharerHandshake(version: version)
        var setup: ScreenShareSetup?
        while setup == nil {
            switch handshake.receive(inbox.take()) {
            case .waiting: continue
            case .ready(let ready): setup = ready
            case .finish(let reason): return finish(link, reason)
            }
        }
        guard let setup else { return finish(link, .hostLeft) }
        guard setup.mode == .relay else { return finish(link, .error("this sharer only relays frames; run rtc-sharer for a standalone share")) }
        let capture: RelayCapture
        do {
            capture = try RelayCapture(setup: setup, source: try makeSource(setup), link: link)
        } catch {
            return finish(link, .error("\(error)"))
        }
        try? link.send(.started)
        while true {
            if let reason = capture.handle(inbox.take(), link: link) { return finish(link, reason) }
        }
    }

    /// Tells the host why, and closes the link.
    public static func finish(_ link: LinkConnection, _ reason: ScreenShareFinishReason) -> ScreenShareFinishReason {
        try? link.send(.finished(reason: reason))
        link.close()
        return reason
    }
}

/// A queue a thread blocks on until something arrives (the link's reader thread fills it).
final class BlockingQueue<Element>: @unchecked Sendable {
    private var items: [Element] = []
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    init() {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    func put(_ item: Element) {
        pthread_mutex_lock(mutex)
        items.append(item)
        pthread_cond_signal(condition)
        pthread_mutex_unlock(mutex)
    }

    func take() -> Element {
        pthread_mutex_lock(mutex)
        while items.isEmpty { pthread_cond_wait(condition, mutex) }
        let item = items.removeFirst()
        pthread_mutex_unlock(mutex)
        return item
    }
}
