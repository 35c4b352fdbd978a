/// The shard's periodic work (``SFU``) on one timer: a wakeup every ``tickUs``, at which the jobs
/// whose period has come run, instead of a timer (and a wakeup) per job. On a lightly loaded server
/// the timers' wakeups were a visible share of its CPU per forwarded packet (`bench janus-load`).
struct PeriodicJobs: Sendable {
    /// The jobs, as bits of one due set.
    struct Due: OptionSet, Sendable {
        let rawValue: UInt8
        /// Upstream NACKs (every 20 ms).
        static let upstreamNacks = Due(rawValue: 1 << 0)
        /// Transport-wide feedback to publishers (every 100 ms).
        static let transportFeedback = Due(rawValue: 1 << 1)
        /// Active speakers (``SpeakerDetector/tickUs``).
        static let speakers = Due(rawValue: 1 << 2)
        /// Simulcast layer choices (every 250 ms).
        static let layers = Due(rawValue: 1 << 3)
        /// Housekeeping: liveness, tokens, receiver reports, publisher limits (every second).
        static let housekeeping = Due(rawValue: 1 << 4)
    }

    /// The timer's period: the shortest job's.
    static let tickUs: Int64 = 20_000

    /// Each job and its period, µs.
    static let periods: [(job: Due, periodUs: Int64)] = [
        (.upstreamNacks, 20_000), (.transportFeedback, 100_000), (.speakers, SpeakerDetector.tickUs),
        (.layers, 250_000), (.housekeeping, 1_000_000),
    ]

    /// When each job is next due, µs, in ``periods``' order.
    private var next: [Int64]

    /// Each job first runs one period after `startUs`.
    init(startUs: Int64) {
        next = Self.periods.map { startUs + $0.periodUs }
    }

    /// The jobs due at `nowUs`, each moved on by its period. A job the loop was too late for runs
    /// once, not once per period missed, and its next run is a period from now.
    mutating func due(nowUs: Int64) -> Due {
        var due: Due = []
        for index in next.indices where nowUs >= next[index] {
            let (job, period) = Self.periods[index]
            due.insert(job)
            next[index] += period
            if next[index] <= nowUs { next[index] = nowUs + period }
        }
        return due
    }
}
