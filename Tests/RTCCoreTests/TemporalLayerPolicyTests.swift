import Testing
@testable import RTCCore

@Suite("When a screen encodes two temporal layers")
struct TemporalLayerPolicyTests {
    /// Floor 200 kbps: off under 400, on again after 4 s at 600 or more.
    struct Step: Sendable, CustomTestStringConvertible {
        let atMs: Int64
        let targetKbps: Int?
        let expected: Int
        var testDescription: String { "\(atMs) ms: \(targetKbps.map(String.init) ?? "none") kbps → \(expected)" }
    }

    static let scenarios: [(String, [Step])] = [
        ("starts layered, and no estimate changes nothing", [Step(atMs: 0, targetKbps: nil, expected: 2),
                                                              Step(atMs: 100, targetKbps: 1500, expected: 2)]),
        ("off at once under twice the floor", [Step(atMs: 0, targetKbps: 1500, expected: 2), Step(atMs: 10, targetKbps: 399, expected: 1)]),
        ("between the thresholds it stays as it is", [Step(atMs: 0, targetKbps: 500, expected: 2), Step(atMs: 10, targetKbps: 390, expected: 1),
                                                      Step(atMs: 9000, targetKbps: 599, expected: 1)]),
        ("on again after 4 s of headroom", [Step(atMs: 0, targetKbps: 300, expected: 1), Step(atMs: 1000, targetKbps: 600, expected: 1),
                                            Step(atMs: 4999, targetKbps: 900, expected: 1), Step(atMs: 5000, targetKbps: 700, expected: 2)]),
        ("a dip under the on threshold starts the wait again", [Step(atMs: 0, targetKbps: 300, expected: 1),
                                                                Step(atMs: 1000, targetKbps: 600, expected: 1),
                                                                Step(atMs: 3000, targetKbps: 500, expected: 1),
                                                                Step(atMs: 5500, targetKbps: 600, expected: 1),
                                                                Step(atMs: 9500, targetKbps: 600, expected: 2)]),
    ]

    @Test("hysteresis on the estimate's target", arguments: scenarios)
    func hysteresis(name: String, steps: [Step]) {
        var policy = TemporalLayerPolicy(maximum: 2, floorKbps: 200)
        for step in steps {
            #expect(policy.update(targetKbps: step.targetKbps, nowUs: step.atMs * 1000) == step.expected, "\(name): \(step.testDescription)")
        }
    }

    @Test("one configured layer stays one")
    func single() {
        var policy = TemporalLayerPolicy(maximum: 1, floorKbps: 200)
        #expect(policy.update(targetKbps: 10_000, nowUs: 10_000_000) == 1)
    }

    @Test("screen content asks for two temporal layers by default, camera content for one; an app's choice stands")
    func defaults() {
        #expect(VideoEncoderConfiguration(contentHint: .detail).temporalLayers == 2)
        #expect(VideoEncoderConfiguration(contentHint: .motion).temporalLayers == 1)
        var camera = VideoEncoderConfiguration()
        camera.contentHint = .detail
        #expect(camera.temporalLayers == 2)
        #expect(VideoEncoderConfiguration(contentHint: .detail, temporalLayers: 1).temporalLayers == 1)
    }
}
