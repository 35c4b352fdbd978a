/// How well a connection carries media, in Agora's six levels (`onNetworkQuality`): one rule for
/// the server, which measures every participant's paths and tells everyone (`connectionQuality`,
/// LiveKit's `ConnectionQualityUpdate`), and for the engine, which judges its own.
///
/// Each measure gives a level by the thresholds below and the connection is as good as its worst
/// measure; a path that carried nothing it should have is ``down``. Loss is what matters most to a
/// call (concealment and freezes start at a few percent), then the round trip (talking over each
/// other past ~300 ms), then jitter (the playout buffer grows to cover it).
public enum NetworkQuality {
    /// Unknown: nothing measured yet.
    public static let unknown = 0
    public static let excellent = 1
    public static let good = 2
    public static let poor = 3
    public static let bad = 4
    public static let veryBad = 5
    /// Nothing gets through.
    public static let down = 6

    /// Upper bounds (exclusive) of levels 1 to 4 for each measure; at or past the last bound, 5.
    static let lossPercentBounds: [Double] = [1, 3, 6, 10]
    static let roundTripMsBounds: [Double] = [100, 200, 300, 500]
    static let jitterMsBounds: [Double] = [20, 40, 60, 100]

    /// The level of a path with `lossFraction` (0...1) of its packets lost, and, when known, its
    /// round trip and its jitter (ms). Loss of 20 % or more is `veryBad` already; `down` is for a
    /// path that carried nothing, which loss alone cannot tell from an idle one (the caller says).
    public static func level(lossFraction: Double, roundTripMs: Double? = nil, jitterMs: Double? = nil) -> Int {
        func level(_ value: Double, _ bounds: [Double]) -> Int {
            guard value.isFinite else { return veryBad }
            return (bounds.firstIndex { value < $0 } ?? bounds.count) + 1
        }
        var worst = lossFraction >= 0.2 ? veryBad : level(max(lossFraction, 0) * 100, lossPercentBounds)
        if let roundTripMs { worst = max(worst, level(roundTripMs, roundTripMsBounds)) }
        if let jitterMs { worst = max(worst, level(jitterMs, jitterMsBounds)) }
        return worst
    }
}
