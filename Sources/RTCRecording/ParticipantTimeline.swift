import RTCCore
import Signaling

/// One encoded unit on its way into a participant's WebM: a whole VP8 frame or one Opus packet.
struct TimelineUnit {
    var kind: TrackKind
    var sid: String
    var source: TrackSource
    var data: [UInt8]
    var rtpTimestamp: UInt32
    var keyframe: Bool
    /// A VP8 keyframe's size.
    var size: VideoSize?
    /// The stream's sender-report mapping the engine handed on with the unit (nil before the first).
    var clock: SenderClock?
    var arrivalWallUs: Int64
    var arrivalMonoUs: Int64
    /// The capture time on the sender's wall clock, once the stream's mapping is known.
    var timeUs: Int64 = 0

    /// A frame or packet from the engine, arriving now.
    init(_ frame: RemoteEncodedVideoFrame) {
        let size = frame.width.flatMap { width in frame.height.map { VideoSize(width: width, height: $0) } }
        self.init(kind: .video, sid: frame.trackSid, source: frame.source, data: frame.data, rtpTimestamp: frame.rtpTimestamp,
                  keyframe: frame.isKeyframe, size: size, clock: frame.senderClock)
    }

    init(_ frame: RemoteEncodedAudioFrame) {
        self.init(kind: .audio, sid: frame.trackSid, source: frame.source, data: frame.data, rtpTimestamp: frame.rtpTimestamp,
                  keyframe: true, size: nil, clock: frame.senderClock)
    }

    init(kind: TrackKind, sid: String, source: TrackSource, data: [UInt8], rtpTimestamp: UInt32, keyframe: Bool, size: VideoSize?,
         clock: SenderClock?, arrivalWallUs: Int64 = MediaClock.wallUs(), arrivalMonoUs: Int64 = MediaClock.monotonicUs()) {
        self.kind = kind
        self.sid = sid
        self.source = source
        self.data = data
        self.rtpTimestamp = rtpTimestamp
        self.keyframe = keyframe
        self.size = size
        self.clock = clock
        self.arrivalWallUs = arrivalWallUs
        self.arrivalMonoUs = arrivalMonoUs
    }
}

/// Places one participant's audio and video on one timeline and hands them to the muxer in time
/// order, as a browser does for lip sync: a unit's time is its RTP timestamp mapped to the sender's
/// wall clock by the stream's RTCP sender reports (RFC 3550 §6.4.1), which the audio and the video
/// of one sender share. File time 0 is the earliest unit the file starts with.
///
/// - Holding: until every stream it has seen has a mapping and every kind the participant announced
///   has arrived (video: a keyframe), at most ``holdUs``, the units wait. Streams still without
///   a sender report by then are placed by their arrival time instead (`syncedBySenderReports`
///   false).
/// - Interleaving: a unit is written once each kind still flowing has reached its time (kinds
///   silent for ``idleUs`` do not hold the others back), or when it has waited ``maxDelayUs``.
///   Within a kind, time never goes back: a late video frame keeps the previous frame's time; a
///   late or repeated audio packet is dropped.
///
/// Confined to the recorder's thread.
final class ParticipantTimeline {
    static let holdUs: Int64 = 2_500_000
    static let idleUs: Int64 = 500_000
    static let maxDelayUs: Int64 = 1_000_000

    private let startedMonoUs: Int64
    private var pending: [TimelineUnit] = []
    /// Each stream's latest mapping, and the arrival-time stand-in for streams without one.
    private var clocks: [String: SenderClock] = [:]
    private var fallbacks: [String: SenderClock] = [:]
    /// Each stream's latest discounted report.
    private var rejected: [String: SenderClock] = [:]
    /// Video streams that have had their first keyframe (frames before it cannot be decoded).
    private var keyframed: Set<String> = []
    private var latestTimeUs: [TrackKind: Int64] = [:]
    private var latestArrivalUs: [TrackKind: Int64] = [:]
    private var lastPtsMs: [TrackKind: Int64] = [:]
    private(set) var originUs: Int64?
    private(set) var syncedBySenderReports = true
    /// Sender reports left out because they contradicted the ones before (see the type's notes).
    private(set) var discountedReports = 0
    private(set) var sids: [String] = []
    private(set) var sources: [TrackSource] = []

    init(nowMonoUs: Int64) { startedMonoUs = nowMonoUs }

    var isOpen: Bool { originUs != nil }
    var kindsPending: Set<TrackKind> { Set(pending.map(\.kind)) }

