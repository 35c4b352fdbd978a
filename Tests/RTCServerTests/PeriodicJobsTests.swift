import Testing
@testable import RTCServer

@Suite("The shard's periodic jobs on one timer")
struct PeriodicJobsTests {
    /// How many times each job ran over `ticks` ticks of the timer, starting at `startUs`.
    static func runs(ticks: Int, startUs: Int64 = 5_000_000, jitterUs: (Int) -> Int64 = { _ in 0 }) -> [UInt8: Int] {
        var jobs = PeriodicJobs(startUs: startUs)
        var counts: [UInt8: Int] = [:]
        for tick in 1...ticks {
            let due = jobs.due(nowUs: startUs + Int64(tick) * PeriodicJobs.tickUs + jitterUs(tick))
            for (job, _) in PeriodicJobs.periods where due.contains(job) { counts[job.rawValue, default: 0] += 1 }
        }
        return counts
    }

    @Test("over 10 s of 20 ms ticks each job runs at its own period: NACKs 500, feedback and speakers 100, layers 40, housekeeping 10")
    func cadence() {
        let counts = Self.runs(ticks: 500)
        #expect(counts[PeriodicJobs.Due.upstreamNacks.rawValue] == 500)
        #expect(counts[PeriodicJobs.Due.transportFeedback.rawValue] == 100)
        #expect(counts[PeriodicJobs.Due.speakers.rawValue] == 10_000_000 / Int(SpeakerDetector.tickUs))
        #expect(counts[PeriodicJobs.Due.layers.rawValue] == 40)
        #expect(counts[PeriodicJobs.Due.housekeeping.rawValue] == 10)
    }

    @Test("ticks that come up to 5 ms late keep every job at its period over 10 s")
    func lateTicks() {
        let counts = Self.runs(ticks: 500) { tick in Int64(tick * 7919 % 5000) }
        #expect(counts[PeriodicJobs.Due.upstreamNacks.rawValue] == 500)
        #expect(counts[PeriodicJobs.Due.transportFeedback.rawValue] == 100)
        #expect(counts[PeriodicJobs.Due.speakers.rawValue] == 10_000_000 / Int(SpeakerDetector.tickUs))
        #expect(counts[PeriodicJobs.Due.layers.rawValue] == 40)
        #expect(counts[PeriodicJobs.Due.housekeeping.rawValue] == 10)
    }

    @Test("ticks 21 ms apart (NIO waits its delay after each run, so lateness adds up): NACKs every tick, the others within one run of their period over 10.5 s")
    func driftingTicks() {
        var jobs = PeriodicJobs(startUs: 0)
        var counts: [UInt8: Int] = [:]
        for tick in 1...500 {
            let due = jobs.due(nowUs: Int64(tick) * 21_000)
            for (job, _) in PeriodicJobs.periods where due.contains(job) { counts[job.rawValue, default: 0] += 1 }
        }
        #expect(counts[PeriodicJobs.Due.upstreamNacks.rawValue] == 500)
        for (job, period) in PeriodicJobs.periods where job != .upstreamNacks {
            let expected = Int(10_500_000 / period)
            let ran = counts[job.rawValue] ?? 0
            #expect(abs(ran - expected) <= 1, "job \(job.rawValue): \(ran) runs, \(expected) periods")
        }
    }

    @Test("nothing before its first period; a loop stalled for 3 s runs each job once, then a period later again")
    func stall() {
        var jobs = PeriodicJobs(startUs: 0)
        #expect(jobs.due(nowUs: 19_999) == [])
        #expect(jobs.due(nowUs: 20_000) == [.upstreamNacks])
        #expect(jobs.due(nowUs: 3_020_000) == [.upstreamNacks, .transportFeedback, .speakers, .layers, .housekeeping])
        #expect(jobs.due(nowUs: 3_040_000) == [.upstreamNacks])
        #expect(jobs.due(nowUs: 3_120_000).contains(.transportFeedback))
        #expect(!jobs.due(nowUs: 4_000_000).contains(.housekeeping))
        #expect(jobs.due(nowUs: 4_020_000).contains(.housekeeping))
    }

