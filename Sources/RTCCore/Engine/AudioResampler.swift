/// Converts interleaved 16-bit PCM from any sample rate and channel count to another, as a stream:
/// state carries over between calls, so blocks of any size join without clicks.
///
/// Channels are mapped first (a mono source is copied to every channel; more channels are averaged
/// down to mono or kept pairwise), then each channel is resampled with 4-point cubic (Catmull-Rom)
/// interpolation: clean for the tones and voice an RTC path carries, and cheap enough to run per
/// 10 ms block on the capture thread.
public struct AudioResampler: Sendable {
    public let inputRate: Int
    public let inputChannels: Int
    public let outputRate: Int
    public let outputChannels: Int
    private let step: Double
    /// Pending input per output channel; index 0 is one sample of history.
    private var pending: [[Float]]
    private var position: Double = 1

    public init(inputRate: Int, inputChannels: Int, outputRate: Int = 48000, outputChannels: Int = 2) throws(CodecError) {
        guard (1000...384_000).contains(inputRate), (1000...384_000).contains(outputRate) else {
            throw CodecError(.invalidConfiguration, "resampler: sample rate \(inputRate) → \(outputRate) Hz is out of range 1000...384000")
        }
        guard (1...8).contains(inputChannels), (1...2).contains(outputChannels) else {
            throw CodecError(.invalidConfiguration,
                             "resampler: \(inputChannels) → \(outputChannels) channels is not supported (1 to 8 in, 1 or 2 out)")
        }
        self.inputRate = inputRate
        self.inputChannels = inputChannels
        self.outputRate = outputRate
        self.outputChannels = outputChannels
        step = Double(inputRate) / Double(outputRate)
        pending = Array(repeating: [0], count: outputChannels)
    }

    /// Whether the conversion does nothing.
    public var isIdentity: Bool { inputRate == outputRate && inputChannels == outputChannels }

    /// Converts one block; returns the output samples ready so far (interleaved).
    public mutating func process(_ samples: [Int16]) -> [Int16] {
        if isIdentity { return samples }
        let frames = samples.count / inputChannels
        // Channel mapping into the pending buffers.
        for channel in 0..<outputChannels { pending[channel].reserveCapacity(pending[channel].count + frames) }
        for frame in 0..<frames {
            let base = frame * inputChannels
            for channel in 0..<outputChannels {
                let value: Float
                if inputChannels == 1 {
                    value = Float(samples[base])
                } else if outputChannels == 1 {
                    var sum: Float = 0
                    for index in 0..<inputChannels { sum += Float(samples[base + index]) }
                    value = sum / Float(inputChannels)
                } else {
                    value = Float(samples[base + min(channel, inputChannels - 1)])
                }
                pending[channel].append(value)
            }
        }
        if inputRate == outputRate {
            // Channel mapping only.
            let count = pending[0].count - 1
            var output = [Int16](repeating: 0, count: count * outputChannels)
            for channel in 0..<outputChannels {
                for index in 0..<count { output[index * outputChannels + channel] = Self.clip(pending[channel][index + 1]) }
                pending[channel].removeFirst(count)
            }
            return output
        }
        var output: [Int16] = []
        let available = pending[0].count
        output.reserveCapacity(Int(Double(available) / step + 2) * outputChannels)
        var position = self.position
        while position + 2 < Double(available) {
            let index = Int(position)
            let t = Float(position - Double(index))
            for channel in 0..<outputChannels {
                let p = pending[channel]
                let y0 = p[index - 1], y1 = p[index], y2 = p[index + 1], y3 = p[index + 2]
                // Catmull-Rom spline through y1...y2.
                let a = -0.5 * y0 + 1.5 * y1 - 1.5 * y2 + 0.5 * y3
                let b = y0 - 2.5 * y1 + 2 * y2 - 0.5 * y3
                let c = -0.5 * y0 + 0.5 * y2
                output.append(Self.clip(((a * t + b) * t + c) * t + y1))
            }
            position += step
        }
        // Keep one sample of history before the next read position.
        let drop = max(0, Int(position) - 1)
        for channel in 0..<outputChannels { pending[channel].removeFirst(drop) }
        self.position = position - Double(drop)
        return output
    }

    @inline(__always)
    static func clip(_ value: Float) -> Int16 {
        let rounded = value.rounded()
        if !(rounded > -32768) { return .min }
        if rounded >= 32767 { return .max }
        return Int16(rounded)
    }
}