    /// Takes a unit in; false when it cannot be used (video before its stream's first keyframe).
    func add(_ unit: TimelineUnit) -> Bool {
        var unit = unit
        if unit.kind == .video && !keyframed.contains(unit.sid) {
            guard unit.keyframe, unit.size != nil else { return false }
            keyframed.insert(unit.sid)
        }
        if let clock = unit.clock {
            if let current = clocks[unit.sid] {
                if clock != current {
                    // Two reports in a row that agree with each other outvote the one in use (a
                    // first report sent before the sender's clock settled); a sender whose every
                    // report lies never has two that agree.
                    if Self.agrees(clock, with: current) || rejected[unit.sid].map({ $0 != clock && Self.agrees(clock, with: $0) }) == true {
                        clocks[unit.sid] = clock
                        rejected[unit.sid] = nil
                    } else if rejected[unit.sid] != clock {
                        rejected[unit.sid] = clock
                        discountedReports += 1
                    }
                }
            } else {
                clocks[unit.sid] = clock
            }
        }
        if !sids.contains(unit.sid) { sids.append(unit.sid) }
        if !sources.contains(unit.source) { sources.append(unit.source) }
        latestArrivalUs[unit.kind] = unit.arrivalMonoUs
        if isOpen {
            unit.timeUs = time(of: unit)
            latestTimeUs[unit.kind] = max(latestTimeUs[unit.kind] ?? .min, unit.timeUs)
            // Mostly in order already: insert from the back.
            var index = pending.endIndex
            while index > pending.startIndex && pending[index - 1].timeUs > unit.timeUs { index -= 1 }
            pending.insert(unit, at: index)
        } else {
            pending.append(unit)
        }
        return true
    }

    /// Whether the file can start: every expected kind is here and every stream has a mapping, or
    /// the hold is over.
    func readyToOpen(expecting expected: Set<TrackKind>, nowMonoUs: Int64) -> Bool {
        guard !isOpen, !pending.isEmpty else { return false }
        if nowMonoUs - startedMonoUs >= Self.holdUs { return true }
        let streams = Set(pending.map(\.sid))
        return kindsPending.isSuperset(of: expected) && streams.allSatisfy { clocks[$0] != nil }
    }

    /// The tracks the file starts with: video at its first keyframe's size, audio if any arrived.
    var tracks: WebMWriter.Tracks {
        WebMWriter.Tracks(video: pending.first { $0.kind == .video && $0.size != nil }?.size, audio: pending.contains { $0.kind == .audio })
    }

    /// Fixes every held unit's time and the file's origin.
    func open() {
        for index in pending.indices {
            pending[index].timeUs = time(of: pending[index])
            latestTimeUs[pending[index].kind] = max(latestTimeUs[pending[index].kind] ?? .min, pending[index].timeUs)
        }
        pending.sort { $0.timeUs < $1.timeUs }
        originUs = pending.first?.timeUs ?? 0
    }

    /// Writes every unit that is due (all of them with `everything`) through `write`, in time order.
    func drain(nowMonoUs: Int64, everything: Bool = false, write: (TimelineUnit, Int64) throws(MediaFileError) -> Void) throws(MediaFileError) {
        guard let origin = originUs else { return }
        // The earliest latest-time among the kinds still flowing (at most two: no collections made).
        var watermark = Int64.max
        for (kind, arrival) in latestArrivalUs where nowMonoUs - arrival < Self.idleUs {
            if let latest = latestTimeUs[kind] { watermark = min(watermark, latest) }
        }
        var taken = 0
        defer { pending.removeFirst(taken) }
        while taken < pending.count {
            let unit = pending[taken]
            guard everything || unit.timeUs <= watermark || nowMonoUs - unit.arrivalMonoUs >= Self.maxDelayUs else { break }
            taken += 1
            var pts = (unit.timeUs - origin) / 1000
            if unit.kind == .audio {
                // A packet already covered (late, or repeated by the network) is left out.
                if let last = lastPtsMs[.audio], pts <= last { continue }
                if pts < 0 { continue }
            } else {
                pts = max(pts, lastPtsMs[.video] ?? 0)
            }
            lastPtsMs[unit.kind] = pts
            try write(unit, pts)
        }
    }

    /// Whether `next` (a newer report of a stream) fits `current`: the wall-clock time it names
    /// and the one `current` predicts for its RTP timestamp differ by no more than clock drift
    /// allows over the time between them (1 %, at least 20 ms: reports are sampled at the sender,
    /// so network jitter does not enter).
    static func agrees(_ next: SenderClock, with current: SenderClock) -> Bool {
        guard next.clockRate == current.clockRate else { return false }
        let error = abs(current.wallUs(of: next.rtpTimestamp) - next.wallUs)
        let elapsed = abs(next.wallUs - current.wallUs)
        return error <= max(20_000, elapsed / 100)
    }

    private func time(of unit: TimelineUnit) -> Int64 {
        // A stream placed by arrival stays so: a sender report coming later would make it jump.
        if let fallback = fallbacks[unit.sid] { return fallback.wallUs(of: unit.rtpTimestamp) }
        if let clock = clocks[unit.sid] { return clock.wallUs(of: unit.rtpTimestamp) }
        syncedBySenderReports = false
        let fallback = SenderClock(wallUs: unit.arrivalWallUs, rtpTimestamp: unit.rtpTimestamp, clockRate: unit.kind == .video ? 90000 : 48000)
        fallbacks[unit.sid] = fallback
        return fallback.wallUs(of: unit.rtpTimestamp)
    }
}