    /// The timer as the SFU drives it: set for the earliest wanted job (``PeriodicJobs/nextDueUs(active:)``)
    /// and fired on time, from `fromUs` to `untilUs`; how many times it fired and how often each job ran.
    static func timerRuns(_ jobs: inout PeriodicJobs, fromUs: Int64 = 0, untilUs: Int64, active: PeriodicJobs.Due) -> (wakeups: Int, runs: [UInt8: Int]) {
        var now = fromUs
        var wakeups = 0
        var runs: [UInt8: Int] = [:]
        while let next = jobs.nextDueUs(active: active), next <= untilUs {
            now = max(now, next)
            wakeups += 1
            let due = jobs.due(nowUs: now, active: active)
            #expect(!due.isEmpty, "a wakeup at \(now) µs with nothing to run")
            for (job, _) in PeriodicJobs.periods where due.contains(job) { runs[job.rawValue, default: 0] += 1 }
        }
        return (wakeups, runs)
    }

    @Test("a shard without participants wakes once a second (housekeeping), 10 times in 10 s")
    func idleShard() {
        var jobs = PeriodicJobs(startUs: 0)
        let (wakeups, runs) = Self.timerRuns(&jobs, untilUs: 10_000_000, active: [.housekeeping])
        #expect(wakeups == 10)
        #expect(runs == [PeriodicJobs.Due.housekeeping.rawValue: 10])
    }

    @Test("a shard with participants and no gap wakes 120 times in 10 s (was 500): feedback and speakers every 100 ms, layers every 250 ms, no NACK job")
    func shardWithoutGaps() {
        var jobs = PeriodicJobs(startUs: 0)
        let active = PeriodicJobs.all.subtracting(.upstreamNacks)
        let (wakeups, runs) = Self.timerRuns(&jobs, untilUs: 10_000_000, active: active)
        // The layer job's times that are not also 100 ms times (250, 750, ... ms) add 20 wakeups.
        #expect(wakeups == 120)
        #expect(runs[PeriodicJobs.Due.upstreamNacks.rawValue] == nil)
        #expect(runs[PeriodicJobs.Due.transportFeedback.rawValue] == 100)
        #expect(runs[PeriodicJobs.Due.speakers.rawValue] == 10_000_000 / Int(SpeakerDetector.tickUs))
        #expect(runs[PeriodicJobs.Due.layers.rawValue] == 40)
        #expect(runs[PeriodicJobs.Due.housekeeping.rawValue] == 10)
    }

    @Test("a gap opened at 1.234 s: the NACK job runs at its next 20 ms time (1.240 s) and every 20 ms while it is open, not at its stale time, and stops when it closes")
    func gapOpensAndCloses() {
        var jobs = PeriodicJobs(startUs: 0)
        let quiet = PeriodicJobs.all.subtracting(.upstreamNacks)
        _ = Self.timerRuns(&jobs, untilUs: 1_234_000, active: quiet)
        // Before the resume the NACK job's time is from the start (20 ms), long gone.
        #expect(jobs.nextDueUs(active: .upstreamNacks) == 20_000)
        jobs.resume(.upstreamNacks, nowUs: 1_234_000)
        #expect(jobs.nextDueUs(active: .upstreamNacks) == 1_240_000)
        #expect(jobs.nextDueUs(active: PeriodicJobs.all) == 1_240_000)
        // A gap opening right at a time of the grid: due then.
        var onGrid = PeriodicJobs(startUs: 0)
        onGrid.resume(.upstreamNacks, nowUs: 100_000)
        #expect(onGrid.nextDueUs(active: .upstreamNacks) == 100_000)
        let open = Self.timerRuns(&jobs, fromUs: 1_234_000, untilUs: 1_634_000, active: PeriodicJobs.all)
        #expect(open.runs[PeriodicJobs.Due.upstreamNacks.rawValue] == 20)
        // Resumed again while it runs: its time stays (no run sooner than a period apart, none skipped).
        let before = jobs.nextDueUs(active: .upstreamNacks)
        jobs.resume(.upstreamNacks, nowUs: 1_640_000)
        #expect(jobs.nextDueUs(active: .upstreamNacks) == before)
        // Closed: the next wakeup is the next 100 ms job's, and the NACK job never runs.
        #expect(jobs.nextDueUs(active: quiet) == 1_700_000)
        let closed = Self.timerRuns(&jobs, fromUs: 1_634_000, untilUs: 3_000_000, active: quiet)
        #expect(closed.runs[PeriodicJobs.Due.upstreamNacks.rawValue] == nil)
        #expect(closed.runs[PeriodicJobs.Due.transportFeedback.rawValue] == 14)
    }
}
