/// The presentation times and durations libvpx is given, from frames' capture times.
///
/// Every frame lasts the nominal interval, and the time between two frames is the capture
/// clock's, at most three intervals (never backwards). libvpx measures the frame rate between the
/// ends of frames (start plus duration), so durations that follow the gaps (each frame's gap since
/// the last as its duration) make it measure rates far off after a skipped frame, and a
/// frame-dropping encoder then drops every other frame for seconds. The gap is bounded because
/// after a long one (frames skipped for congestion, a paused source) CBR would grant the next
/// frame the whole gap's bits, a burst the path has to queue.
struct VPXFrameClock: Sendable, Equatable {
    static let maxGapIntervals: Int64 = 3

    let nominalUs: Int64
    private var lastCaptureUs: Int64?
    private var clockUs: Int64 = 0

    init(frameRate: Double) {
        nominalUs = max(Int64((1_000_000 / frameRate).rounded()), 1)
    }

    /// The presentation time and duration (µs) of the frame captured at `captureUs`.
    mutating func next(captureUs: Int64) -> (presentationUs: Int64, durationUs: Int64) {
        if let last = lastCaptureUs {
            clockUs += min(max(captureUs - last, 1), nominalUs * Self.maxGapIntervals)
        }
        lastCaptureUs = captureUs
        return (clockUs, nominalUs)
    }
}
