#if canImport(Glibc)
import Glibc
#endif

/// Drops frames by timestamp to hold a maximum frame rate, evenly: a 60 fps source capped at 5
/// gives one frame every 200 ms, not bursts. Deterministic; no clock of its own.
public struct FrameRateLimiter: Sendable, Hashable {
    public private(set) var maxFramesPerSecond: Double
    private var intervalUs: Int64
    private var nextDueUs: Int64?

    public init(maxFramesPerSecond: Double) {
        self.maxFramesPerSecond = max(0.1, maxFramesPerSecond)
        intervalUs = Int64(1_000_000 / self.maxFramesPerSecond)
    }

    public mutating func setMaxFramesPerSecond(_ value: Double) {
        self = FrameRateLimiter(maxFramesPerSecond: value)
    }

    /// Whether the frame captured at `timestampUs` is to be sent.
    public mutating func admit(timestampUs: Int64) -> Bool {
        guard let due = nextDueUs else {
            nextDueUs = timestampUs + intervalUs
            return true
        }
        // A quarter interval of tolerance absorbs capture jitter without raising the average rate.
        guard timestampUs >= due - intervalUs / 4 else { return false }
        // After a pause, start a new cadence instead of catching up with a burst.
        nextDueUs = timestampUs > due + intervalUs ? timestampUs + intervalUs : due + intervalUs
        return true
    }
}

/// Monotonic and wall clocks in microseconds.
public enum MediaClock {
    public static func monotonicUs() -> Int64 { MediaThread.monotonicNowUs() }

    /// Microseconds since 1970.
    public static func wallUs() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1000
    }
}
