import RTCTransport
import Signaling

/// One RTP stream a track arrives on: the track's only stream, or one simulcast layer of it
/// (``rid``). What forwarding and repairs need of it: its SSRCs, a packet cache for NACKs,
/// reception statistics for receiver reports, gaps to ask for upstream, a keyframe-request
/// throttle; and what layer selection needs: its size (from keyframes), its bitrate and whether it
/// is being sent. On the SFU's event loop.
final class PublishedStream: @unchecked Sendable {
    /// The RFC 8851 stream id; nil for a track without simulcast.
    let rid: String?
    var ssrc: UInt32?
    /// The RFC 4588 stream that repairs this one (from the offer's FID group, or for a layer the
    /// first repair carrying its repaired stream id).
    var rtxSSRC: UInt32?
    /// The last 512 packets, to answer subscribers' NACKs without asking the publisher.
    var cache = PacketHistory<RTPPacket>(capacity: 512)
    var newestSequence: UInt16?
    var keyframeThrottle: Throttle
    /// A throttled keyframe request is waiting for the throttle window to end.
    var keyframeRequestDeferred = false
    var statistics: ReceptionStatistics?
    /// Expected and received packets at the last connection-quality tick (``SFU/reportConnectionQuality()``).
    var qualityMark: (expected: UInt32, received: UInt64) = (0, 0)
    /// Gaps in what the publisher sends, asked for upstream (video).
    /// Retries every 60 ms: the SFU does not measure its round trip to the publisher (it only receives).
    var nack = NackGenerator(roundTrip: 40_000)
    /// The size of its latest keyframe.
    var width: Int?
    var height: Int?
    var rate = RateWindow()
    var lastPacketUs: Int64?
    /// It carries VP8 temporal layers (TID in its payload descriptors): its upper layer can be
    /// dropped for a viewer whose path cannot carry it; `baseRate` counts the base layer alone.
    var hasTemporalLayers = false
    var baseRate = RateWindow()
    /// Dynacast: the publisher was told to stop sending it (nobody wants it); still selectable.
    var pausedByServer = false
    /// When the publisher was last told to send it again (it counts as sent for a while after).
    var resumedAtUs: Int64?

    init(rid: String?, ssrc: UInt32?, keyframeIntervalMs: Int) {
        self.rid = rid
        self.ssrc = ssrc
        keyframeThrottle = Throttle(intervalMs: keyframeIntervalMs)
    }

    /// A packet of this stream arrived (after the cache took it).
    func received(bytes: Int, sequence: UInt16, nowUs: Int64) {
        lastPacketUs = nowUs
        rate.add(bytes: bytes, nowUs: nowUs)
        if let newest = newestSequence {
            if sequence &- newest < 0x8000 { newestSequence = sequence }
        } else {
            newestSequence = sequence
        }
    }

    /// How long without packets before a layer counts as stopped.
    static let stoppedAfterUs: Int64 = 400_000
    /// How long a layer asked to start again may take to arrive.
    static let resumeGraceUs: Int64 = 1_500_000

    /// Whether a subscriber may be moved to it: it is being sent, or paused only because nobody
    /// wanted it (asking for it starts it again).
    func isSelectable(nowUs: Int64) -> Bool {
        if pausedByServer { return true }
        if let resumedAtUs, nowUs - resumedAtUs < Self.resumeGraceUs { return true }
        guard let lastPacketUs else { return false }
        return nowUs - lastPacketUs < Self.stoppedAfterUs
    }

    /// What selection knows of it now.
    func layerState(index: Int, nowUs: Int64) -> LayerSelector.Layer {
        LayerSelector.Layer(index: index, width: width, height: height, bitrateBps: rate.costBitsPerSecond(nowUs: nowUs),
                            selectable: isSelectable(nowUs: nowUs))
    }
}

