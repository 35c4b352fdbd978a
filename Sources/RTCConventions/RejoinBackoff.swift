/// How a client that lost its session joins again (the engine's rejoin, and the web client's:
/// `Web/rejoin-policy.js`; both checked against `Tests/Fixtures/rejoin-policy.json`). The first
/// attempt is at once; after each failure the wait doubles from 100 ms up to 2 s. A server that
/// answered (an error code: it is up, maybe a node waiting for a dead owner's key to expire) is
/// tried again within 500 ms; one that could not be reached is left for the next URL, after the
/// full wait.
public struct RejoinBackoff: Sendable, Hashable {
    public static let initialMs = 100
    public static let maximumMs = 2000
    public static let answeredMaximumMs = 500

    private var delayMs = RejoinBackoff.initialMs
    /// Failures of servers that could not be reached: which URL to try next (`attempt % urls`).
    public private(set) var unreachable = 0

    public init() {}

    /// After a failed attempt: how long to wait before the next one.
    public mutating func failed(answered: Bool) -> Int {
        if !answered { unreachable += 1 }
        let wait = answered ? min(delayMs, Self.answeredMaximumMs) : delayMs
        delayMs = min(delayMs * 2, Self.maximumMs)
        return wait
    }
}
