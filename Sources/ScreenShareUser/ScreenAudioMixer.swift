import RTCCore

/// Mixes the two audio feeds ReplayKit delivers separately (app audio and microphone), each at its
/// own rate and channel count, into one 48 kHz stereo stream in 10 ms blocks, without clipping: the
/// sum passes a peak limiter (instant attack, 50 ms release) instead of saturating.
public struct ScreenAudioMixer: Sendable {
    public enum Input: Int, Sendable, CaseIterable { case app = 0, microphone = 1 }

    static let block = 480 * 2  // 10 ms of 48 kHz stereo
    private var resamplers: [AudioResampler?] = [nil, nil]
    private var pending: [[Int16]] = [[], []]
    private var lastPush: [Int64?] = [nil, nil]
    private var gain: Float = 1
    /// 10 ms blocks the limiter turned down (they would have clipped).
    public private(set) var limitedBlocks = 0

    public init() {}

    /// Takes audio from one input; returns the 10 ms blocks now complete.
    public mutating func push(_ frame: AudioFrame, from input: Input, nowUs: Int64) throws(CodecError) -> [AudioFrame] {
        let index = input.rawValue
        if resamplers[index] == nil || resamplers[index]!.inputRate != frame.sampleRate || resamplers[index]!.inputChannels != frame.channels {
            resamplers[index] = try AudioResampler(inputRate: frame.sampleRate, inputChannels: frame.channels)
        }
        pending[index] += resamplers[index]!.process(frame.int16Samples)
        lastPush[index] = nowUs
        return mix(nowUs: nowUs)
    }

    /// An input is live while it pushed within the last 100 ms; a silent one does not hold the mix back.
    private func live(_ index: Int, nowUs: Int64) -> Bool {
        guard let last = lastPush[index] else { return false }
        return nowUs - last < 100_000
    }

    private mutating func mix(nowUs: Int64) -> [AudioFrame] {
        var out: [AudioFrame] = []
        while true {
            let inputs = (0..<2).filter { live($0, nowUs: nowUs) }
            guard !inputs.isEmpty, inputs.allSatisfy({ pending[$0].count >= Self.block }) else { break }
            var sum = [Float](repeating: 0, count: Self.block)
            for index in inputs {
                for sample in 0..<Self.block { sum[sample] += Float(pending[index][sample]) }
                pending[index].removeFirst(Self.block)
            }
            let peak = sum.reduce(0) { max($0, abs($1)) }
            // The limiter's ceiling sits just under full scale (-0.3 dBFS): no sample ever saturates.
            let ceiling: Float = 31_700
            let needed: Float = peak > ceiling ? ceiling / peak : 1
            // Instant attack; release toward unity by a fifth of the way per 10 ms (about 50 ms).
            let recovered = gain + (1 - gain) * 0.2
            if needed < recovered { limitedBlocks += 1 }
            gain = min(needed, recovered)
            var samples = [Int16](repeating: 0, count: Self.block)
            for sample in 0..<Self.block { samples[sample] = Int16((sum[sample] * gain).rounded()) }
            out.append(AudioFrame(samples: .int16(samples), sampleRate: 48000, channels: 2, timestampUs: nowUs))
        }
        // A stopped input's leftovers are dropped, so it cannot hold audio back later.
        for index in 0..<2 where !live(index, nowUs: nowUs) { pending[index].removeAll() }
        return out
    }
}
