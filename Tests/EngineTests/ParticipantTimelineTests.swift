@testable import RTCCore
@testable import RTCRecording
import RTCTransport
import Signaling
import Testing

/// The WebM timeline on its own: sender-report placement, the hold, interleaving and the rules
/// that keep each track's time from going back.
@Suite("Participant timeline")
struct ParticipantTimelineTests {
    /// Audio and video of one sender: both RTP clocks map to the same wall clock (1 000 s), the
    /// video's RTP origin 9000 and the audio's 4800.
    static let videoClock = SenderClock(wallUs: 1_000_000_000, rtpTimestamp: 9000, clockRate: 90000)
    static let audioClock = SenderClock(wallUs: 1_000_000_000, rtpTimestamp: 4800, clockRate: 48000)

    func video(_ ms: Int64, arrival: Int64, keyframe: Bool = false, clock: SenderClock? = videoClock) -> TimelineUnit {
        TimelineUnit(kind: .video, sid: "V", source: .camera, data: [1], rtpTimestamp: 9000 &+ UInt32(ms * 90), keyframe: keyframe,
                     size: keyframe ? VideoSize(width: 640, height: 360) : nil, clock: clock, arrivalWallUs: 5_000_000_000 + arrival * 1000,
                     arrivalMonoUs: arrival * 1000)
    }

    func audio(_ ms: Int64, arrival: Int64, clock: SenderClock? = audioClock) -> TimelineUnit {
        TimelineUnit(kind: .audio, sid: "A", source: .microphone, data: [2], rtpTimestamp: 4800 &+ UInt32(ms * 48), keyframe: true,
                     size: nil, clock: clock, arrivalWallUs: 5_000_000_000 + arrival * 1000, arrivalMonoUs: arrival * 1000)
    }

    func written(_ timeline: ParticipantTimeline, now: Int64, everything: Bool = false) throws -> [String] {
        var out: [String] = []
        try timeline.drain(nowMonoUs: now * 1000, everything: everything) { unit, pts in out.append("\(unit.kind == .video ? "v" : "a")\(pts)") }
        return out
    }

    @Test("units are placed by their sender reports, audio and video on one timeline, in time order")
    func senderReportPlacement() throws {
        let timeline = ParticipantTimeline(nowMonoUs: 0)
        // Video arrives 80 ms after the audio of the same instant (a slower path): the file lines them up anyway.
        #expect(timeline.add(audio(0, arrival: 10)))
        #expect(timeline.add(audio(20, arrival: 30)))
        #expect(!timeline.readyToOpen(expecting: [.audio, .video], nowMonoUs: 30_000))
        #expect(timeline.add(video(10, arrival: 90, keyframe: true)))
        #expect(timeline.readyToOpen(expecting: [.audio, .video], nowMonoUs: 90_000))
        #expect(timeline.tracks == WebMWriter.Tracks(video: VideoSize(width: 640, height: 360), audio: true))
        timeline.open()
        #expect(timeline.syncedBySenderReports)
        #expect(timeline.add(audio(40, arrival: 50)))
        #expect(timeline.add(video(43, arrival: 120)))
        #expect(try written(timeline, now: 120) == ["a0", "v10", "a20", "a40"])
        // The video at 43 ms waits until the audio has reached it.
        #expect(try written(timeline, now: 121).isEmpty)
        #expect(timeline.add(audio(60, arrival: 122)))
        #expect(try written(timeline, now: 122) == ["v43"])
        // What is left goes out at the end.
        #expect(try written(timeline, now: 123, everything: true) == ["a60"])
    }