/// Bytes over the last second, in four 250 ms buckets: a layer's bitrate with its keyframes
/// averaged in. A stream that just (re)started is measured over the time it has been sending (a
/// resumed layer's first keyframe makes that high, never low); one that stopped keeps the rate it
/// had (``lastBitsPerSecond``), which is what it will cost when it is sent again.
struct RateWindow {
    private var buckets = [Int](repeating: 0, count: 4)
    private var bucketStartUs: Int64 = 0
    private var activeSinceUs: Int64?
    private var lastActiveUs: Int64?
    private(set) var lastBitsPerSecond = 0.0
    /// The rate of the latest whole second the stream was sent through: a layer that just
    /// resumed (its encoder ramping up again) is not taken for cheaper than it was.
    private(set) var steadyBitsPerSecond = 0.0
    static let bucketUs: Int64 = 250_000
    /// A pause longer than this starts the measurement over.
    static let restartAfterUs: Int64 = 500_000

    mutating func add(bytes: Int, nowUs: Int64) {
        if let last = lastActiveUs, nowUs - last <= Self.restartAfterUs {
            advance(to: nowUs)
        } else {
            clear(from: 0)
            bucketStartUs = nowUs
            activeSinceUs = nowUs
        }
        buckets[buckets.count - 1] += bytes
        lastActiveUs = nowUs
    }

    private mutating func advance(to nowUs: Int64) {
        let steps = Int((nowUs - bucketStartUs) / Self.bucketUs)
        guard steps > 0 else { return }
        // Shifted in place: this runs on the packet path, so no array is made.
        let kept = max(0, buckets.count - steps)
        for index in 0..<kept { buckets[index] = buckets[index + steps] }
        clear(from: kept)
        bucketStartUs += Int64(steps) * Self.bucketUs
    }

    private mutating func clear(from start: Int) {
        for index in start..<buckets.count { buckets[index] = 0 }
    }

    /// The rate over the second up to its latest packet (or since the stream started, at least
    /// 250 ms); once the stream stopped, the rate it had. Measured up to the latest packet, not to
    /// now: a layer the server just paused, asked while its last second still held the silence
    /// since, was taken for under half its rate (640x360 at 224-238 kbit/s instead of ~550), and a
    /// viewer held at 400 kbit/s was moved up to it and stalled.
    mutating func bitsPerSecond(nowUs: Int64) -> Double {
        guard let last = lastActiveUs, let since = activeSinceUs, nowUs - last <= Self.restartAfterUs else { return lastBitsPerSecond }
        let window = Int64(buckets.count - 1) * Self.bucketUs + max(1, last - bucketStartUs)
        let spanUs = max(Self.bucketUs, min(window, last - since))
        lastBitsPerSecond = Double(buckets.reduce(0, +) * 8) / (Double(spanUs) / 1e6)
        if last - since >= Int64(buckets.count) * Self.bucketUs { steadyBitsPerSecond = lastBitsPerSecond }
        return lastBitsPerSecond
    }

    /// What the stream costs when sent: its rate now, never under its last steady second's.
    mutating func costBitsPerSecond(nowUs: Int64) -> Double {
        max(bitsPerSecond(nowUs: nowUs), steadyBitsPerSecond)
    }
}

/// Picks the simulcast layer a subscriber gets (pure logic, table-tested): the layer its request
/// asks for (stream type, render size, else the full one), lowered to what its path's budget
/// carries, among the layers being sent (a layer asked for but not sent gives the nearest one).
/// Going up needs 15 % of headroom over the layer's bitrate within the up-switch budget (what a
/// probe vouched for); staying or going down needs only the budget, so a layer is left only when
/// the budget falls under it.
enum LayerSelector {
    struct Layer: Sendable, Hashable {
        var index: Int
        var width: Int?
        var height: Int?
        var bitrateBps: Double
        var selectable: Bool

        var pixels: Int { (width ?? 0) * (height ?? 0) }

