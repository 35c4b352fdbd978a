import NIOConcurrencyHelpers
import NIOCore
import LiveKitProtocol
import RTCTransport
import Signaling

/// The app's data streams (Agora's `createDataStream` / `sendStreamMessage`, LiveKit's
/// `publishData`) over the data channels of the publisher transport: every message is a
/// ``DataEnvelope`` (topic, destinations, stream id) on `_reliable` (ordered, retransmitted) or
/// `_lossy` (unordered, never retransmitted); the server writes the sender's uid and relays it.
///
/// It outlives a session: a rejoin attaches the new session's channels and what was queued goes
/// out then. Messages sent before the channels are open are queued (at most ``queueLimit``); past
/// that, or past a stream's rate, a send fails with its reason. The endpoint's calls run on its
/// transport's event loop.
final class DataStreams: @unchecked Sendable {
    struct Stream {
        let reliable: Bool
        let ordered: Bool
        var bucket: (tokens: Double, lastUs: Int64)
    }

    static let queueLimit = 256
    static let maxStreams = 16
    /// The largest payload one message may carry (the server relays 64 KiB messages by default;
    /// the envelope takes the rest).
    static let maxPayloadBytes = 60 * 1024
    /// Messages per second one stream may send (bursts of twice that).
    static let messagesPerSecond = 200.0

    private let lock = NIOLock()
    private var streams: [Int: Stream] = [:]
    private var nextStreamID = 1
    private var endpoint: DataChannelEndpoint?
    private var loop: EventLoop?
    /// Streams of the envelope channels once open; messages waiting for them.
    private var open: (reliable: UInt16?, lossy: UInt16?) = (nil, nil)
    private var queued: [(reliable: Bool, bytes: [UInt8])] = []
    /// Messages SCTP refused for want of send buffer, sent again in order (on the transport's
    /// loop) as it drains: a reliable message is never dropped for a full buffer. At most
    /// ``queueLimit``: past it, `send` refuses (`messageRateExceeded`).
    private var backlog: [(reliable: Bool, bytes: [UInt8])] = []
    private var retryScheduled = false
    /// Messages ``send(streamID:reliable:_:topic:destinations:)`` accepted that have not reached the
    /// transport's loop yet: they count against ``queueLimit`` with the queue and the backlog, so
    /// the loop never finds a full queue for a message the app was told is on its way.
    private var onTheirWay = 0
    /// Whether the app asked for data (the engine enables the channels on every join then).
    private(set) var wanted = false
    private let emit: @Sendable (RTCEngineEvent) -> Void
    /// How messages are framed on the channels: our envelope, or LiveKit's `DataPacket` (a
    /// session on LiveKit's protocol; its packets carry no stream id: they arrive as stream 0).
    let framing: DataFraming

    init(framing: DataFraming = .envelope, emit: @escaping @Sendable (RTCEngineEvent) -> Void) {
        self.framing = framing
        self.emit = emit
    }

    /// Messages taken and not yet handed to SCTP: queued for the channels, waiting for buffer, or
    /// on their way to the loop (tests).
    var waitingCount: Int { lock.withLock { queued.count + backlog.count + onTheirWay } }

    func want() { lock.withLock { wanted = true } }

    /// A new stream; its id names it in ``send(streamID:_:topic:destinations:)``.
    func create(reliable: Bool, ordered: Bool) throws(RTCEngineError) -> Int {
        lock.lock()
        defer { lock.unlock() }
        guard streams.count < Self.maxStreams else {
            throw RTCEngineError(.invalidState, "at most \(Self.maxStreams) data streams")
        }
        let id = nextStreamID
        nextStreamID += 1
        streams[id] = Stream(reliable: reliable, ordered: ordered, bucket: (Self.messagesPerSecond * 2, MediaClock.monotonicUs()))
        wanted = true
        return id
    }

