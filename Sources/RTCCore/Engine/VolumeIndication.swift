import NIOConcurrencyHelpers
import NIOCore
import RTCTransport

/// One user's volume in an ``RTCEngineEvent/audioVolumeIndication(speakers:totalVolume:)``.
public struct AudioVolumeInfo: Sendable, Hashable {
    /// The user (this client's own uid for its local entry).
    public var uid: String
    /// 0 (silence) to 255 (full scale), linear in dB (``AudioLevelWindow/volume``).
    public var volume: Int
    /// Voice activity (only with `reportVad`; false otherwise).
    public var vad: Bool
}

/// Agora's `enableAudioVolumeIndication`: every `interval`, the volume of this client's own audio
/// and of each remote user it receives audio from, read from the RFC 6464 levels of the packets
/// sent and received over the interval (no decoding needed), smoothed over `smooth` intervals.
final class VolumeIndicator: Sendable {
    private struct State {
        var task: RepeatedTask?
        var smoothed: [String: Double] = [:]
    }

    private let state = NIOLockedValueBox(State())

    /// Starts (or restarts) the indication; an interval of 0 or less stops it.
    func configure(intervalMs: Int, smooth: Int, reportVad: Bool, loop: EventLoop,
                   sample: @escaping @Sendable () -> [(uid: String, window: AudioLevelWindow)],
                   emit: @escaping @Sendable (RTCEngineEvent) -> Void) {
        let weight = Double(max(0, min(10, smooth)))
        let old = state.withLockedValue { state -> RepeatedTask? in
            defer { state.task = nil; state.smoothed = [:] }
            return state.task
        }
        old?.cancel()
        guard intervalMs > 0 else { return }
        let interval = TimeAmount.milliseconds(Int64(intervalMs))
        let task = loop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { [weak self] _ in
            guard let self else { return }
            let windows = sample()
            let speakers = self.state.withLockedValue { state -> [AudioVolumeInfo] in
                var current: [String: (volume: Int, vad: Bool)] = [:]
                for (uid, window) in windows {
                    let previous = current[uid]
                    if previous == nil || window.volume > previous!.volume { current[uid] = (window.volume, window.mostlyVoiced) }
                }
                var out: [AudioVolumeInfo] = []
                for (uid, now) in current.sorted(by: { $0.key < $1.key }) {
                    // Each interval weighs 1, the history `smooth`.
                    let smoothed = state.smoothed[uid].map { ($0 * weight + Double(now.volume)) / (weight + 1) } ?? Double(now.volume)
                    state.smoothed[uid] = smoothed
                    out.append(AudioVolumeInfo(uid: uid, volume: Int(smoothed.rounded()), vad: reportVad && now.vad))
                }
                for uid in state.smoothed.keys where current[uid] == nil { state.smoothed[uid] = nil }
                return out
            }
            emit(.audioVolumeIndication(speakers: speakers, totalVolume: speakers.map(\.volume).max() ?? 0))
        }
        state.withLockedValue { $0.task = task }
    }

    func stop() {
        state.withLockedValue { state in state.task?.cancel(); state.task = nil }
    }
}

extension RTCEngine {
    /// Reports volumes every `interval` ms (Agora's `enableAudioVolumeIndication(interval:smooth:reportVad:)`):
    /// an ``RTCEngineEvent/audioVolumeIndication(speakers:totalVolume:)`` with this client's own
    /// audio (its uid) and each remote user whose audio it receives, 0–255, smoothed over `smooth`
    /// intervals (0 to 10); `reportVad` adds voice activity. 0 or less stops it.
    public func enableAudioVolumeIndication(interval: Int, smooth: Int = 3, reportVad: Bool = false) {
        volumeIndicator.configure(intervalMs: interval, smooth: smooth, reportVad: reportVad, loop: eventLoopForTimers,
                                  sample: { [weak self] in self?.audioLevelSample() ?? [] },
                                  emit: { [weak self] event in self?.emitEvent(event) })
    }
}
