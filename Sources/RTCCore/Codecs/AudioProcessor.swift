internal import CAPM

/// Settings of an ``AudioProcessor``.
public struct AudioProcessingConfiguration: Sendable, Hashable {
    /// How hard a stage works; `.off` disables it.
    public enum Level: Int, Sendable, Hashable, CaseIterable {
        case off = 0, low, moderate, high, veryHigh
    }

    /// 16000, 32000 or 48000.
    public var sampleRate: Int
    /// 1 or 2.
    public var channels: Int
    /// Acoustic echo cancellation (needs the far-end signal through ``AudioProcessor/processFarEnd(_:)``).
    public var echoCancellation: Level
    public var noiseSuppression: Level
    /// Adaptive digital gain control towards -3 dBFS.
    public var gainControl: Bool
    public var highPassFilter: Bool

    public init(sampleRate: Int = 48000, channels: Int = 1, echoCancellation: Level = .high,
                noiseSuppression: Level = .moderate, gainControl: Bool = true, highPassFilter: Bool = true) {
        self.sampleRate = sampleRate
        self.channels = channels
        self.echoCancellation = echoCancellation
        self.noiseSuppression = noiseSuppression
        self.gainControl = gainControl
        self.highPassFilter = highPassFilter
    }

    /// Samples per channel in one 10 ms frame.
    public var samplesPerFrame: Int { sampleRate / 100 }
}

/// Echo cancellation, noise suppression and gain control over webrtc-audio-processing, on 10 ms
/// frames of interleaved 16-bit audio.
///
/// Not thread-safe: call both directions from one audio thread.
public final class AudioProcessor {
    public let configuration: AudioProcessingConfiguration
    private let apm: OpaquePointer

    public init(configuration: AudioProcessingConfiguration) throws(CodecError) {
        guard [16000, 32000, 48000].contains(configuration.sampleRate), (1...2).contains(configuration.channels) else {
            throw CodecError(.invalidConfiguration,
                             "audio processing: \(configuration.channels) channels at \(configuration.sampleRate) Hz is not supported (16, 32 or 48 kHz, mono or stereo)")
        }
        var settings = rtc_apm_config(
            sample_rate_hz: Int32(configuration.sampleRate), channels: Int32(configuration.channels),
            echo_cancellation: Int32(min(configuration.echoCancellation.rawValue, 3)),
            noise_suppression: Int32(configuration.noiseSuppression.rawValue),
            gain_control: configuration.gainControl ? 1 : 0, high_pass_filter: configuration.highPassFilter ? 1 : 0)
        var error: Int32 = 0
        guard let apm = rtc_apm_create(&settings, &error) else {
            throw CodecError(.library, "audio processing: create failed with error \(error)")
        }
        self.apm = apm
        self.configuration = configuration
    }

    deinit { rtc_apm_destroy(apm) }

    /// Feeds 10 ms of the audio being played out (the far end), which the echo canceller removes
    /// from the microphone signal.
    public func processFarEnd(_ samples: [Int16]) throws(CodecError) {
        try checkLength(samples)
        let status = samples.withUnsafeBufferPointer { rtc_apm_process_reverse(apm, $0.baseAddress, Int32(configuration.samplesPerFrame)) }
        guard status == 0 else { throw CodecError(.library, "audio processing: far-end frame failed with error \(status)") }
    }

    /// Cleans 10 ms of microphone audio in place. `delayMs` is the time from a far-end frame
    /// being fed to its echo reaching this call (playout plus capture latency).
    public func processNearEnd(_ samples: inout [Int16], delayMs: Int) throws(CodecError) {
        try checkLength(samples)
        let count = Int32(configuration.samplesPerFrame)
        let status = samples.withUnsafeMutableBufferPointer {
            rtc_apm_process_capture(apm, $0.baseAddress, count, Int32(clamping: max(0, min(delayMs, 500))))
        }
        guard status == 0 else { throw CodecError(.library, "audio processing: near-end frame failed with error \(status)") }
    }

    /// Whether the last near-end frame held voice.
    public var lastFrameHasVoice: Bool { rtc_apm_last_has_voice(apm) != 0 }

    private func checkLength(_ samples: [Int16]) throws(CodecError) {
        let expected = configuration.samplesPerFrame * configuration.channels
        guard samples.count == expected else {
            throw CodecError(.invalidInput, "audio processing takes 10 ms frames of \(expected) samples, got \(samples.count)")
        }
    }
}
