import Synchronization

/// Opening a connection with a backup attempt, as browsers do for a connection that has not
/// completed after a short while: a lost SYN or SYN-ACK costs TCP's initial retransmission
/// timeout, a whole second (RFC 6298 §2.1), so when the first attempt has not opened within
/// ``backupAfter`` a second one starts beside it and whichever opens first is used; the other is
/// released (closed) when it opens, or left to fail.
///
/// An attempt that fails before the backup starts fails the whole open at once (a refused
/// connection says the server is not there: waiting would only slow a rejoin down). Once two are
/// running, the open fails only when both have, with the first attempt's error.
public struct BackupConnect: Sendable {
    /// How long the first attempt runs alone.
    public var backupAfter: Duration

    /// 250 ms: a signaling round trip on most paths, and a quarter of the SYN timeout.
    public static let standard = BackupConnect(backupAfter: .milliseconds(250))

    public init(backupAfter: Duration) {
        self.backupAfter = backupAfter
    }

    /// Runs `attempt(0)`, and `attempt(1)` if the first has not finished within ``backupAfter``;
    /// returns the first value opened. `release` gets every value opened after that one.
    public func open<Value: Sendable>(_ attempt: @escaping @Sendable (_ index: Int) async throws -> Value,
                                      release: @escaping @Sendable (Value) -> Void) async throws -> Value {
        let race = Race<Value>()
        return try await withCheckedThrowingContinuation { continuation in
            race.begin(continuation)
            race.start(0, attempt, release: release)
            Task { [backupAfter] in
                try? await Task.sleep(for: backupAfter)
                if race.startsBackup() { race.start(1, attempt, release: release) }
            }
        }
    }
}

/// One open's attempts, settled once.
private final class Race<Value: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<Value, any Error>?
        var running = 0
        var backupStarted = false
        var settled = false
        var firstError: (any Error)?
    }

    private let state = Mutex(State())

    func begin(_ continuation: CheckedContinuation<Value, any Error>) {
        state.withLock { $0.continuation = continuation; $0.running = 1 }
    }

    /// Whether the backup is to start: nothing settled yet.
    func startsBackup() -> Bool {
        state.withLock { state in
            guard !state.settled else { return false }
            state.backupStarted = true
            state.running += 1
            return true
        }
    }

    func start(_ index: Int, _ attempt: @escaping @Sendable (Int) async throws -> Value, release: @escaping @Sendable (Value) -> Void) {
        Task {
            do {
                let value = try await attempt(index)
                let waiter = state.withLock { state -> CheckedContinuation<Value, any Error>? in
                    state.running -= 1
                    guard !state.settled else { return nil }
                    state.settled = true
                    defer { state.continuation = nil }
                    return state.continuation
                }
                if let waiter { waiter.resume(returning: value) } else { release(value) }
            } catch {
                let failed = state.withLock { state -> (CheckedContinuation<Value, any Error>, any Error)? in
                    state.running -= 1
                    if index == 0 || state.firstError == nil { state.firstError = error }
                    // Alone (no backup yet), or the last one running: the open fails.
                    guard !state.settled, !state.backupStarted || state.running == 0, let waiter = state.continuation else { return nil }
                    state.settled = true
                    state.continuation = nil
                    return (waiter, state.firstError ?? error)
                }
                if let (waiter, error) = failed { waiter.resume(throwing: error) }
            }
        }
    }
}
