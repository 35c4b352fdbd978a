import NIOConcurrencyHelpers
import RTCCore

#if canImport(Glibc)
import Glibc
#endif

/// The sharer process's side of the link (`rtc-cli share --link PATH`): connects to the host,
/// says its version, takes the setup, and shares until the host stops it, the host goes away, or the
/// server ends the `_sub`. In standalone mode it runs a ``ScreenShareSession``; in relay mode it only
/// captures and hands scaled I420 frames over the ``FrameRing`` (no codec, no network of its own).
public enum ScreenShareSharer {
    /// Runs a share for the host at `linkPath`; returns why it finished. `version` is overridable
    /// only to test the mismatch path.
    public static func run(linkPath: String, version: Int = screenShareLinkVersion,
                           makeSource: (ScreenShareSetup) throws(ScreenSourceError) -> ScreenSource = defaultSource) async -> ScreenShareFinishReason {
        let link: LinkConnection
        do {
            link = try LinkConnection.connect(path: linkPath)
        } catch {
            return .error(error.message)
        }
        let (messages, continuation) = AsyncStream.makeStream(of: LinkMessage?.self)
        link.start(onMessage: { continuation.yield($0) }, onClose: { _ in
            continuation.yield(nil)
            continuation.finish()
        })
        try? link.send(.hello(version: version))
        var iterator = messages.makeAsyncIterator()
        // The host's hello, then its setup.
        guard case .hello(let theirs)?? = await iterator.next() else { return finish(link, .hostLeft) }
        guard theirs == version else { return finish(link, .versionMismatch) }
        var setup: ScreenShareSetup?
        while setup == nil {
            switch await iterator.next() {
            case .configure(let received)??: setup = received
            case .stop??: return finish(link, .requestedByHost)
            case nil, .some(nil): return finish(link, .hostLeft)
            default: continue
            }
        }
        guard let setup else { return finish(link, .hostLeft) }
        while true {
            switch await iterator.next() {
            case .start??: break
            case .stop??: return finish(link, .requestedByHost)
            case nil, .some(nil): return finish(link, .hostLeft)
            default: continue
            }
            break
        }
        let source: ScreenSource
        do {
            source = try makeSource(setup)
        } catch {
            return finish(link, .error(error.message))
        }
        switch setup.mode {
        case .standalone: return await standalone(setup, source: source, link: link, messages: &iterator)
        case .relay: return await relay(setup, source: source, link: link, messages: &iterator)
        }
    }

    /// `pattern` (1920x1080), `x11` or `x11:DISPLAY`, a Y4M path, or `-` (raw BGRA on stdin).
    public static func defaultSource(_ setup: ScreenShareSetup) throws(ScreenSourceError) -> ScreenSource {
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

    private static func finish(_ link: LinkConnection, _ reason: ScreenShareFinishReason) -> ScreenShareFinishReason {
        try? link.send(.finished(reason: reason))
        link.close()
        return reason
    }

    private static func standalone(_ setup: ScreenShareSetup, source: ScreenSource, link: LinkConnection,
                                   messages: inout AsyncStream<LinkMessage?>.Iterator) async -> ScreenShareFinishReason {
        let session = ScreenShareSession(configuration: setup.configuration)
        let ended = NIOLockedValueBox<ScreenShareFinishReason?>(nil)
        // Session events go to the host; the session's own end (the server removed the `_sub`
        // because its host left, or the connection was lost) closes the link to end the loop below.
        let forwarding = Task {
            for await event in session.events {
                switch event {
                case .started: try? link.send(.started)
                case .paused: try? link.send(.paused)
                case .resumed: try? link.send(.resumed)
                case .stats(let stats): try? link.send(.stats(stats))
                case .finished(let reason):
                    ended.withLockedValue { $0 = $0 ?? reason }
                    try? link.send(.finished(reason: reason))
                    link.close()
                }
            }
        }
        do {
            try await session.start()
        } catch {
            forwarding.cancel()
            return finish(link, .error("join failed: \(error)"))
        }
        let capturer = ScreenCapturer(source: source, framesPerSecond: setup.configuration.policy.framesPerSecond,
                                      deliver: { session.pushVideoFrame($0) },
                                      failed: { error in
                                          ended.withLockedValue { $0 = $0 ?? .error(error.message) }
                                          link.close()
                                      })
        var reason: ScreenShareFinishReason = .hostLeft
        loop: while true {
            switch await messages.next() {
            case .stop??: reason = .requestedByHost; break loop
            case .pause??: try? await session.pause()
            case .resume??: try? await session.resume()
            case nil, .some(nil): reason = ended.withLockedValue { $0 } ?? .hostLeft; break loop
            default: continue
            }
        }
        capturer.stop()
        if let sessionReason = ended.withLockedValue({ $0 }) { reason = sessionReason }
        ended.withLockedValue { $0 = $0 ?? reason }
        await session.stop(reason: reason)
        forwarding.cancel()
        return finish(link, reason)
    }

    private static func relay(_ setup: ScreenShareSetup, source: ScreenSource, link: LinkConnection,
                              messages: inout AsyncStream<LinkMessage?>.Iterator) async -> ScreenShareFinishReason {
        guard let ringPath = setup.frameRingPath else { return finish(link, .error("relay mode without a frame ring")) }
        let ring: FrameRing
        do {
            ring = try FrameRing.open(path: ringPath)
        } catch {
            return finish(link, .error(error.message))
        }
        let policy = setup.configuration.policy
        let paused = NIOLockedValueBox(false)
        let converter = FrameConverter()
        var limiter = FrameRateLimiter(maxFramesPerSecond: Double(policy.framesPerSecond))
        var sequence = 0
        let failure = NIOLockedValueBox<String?>(nil)
        // Capture → rate limit → scale (before converting) → ring slot → a note on the link.
        let capturer = ScreenCapturer(source: source, framesPerSecond: policy.framesPerSecond, deliver: { frame in
            guard !paused.withLockedValue({ $0 }), limiter.admit(timestampUs: frame.timestampUs) else { return }
            let size = policy.fittedSize(width: frame.width, height: frame.height)
            do {
                let scaled = try converter.fitI420(frame, into: size)
                let slot = sequence % ring.slotCount
                try ring.write(scaled, slot: slot)
                try link.send(.frame(slot: slot, sequence: sequence, width: scaled.width, height: scaled.height, timestampUs: frame.timestampUs))
                sequence += 1
            } catch {
                failure.withLockedValue { $0 = "\(error)" }
            }
        }, failed: { error in failure.withLockedValue { $0 = error.message } })
        try? link.send(.started)
        var reason: ScreenShareFinishReason = .hostLeft
        loop: while true {
            switch await messages.next() {
            case .stop??: reason = .requestedByHost; break loop
            case .pause??:
                paused.withLockedValue { $0 = true }
                try? link.send(.paused)
            case .resume??:
                paused.withLockedValue { $0 = false }
                try? link.send(.resumed)
            case nil, .some(nil): reason = .hostLeft; break loop
            default: continue
            }
        }
        capturer.stop()
        if let message = failure.withLockedValue({ $0 }), reason == .hostLeft { reason = .error(message) }
        return finish(link, reason)
    }
}
