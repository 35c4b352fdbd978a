import NIOCore

/// Paces what one subscription is sent while its leg drains the queue a collapse of its link left
/// (``LayerController`` moved it down to the smallest layer): the smaller layer's keyframe goes out
/// at a rate under what the link was measured to deliver, so it finds room in a queue that is
/// still full instead of losing packets to it as a burst would (a lost packet is repaired only after
/// its NACK has come back through that queue). Only during such an episode: other legs, and this one
/// otherwise, send each packet as it comes. On the SFU's event loop.
final class LegPacer: @unchecked Sendable {
    struct Item {
        var packet: ByteBuffer
        var payloadBytes: Int
        var sequenceAt: (id: UInt8, offset: Int)?
    }

    /// Bits per second the queue is drained at: set at the start and, once the keyframe is out,
    /// on each feedback report from the leg (``retune(to:)``), so that it falls with the leg's
    /// estimate. The figures the pace starts from predate the collapse: kept at them, the pace and
    /// the subscriber's audio filled a 400 kbit/s link for a second, its queue stayed full and
    /// dropped a packet every 200 ms, and the repair of one waited behind 600 ms of queue (a
    /// second freeze of about a second, in about one collapse in four).
    var bps: Double
    /// From this time on the pacing ends as soon as it holds nothing, congested or not.
    let untilUs: Int64
    /// What it still holds at this time goes at once (a leg congested for this long is paced at a
    /// rate that should have emptied it long before).
    let giveUpUs: Int64
    private var items: [Item] = []
    private var head = 0
    /// Bytes that may go now (one packet's worth at the start: the first goes at once).
    private var credit: Double
    private var lastUs: Int64
    /// Set while its drain timer runs.
    var timer: RepeatedTask?

    /// How long a pacing lasts while the leg stays congested; how long at most (what it still
    /// holds then goes at once: sent as a burst earlier, into a queue still draining, it lost a
    /// packet whose repair then waited behind that queue); how often it sends; how much it holds
    /// (packets beyond are dropped, and repaired if the subscriber asks).
    static let durationUs: Int64 = 1_500_000
    static let maximumDurationUs: Int64 = 6_000_000
    static let tick = TimeAmount.milliseconds(5)
    static let capacity = 256
    /// Of what the link delivered lately (the lesser of the estimate and the acknowledged rate):
    /// the rest drains the queue.
    static let share = 0.5
    static let minimumBps = 64_000.0

    /// The pace for a layer of `layerBps`: `share` of the link, but never more than 1.5 times the
    /// layer or 250 kbit/s, whichever is more (its keyframe is spread out, not sent as a burst: both
    /// figures lag a collapse by a feedback interval or two, and a layer just resumed is measured
    /// low), nor less than 1.2 times the layer (the layer itself must get through).
    ///
    /// At 2.5 times the layer, a switch made before the estimate had fallen (a share of 480 kbit/s)
    /// paced a 180 kbit/s layer's keyframe at 430 kbit/s into a 400 kbit/s link whose queue the
    /// collapse had filled: with the audio, more went in than came out, a packet of the keyframe or
    /// of the frames after it was lost, and its repair through 600 ms of queue (or the keyframe
    /// asked for when that repair was lost too) froze the viewer again for 0.7-1.1 s, in two
    /// collapses of six. The keyframe now takes some tens of ms longer.
    static func rate(share: Double, layerBps: Double) -> Double {
        max(minimumBps, 1.2 * layerBps, min(max(spreadFactor * layerBps, spreadBps), share))
    }
    static let spreadFactor = 1.5
    static let spreadBps = 250_000.0

    /// The pace it started at: never exceeded.
    let startBps: Double
    let startUs: Int64
    /// The layer's rate before it went through this leg (its last steady second): what the pace
    /// keeps room for once the keyframe is out, until the layer's own rate is measured past its
    /// keyframe (``layerBps(measured:nowUs:)``).
    let steadyLayerBps: Double
    /// Set once the first frame held (the smaller layer's keyframe) has gone: from then on the
    /// pace follows the leg's feedback (``Producer/pacingRate(_:nowUs:layerBps:)``).
    private(set) var keyframeSent = false

    init(bps: Double, steadyLayerBps: Double = 0, nowUs: Int64) {
        startBps = bps
        startUs = nowUs
        self.steadyLayerBps = steadyLayerBps
        self.bps = bps
        untilUs = nowUs + Self.durationUs
        giveUpUs = nowUs + Self.maximumDurationUs
        credit = 1200
        lastUs = nowUs
        items.reserveCapacity(64)
    }

    var isEmpty: Bool { head == items.count }

    /// Holds a packet; false when full (the packet is dropped).
    func enqueue(_ item: Item) -> Bool {
        guard items.count - head < Self.capacity else { return false }
        if head > 0, head == items.count {
            items.removeAll(keepingCapacity: true)
            head = 0
        }
        items.append(item)
        return true
    }

    /// The layer rate the pace keeps room for, given what the layer measures now (`measured`):
    /// for its first second (the rate meter's window, which holds the keyframe then: a layer just
    /// resumed reads at twice its rate, and a pace of 1.2 times that kept a 400 kbit/s link's
    /// queue full, losing a packet every 200 ms) the steady rate from before; after it, the
    /// larger of the two (a pace under the layer would never empty).
    func layerBps(measured: Double, nowUs: Int64) -> Double {
        nowUs - startUs < Self.layerWindowUs ? steadyLayerBps : max(steadyLayerBps, measured)
    }
    static let layerWindowUs: Int64 = 1_000_000

    /// The pace after a feedback report, from `rate` (``rate(share:layerBps:)`` now): once the
    /// keyframe is out it follows the leg, never above where it started; before, it stays.
    func retune(to rate: Double) {
        guard keyframeSent else { return }
        bps = min(startBps, rate)
    }

    /// Whether an RTP packet carries the marker bit (the last packet of a video frame).
    static func endsFrame(_ packet: ByteBuffer) -> Bool {
        (packet.getInteger(at: packet.readerIndex + 1, as: UInt8.self) ?? 0) & 0x80 != 0
    }

    /// Every packet held, oldest first, to `send`; returns how many went.
    @discardableResult
    func drainAll(_ send: (inout Item) -> Void) -> Int {
        let count = items.count - head
        while head < items.count {
            send(&items[head])
            head += 1
        }
        items.removeAll(keepingCapacity: true)
        head = 0
        return count
    }

    /// The packets whose time has come, oldest first, to `send`; returns how many went.
    @discardableResult
    func drain(nowUs: Int64, _ send: (inout Item) -> Void) -> Int {
        credit = min(credit + bps / 8 * Double(max(0, nowUs - lastUs)) / 1e6, 4 * 1200)
        lastUs = nowUs
        var sent = 0
        while head < items.count, credit >= Double(min(items[head].packet.readableBytes, 1200)) {
            credit -= Double(items[head].packet.readableBytes)
            if !keyframeSent { keyframeSent = Self.endsFrame(items[head].packet) }
            send(&items[head])
            head += 1
            sent += 1
        }
        if head == items.count {
            items.removeAll(keepingCapacity: true)
            head = 0
        }
        return sent
    }
}
