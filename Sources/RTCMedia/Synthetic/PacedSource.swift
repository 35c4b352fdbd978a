import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A synthetic source pushed at a steady rate from a ``MediaThread`` of its own (absolute deadlines
/// on the monotonic clock, skipping ahead rather than bursting after a stall): a pattern's frames,
/// or a tone's 10 ms blocks, from the moment it is made until ``stop()``. Off Swift's cooperative
/// pool, so a loaded pool neither delays nor bunches the source, and the source's own gaps are not
/// taken for the path's. Like a task, it runs until stopped, whether or not it is still referenced
/// (the thread holds itself). A finite clip (``init(frames:fps:frame:push:)``) stops by itself after
/// its last frame, and ``finished()`` waits for that. The one paced source of the tests and the
/// benches (`pushPattern`, `pushTone`, clips, `rtc-cli bench resilience` and `bench latency`).
public final class PacedSource: @unchecked Sendable {
    private var thread: MediaThread!
    private let completion = Completion()

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

    /// `count` frames, `frame(index)` each (nil ends the clip early), `fps` a second, the first at
    /// once; each is stamped on one timeline from the first (index / fps seconds, rounded up to the
    /// µs, as a camera's capture clock would: the push's own scheduling jitter is not the clip's).
    /// It stops by itself after the last one.
    public init(frames count: Int, fps: Int, frame: @escaping (Int) -> VideoFrame?, push: @escaping (VideoFrame) -> Void) {
        let rate = max(1, fps), periodUs = 1_000_000 / Int64(rate)
        let completion = completion, own = WeakThread()
        var index = 0
        var startUs: Int64 = 0
        let tick = {
            guard index < count, var next = frame(index) else {
                completion.finish()
                own.thread?.stop()
                return
            }
            if index == 0 { startUs = MediaClock.monotonicUs() }
            // Rounded up, never early: index × 66 666 µs at 15 fps drifts a frame's 90 kHz stamp
            // below its slot (53 999 for frame 9), and whatever pairs frames by time (a file's
            // player, ffmpeg's psnr filter) then takes it for the frame before.
            next.timestampUs = startUs + (Int64(index) * 1_000_000 + Int64(rate) - 1) / Int64(rate)
            index += 1
            push(next)
            if index == count {
                completion.finish()
                own.thread?.stop()
            }
        }
        thread = MediaThread(name: "paced-clip", tickIntervalUs: periodUs, onTick: tick)
        own.thread = thread
        thread.execute(tick)
    }

    /// Returns once a finite clip's last frame is pushed, or the source is stopped.
    public func finished() async { await completion.wait() }

    /// Stops pushing (what is being pushed finishes first). Idempotent.
    public func stop() {
        thread.stop()
        completion.finish()
    }

    /// The same as ``stop()``: what a test that held a task before calls.
    public func cancel() { stop() }
}

/// Done or not, and whoever waits for it.
private final class Completion: Sendable {
    private let state = Mutex<(done: Bool, waiting: [CheckedContinuation<Void, Never>])>((false, []))

    func finish() {
        let waiting = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            guard !state.done else { return [] }
            state.done = true
            defer { state.waiting = [] }
            return state.waiting
        }
        for continuation in waiting { continuation.resume() }
    }

    func wait() async {
        await withCheckedContinuation { continuation in
            let done = state.withLock { state -> Bool in
                if !state.done { state.waiting.append(continuation) }
                return state.done
            }
            if done { continuation.resume() }
        }
    }
}

/// The clip's own thread, for its last tick to stop it (weak: the running thread keeps itself).
private final class WeakThread: @unchecked Sendable {
    weak var thread: MediaThread?
}
