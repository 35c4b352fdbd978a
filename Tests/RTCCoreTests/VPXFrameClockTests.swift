import Testing
@testable import RTCCore

@Suite("libvpx's frame clock")
struct VPXFrameClockTests {
    /// Capture times (µs) at 15 fps → the presentation times libvpx is given; every duration is
    /// the nominal 66 667 µs.
    @Test("frames keep the capture clock's gaps up to three intervals, never go back, and all last one interval",
          arguments: [
              // Regular frames: the capture clock from the first frame.
              ([1_000_000, 1_066_667, 1_133_334], [0, 66_667, 133_334]),
              // A skipped frame: the gap stays.
              ([0, 66_667, 200_000, 266_667], [0, 66_667, 200_000, 266_667]),
              // A 2 s pause: three intervals.
              ([0, 66_667, 2_066_667, 2_133_334], [0, 66_667, 266_668, 333_335]),
              // A frame captured before the last: 1 µs later.
              ([500_000, 400_000, 466_667], [0, 1, 66_668]),
          ] as [([Int64], [Int64])])
    func clock(captures: [Int64], presentations: [Int64]) {
        var clock = VPXFrameClock(frameRate: 15)
        let given = captures.map { clock.next(captureUs: $0) }
        #expect(given.map(\.presentationUs) == presentations)
        #expect(given.allSatisfy { $0.durationUs == 66_667 })
    }
}
