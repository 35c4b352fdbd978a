/// A block of interleaved PCM audio.
public struct AudioFrame: Sendable {
    /// Interleaved samples, either 16-bit integers or floats in -1...1.
    public enum Samples: Sendable, Equatable {
        case int16([Int16])
        case float([Float])

        /// Total number of samples (all channels).
        public var count: Int {
            switch self {
            case .int16(let values): values.count
            case .float(let values): values.count
            }
        }
    }

    public var samples: Samples
    /// Samples per second per channel (for example 48000).
    public var sampleRate: Int
    /// Number of interleaved channels.
    public var channels: Int
    /// Capture time of the first sample, in microseconds.
    public var timestampUs: Int64

    public init(samples: Samples, sampleRate: Int, channels: Int, timestampUs: Int64 = 0) {
        self.samples = samples
        self.sampleRate = sampleRate
        self.channels = channels
        self.timestampUs = timestampUs
    }

    /// Samples per channel.
    public var samplesPerChannel: Int { channels > 0 ? samples.count / channels : 0 }

    /// Duration in microseconds.
    public var durationUs: Int64 {
        sampleRate > 0 ? Int64(samplesPerChannel) * 1_000_000 / Int64(sampleRate) : 0
    }

    /// The samples as 16-bit integers, converting (with clipping) from float if needed.
    public var int16Samples: [Int16] {
        switch samples {
        case .int16(let values): return values
        case .float(let values): return values.map(Self.int16(fromFloat:))
        }
    }

    /// The samples as floats in -1...1, converting from 16-bit if needed.
    public var floatSamples: [Float] {
        switch samples {
        case .int16(let values): return values.map { Float($0) / 32768 }
        case .float(let values): return values
        }
    }

    /// Converts one float sample to 16 bits with rounding and clipping.
    @inline(__always)
    public static func int16(fromFloat value: Float) -> Int16 {
        let scaled = (value * 32768).rounded()
        if !(scaled > -32768) { return .min }  // also catches NaN
        if scaled >= 32767 { return .max }
        return Int16(scaled)
    }
}
