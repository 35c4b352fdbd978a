import NIOCore
import RTCTransport
import Synchronization

/// Sends a publisher transport's RTP packets at the pace of the bandwidth estimate: the senders
/// queue packets here (from their encode threads, or the network loop for retransmissions) and
/// they leave on the transport's event loop, as ``PacingQueue`` allows. Each packet gets its
/// transport-wide sequence number and abs-send-time as it leaves, and is logged for congestion
/// control then, so feedback is matched against the time it really went out.
final class Pacer: Sendable {
    /// The pacing rate is this many times the estimate (libwebrtc's factor): a frame leaves
    /// quickly, but not as one burst into the bottleneck.
    static let pacingFactor = 2.5

    private struct State {
        var queue: PacingQueue
        var scheduled = false
        var stopped = false
        /// Packets to probe with when no media is waiting (RTX copies of recent video).
        var padding: (@Sendable () -> RTPPacket?)?
        /// The SDK's extension ids → the ones the answer kept (identity unless it dropped or
        /// renumbered some).
        var extensions = ExtensionIDMap.identity

        /// Marks a drain as due; true when the caller must start one.
        mutating func schedule() -> Bool {
            guard !scheduled else { return false }
            scheduled = true
            return true
        }
    }

    private let state: Mutex<State>
    private let loop: EventLoop
    private let sequencer: TransportSequencer
    private let output: @Sendable ([ByteBuffer]) -> Void

    init(loop: EventLoop, sequencer: TransportSequencer, output: @escaping @Sendable ([ByteBuffer]) -> Void) {
        self.loop = loop
        self.sequencer = sequencer
        self.output = output
        state = Mutex(State(queue: PacingQueue(pacingBps: Self.pacingFactor * sequencer.congestion.targetBps)))
    }

    /// Queues packets; they carry placeholder transport-wide and abs-send-time extensions, which
    /// are filled in as they leave.
    func enqueue(_ packets: [RTPPacket], priority: PacketPriority) {
        guard !packets.isEmpty else { return }
        let wake = state.withLock { state -> Bool in
            guard !state.stopped else { return false }
            state.queue.enqueue(packets, priority: priority, nowUs: MediaClock.monotonicUs())
            return state.schedule()
        }
        if wake { loop.execute { self.drain() } }
    }

    /// Sends a probe cluster (with padding when media does not fill it).
    func probe(_ cluster: ProbeCluster) {
        let wake = state.withLock { state -> Bool in
            guard !state.stopped, state.padding != nil else { return false }
            state.queue.startProbe(cluster)
            return state.schedule()
        }
        if wake { loop.execute { self.drain() } }
    }

    /// Whether a probe can be sent: there is something to pad with.
    var canProbe: Bool { state.withLock { $0.padding != nil } }

    /// What the answer did to the header extensions this SDK offered: packets go out in its ids,
    /// without the ones it did not keep (RFC 8285: only negotiated extensions are sent).
    func setNegotiatedExtensions(_ map: ExtensionIDMap) { state.withLock { $0.extensions = map } }

    func setPaddingSource(_ source: (@Sendable () -> RTPPacket?)?) { state.withLock { $0.padding = source } }

    /// A new estimate (bits per second).
    func setEstimate(bps: Double) { state.withLock { $0.queue.pacingBps = Self.pacingFactor * bps } }

    /// Drops what is queued; nothing is sent after this.
    func stop() {
        state.withLock { state in
            state.stopped = true
            state.queue = PacingQueue(pacingBps: state.queue.pacingBps)
        }
    }

    // MARK: On the loop

    private func drain() {
        let now = MediaClock.monotonicUs()
        let (released, next, extensions) = state.withLock { state -> ([PacingQueue.Released], Int64?, ExtensionIDMap) in
            guard !state.stopped else {
                state.scheduled = false
                return ([], nil, state.extensions)
            }
            let padding = state.padding
            let result = state.queue.release(nowUs: now) { padding?() }
            if result.nextUs == nil { state.scheduled = false }
            return (result.0, result.1, state.extensions)
        }
        if !released.isEmpty {
            let sendTime = AbsSendTime(microseconds: UInt64(MediaClock.wallUs())).data
            var buffers: [ByteBuffer] = []
            buffers.reserveCapacity(released.count)
            var logged: [(sequence: UInt16, bytes: Int, probeCluster: Int?)] = []
            logged.reserveCapacity(released.count)
            for item in released {
                let sequence = sequencer.take()
                let buffer = Self.serialize(item.packet, transportSequence: sequence, absSendTime: sendTime, extensions: extensions)
                logged.append((sequence, buffer.readableBytes, item.probeCluster))
                buffers.append(buffer)
            }
            sequencer.congestion.sent(logged, nowUs: now)
            output(buffers)
        }
        if let next {
            loop.scheduleTask(in: .microseconds(max(next - now, 500))) { self.drain() }
        }
    }
}

extension Pacer {
    /// The packet on the wire with its transport-wide sequence number and abs-send-time written
    /// over the placeholders in place (no rebuilt extension block per packet).
    static func serialize(_ packet: RTPPacket, transportSequence: UInt16, absSendTime: ByteBuffer,
                          extensions: ExtensionIDMap = .identity) -> ByteBuffer {
        let header = packet.header
        guard extensions.isIdentity else {
            var stamped = packet
            stamped.header.stamp(transportSequence: transportSequence, absSendTime: absSendTime)
            extensions.apply(to: &stamped.header)
            return stamped.serialized
        }
        guard let sequenceAt = header.extensionDataOffset(id: RTPExtensionID.transportWideSequence), sequenceAt.length == 2,
              let timeAt = header.extensionDataOffset(id: RTPExtensionID.absSendTime), timeAt.length == absSendTime.readableBytes
        else {
            var stamped = packet
            stamped.header.stamp(transportSequence: transportSequence, absSendTime: absSendTime)
            return stamped.serialized
        }
        var buffer = packet.serialized
        buffer.setInteger(transportSequence, at: buffer.readerIndex + sequenceAt.offset)
        buffer.setBuffer(absSendTime, at: buffer.readerIndex + timeAt.offset)
        return buffer
    }
}

extension RTPHeader {
    /// Sets the transport-wide sequence number and abs-send-time extensions (replacing the
    /// placeholders the senders put in, so the packet's size does not change).
    mutating func stamp(transportSequence: UInt16, absSendTime: ByteBuffer) {
        var elements = extensions
        var found = (sequence: false, time: false)
        for index in elements.indices {
            switch elements[index].id {
            case RTPExtensionID.transportWideSequence:
                elements[index].data = TransportSequenceNumber(transportSequence).data
                found.sequence = true
            case RTPExtensionID.absSendTime:
                elements[index].data = absSendTime
                found.time = true
            default:
                break
            }
        }
        if !found.sequence { elements.append(RTPHeaderExtension(id: RTPExtensionID.transportWideSequence, data: TransportSequenceNumber(transportSequence).data)) }
        if !found.time { elements.append(RTPHeaderExtension(id: RTPExtensionID.absSendTime, data: absSendTime)) }
        extensions = elements
    }

    /// The placeholders ``stamp(transportSequence:absSendTime:)`` fills in.
    static var pacedExtensions: [RTPHeaderExtension] {
        [RTPHeaderExtension(id: RTPExtensionID.absSendTime, data: AbsSendTime(microseconds: 0).data),
         RTPHeaderExtension(id: RTPExtensionID.transportWideSequence, data: TransportSequenceNumber(0).data)]
    }
}
