#if canImport(Glibc)
import Glibc
#endif

/// A synthetic source pushed at a steady rate from a ``MediaThread`` of its own (absolute deadlines
/// on the monotonic clock, skipping ahead rather than bursting after a stall): a pattern's frames,
/// or a tone's 10 ms blocks, from the moment it is made until ``stop()``. Off Swift's cooperative
/// pool, so a loaded pool neither delays nor bunches the source, and the source's own gaps are not
/// taken for the path's. Like a task, it runs until stopped, whether or not it is still referenced
/// (the thread holds itself). The one paced source of the tests and the benches (`pushPattern`,
/// `pushTone`, `rtc-cli bench resilience`).
public final class PacedSource: @unchecked Sendable {
    private let thread: MediaThread

    /// `kind`'s pattern at `size`, `fps` frames a second, the first at once; each frame is stamped
    /// with the monotonic time it is pushed at. `sceneRate`: the rate the scene moves at (by default
    /// `fps`: one scene step per frame); `moving` false: its first picture again and again.
    public init(pattern kind: PatternKind, size: VideoSize, fps: Int, sceneRate: FrameRate? = nil, moving: Bool = true,
                push: @escaping (VideoFrame) -> Void) throws {
        let fps = max(1, fps)
        let generator = try PatternGenerator(kind: kind, size: size, frameRate: sceneRate ?? FrameRate(fps))
        // Touched on the thread alone.
        var index = 0
        let tick = {
            var frame = generator.frame(at: moving ? index : 0)
            index += 1
            frame.timestampUs = MediaClock.monotonicUs()
            push(frame)
        }
        thread = MediaThread(name: "paced-\(kind.rawValue)", tickIntervalUs: 1_000_000 / Int64(fps), onTick: tick)
        thread.execute(tick)
    }

    /// A sine tone of `frequency` Hz, mono, in blocks of 10 ms at `sampleRate`, the first at once;
    /// the blocks are stamped on one continuous timeline from the first.
    public init(tone frequency: Double, sampleRate: Int = 48_000, amplitude: Double = 12_000, push: @escaping (AudioFrame) -> Void) {
        let block = max(1, sampleRate / 100)
        let startUs = MediaClock.monotonicUs()
        var index = 0
        let tick = {
            let samples = (0..<block).map { offset in
                Int16(amplitude * sin(2 * Double.pi * frequency * Double(index * block + offset) / Double(sampleRate)))
            }
            push(AudioFrame(samples: .int16(samples), sampleRate: sampleRate, channels: 1, timestampUs: startUs + Int64(index) * 10_000))
            index += 1
        }
        thread = MediaThread(name: "paced-tone", tickIntervalUs: 10_000, onTick: tick)
        thread.execute(tick)
    }

    /// Stops pushing (what is being pushed finishes first). Idempotent.
    public func stop() { thread.stop() }

    /// The same as ``stop()``: what a test that held a task before calls.
    public func cancel() { stop() }
}
