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

    /// Bits per second the queue is drained at.
    let bps: Double
    /// The pacing ends at this time at the latest.
    let untilUs: Int64
    private var items: [Item] = []
    private var head = 0
    /// Bytes that may go now (one packet's worth at the start: the first goes at once).
    private var credit: Double
    private var lastUs: Int64
    /// Set while its drain timer runs.
    var timer: RepeatedTask?

    /// How long a pacing lasts at most (what it still holds then goes at once); how often it
    /// sends; how much it holds (packets beyond are dropped, and repaired if the subscriber asks).
    static let durationUs: Int64 = 1_500_000
    static let tick = TimeAmount.milliseconds(5)
    static let capacity = 256
    /// Of what the link delivered lately (the lesser of the estimate and the acknowledged rate):
    /// the rest drains the queue.
    static let share = 0.5
    static let minimumBps = 64_000.0

    /// The pace for a layer of `layerBps`: `share` of the link, but never more than 2.5 times the
    /// layer or 250 kbit/s, whichever is more (its keyframe is spread out, not sent as a burst: both
    /// figures lag a collapse by a feedback interval or two, and a layer just resumed is measured
    /// low), nor less than 1.2 times the layer (the layer itself must get through).
    static func rate(share: Double, layerBps: Double) -> Double {
        max(minimumBps, 1.2 * layerBps, min(max(2.5 * layerBps, spreadBps), share))
    }
    static let spreadBps = 250_000.0

    init(bps: Double, nowUs: Int64) {
        self.bps = bps
        untilUs = nowUs + Self.durationUs
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
