import NIOConcurrencyHelpers
import RTCTransport
import Signaling

/// Turns the counters of a session's senders and receivers into ``RTCStats``: rates are the
/// change since the previous report of each stream. Its lock guards only the previous counters.
final class EngineStats: Sendable {
    private struct Sample {
        var bytes: Int
        var frames: Int
        var atUs: Int64
    }

    private let previous = NIOLockedValueBox([UInt32: Sample]())

    /// A report for now. `senders` and `receivers` are what exists at this moment;
    /// `subscriberRTT` is the subscriber transport's round trip in seconds, if measured.
    func report(nowUs: Int64, sinceUs: Int64, senders: (video: LocalVideoSender?, audio: LocalAudioSender?),
                receivers: SubscriberTransport.Receivers, subscriberRTT: Double?, estimatedBandwidthKbps: Int?) -> RTCStats {
        previous.withLockedValue { previous in
            func rate(_ ssrc: UInt32, bytes: Int, frames: Int) -> (kbps: Double, fps: Double) {
                defer { previous[ssrc] = Sample(bytes: bytes, frames: frames, atUs: nowUs) }
                guard let last = previous[ssrc], nowUs > last.atUs else { return (0, 0) }
                let seconds = Double(nowUs - last.atUs) / 1e6
                return (Double(bytes - last.bytes) * 8 / 1000 / seconds, Double(frames - last.frames) / seconds)
            }
            var local: [LocalTrackStats] = []
            for (sender, kind, source) in [(senders.video?.state, TrackKind.video, senders.video?.source),
                                           (senders.audio?.state, TrackKind.audio, senders.audio?.source)] {
                guard let sender, let source else { continue }
                let counters = sender.counters.withLock { $0 }
                let (kbps, fps) = rate(sender.ssrc, bytes: counters.bytesSent, frames: counters.framesEncoded)
                local.append(LocalTrackStats(kind: kind, source: source, bitrateKbps: kbps, framesPerSecond: fps,
                                             packetsSent: counters.packetsSent, framesEncoded: counters.framesEncoded,
                                             framesDropped: counters.framesDropped, packetsRetransmitted: counters.retransmitted,
                                             lossFraction: counters.lossFraction, roundTripTimeMs: counters.roundTripTimeMs,
                                             width: counters.width, height: counters.height))
            }
            var remote: [RemoteTrackStats] = []
            let streams: [(ReceiverState, RemoteTrackInfo)] = receivers.video.map { ($0.state, $0.info) }
                + receivers.audio.map { ($0.state, $0.info) }
            for (state, info) in streams {
                let counters = state.counters.withLock { $0 }
                let (kbps, fps) = rate(state.ssrc, bytes: counters.bytesReceived, frames: counters.framesDecoded)
                let statistics = counters.statistics
                let expected = Double(statistics.expected)
                remote.append(RemoteTrackStats(
                    uid: info.uid, kind: info.kind, source: info.source, bitrateKbps: kbps, framesPerSecond: fps,
                    packetsReceived: Int(statistics.packetsReceived), packetsLost: Int(max(0, statistics.cumulativeLost)),
                    lossFraction: expected > 0 ? Double(max(0, statistics.cumulativeLost)) / expected : 0,
                    jitterMs: Double(statistics.jitter) * 1000 / Double(statistics.clockRate), roundTripTimeMs: subscriberRTT.map { $0 * 1000 },
                    framesDecoded: counters.framesDecoded, framesDropped: counters.framesDropped, decodeFailures: counters.decodeFailures,
                    keyframeRequests: counters.keyframeRequests, nacksSent: counters.nacksSent,
                    decryptionFailures: counters.decryptionFailures, framesConcealed: counters.framesConcealed,
                    framesRecovered: counters.framesRecovered, width: counters.width, height: counters.height))
            }
            remote.sort { ($0.uid, $0.kind.rawValue) < ($1.uid, $1.kind.rawValue) }
            return RTCStats(durationMs: Int((nowUs - sinceUs) / 1000), local: local, remote: remote,
                            estimatedBandwidthKbps: estimatedBandwidthKbps)
        }
    }
}
