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
}
