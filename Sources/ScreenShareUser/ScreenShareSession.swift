import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RTCCore
import Signaling

public enum ScreenShareEvent: Sendable, Hashable {
    case started
    case paused
    case resumed
    case finished(ScreenShareFinishReason)
    case stats(ScreenShareStats)
}

/// The screen-share auxiliary user: joins as `<hostUid>_sub`, broadcaster, subscribed to nothing (no
/// subscriber transport ever exists), and publishes a screen track from frames the app pushes, under
/// the ``ScreenSharePolicy``. Screen audio, if enabled, mixes app and microphone audio.
///
/// Frames are rate-limited, scaled (before any conversion) and kept as the last frame on a thread of
/// the session's own, which also re-sends that frame when the screen is idle.
public final class ScreenShareSession: @unchecked Sendable {
    public let configuration: ScreenShareConfiguration
    public let engine: RTCEngine
    public let events: AsyncStream<ScreenShareEvent>
    private let continuation: AsyncStream<ScreenShareEvent>.Continuation
    private let lock = NIOLock()
    private var started = false
    private var paused = false
    private var finished = false
    /// Joined once: a failed attempt before (the host not there yet) does not end the share.
    private var joined = false
    private var mixer = ScreenAudioMixer()
    private var eventTask: Task<Void, Never>?
    private var worker: MediaThread?
    // Confined to `worker`:
    private let converter = FrameConverter()
    private var limiter: FrameRateLimiter
    private var lastFrame: VideoFrame?
    private var lastPushUs: Int64 = 0
    private let counters = NIOLockedValueBox((pushed: 0, resent: 0))

    public init(configuration: ScreenShareConfiguration, group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton) {
        self.configuration = configuration
        var engineConfiguration = RTCEngineConfiguration(serverURL: configuration.serverURL, clientRole: .broadcaster,
                                                         protocol: configuration.liveKit == true ? .livekit : .native)
        if let urls = configuration.turnURLs, !urls.isEmpty {
            engineConfiguration.iceServers = [ICEServer(urls: urls, username: configuration.turnUsername, credential: configuration.turnCredential)]
        }
        engineConfiguration.iceTransportPolicy = configuration.relayOnly == true ? .relay : .all
        engineConfiguration.turnTrustedCertificates = configuration.turnTrustedCertificates
        engine = RTCEngine(configuration: engineConfiguration, group: group)
        (events, continuation) = AsyncStream.makeStream(of: ScreenShareEvent.self)
        limiter = FrameRateLimiter(maxFramesPerSecond: Double(configuration.policy.framesPerSecond))
    }

    deinit { worker?.stop() }

    /// Joins and starts publishing. Throws with the server's reason.
    public func start() async throws {
        guard lock.withLock({ () -> Bool in defer { started = true }; return !started }) else {
            throw RTCEngineError(.invalidState, "the share was already started")
        }
        try engine.setVideoEncoderConfiguration(configuration.policy.encoderConfiguration)
        try await engine.enableVideo()
        if configuration.shareAudio { try await engine.enableAudio() }
        engine.setAudioProcessing(enabled: false)
        let engineEvents = engine.events
        eventTask = Task { [weak self] in
            for await event in engineEvents {
                guard let self else { return }
                self.handle(event)
            }
        }
        try await joinWhenOwnerIsPresent()
        lock.withLock { joined = true }
        worker = MediaThread(name: "screen-share", tickIntervalUs: 20_000) { [weak self] in self?.idleTick() }
        continuation.yield(.started)
    }

    /// Joins; while the server answers that the host is not in the channel yet (3003: the share
    /// started first, as a broadcast extension can), asks again with backoff up to the wait.
    private func joinWhenOwnerIsPresent() async throws {
        let deadline = MediaClock.monotonicUs() + Int64((configuration.ownerWaitSeconds ?? ScreenShareConfiguration.defaultOwnerWaitSeconds) * 1e6)
        var pause = 0.2
        while true {
            do {
                try await engine.join(token: configuration.token, channel: configuration.channel, uid: configuration.uid,
                                      options: JoinOptions(autoSubscribeAudio: false, autoSubscribeVideo: false, publishAudio: configuration.shareAudio,
                                                           publishVideo: true, videoSource: .screen, audioSource: .screenAudio))
                return
            } catch let error as RTCEngineError where error.serverCode == SignalingError.Code.screenShareOwnerAbsent.rawValue {
                guard MediaClock.monotonicUs() + Int64(pause * 1e6) < deadline else {
                    throw RTCEngineError(.joinFailed, "\(configuration.hostUID) is not in \(configuration.channel): a screen share needs its host "
                                         + "there (waited \(configuration.ownerWaitSeconds ?? ScreenShareConfiguration.defaultOwnerWaitSeconds) s)",
                                         serverCode: error.serverCode)
                }
                try await Task.sleep(for: .seconds(pause))
                pause = min(pause * 2, 1)
            }
        }
    }

