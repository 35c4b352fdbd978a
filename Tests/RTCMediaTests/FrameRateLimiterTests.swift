import RTCMedia
import Testing

/// FrameRateLimiter (RTCMedia/Threads), moved here from the engine-component tests.
@Suite("Frame-rate limiter")
struct FrameRateLimiterTests {
    @Test("the frame-rate limiter keeps an even cadence at the cap",
          arguments: [(60.0, 5.0, 5), (30, 15, 15), (30, 30, 30), (24, 15, 15), (10, 15, 10), (60, 30, 30)])
    func limiter(source: Double, cap: Double, expected: Int) {
        var limiter = FrameRateLimiter(maxFramesPerSecond: cap)
        var admitted: [Int64] = []
        for index in 0..<Int(source * 10) {
            let timestamp = Int64(Double(index) * 1_000_000 / source)
            if limiter.admit(timestampUs: timestamp) { admitted.append(timestamp) }
        }
        // Ten seconds of input.
        #expect(abs(admitted.count - expected * 10) <= 1, "\(admitted.count) frames admitted")
        let gaps = zip(admitted.dropFirst(), admitted).map { $0 - $1 }
        let interval = 1_000_000 / min(cap, source)
        #expect(gaps.allSatisfy { Double($0) <= interval * 1.5 }, "no bursts or long holes")
    }

    @Test("after a pause the limiter starts a new cadence instead of a burst")
    func limiterPause() {
        var limiter = FrameRateLimiter(maxFramesPerSecond: 10)
        let v1 = limiter.admit(timestampUs: 0)
        #expect(v1)
        let v2 = limiter.admit(timestampUs: 100_000)
        #expect(v2)
        let v3 = limiter.admit(timestampUs: 5_000_000)
        #expect(v3)
        let v4 = limiter.admit(timestampUs: 5_010_000)
        #expect(!v4)
        let v5 = limiter.admit(timestampUs: 5_050_000)
        #expect(!v5)
        let v6 = limiter.admit(timestampUs: 5_100_000)
        #expect(v6)
    }
}
