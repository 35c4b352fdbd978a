import RTCConventions
import Testing

/// The one rule for connection quality (``NetworkQuality``), as the server and the engine use it.
@Suite("Network quality levels")
struct NetworkQualityTests {
    @Test("each measure's thresholds; the worst measure decides", arguments: [
        (0.0, nil, nil, 1), (0.009, nil, nil, 1), (0.01, nil, nil, 2), (0.029, nil, nil, 2), (0.03, nil, nil, 3), (0.06, nil, nil, 4),
        (0.1, nil, nil, 5), (0.19, nil, nil, 5), (0.2, nil, nil, 5), (1.0, nil, nil, 5),
        (0.0, 99.0, nil, 1), (0.0, 100.0, nil, 2), (0.0, 250.0, nil, 3), (0.0, 400.0, nil, 4), (0.0, 900.0, nil, 5),
        (0.0, nil, 19.0, 1), (0.0, nil, 20.0, 2), (0.0, nil, 59.0, 3), (0.0, nil, 99.0, 4), (0.0, nil, 150.0, 5),
        (0.02, 350.0, 10.0, 4), (0.07, 50.0, 45.0, 4), (0.0, .infinity, nil, 5), (-0.5, nil, nil, 1),
    ] as [(Double, Double?, Double?, Int)])
    func levels(loss: Double, roundTripMs: Double?, jitterMs: Double?, expected: Int) {
        #expect(NetworkQuality.level(lossFraction: loss, roundTripMs: roundTripMs, jitterMs: jitterMs) == expected)
    }

    @Test("10 % loss is a level worse than a clean path by at least three")
    func lossMoves() {
        #expect(NetworkQuality.level(lossFraction: 0.1) - NetworkQuality.level(lossFraction: 0) >= 3)
    }
}