    @Test("video frames before the stream's first keyframe are not taken; a silent kind does not hold the other back")
    func keyframeAndIdle() throws {
        let timeline = ParticipantTimeline(nowMonoUs: 0)
        #expect(!timeline.add(video(0, arrival: 0)))
        #expect(timeline.add(video(33, arrival: 33, keyframe: true)))
        #expect(timeline.add(audio(33, arrival: 33)))
        #expect(timeline.readyToOpen(expecting: [.video, .audio], nowMonoUs: 33_000))
        timeline.open()
        #expect(Set(try written(timeline, now: 33)) == ["v0", "a0"])
        // Audio stops; video goes on: after the idle time the video is no longer held for audio.
        for frame in 1...20 { _ = timeline.add(video(33 + Int64(frame) * 33, arrival: 33 + Int64(frame) * 33)) }
        let late = try written(timeline, now: 33 + 20 * 33)
        #expect(late.count == 20, "\(late)")
    }

    @Test("within a track time never goes back: late video keeps the last time, late or repeated audio is left out")
    func monotonicPerTrack() throws {
        let timeline = ParticipantTimeline(nowMonoUs: 0)
        _ = timeline.add(video(0, arrival: 0, keyframe: true))
        _ = timeline.add(audio(0, arrival: 0))
        timeline.open()
        #expect(Set(try written(timeline, now: 0, everything: true)) == ["v0", "a0"])
        _ = timeline.add(video(100, arrival: 100))
        _ = timeline.add(audio(100, arrival: 100))
        #expect(Set(try written(timeline, now: 100, everything: true)) == ["v100", "a100"])
        _ = timeline.add(video(66, arrival: 101))
        _ = timeline.add(audio(80, arrival: 101))
        _ = timeline.add(audio(100, arrival: 102))
        #expect(try written(timeline, now: 102, everything: true) == ["v100"])
    }

    @Test("streams with no sender report by the end of the hold are placed by arrival, and stay so")
    func arrivalFallback() throws {
        let timeline = ParticipantTimeline(nowMonoUs: 0)
        _ = timeline.add(video(0, arrival: 0, keyframe: true, clock: nil))
        #expect(!timeline.readyToOpen(expecting: [.video], nowMonoUs: 1_000_000))
        #expect(timeline.readyToOpen(expecting: [.video], nowMonoUs: ParticipantTimeline.holdUs))
        timeline.open()
        #expect(!timeline.syncedBySenderReports)
        // A report arriving later does not move the stream.
        let shifted = SenderClock(wallUs: 2_000_000_000, rtpTimestamp: 9000, clockRate: 90000)
        _ = timeline.add(video(500, arrival: 520, clock: shifted))
        #expect(try written(timeline, now: 600, everything: true) == ["v0", "v500"])
    }

    @Test("a sender clock maps RTP time across the 32-bit wrap")
    func senderClockWraps() {
        let clock = SenderClock(wallUs: 10_000_000, rtpTimestamp: UInt32.max - 899, clockRate: 90000)
        #expect(clock.wallUs(of: 8100) == 10_100_000)
        #expect(clock.wallUs(of: UInt32.max - 9899) == 9_900_000)
    }

    @Test("the tracks of one transport share a capture clock: one capture time, one local time, whichever came first")
    func captureClockIsShared() async throws {
        let clock = CaptureClock()
        let first = clock.monotonicUs(ofCapture: 1_000)
        try await Task.sleep(for: .milliseconds(30))
        #expect(clock.monotonicUs(ofCapture: 1_000) == first)
        #expect(clock.monotonicUs(ofCapture: 21_000) == first + 20_000)
    }

