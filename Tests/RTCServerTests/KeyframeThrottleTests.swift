import Testing
@testable import RTCServer

@Suite("Keyframe request throttle")
struct KeyframeThrottleTests {
    /// One step: at `atMs`, a keyframe arrives (`keyframe`) or a request is made (expecting `allowed`).
    struct Step: Sendable, CustomTestStringConvertible {
        var atMs: Int64
        var keyframe = false
        var allowed = false
        var newSubscriber = false
        var testDescription: String { keyframe ? "\(atMs) ms keyframe" : "\(atMs) ms request → \(allowed ? "sent" : "held")" }
    }

    static func request(_ atMs: Int64, _ allowed: Bool) -> Step { Step(atMs: atMs, allowed: allowed) }
    static func keyframe(_ atMs: Int64) -> Step { Step(atMs: atMs, keyframe: true) }
    static func newSubscriber(_ atMs: Int64, _ allowed: Bool) -> Step { Step(atMs: atMs, allowed: allowed, newSubscriber: true) }

    static let cases: [(String, [Step])] = [
        ("unanswered: one per 500 ms", [request(0, true), request(100, false), request(499, false), request(500, true)]),
        ("answered: the next may go 100 ms after the last", [request(0, true), keyframe(60), request(80, false), request(100, true),
                                                              request(150, false)]),
        ("answered after the floor: at once", [request(0, true), keyframe(70), request(300, true), request(350, false), request(799, false),
                                               request(800, true)]),
        ("a subscriber asking again and again: at most two per interval", [
            request(0, true), keyframe(50), request(100, true), keyframe(150), request(250, false), request(599, false),
            request(600, true), keyframe(650), request(700, true), keyframe(750), request(800, false), request(1199, false),
            request(1200, true)]),
        ("viewers joining together: each new one once the last keyframe has arrived, none while one is on its way", [
            newSubscriber(0, true), newSubscriber(20, false), keyframe(40), newSubscriber(45, true), newSubscriber(60, false),
            newSubscriber(100, false), keyframe(150), newSubscriber(160, true), keyframe(200), request(230, false),
            newSubscriber(330, true)]),
    ]

    @Test("requests against keyframes", arguments: cases)
    func steps(name: String, steps: [Step]) {
        var throttle = Throttle(intervalMs: 500)
        for step in steps {
            if step.keyframe {
                throttle.answered()
                #expect(!throttle.outstanding)
            } else {
                #expect(throttle.allow(nowMs: step.atMs, newSubscriber: step.newSubscriber) == step.allowed, "\(name): \(step.testDescription)")
            }
        }
    }

    @Test("the wait names when the next request may go")
    func wait() {
        var throttle = Throttle(intervalMs: 500)
        #expect(throttle.waitMs(nowMs: 0) == 0)
        _ = throttle.allow(nowMs: 1000)
        #expect(throttle.waitMs(nowMs: 1200) == 300)
        throttle.answered()
        #expect(throttle.waitMs(nowMs: 1050) == 50)
        #expect(throttle.waitMs(nowMs: 1200) == 0)
    }
}
