import NIOConcurrencyHelpers
import RTCCore

#if canImport(Glibc)
import Glibc
#endif

/// What drives a standalone share (``ScreenShareSharer/runStandalone(_:source:onEvent:onEnd:nextControl:)``):
/// the host's link messages, or a command line's duration and signals.
public enum ScreenShareControl: Sendable, Hashable {
    case pause
    case resume
    case stop
}

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
        var handshake = SharerHandshake(version: version)
        var ready: ScreenShareSetup?
        while ready == nil {
            let next = await iterator.next()
            switch handshake.receive(next ?? nil) {
            case .waiting: continue
            case .ready(let setup): ready = setup
            case .finish(let reason): return finish(link, reason)
            }
        }
        guard let setup = ready else { return finish(link, .hostLeft) }
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
        try makeScreenSource(for: setup)
    }

    private static func finish(_ link: LinkConnection, _ reason: ScreenShareFinishReason) -> ScreenShareFinishReason {
        RelaySharer.finish(link, reason)
    }

    /// Standalone mode over the link: the host's `stop`, `pause` and `resume` drive the share, and
    /// the session's events go back to the host.
    private static func standalone(_ setup: ScreenShareSetup, source: ScreenSource, link: LinkConnection,
                                   messages: inout AsyncStream<LinkMessage?>.Iterator) async -> ScreenShareFinishReason {
        let reason = await runStandalone(
            setup, source: source,
            onEvent: { event in
                switch event {
                case .started: try? link.send(.started)
                case .paused: try? link.send(.paused)
                case .resumed: try? link.send(.resumed)
                case .stats(let stats): try? link.send(.stats(stats))
                case .finished(let reason): try? link.send(.finished(reason: reason))
                }
            },
            // The share ended on its own: closing the link ends the wait for the host's next message.
            onEnd: { link.close() },
            nextControl: {
                while true {
                    switch await messages.next() {
                    case .stop??: return .stop
                    case .pause??: return .pause
                    case .resume??: return .resume
                    case nil, .some(nil): return nil
                    default: continue
                    }
                }
            })
        return finish(link, reason)
    }

    /// What the process of a standalone share does first, before any codec or frame exists: the
    /// memory settings of a process with a budget (`ProcessMemory.tuneForSmallProcess()`; docs/screen-share.md,
    /// "Memory"). Both the sharer a host launches (`rtc-sharer`, `rtc-cli share`) and a `_sub` uid
    /// joined from the command line (`rtc-cli join --uid X_sub`) call it.
    public static func prepareProcess() {
        ProcessMemory.tuneForSmallProcess()
    }

    /// One standalone share in this process, whoever controls it: joins as the `_sub` (a
    /// ``ScreenShareSession``), captures `source` at the policy's frame rate into it, and follows
    /// `nextControl` until it answers `.stop` (the host asked: `requestedByHost`) or nil (`hostLeft`),
    /// or the share ends on its own (the server removed the `_sub`, the connection was lost, the
    /// source failed). The session's events go to `onEvent`, `finished` included; `onEnd` runs once
    /// when the share ends on its own, and must make a pending `nextControl` return (nil or `.stop`).
    /// Returns why the share finished; a failed join is `.error("join failed: …")`.
    public static func runStandalone(_ setup: ScreenShareSetup, source: ScreenSource,
                                     onEvent: @escaping @Sendable (ScreenShareEvent) -> Void,
                                     onEnd: @escaping @Sendable () -> Void,
                                     nextControl: () async -> ScreenShareControl?) async -> ScreenShareFinishReason {
        let session = ScreenShareSession(configuration: setup.configuration)
        let ended = NIOLockedValueBox<ScreenShareFinishReason?>(nil)
        let forwarding = Task {
            for await event in session.events {
                onEvent(event)
                if case .finished(let reason) = event {
                    ended.withLockedValue { $0 = $0 ?? reason }
                    onEnd()
                }
            }
        }
        do {
            try await session.start()
        } catch {
            forwarding.cancel()
            return .error("join failed: \(error)")
        }
        let capturer = ScreenCapturer(source: source, framesPerSecond: setup.configuration.policy.framesPerSecond,
                                      deliver: { session.pushVideoFrame($0) },
                                      failed: { error in
                                          ended.withLockedValue { $0 = $0 ?? .error(error.message) }
                                          onEnd()
                                      })
        var reason: ScreenShareFinishReason = .hostLeft
        loop: while true {
            switch await nextControl() {
            case .stop: reason = .requestedByHost; break loop
            case .pause: try? await session.pause()
            case .resume: try? await session.resume()
            case nil: reason = ended.withLockedValue { $0 } ?? .hostLeft; break loop
            }
        }
        capturer.stop()
        if let sessionReason = ended.withLockedValue({ $0 }) { reason = sessionReason }
        ended.withLockedValue { $0 = $0 ?? reason }
        await session.stop(reason: reason)
        // The `finished` event reaches `onEvent` before this returns.
        await forwarding.value
        return reason
    }

    private static func relay(_ setup: ScreenShareSetup, source: ScreenSource, link: LinkConnection,
                              messages: inout AsyncStream<LinkMessage?>.Iterator) async -> ScreenShareFinishReason {
        let capture: RelayCapture
        do {
            capture = try RelayCapture(setup: setup, source: source, link: link)
        } catch {
            return finish(link, .error(error.message))
        }
        try? link.send(.started)
        while true {
            if let reason = capture.handle(await messages.next() ?? nil, link: link) { return finish(link, reason) }
        }
    }
}
