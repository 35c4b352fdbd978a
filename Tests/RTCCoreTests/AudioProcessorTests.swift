import Foundation
import Testing
@testable import RTCCore

@Suite("Audio processing (webrtc-audio-processing)")
struct AudioProcessorTests {
    /// Far-end speech-like audio; the microphone hears it back through a simulated room (a delay
    /// and a short decaying impulse response) and nothing else. ERLE compares the echo power going
    /// in with what is left after processing, over the last second once the canceller has converged.
    @Test("echo cancellation removes at least 15 dB of echo (ERLE)", arguments: [16000, 48000])
    func echoReturnLossEnhancement(sampleRate: Int) throws {
        let processor = try AudioProcessor(configuration: AudioProcessingConfiguration(
            sampleRate: sampleRate, channels: 1, echoCancellation: .high, noiseSuppression: .off,
            gainControl: false, highPassFilter: true))
        let frame = sampleRate / 100
        let seconds = 6
        let far = speechLike(sampleRate: sampleRate, samples: frame * 100 * seconds, offset: 0)
        let delayMs = 40
        let delay = sampleRate * delayMs / 1000
        // Room: direct path at 0.5, reflections at +3 ms and +7 ms.
        let taps: [(Int, Double)] = [(0, 0.5), (sampleRate * 3 / 1000, 0.25), (sampleRate * 7 / 1000, 0.12)]
        let echo: [Int16] = far.indices.map { index in
            var value = 0.0
            for (lag, gain) in taps where index - delay - lag >= 0 { value += gain * Double(far[index - delay - lag]) }
            return Int16(clamping: Int(value))
        }
        var inPower = 0.0, outPower = 0.0
        for block in 0..<(100 * seconds) {
            let range = (block * frame)..<((block + 1) * frame)
            try processor.processFarEnd(Array(far[range]))
            var mic = Array(echo[range])
            try processor.processNearEnd(&mic, delayMs: delayMs)
            if block >= 100 * (seconds - 1) {
                inPower += echo[range].reduce(0.0) { $0 + Double($1) * Double($1) }
                outPower += mic.reduce(0.0) { $0 + Double($1) * Double($1) }
            }
        }
        let erle = 10 * log10(inPower / max(outPower, 1))
        #expect(erle >= 15, "ERLE \(erle) dB at \(sampleRate) Hz")
    }

    @Test("gain control lifts quiet speech, noise suppression keeps it", arguments: [1, 2])
    func noiseSuppressionAndGain(channels: Int) throws {
        let processor = try AudioProcessor(configuration: AudioProcessingConfiguration(
            sampleRate: 48000, channels: channels, echoCancellation: .off, noiseSuppression: .high, gainControl: true))
        let mono = speechLike(sampleRate: 48000, samples: 48000 * 3, offset: 0).map { Int16($0 / 16) }
        var inPower = 0.0, outPower = 0.0
        for block in 0..<300 {
            let input = mono[(block * 480)..<((block + 1) * 480)]
            var frame: [Int16] = input.flatMap { Array(repeating: $0, count: channels) }
            try processor.processNearEnd(&frame, delayMs: 0)
            if block >= 200 {
                inPower += input.reduce(0.0) { $0 + Double($1) * Double($1) }
                outPower += stride(from: 0, to: frame.count, by: channels).reduce(0.0) { $0 + Double(frame[$1]) * Double(frame[$1]) }
            }
        }
        let gain = 10 * log10(outPower / inPower)
        #expect(gain > 3, "gain \(gain) dB with \(channels) channels")
    }

    @Test("wrong rates, channel counts and frame lengths are errors")
    func rejectsBadInput() throws {
        #expect(throws: CodecError.self) { try AudioProcessor(configuration: AudioProcessingConfiguration(sampleRate: 44100)) }
        #expect(throws: CodecError.self) { try AudioProcessor(configuration: AudioProcessingConfiguration(channels: 3)) }
        let processor = try AudioProcessor(configuration: AudioProcessingConfiguration(sampleRate: 16000))
        var short = [Int16](repeating: 0, count: 100)
        #expect(throws: CodecError.self) { try processor.processNearEnd(&short, delayMs: 0) }
        #expect(throws: CodecError.self) { try processor.processFarEnd(short) }
    }
}
