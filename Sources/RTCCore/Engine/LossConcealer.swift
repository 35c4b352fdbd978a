/// Fills the 20 ms a lost audio packet leaves with a continuation of what was played before it, and
/// blends the next decoded frame in: what a receiver's playout must do when neither the packet nor
/// its FEC came. (libopus's own concealment fades a tone to about a tenth of its level within the
/// first 10 ms of a loss and leaves the next decoded frame at a quarter; a listener hears a gap.)
///
/// The continuation repeats the last pitch period of the history (found by normalized
/// autocorrelation, 50-500 Hz), so a voiced sound or a tone keeps its level and phase; a
/// signal with no clear period (noise, unvoiced speech) is repeated the same way but fades faster.
/// The level holds for the first 40 ms of a loss, then falls by `fadePerFrame` each frame; the next
/// decoded frame is cross-faded in over 5 ms from where the continuation had got to.
///
/// Interleaved 16-bit samples at any rate and channel count; one per received audio track, used
/// from its playout thread only.
public struct LossConcealer: Sendable {
    public let sampleRate: Int
    public let channels: Int
    /// How many samples per channel of played audio are kept to conceal from: 60 ms.
    private let historyLength: Int
    private var history: [Int16]
    /// The continuation in progress: its period (samples per channel), how far into it (samples
    /// per channel since the loss began), its gain and how many frames it has covered.
    private var period = 0
    private var position = 0
    private var gain: Float = 1
    private var voiced = true
    public private(set) var framesInARow = 0
    /// Frames concealed since the start.
    public private(set) var framesConcealed = 0

    /// Frames concealed at full level before the fade begins.
    static let holdFrames = 2
    /// The gain kept per frame after that: a voiced sound, and one with no clear period.
    static let fadePerFrame: Float = 0.75
    static let unvoicedFadePerFrame: Float = 0.5

    /// `sampleRate` is one of Opus's (8000 to 48000 Hz); others are taken as 48000.
    public init(sampleRate: Int = 48000, channels: Int = 2) {
        self.sampleRate = (8000...48000).contains(sampleRate) ? sampleRate : 48000
        self.channels = max(1, channels)
        historyLength = sampleRate * 60 / 1000
        history = []
        history.reserveCapacity(historyLength * self.channels)
    }

    /// Whether the last frame out was a concealed one.
    public var concealing: Bool { framesInARow > 0 }

    /// A frame decoded from a packet (or recovered from FEC), on its way out: cross-faded in from
    /// the continuation if it follows a concealed one, then kept as history.
    public mutating func played(_ samples: inout [Int16]) {
        // Whole frames of every channel only: a ragged end is left out of the history.
        samples.removeLast(samples.count % channels)
        if framesInARow > 0 {
            let fade = min(samples.count / channels, sampleRate / 200)
            let tail = continuation(count: fade)
            for frame in 0..<fade {
                let weight = Float(frame + 1) / Float(fade + 1)
                for channel in 0..<channels {
                    let index = frame * channels + channel
                    let mixed = weight * Float(samples[index]) + (1 - weight) * gain * Float(tail[index])
                    samples[index] = Int16(clamping: Int(mixed.rounded()))
                }
            }
        }
        framesInARow = 0
        remember(samples)
    }

    /// Playout stopped (nothing to conceal from any more): what comes next starts afresh.
    public mutating func reset() {
        history.removeAll(keepingCapacity: true)
        framesInARow = 0
        period = 0
    }

