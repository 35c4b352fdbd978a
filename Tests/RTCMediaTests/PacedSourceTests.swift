import RTCMedia
import Synchronization
import Testing

/// PacedSource (RTCMedia/Synthetic): the one paced source of the tests and benches. Functional
/// checks only (order, count, the clip's timeline, ending); its cadence under load is what the
/// end-to-end suites lean on, not a figure asserted here.
@Suite("Paced source")
struct PacedSourceTests {
    @Test("a finite clip pushes each frame once, in order, stamped index × period from the first, then ends by itself")
    func clip() async throws {
        let generator = try PatternGenerator(kind: .camera, size: VideoSize(width: 64, height: 36), frameRate: FrameRate(50))
        let asked = Mutex<[Int]>([]), stamps = Mutex<[Int64]>([])
        let source = PacedSource(frames: 12, fps: 50, frame: { index in
            asked.withLock { $0.append(index) }
            return generator.frame(at: index)
        }, push: { frame in stamps.withLock { $0.append(frame.timestampUs) } })
        await source.finished()
        #expect(asked.withLock { $0 } == Array(0..<12))
        let pushed = stamps.withLock { $0 }
        #expect(pushed.count == 12)
        #expect(pushed.enumerated().allSatisfy { $0.element - pushed[0] == Int64($0.offset) * 20_000 }, "\(pushed)")
    }

    @Test("a clip's stamps are never early: at 15 fps, frame n is at ⌈n × 10⁶ / 15⌉ µs, so its 90 kHz stamp is n × 6000")
    func stampsNotEarly() async throws {
        let generator = try PatternGenerator(kind: .camera, size: VideoSize(width: 64, height: 36), frameRate: FrameRate(15))
        let stamps = Mutex<[Int64]>([])
        let source = PacedSource(frames: 16, fps: 15, frame: { generator.frame(at: $0) },
                                 push: { frame in stamps.withLock { $0.append(frame.timestampUs) } })
        await source.finished()
        let pushed = stamps.withLock { $0 }
        #expect(pushed.count == 16)
        let offsets: [Int64] = pushed.map { $0 - pushed[0] }
        let expected: [Int64] = (0..<16).map { (Int64($0) * 1_000_000 + 14) / 15 }
        #expect(offsets == expected, "\(offsets)")
        let ticks: [Int64] = offsets.map { $0 * 90 / 1000 }
        let slots: [Int64] = (0..<16).map { Int64($0) * 6000 }
        #expect(ticks == slots, "\(ticks)")
        await source.finished()  // again: at once
        source.stop()  // after the end: nothing to do
    }

    @Test("a clip whose frames run out (nil) ends early; one stopped midway ends its waiters")
    func endings() async throws {
        let generator = try PatternGenerator(kind: .camera, size: VideoSize(width: 64, height: 36), frameRate: FrameRate(50))
        let count = Mutex(0)
        let short = PacedSource(frames: 100, fps: 100, frame: { $0 < 3 ? generator.frame(at: $0) : nil },
                                push: { _ in count.withLock { $0 += 1 } })
        await short.finished()
        #expect(count.withLock { $0 } == 3)

        let long = PacedSource(frames: 10_000, fps: 50, frame: { generator.frame(at: $0) }, push: { _ in })
        async let waited: Void = long.finished()
        long.stop()
        await waited
    }
}