    /// 15 s of a sender at 15 fps and 50 audio packets a second, arriving in real time, whose
    /// reports come every second with `slope` times the RTP time that passed (1: honest). Returns
    /// the video and audio presentation times written and the reports discounted.
    func lyingSender(slope: Double, firstReportOff: Bool = false) throws -> (video: [Int64], audio: [Int64], discounted: Int) {
        let timeline = ParticipantTimeline(nowMonoUs: 0)
        func clock(_ rate: Int, origin: UInt32, atMs ms: Int64) -> SenderClock {
            // The report at `ms`: the wall clock says `ms`, the RTP clock says `slope` times as much.
            let skew: Int64 = firstReportOff && ms == 0 ? 300 : 0
            return SenderClock(wallUs: 1_000_000_000 + (ms + skew) * 1000,
                               rtpTimestamp: origin &+ UInt32(truncatingIfNeeded: Int64(Double(ms) * slope) * Int64(rate) / 1000), clockRate: rate)
        }
        var videoPts: [Int64] = [], audioPts: [Int64] = []
        var opened = false
        for ms in stride(from: Int64(0), to: 15_000, by: 20) {
            let report = ms / 1000 * 1000
            let videoClock = clock(90000, origin: 9000, atMs: report), audioClock = clock(48000, origin: 4800, atMs: report)
            _ = timeline.add(audio(ms, arrival: ms + 5, clock: audioClock))
            if ms % 60 == 0 || ms % 200 == 0 {  // about 15 fps with these steps
                _ = timeline.add(video(ms, arrival: ms + 5, keyframe: ms == 0, clock: videoClock))
            }
            if !opened && timeline.readyToOpen(expecting: [.audio, .video], nowMonoUs: (ms + 5) * 1000) {
                timeline.open()
                opened = true
            }
            try timeline.drain(nowMonoUs: (ms + 5) * 1000) { unit, pts in
                if unit.kind == .video { videoPts.append(pts) } else { audioPts.append(pts) }
            }
        }
        try timeline.drain(nowMonoUs: 16_000_000, everything: true) { unit, pts in
            if unit.kind == .video { videoPts.append(pts) } else { audioPts.append(pts) }
        }
        return (videoPts, audioPts, timeline.discountedReports)
    }

    @Test("a sender whose reports run their RTP clock twice (or half) as fast as their wall clock: every report after the first is discounted, the WebM keeps the packets' own spacing (duration within 1 %) and every audio packet")
    func lyingReports() throws {
        let honest = try lyingSender(slope: 1)
        #expect(honest.discounted == 0)
        for slope in [2.0, 0.5] {
            let lied = try lyingSender(slope: slope)
            #expect(lied.discounted == 28, "slope \(slope): \(lied.discounted) discounted (14 reports of each of two streams)")
            #expect(lied.audio.count == 750, "slope \(slope): \(lied.audio.count) audio packets kept of 750")
            let duration = Double((lied.video.last ?? 0) - (lied.video.first ?? 0))
            let honestDuration = Double((honest.video.last ?? 0) - (honest.video.first ?? 0))
            #expect(abs(duration / honestDuration - 1) < 0.01, "slope \(slope): video spans \(duration) ms, honest \(honestDuration) ms")
            #expect(lied.video == honest.video && lied.audio == honest.audio, "slope \(slope): the same times as an honest sender's")
        }
        #expect(honest.audio.count == 750 && zip(honest.audio, honest.audio.dropFirst()).allSatisfy { $1 - $0 == 20 })
    }