    /// `samplesPerChannel` samples to play in place of a lost packet.
    public mutating func conceal(samplesPerChannel: Int) -> [Int16] {
        guard samplesPerChannel > 0 else { return [] }
        if framesInARow == 0 {
            let found = Self.pitch(history, channels: channels, sampleRate: sampleRate)
            period = found.period
            voiced = found.correlation >= 0.5
            position = 0
            gain = 1
        }
        framesInARow += 1
        framesConcealed += 1
        guard period > 0 else { return [Int16](repeating: 0, count: samplesPerChannel * channels) }
        let startGain = gain
        if framesInARow > Self.holdFrames { gain *= voiced ? Self.fadePerFrame : Self.unvoicedFadePerFrame }
        var out = continuation(count: samplesPerChannel)
        // The gain moves smoothly from where the last frame left it.
        for frame in 0..<samplesPerChannel {
            let level = startGain + (gain - startGain) * Float(frame + 1) / Float(samplesPerChannel)
            for channel in 0..<channels {
                let index = frame * channels + channel
                out[index] = Int16(clamping: Int((Float(out[index]) * level).rounded()))
            }
        }
        position += samplesPerChannel
        return out
    }

    /// The next `count` samples per channel of the periodic continuation, without the gain and
    /// without advancing.
    private func continuation(count: Int) -> [Int16] {
        var out = [Int16](repeating: 0, count: count * channels)
        let frames = history.count / channels
        guard period > 0, frames >= period else { return out }
        let start = frames - period
        for frame in 0..<count {
            let source = start + (position + frame) % period
            for channel in 0..<channels { out[frame * channels + channel] = history[source * channels + channel] }
        }
        return out
    }

    private mutating func remember(_ samples: [Int16]) {
        // While concealing, the history stays what was last decoded: the continuation repeats it.
        guard framesInARow == 0 else { return }
        history.append(contentsOf: samples)
        let excess = history.count - historyLength * channels
        if excess > 0 { history.removeFirst(excess) }
    }

    /// The period (samples per channel) of the end of `history` with the highest normalized
    /// autocorrelation between 2 ms and 20 ms, and that correlation (0 when there is too little
    /// history or only silence). Searched at a quarter of the rate, then refined at the full rate.
    static func pitch(_ history: [Int16], channels: Int, sampleRate: Int) -> (period: Int, correlation: Float) {
        let frames = history.count / max(1, channels)
        let minLag = sampleRate / 500, maxLag = sampleRate / 50
        let window = sampleRate / 50  // 20 ms compared with the 20 ms one period earlier
        guard frames >= maxLag + window else { return (0, 0) }
        var mono = [Float](repeating: 0, count: frames)
        for frame in 0..<frames {
            var sum: Float = 0
            for channel in 0..<channels { sum += Float(history[frame * channels + channel]) }
            mono[frame] = sum / Float(channels)
        }
        func correlation(_ signal: [Float], lag: Int, window: Int) -> Float {
            let end = signal.count
            var cross: Float = 0, energyA: Float = 0, energyB: Float = 0
            for index in (end - window)..<end {
                let a = signal[index], b = signal[index - lag]
                cross += a * b
                energyA += a * a
                energyB += b * b
            }
            let denominator = (energyA * energyB).squareRoot()
            return denominator > 0 ? cross / denominator : 0
        }
        // A quarter of the rate: the mean of each 4 samples.
        var decimated: [Float] = []
        decimated.reserveCapacity(frames / 4)
        for start in stride(from: frames % 4, to: frames, by: 4) {
            let sum: Float = mono[start] + mono[start + 1] + mono[start + 2] + mono[start + 3]
            decimated.append(sum / 4)
        }
        var best = (lag: 0, value: Float(-2))
        for lag in max(1, minLag / 4)...(maxLag / 4) {
            let value = correlation(decimated, lag: lag, window: window / 4)
            if value > best.value { best = (lag, value) }
        }
        guard best.lag > 0, best.value > 0 else { return (0, 0) }
        var refined = (lag: best.lag * 4, value: Float(-2))
        for lag in max(minLag, best.lag * 4 - 4)...min(maxLag, best.lag * 4 + 4) {
            let value = correlation(mono, lag: lag, window: window)
            if value > refined.value { refined = (lag, value) }
        }
        return (refined.lag, max(0, refined.value))
    }
}
