/// The shard's periodic work (``SFU``) on one timer, instead of a timer (and a wakeup) per job: the
/// timer is set for the earliest due time of the jobs that are wanted now (``nextDueUs(active:)``),
/// and when it fires the jobs whose period has come run. A job not wanted (the upstream NACKs while
/// no gap is open, the participants' jobs on a shard without participants) neither runs nor sets
/// the timer. A wakeup costs about 0.1 ms of CPU on this machine (the kernel's task switch in a
/// virtual machine): a 20 ms timer alone cost an idle shard 6 ms of CPU a second, a visible share of
/// the CPU per forwarded packet of a lightly loaded server (`bench janus-load`).
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

    /// The shortest job's period (the upstream NACKs').
    static let tickUs: Int64 = 20_000

    /// Every job.
    static let all: Due = [.upstreamNacks, .transportFeedback, .speakers, .layers, .housekeeping]

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

    /// The jobs of `active` due at `nowUs`, each moved on by its period. A job the loop was too
    /// late for (or that was not wanted for a while) runs once, not once per period missed, and
    /// its next run is a period from now.
    mutating func due(nowUs: Int64, active: Due = Self.all) -> Due {
        var due: Due = []
        for index in next.indices where nowUs >= next[index] {
            let (job, period) = Self.periods[index]
            guard active.contains(job) else { continue }
            due.insert(job)
            next[index] += period
            if next[index] <= nowUs { next[index] = nowUs + period }
        }
        return due
    }

    /// When the timer is next wanted for the `active` jobs: the earliest of their due times (in the
    /// past for a job that was not wanted for a while), nil when none is active.
    func nextDueUs(active: Due) -> Int64? {
        var earliest: Int64?
        for (index, entry) in Self.periods.enumerated() where active.contains(entry.job) {
            earliest = min(earliest ?? .max, next[index])
        }
        return earliest
    }

    /// `job` wanted again from `nowUs` (a gap opened): due at the first time of its own grid from
    /// `nowUs` on (0 to one period later, as when it ran all along), not at a time long past from
    /// before its pause. A job already due later is left as it is.
    mutating func resume(_ job: Due, nowUs: Int64) {
        for (index, entry) in Self.periods.enumerated() where entry.job == job && next[index] < nowUs {
            next[index] += (nowUs - next[index] + entry.periodUs - 1) / entry.periodUs * entry.periodUs
        }
    }
}
