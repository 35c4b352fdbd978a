import NIOConcurrencyHelpers
import RTCMedia
import ServerCommandLine

/// `rtc-cli join --playout-wav FILE`: what the bot would play out, every remote audio track mixed
/// (48 kHz stereo, the engine's mixed sink), with silence written where nothing played (before the
/// first packets, or while rebuffering), so the file keeps the playout's own timeline for the
/// quality bench to align against its source. The header is brought up to date once a second, so
/// a bot stopped by a signal still leaves a readable file.
/// The writer is touched only under the lock.
final class PlayoutWAV: @unchecked Sendable {
    private struct State {
        let writer: WAVWriter
        var startUs: Int64?
        /// Samples per channel written.
        var written = 0
        var failed = false
    }

    private let state: NIOLockedValueBox<State>
    let path: String

    init(path: String) throws {
        self.path = path
        do {
            state = NIOLockedValueBox(State(writer: try WAVWriter(path: path, sampleRate: 48000, channels: 2)))
        } catch {
            throw CLIError("--playout-wav \(path): \(error)")
        }
    }

    /// A mixed 20 ms frame, stamped (monotonic µs) when it was played.
    func write(_ frame: AudioFrame) {
        state.withLockedValue { state in
            guard !state.failed, frame.sampleRate == 48000, frame.channels == 2 else { return }
            let samples = frame.int16Samples.count / 2
            guard samples > 0 else { return }
            let start = state.startUs ?? frame.timestampUs
            state.startUs = start
            // Where this frame belongs on the playout's clock; a gap of a whole frame or more is silence.
            let due = Int((frame.timestampUs - start) * 48 / 1000)
            let missing = (due - state.written) / samples * samples
            do {
                if missing > 0 {
                    try state.writer.write(int16: [Int16](repeating: 0, count: missing * 2))
                    state.written += missing
                }
                try state.writer.write(frame)
                state.written += samples
                if state.written % 48000 < samples { try state.writer.updateHeader() }
            } catch {
                state.failed = true
                print("rtc-cli: --playout-wav \(path): \(error)")
            }
        }
    }

    func finish() {
        state.withLockedValue { state in try? state.writer.finish() }
    }
}