    @Test("a first report 300 ms off and honest ones after it: two later reports that agree with each other replace it (one discounted per stream), and the times are the honest ones from then on")
    func offFirstReport() throws {
        let recovered = try lyingSender(slope: 1, firstReportOff: true)
        let honest = try lyingSender(slope: 1)
        #expect(recovered.discounted == 2, "\(recovered.discounted)")
        // The switch moves the times back by the 300 ms the first report was off: the audio that
        // overlaps is left out (time never goes back), nothing else.
        #expect(recovered.audio.count >= 750 - 16, "\(recovered.audio.count)")
        // From then on the stream's spacing is its own again (the file's origin stays where the
        // first report put it, so the times are the honest ones less those 300 ms).
        #expect(Array(recovered.audio.suffix(600)) == Array(honest.audio.suffix(600)).map { $0 - 300 },
                "\(recovered.audio.suffix(3)) vs \(honest.audio.suffix(3))")
    }

    @Test("sender reports sent at fractions of a second (audio at .5 s, video at .25 s of another second) still line audio and video up: units captured at one instant get one time (the fraction used to be read as 0, a 250 ms offset here)")
    func fractionalReportsKeepSync() throws {
        let ntpSeconds: UInt64 = 3_900_000_000
        // The same instant, 1000.75 s after the reports' base second, written by each report.
        let audioReport = SenderClock(wallUs: NTPTime.unixMicroseconds((ntpSeconds << 32) | 0x8000_0000), rtpTimestamp: 4800, clockRate: 48000)
        let videoReport = SenderClock(wallUs: NTPTime.unixMicroseconds(((ntpSeconds + 1) << 32) | 0x4000_0000), rtpTimestamp: 9000, clockRate: 90000)
        #expect(videoReport.wallUs - audioReport.wallUs == 750_000, "the reports are 0.75 s apart")
        let timeline = ParticipantTimeline(nowMonoUs: 0)
        // Audio 750 ms after its report and video at its report: the same capture instant.
        let audioUnit = TimelineUnit(kind: .audio, sid: "A", source: .microphone, data: [2], rtpTimestamp: 4800 &+ 750 * 48, keyframe: true,
                                     size: nil, clock: audioReport, arrivalWallUs: 5_000_000_000, arrivalMonoUs: 1000)
        let videoUnit = TimelineUnit(kind: .video, sid: "V", source: .camera, data: [1], rtpTimestamp: 9000, keyframe: true,
                                     size: VideoSize(width: 640, height: 360), clock: videoReport, arrivalWallUs: 5_000_000_000, arrivalMonoUs: 1000)
        #expect(timeline.add(audioUnit) && timeline.add(videoUnit))
        timeline.open()
        var times: [String: Int64] = [:]
        try timeline.drain(nowMonoUs: 2_000_000, everything: true) { unit, pts in times[unit.sid] = pts }
        #expect(times["A"] == times["V"] && times["A"] != nil, "audio and video of one instant: \(times)")
    }

    @Test("a report agrees with the one before when its RTP and wall clocks moved together (random times, RTP origins across the 32-bit wrap, both rates, up to 100 ppm of drift), and not when they moved 2.5 % or more apart over a second or longer (the bound is 1 %, at least 20 ms)")
    func agreementOnRandomClocks() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2000 {
            let rate = Bool.random(using: &generator) ? 90000 : 48000
            let first = SenderClock(wallUs: Int64.random(in: 0...4_000_000_000_000_000, using: &generator),
                                    rtpTimestamp: UInt32.random(in: 0...UInt32.max, using: &generator), clockRate: rate)
            // Reports 20 ms to 60 s apart: under 6 hours at 90 kHz, as the signed difference allows.
            let elapsedUs = Int64.random(in: 20_000...60_000_000, using: &generator)
            func next(slope: Double) -> SenderClock {
                let ticks = Int64((Double(elapsedUs) * slope * Double(rate) / 1e6).rounded())
                return SenderClock(wallUs: first.wallUs + elapsedUs, rtpTimestamp: first.rtpTimestamp &+ UInt32(truncatingIfNeeded: ticks), clockRate: rate)
            }
            let drift = Double.random(in: -0.0001...0.0001, using: &generator)
            #expect(ParticipantTimeline.agrees(next(slope: 1 + drift), with: first), "honest: \(first) after \(elapsedUs) µs")
            if elapsedUs >= 1_000_000 {
                let off = Double.random(in: 0.025...1, using: &generator) * (Bool.random(using: &generator) ? 1 : -1)
                #expect(!ParticipantTimeline.agrees(next(slope: 1 + off), with: first), "slope \(1 + off): \(first) after \(elapsedUs) µs")
            }
        }
        #expect(!ParticipantTimeline.agrees(SenderClock(wallUs: 0, rtpTimestamp: 0, clockRate: 48000), with: SenderClock(wallUs: 0, rtpTimestamp: 0, clockRate: 90000)),
                "another clock rate is another stream")
    }
}
