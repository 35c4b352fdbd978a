import Foundation
import RTCCore
import ServerCommandLine

#if canImport(Glibc)
import Glibc
#endif

/// Where a bot's video comes from.
enum BotVideoSource {
    case none
    case pattern(PatternKind)
    case file(String)

    init(parsing text: String) {
        switch text {
        case "none": self = .none
        case "pattern", "camera": self = .pattern(.camera)
        case "screen": self = .pattern(.screen)
        default: self = .file(text)
        }
    }
}

/// Where a bot's audio comes from.
enum BotAudioSource {
    case none
    case tone(Double)
    /// A tone with pauses, as speech comes: 1 s off, 2 s on, over and over.
    case speech
    case file(String)

    init(parsing text: String) {
        switch text {
        case "none": self = .none
        case "tone": self = .tone(440)
        case "speech": self = .speech
        case "silence": self = .tone(0)
        default: self = .file(text)
        }
    }
}

/// One capture clock for a bot's sources: frame n of a source running at interval i was captured
/// at `origin + n·i`, whenever its pump got to push it. So a Y4M and a WAV that start together stay
/// together in RTP and sender reports (a pump's first tick comes one interval after it starts,
/// and the two intervals differ: stamping push times put audio ~60 ms ahead at 15 fps).
struct CaptureTimeline: Sendable {
    let originUs: Int64

    init(originUs: Int64 = MediaClock.monotonicUs()) { self.originUs = originUs }

    /// The capture time of frame `index` at `rate`, to the nearest microsecond (15 fps: 0, 66667,
    /// 133333, …, never drifting by a truncated interval per frame).
    func captureUs(index: Int, rate: FrameRate) -> Int64 {
        let numerator = Int64(max(rate.numerator, 1))
        return originUs + (Int64(index) * 1_000_000 * Int64(rate.denominator) + numerator / 2) / numerator
    }
}

/// Feeds an engine from a synthetic pattern or a Y4M file (looping) at the source's frame rate,
/// paced on a thread of its own, with capture times from the bot's ``CaptureTimeline``.
final class VideoPump: @unchecked Sendable {
    private var thread: MediaThread?
    private let next: () throws -> VideoFrame?
    private let engine: RTCEngine
    /// Set by `start`: the capture times of the bot's tracks (one timeline for audio and video).
    private var timeline = CaptureTimeline()
    private var rate = FrameRate(15)
    private(set) var framesPushed = 0

    /// Checks the source now (a missing or bad file is an error here, not later).
    init(_ source: BotVideoSource, size: VideoSize, fps: Int, engine: RTCEngine) throws {
        self.engine = engine
        switch source {
        case .none:
            next = { nil }
        case .pattern(let kind):
            let generator = try reporting { try PatternGenerator(kind: kind, size: size, frameRate: FrameRate(fps)) }
            var index = 0
            next = {
                defer { index += 1 }
                return generator.frame(at: index)
            }
        case .file(let path):
            var reader = try reporting { try Y4MReader(path: path) }
            next = {
                if let frame = try reader.readFrame() { return frame }
                reader = try Y4MReader(path: path)  // loop
                return try reader.readFrame()
            }
        }
        if case .file(let path) = source {
            rate = try reporting { try Y4MReader(path: path) }.header.frameRate
        } else {
            rate = FrameRate(max(1, fps))
        }
        if case .none = source { isActive = false } else { isActive = true }
    }

    /// Starts pushing: the first frame at once (a camera that is already open delivers one), then
    /// one per frame interval.
    func start(_ timeline: CaptureTimeline) {
        guard isActive, thread == nil else { return }
        self.timeline = timeline
        thread = MediaThread(name: "video-source", tickIntervalUs: rate.frameDurationUs) { [unowned self] in self.tick() }
        thread?.execute { [unowned self] in self.tick() }
    }

    private func tick() {
        guard var frame = try? next() else { return }
        frame.timestampUs = timeline.captureUs(index: framesPushed, rate: rate)
        engine.pushVideoFrame(frame)
        framesPushed += 1
    }

    func stop() { thread?.stop() }

    /// Whether the pump has a source (not `none`).
    let isActive: Bool
}

/// Feeds an engine a tone or a WAV file (looping) in 10 ms blocks, paced on a thread of its own.
final class AudioPump: @unchecked Sendable {
    private var thread: MediaThread?
    private let next: () throws -> AudioFrame?
    private let engine: RTCEngine
    /// Set by `start`: the capture times of the bot's tracks (one timeline for audio and video).
    private var timeline = CaptureTimeline()
    private var blocksPushed = 0

    init(_ source: BotAudioSource, engine: RTCEngine) throws {
        self.engine = engine
        switch source {
        case .none:
            next = { nil }
        case .tone(let frequency):
            var index = 0
            next = {
                defer { index += 1 }
                let samples = (0..<480).map { offset -> Int16 in
                    Int16(10000 * sin(2 * Double.pi * frequency * Double(index * 480 + offset) / 48000))
                }
                return AudioFrame(samples: .int16(samples), sampleRate: 48000, channels: 1)
            }
        case .speech:
            // 10 ms blocks: 100 silent, then 200 of a 300 Hz tone; each start is printed (when it is pushed).
            var index = 0
            next = {
                defer { index += 1 }
                let phase = index % 300
                if phase == 100 { print("speech on \(MediaClock.monotonicUs()) \(Int64(Date().timeIntervalSince1970 * 1000))"); fflush(nil) }
                let samples = (0..<480).map { offset -> Int16 in
                    phase < 100 ? 0 : Int16(10000 * sin(2 * Double.pi * 300 * Double(index * 480 + offset) / 48000))
                }
                return AudioFrame(samples: .int16(samples), sampleRate: 48000, channels: 1)
            }
        case .file(let path):
            var reader = try reporting { try WAVReader(path: path) }
            let block = reader.format.sampleRate / 100
            next = {
                if let frame = try reader.read(samplesPerChannel: block), frame.samplesPerChannel > 0 { return frame }
                reader = try WAVReader(path: path)  // loop
                return try reader.read(samplesPerChannel: block)
            }
        }
        if case .none = source { isActive = false } else { isActive = true }
    }

    /// Starts pushing a 10 ms block every 10 ms.
    func start(_ timeline: CaptureTimeline) {
        guard isActive, thread == nil else { return }
        self.timeline = timeline
        thread = MediaThread(name: "audio-source", tickIntervalUs: 10_000) { [unowned self] in self.tick() }
    }

    private func tick() {
        guard var frame = try? next() else { return }
        frame.timestampUs = timeline.captureUs(index: blocksPushed, rate: FrameRate(100))
        engine.pushAudioFrame(frame)
        blocksPushed += 1
    }

    func stop() { thread?.stop() }

    /// Whether the pump has a source (not `none`).
    let isActive: Bool
}
