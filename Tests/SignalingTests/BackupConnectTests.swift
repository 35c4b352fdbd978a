import Synchronization
import Testing
@testable import Signaling

/// Attempts the test opens or fails by hand: each waits until told, and says when it starts.
final class BackupAttempts: Sendable {
    struct Failure: Error, Equatable { let index: Int }

    private let waiting = Mutex<[Int: CheckedContinuation<Int, any Error>]>([:])
    private let released = Mutex<[Int]>([])
    let started: AsyncStream<Int>
    private let startedContinuation: AsyncStream<Int>.Continuation

    init() { (started, startedContinuation) = AsyncStream.makeStream(of: Int.self) }

    @Sendable func attempt(_ index: Int) async throws -> Int {
        try await withCheckedThrowingContinuation { continuation in
            waiting.withLock { $0[index] = continuation }
            startedContinuation.yield(index)
        }
    }

    @Sendable func release(_ value: Int) { released.withLock { $0.append(value) } }
    var releasedValues: [Int] { released.withLock { $0 } }

    func open(_ index: Int) { waiting.withLock { $0.removeValue(forKey: index) }?.resume(returning: index) }
    func fail(_ index: Int) { waiting.withLock { $0.removeValue(forKey: index) }?.resume(throwing: Failure(index: index)) }
}

@Suite("BackupConnect: a second attempt beside a slow first one")
struct BackupConnectTests {
    /// The steps of one case: the test settles attempts as they start.
    enum Step { case open(Int), fail(Int) }

    struct Case: CustomTestStringConvertible, Sendable {
        var name: String
        /// What to do once attempt N has started (in start order); a backup starts only if the
        /// first attempt is still running after `backupAfter`.
        var whenStarted: [Int: [Step]]
        var result: Result<Int, BackupAttempts.Failure>
        var attempts: Int
        var released: [Int]
        /// Attempts opened once the race has its result (a loser that opens late).
        var openAfterResult: [Int] = []
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(name: "the first opens at once: no backup", whenStarted: [0: [.open(0)]], result: .success(0), attempts: 1, released: []),
        Case(name: "the first is refused at once: the open fails, no backup", whenStarted: [0: [.fail(0)]],
             result: .failure(.init(index: 0)), attempts: 1, released: []),
        Case(name: "the first is silent, the backup opens: the backup's, and the first is released when it opens",
             whenStarted: [1: [.open(1)]], result: .success(1), attempts: 2, released: [0], openAfterResult: [0]),
        Case(name: "the backup fails, the first opens late: the first's", whenStarted: [1: [.fail(1), .open(0)]],
             result: .success(0), attempts: 2, released: []),
        Case(name: "both fail: the first attempt's error", whenStarted: [1: [.fail(1), .fail(0)]],
             result: .failure(.init(index: 0)), attempts: 2, released: []),
        Case(name: "the first fails after the backup started: the backup's", whenStarted: [1: [.fail(0), .open(1)]],
             result: .success(1), attempts: 2, released: []),
    ]

    @Test("outcomes", arguments: cases)
    func outcomes(_ test: Case) async throws {
        let attempts = BackupAttempts()
        // 300 ms: the cases without a backup settle within a few hops of the cooperative pool, which
        // a loaded machine can stall for 30 ms (a backup then started where none should).
        let race = BackupConnect(backupAfter: .milliseconds(300))
        let driver = Task {
            var seen = 0
            for await index in attempts.started {
                seen += 1
                for step in test.whenStarted[index] ?? [] {
                    switch step {
                    case .open(let n): attempts.open(n)
                    case .fail(let n): attempts.fail(n)
                    }
                }
            }
            return seen
        }
        let result: Result<Int, BackupAttempts.Failure>
        do {
            result = .success(try await race.open(attempts.attempt, release: attempts.release))
        } catch let failure as BackupAttempts.Failure {
            result = .failure(failure)
        }
        #expect(result == test.result)
        for index in test.openAfterResult { attempts.open(index) }
        // Long enough for a backup that should not start to have started (300 ms), and for a
        // loser's release to land.
        try await Task.sleep(for: .milliseconds(500))
        #expect(attempts.releasedValues == test.released)
        driver.cancel()
        let seen = await driver.value
        #expect(seen == test.attempts)
    }
}