    /// A captured screen frame (I420, NV12 or BGRA) with its capture time and rotation, from any thread.
    public func pushVideoFrame(_ frame: VideoFrame) {
        guard let worker, lock.withLock({ !paused && !finished }) else { return }
        _ = worker.execute(ifBacklogBelow: 1) { [self] in take(frame) }
    }

    /// App or microphone audio as ReplayKit hands it over (any common rate and channel count).
    public func pushAudio(_ frame: AudioFrame, from input: ScreenAudioMixer.Input) {
        guard configuration.shareAudio else { return }
        let blocks: [AudioFrame] = lock.withLock {
            guard !paused, !finished else { return [] }
            return (try? mixer.push(frame, from: input, nowUs: MediaClock.monotonicUs())) ?? []
        }
        for block in blocks { engine.pushAudioFrame(block) }
    }

    /// Stops sending and marks the track muted; the viewers see `remoteTrackMuted`.
    public func pause() async throws {
        guard lock.withLock({ () -> Bool in defer { paused = true }; return !paused && !finished }) else { return }
        try await engine.muteLocalVideoStream(true)
        if configuration.shareAudio { try await engine.muteLocalAudioStream(true) }
        continuation.yield(.paused)
    }

    /// Sends again, starting with a keyframe.
    public func resume() async throws {
        guard lock.withLock({ () -> Bool in defer { paused = false }; return paused && !finished }) else { return }
        try await engine.muteLocalVideoStream(false)
        if configuration.shareAudio { try await engine.muteLocalAudioStream(false) }
        continuation.yield(.resumed)
    }

    /// Leaves the channel and reports `finished(reason)`.
    public func stop(reason: ScreenShareFinishReason = .requestedByHost) async {
        await finish(reason)
    }

    public var isPaused: Bool { lock.withLock { paused } }

    private func finish(_ reason: ScreenShareFinishReason) async {
        guard lock.withLock({ () -> Bool in defer { finished = true }; return !finished }) else { return }
        worker?.stop()
        await engine.leave()
        eventTask?.cancel()
        continuation.yield(.finished(reason))
        continuation.finish()
    }

    private func handle(_ event: RTCEngineEvent) {
        switch event {
        case .connectionStateChanged(let state, let reason):
            guard state == .disconnected || state == .failed, reason != .leaveChannel, lock.withLock({ joined }) else { return }
            let finishReason: ScreenShareFinishReason = reason == .ownerLeft ? .hostLeft : .disconnected
            Task { await finish(finishReason) }
        case .rtcStats(let stats):
            guard let video = stats.local.first(where: { $0.kind == .video }) else { return }
            let (pushed, resent) = counters.withLockedValue { $0 }
            continuation.yield(.stats(ScreenShareStats(framesPerSecond: video.framesPerSecond, bitrateKbps: video.bitrateKbps,
                                                       width: video.width, height: video.height, framesPushed: pushed, framesResent: resent)))
        default:
            break
        }
    }

    // MARK: On the worker

    private func take(_ frame: VideoFrame) {
        guard limiter.admit(timestampUs: frame.timestampUs) else { return }
        let size = configuration.policy.fittedSize(width: frame.width, height: frame.height)
        guard let scaled = try? converter.fitI420(frame, into: size) else { return }
        lastFrame = scaled
        lastPushUs = MediaClock.monotonicUs()
        counters.withLockedValue { $0.pushed += 1 }
        engine.pushVideoFrame(scaled)
    }

    private func idleTick() {
        guard var frame = lastFrame, !lock.withLock({ paused || finished }) else { return }
        let now = MediaClock.monotonicUs()
        // Early (by 150 ms, or half the limit if that is less), so that with encoding, pacing, the
        // network and a busy machine a viewer's gap stays within the limit (100 ms early was seen
        // to miss it by 3 ms under load).
        let limit = configuration.policy.idleResendMs
        guard now - lastPushUs >= Int64(limit - min(150, limit / 2)) * 1000 else { return }
        // The same picture again, stamped now: viewers and the server see a live stream.
        frame.timestampUs = frame.timestampUs + (now - lastPushUs)
        lastFrame = frame
        lastPushUs = now
        limiter = FrameRateLimiter(maxFramesPerSecond: Double(configuration.policy.framesPerSecond))
        _ = limiter.admit(timestampUs: frame.timestampUs)
        counters.withLockedValue { $0.resent += 1 }
        engine.pushVideoFrame(frame)
    }
}