    /// Sends on stream `streamID` (0: ``publishData``'s, with `reliable` as given).
    func send(streamID: Int, reliable: Bool = true, _ data: [UInt8], topic: String, destinations: [String]) throws(RTCEngineError) {
        guard data.count <= Self.maxPayloadBytes else {
            throw RTCEngineError(.messageTooLarge, "a message of \(data.count) bytes (at most \(Self.maxPayloadBytes))")
        }
        guard topic.utf8.count <= DataEnvelope.maxTopicBytes, destinations.count <= DataEnvelope.maxDestinations,
              destinations.allSatisfy({ !$0.isEmpty && $0.utf8.count <= 255 }) else {
            throw RTCEngineError(.invalidArgument, "a topic of at most \(DataEnvelope.maxTopicBytes) bytes and at most "
                                 + "\(DataEnvelope.maxDestinations) destination uids of 1 to 255 bytes")
        }
        let (isReliable, target, bytes) = try reserve(streamID: streamID, reliable: reliable) { isReliable in
            switch framing {
            case .envelope: DataEnvelope(topic: topic, destinations: destinations, streamID: UInt8(clamping: streamID), payload: data).serialized
            case .liveKit: LiveKitData.outgoing(payload: data, topic: topic, destinations: destinations, reliable: isReliable)
            }
        }
        guard let (endpoint, loop) = target else { return }
        loop.execute { self.sendOnLoop(bytes, reliable: isReliable, endpoint: endpoint, reserved: true) }
    }

    /// Under the lock: the stream's rate, and where the message goes now (nil: queued).
    private func reserve(streamID: Int, reliable: Bool, frame: (Bool) -> [UInt8]) throws(RTCEngineError)
        -> (Bool, (DataChannelEndpoint, EventLoop)?, [UInt8]) {
        lock.lock()
        defer { lock.unlock() }
        var isReliable = reliable
        if streamID != 0 {
            guard var stream = streams[streamID] else { throw RTCEngineError(.invalidArgument, "no data stream \(streamID)") }
            let now = MediaClock.monotonicUs()
            stream.bucket.tokens = min(Self.messagesPerSecond * 2,
                                       stream.bucket.tokens + Double(now - stream.bucket.lastUs) / 1e6 * Self.messagesPerSecond)
            stream.bucket.lastUs = now
            guard stream.bucket.tokens >= 1 else {
                streams[streamID] = stream
                throw RTCEngineError(.messageRateExceeded, "stream \(streamID) sends more than \(Int(Self.messagesPerSecond)) messages a second")
            }
            stream.bucket.tokens -= 1
            streams[streamID] = stream
            isReliable = stream.reliable
        }
        guard backlog.count + queued.count + onTheirWay < Self.queueLimit else {
            throw RTCEngineError(.messageRateExceeded, "\(Self.queueLimit) messages wait for the data channels or their send buffer already")
        }
        let bytes = frame(isReliable)
        guard let endpoint, let loop else {
            queued.append((isReliable, bytes))
            return (isReliable, nil, bytes)
        }
        onTheirWay += 1
        return (isReliable, (endpoint, loop), bytes)
    }

    /// A session's data channels: their events come here; the envelope channels open once SCTP is up.
    func attach(_ endpoint: DataChannelEndpoint, loop: EventLoop) {
        lock.withLock {
            self.endpoint = endpoint
            self.loop = loop
            open = (nil, nil)
        }
        endpoint.onEvent = { [weak self] event in self?.handle(event, endpoint: endpoint) }
        loop.execute { if endpoint.isConnected { self.openChannels(endpoint) } }
    }

    /// The session ended: messages queue until the next one.
    func detach() {
        lock.withLock {
            endpoint = nil
            loop = nil
            open = (nil, nil)
            // What waited for the old association's buffer goes out on the next session's.
            queued = backlog + queued
            backlog.removeAll()
        }
    }

    // MARK: On the transport's loop