        /// Smallest first: by size once keyframes told it, by bitrate (then offer order) before; a
        /// layer never seen at all ranks above every seen one (an encoder starts, and sheds, its
        /// largest layers last, as libwebrtc ramping up does).
        static func smaller(_ a: Layer, _ b: Layer) -> Bool {
            (a.neverSeen ? 1 : 0, a.pixels, a.bitrateBps, a.index) < (b.neverSeen ? 1 : 0, b.pixels, b.bitrateBps, b.index)
        }

        var neverSeen: Bool { width == nil && bitrateBps == 0 }
    }

    /// `layers` smallest first (``Layer/smaller(_:_:)``).
    static func ranked(_ layers: [Layer]) -> [Layer] { layers.sorted(by: Layer.smaller) }

    struct Request: Sendable, Hashable {
        var streamType: VideoStreamType?
        var renderWidth: Int?
        var renderHeight: Int?

        init(streamType: VideoStreamType? = nil, renderWidth: Int? = nil, renderHeight: Int? = nil) {
            self.streamType = streamType
            self.renderWidth = renderWidth
            self.renderHeight = renderHeight
        }
    }

    static let upHeadroom = 1.15

    /// The layer for a subscriber and why; nil when no layer is being sent. `budgetBps` nil: no
    /// estimate (nothing limits it).
    static func select(_ layers: [Layer], request: Request, budgetBps: Double?, upBudgetBps: Double? = nil,
                       current: Int?) -> (index: Int, reason: LayerReason)? {
        let ranked = ranked(layers)
        let selectable = ranked.filter(\.selectable)
        guard !selectable.isEmpty else { return nil }
        let wanted = wantedLayer(ranked, request: request)
        // The nearest selectable layer to the one asked for: the largest not above it, else the smallest above.
        let wantedRank = ranked.firstIndex { $0.index == wanted.index } ?? ranked.count - 1
        let atOrBelow = selectable.filter { (ranked.firstIndex(of: $0) ?? 0) <= wantedRank }
        var candidates = atOrBelow.isEmpty ? [selectable[0]] : atOrBelow
        var reason: LayerReason = candidates.last?.index == wanted.index ? .request : .unavailable
        guard let budgetBps else { return (candidates[candidates.count - 1].index, reason) }
        // Ranked at or below the layer it gets: no headroom needed (a move down is never held back).
        let currentRank = current.flatMap { index in ranked.firstIndex { $0.index == index } }
        let fits = { (layer: Layer) in
            if let currentRank, let rank = ranked.firstIndex(of: layer), rank <= currentRank { return layer.bitrateBps <= budgetBps }
            // A first layer is picked on the estimate alone (there is nothing to move up from).
            return layer.bitrateBps * upHeadroom <= (current == nil ? budgetBps : min(budgetBps, upBudgetBps ?? budgetBps))
        }
        let ceiling = candidates[candidates.count - 1]
        candidates = candidates.filter(fits)
        guard let chosen = candidates.last else {
            // Nothing fits: the smallest layer there is.
            return (selectable[0].index, selectable[0].index == ceiling.index ? reason : .estimate)
        }
        if chosen.index != ceiling.index { reason = .estimate }
        return (chosen.index, reason)
    }

    /// The layer the request names, among all layers (sent or not), `ranked` smallest first.
    static func wantedLayer(_ ranked: [Layer], request: Request) -> Layer {
        if let width = request.renderWidth, let height = request.renderHeight, width > 0, height > 0 {
            // The smallest that covers the render size in either orientation; the largest when none does.
            let long = max(width, height), short = min(width, height)
            return ranked.first { layer in
                guard let w = layer.width, let h = layer.height else { return false }
                return max(w, h) >= long && min(w, h) >= short
            } ?? ranked[ranked.count - 1]
        }
        switch request.streamType {
        case .low: return ranked[0]
        // The middle of three, the larger of two.
        case .medium: return ranked[ranked.count / 2]
        case .high, nil: return ranked[ranked.count - 1]
        }
    }
}
