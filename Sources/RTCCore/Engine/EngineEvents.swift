import NIOConcurrencyHelpers

/// Where the engine's events go: every `events` stream and the delegate. Its lock guards only the
/// list of streams and the delegate reference, and is never held while an event is delivered, so
/// any thread (an encode thread reporting an error, a decode thread reporting a first frame, a
/// signaling task) may emit at any time without a lock order to respect.
final class EngineEventHub: Sendable {
    private struct Targets {
        var continuations: [Int: AsyncStream<RTCEngineEvent>.Continuation] = [:]
        var nextID = 0
        weak var delegate: (any RTCEngineDelegate)?
        weak var engine: RTCEngine?
    }

    private let targets = NIOLockedValueBox(Targets())

    /// The engine the delegate is told about (set once by the engine itself).
    func attach(_ engine: RTCEngine) { targets.withLockedValue { $0.engine = engine } }
    /// The connection state last announced.
    private let state = NIOLockedValueBox(ConnectionState.disconnected)

    var delegate: (any RTCEngineDelegate)? {
        get { targets.withLockedValue { $0.delegate } }
        set { targets.withLockedValue { $0.delegate = newValue } }
    }

    var connectionState: ConnectionState { state.withLockedValue { $0 } }

    /// A new stream of every event from now on.
    func makeStream() -> AsyncStream<RTCEngineEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: RTCEngineEvent.self)
        let id = targets.withLockedValue { targets -> Int in
            targets.nextID += 1
            targets.continuations[targets.nextID] = continuation
            return targets.nextID
        }
        continuation.onTermination = { [weak self] _ in self?.targets.withLockedValue { _ = $0.continuations.removeValue(forKey: id) } }
        return stream
    }

    func finishAll() {
        let continuations = targets.withLockedValue { targets in
            defer { targets.continuations.removeAll() }
            return Array(targets.continuations.values)
        }
        for continuation in continuations { continuation.finish() }
    }

    func setConnectionState(_ newState: ConnectionState, _ reason: ConnectionChangedReason) {
        state.withLockedValue { $0 = newState }
        emit(.connectionStateChanged(newState, reason: reason))
    }

    func emit(_ event: RTCEngineEvent) {
        let (continuations, delegate, engine) = targets.withLockedValue { (Array($0.continuations.values), $0.delegate, $0.engine) }
        for continuation in continuations { continuation.yield(event) }
        guard let delegate, let engine else { return }
        switch event {
        case .joinedChannel(let channel, let uid, let elapsed): delegate.rtcEngine(engine, didJoinChannel: channel, uid: uid, elapsedMs: elapsed)
        case .userJoined(let uid): delegate.rtcEngine(engine, didJoinedOfUid: uid)
        case .userOffline(let uid, let reason): delegate.rtcEngine(engine, didOfflineOfUid: uid, reason: reason)
        case .firstRemoteVideoFrameDecoded(let uid, _, let size, let elapsed):
            delegate.rtcEngine(engine, firstRemoteVideoFrameOfUid: uid, size: size, elapsedMs: elapsed)
        case .connectionStateChanged(let state, let reason): delegate.rtcEngine(engine, connectionChangedTo: state, reason: reason)
        case .tokenPrivilegeWillExpire(let expiresAt): delegate.rtcEngine(engine, tokenPrivilegeWillExpire: expiresAt)
        case .rtcStats(let stats): delegate.rtcEngine(engine, reportRtcStats: stats)
        case .streamMessage(let uid, let stream, let data, let topic):
            delegate.rtcEngine(engine, streamMessageFrom: uid, streamId: stream, data: data, topic: topic)
        default: break
        }
        delegate.rtcEngine(engine, didEmit: event)
    }
}

/// The app's sinks for remote media, read by decode and playout threads once per frame.
struct EngineSinks: Sendable {
    var video: (@Sendable (RemoteVideoFrame) -> Void)?
    var encodedVideo: (@Sendable (RemoteEncodedVideoFrame) -> Void)?
    var encodedAudio: (@Sendable (RemoteEncodedAudioFrame) -> Void)?
    var audio: (@Sendable (RemoteAudioFrame) -> Void)?
    var mixedAudio: (@Sendable (AudioFrame) -> Void)?
}