    private func handle(_ event: DataChannelEndpoint.Event, endpoint: DataChannelEndpoint) {
        switch event {
        case .connected:
            openChannels(endpoint)
        case .opened(let channel):
            lock.withLock {
                if channel.parameters.label == DataEnvelope.reliableLabel { open.reliable = channel.stream }
                if channel.parameters.label == DataEnvelope.lossyLabel { open.lossy = channel.stream }
            }
            flush(endpoint)
        case .message(let channel, let data, _):
            guard DataEnvelope.isEnvelopeLabel(channel.parameters.label) else { return }
            switch framing {
            case .envelope:
                guard let envelope = try? DataEnvelope(parsing: data) else { return }
                emit(.streamMessage(uid: envelope.sender, streamId: Int(envelope.streamID), data: envelope.payload, topic: envelope.topic))
            case .liveKit:
                guard let packet = LiveKitData.incoming(data) else { return }
                emit(.streamMessage(uid: packet.sender, streamId: 0, data: packet.payload, topic: packet.topic))
            }
        case .closed, .disconnected:
            break
        }
    }

    private func openChannels(_ endpoint: DataChannelEndpoint) {
        let present = Set(endpoint.openChannels.map(\.parameters.label))
        for parameters in [DataEnvelope.reliableChannel, DataEnvelope.lossyChannel] where !present.contains(parameters.label) {
            _ = try? endpoint.open(parameters)
        }
    }

    /// `reserved`: a message ``send(streamID:reliable:_:topic:destinations:)`` counted in
    /// ``onTheirWay``; it moves to the queue or the backlog under the same lock, so the count never
    /// dips below what waits. Nothing is dropped here: the limit was checked when it was accepted.
    private func sendOnLoop(_ bytes: [UInt8], reliable: Bool, endpoint: DataChannelEndpoint, reserved: Bool = false) {
        let stream = lock.withLock { () -> UInt16? in
            if reserved { onTheirWay -= 1 }
            // Its channel not open yet, or earlier messages of its kind still queued for it: behind
            // them. (A message that overtook the queue arrived before the first ones: seen at 10 %
            // loss, where the reliable channel opened well before the lossy one.)
            guard let stream = reliable ? open.reliable : open.lossy, !queued.contains(where: { $0.reliable == reliable }) else {
                queued.append((reliable, bytes))
                return nil
            }
            // Behind messages already waiting for buffer: after them, in order.
            guard backlog.isEmpty else {
                backlog.append((reliable, bytes))
                return nil
            }
            return stream
        }
        guard let stream else { return }
        do {
            try endpoint.send(bytes, binary: true, on: stream)
        } catch {
            // Too large never fits; a full send buffer drains: try again shortly.
            guard !error.isTooLarge else { return }
            lock.withLock { backlog.append((reliable, bytes)) }
            scheduleRetry(endpoint)
        }
    }

    /// Sends what waits for buffer, in order, until SCTP refuses again (then a little later).
    private func scheduleRetry(_ endpoint: DataChannelEndpoint) {
        guard let loop = lock.withLock({ () -> EventLoop? in
            guard !retryScheduled, let loop = self.loop else { return nil }
            retryScheduled = true
            return loop
        }) else { return }
        loop.scheduleTask(in: .milliseconds(5)) {
            self.lock.withLock { self.retryScheduled = false }
            while let next = self.lock.withLock({ self.backlog.first }) {
                let stream = self.lock.withLock { next.reliable ? self.open.reliable : self.open.lossy }
                guard let stream else { return }
                do {
                    try endpoint.send(next.bytes, binary: true, on: stream)
                } catch let error as DataChannelEndpoint.Error where error.isTooLarge {
                    self.lock.withLock { _ = self.backlog.removeFirst() }
                    continue
                } catch {
                    return self.scheduleRetry(endpoint)
                }
                self.lock.withLock { _ = self.backlog.removeFirst() }
            }
        }
    }

    /// Sends the queued messages whose channel is open now, in order; the others wait for theirs.
    private func flush(_ endpoint: DataChannelEndpoint) {
        let ready = lock.withLock { () -> [(reliable: Bool, bytes: [UInt8])] in
            let (now, later) = (queued.filter { ($0.reliable ? open.reliable : open.lossy) != nil },
                                queued.filter { ($0.reliable ? open.reliable : open.lossy) == nil })
            queued = later
            return now
        }
        for message in ready { sendOnLoop(message.bytes, reliable: message.reliable, endpoint: endpoint) }
    }
}
