import LiveKitProtocol
import Logging
import RTCTransport
import Signaling

/// Data channels (RFC 8831) of participants whose offer has an `m=application` section: the server
/// ends each one's SCTP association on its publisher transport and relays each message it receives
/// to every other participant in the room, on that participant's channel of the same label (opened
/// by the server with the sender's parameters when it has none yet). Messages larger than
/// ``ServerLimits/maxDataMessageBytes`` or past the sender's rate are dropped and counted.
extension SFU {
    func enableData(for participant: Participant, on session: MediaSession, offered: DataChannelOffer) {
        let limits = configuration.limits
        do {
            // SCTP takes what the answer's a=max-message-size promised; the relay limit is checked
            // (and counted) per message below.
            let endpoint = try session.enableDataChannelsOnLoop(remotePort: offered.sctpPort, maxMessageSize: SessionDescription.maxMessageSize)
            participant.dataMaxMessageSize = offered.maxMessageSize
            participant.dataMessages = TokenBucket(ratePerSecond: limits.dataMessagesPerSecond,
                                                   burst: limits.dataMessagesPerSecond * ServerLimits.dataBurstSeconds)
            participant.dataBytes = TokenBucket(ratePerSecond: limits.dataBytesPerSecond, burst: limits.dataBytesPerSecond * ServerLimits.dataBurstSeconds)
            endpoint.onEvent = { [weak self, weak participant] event in
                guard let self, let participant else { return }
                switch event {
                case .opened:
                    self.dataBecameReady(participant)
                case .disconnected:
                    // Messages wait again until it is back.
                    participant.dataReady = false
                case .connected:
                    // A peer that opens no channel of its own takes the server's: ready soon anyway.
                    self.loop.scheduleTask(in: .milliseconds(Participant.dataReadyAfterMs)) { [weak self, weak participant] in
                        guard let self, let participant else { return }
                        self.dataBecameReady(participant)
                    }
                default:
                    self.dataEvent(event, from: participant)
                }
            }
        } catch {
            context.logger.warning("data channels for \(participant.uid) could not start", metadata: ["reason": "\(error)"])
        }
    }

    private func dataEvent(_ event: DataChannelEndpoint.Event, from sender: Participant) {
        guard case .message(let channel, let data, let binary) = event else { return }
        context.counters.dataMessagesIn += 1
        context.counters.dataBytesIn += data.count
        let nowNs = context.monotonicClock()
        let screenShare: Bool = if case .screenShare = sender.kind { true } else { false }
        guard data.count <= configuration.limits.maxDataMessageBytes, sender.grants.maySendData(screenShare: screenShare),
              sender.dataMessages?.take(1, nowNs: nowNs) != false, sender.dataBytes?.take(Double(data.count), nowNs: nowNs) != false
        else {
            context.counters.dataMessagesDropped += 1
            return
        }
        // Three kinds of peer: SDK clients that frame messages as our envelope, LiveKit's clients
        // that frame them as its DataPacket (both on `_reliable` and `_lossy`), and plain data
        // channel peers. The sender is the server's to write, destinations choose the receivers,
        // and a message reaches each receiver in its own framing: a plain peer's wrapped (its
        // label as the topic), a framed one unwrapped for a plain peer (on the channel labelled
        // with the topic). LiveKit packets other than user data (RPC, streams) reach only LiveKit's
        // clients, untouched but for the sender.
        let fromSDK = DataEnvelope.isEnvelopeLabel(channel.parameters.label)
        let message: RelayedData
        do { message = try RelayedData(data, framedBy: fromSDK ? sender.dataFraming : nil, label: channel.parameters.label, sender: sender) } catch {
            context.counters.dataMessagesDropped += 1
            return
        }
        // An ack or answer to one of the server's own RPCs goes no further.
        if !pendingRPCs.isEmpty, let packet = message.packet, takeRPCReply(packet, from: sender) { return }
        // The kind is the channel's (LiveKit's clients write an inverted `kind` in their packets).
        deliver(message, reliable: channel.parameters.reliability == .reliable, channel: channel.parameters, fromSDK: fromSDK,
                binary: binary, in: sender.room, except: sender)
    }

    /// Relays one message to the room's participants (its destinations, when it names some) other
    /// than `sender`, each in its own framing, on a channel like `channel` (a framed message for a
    /// plain peer goes on the channel labelled with its topic). Returns how many it was sent to.
    @discardableResult
    func deliver(_ message: RelayedData, reliable: Bool, channel: DCEPMessage.DataChannelParameters, fromSDK: Bool, binary: Bool, in room: Room,
                 except sender: Participant?) -> Int {
        let destinations = message.destinations.isEmpty ? nil : Set(message.destinations)
        var framed: [DataFraming: [UInt8]] = [:]
        var sent = 0
        // Made once for every receiver (what a receiver whose channels are not up keeps).
        let outgoing = OutgoingData(message: message, reliable: reliable, channel: channel, fromSDK: fromSDK, binary: binary,
                                    atNs: context.monotonicClock())
        for receiver in room.participants.values where receiver !== sender {
            if let destinations, !destinations.contains(receiver.uid) { continue }
            guard let endpoint = receiver.publisher?.dataChannels, endpoint.isConnected, receiver.dataReady else {
                // Its data channels are not up yet (it joined a moment ago, or they are coming):
                // a reliable message waits for them, lossy ones go (as the channel allows).
                if reliable, receiver.publisher?.dataChannels != nil || clock() - receiver.joinedAt <= 10 { hold(outgoing, for: receiver) }
                continue
            }
            if send(outgoing, to: receiver, on: endpoint, framed: &framed) { sent += 1 }
        }
        return sent
    }

    /// One message on its way to one receiver whose data channels are up, in its framing (cached
    /// in `framed` across receivers). False when it was not sent: nothing it can read, too large.
    private func send(_ outgoing: OutgoingData, to receiver: Participant, on endpoint: DataChannelEndpoint,
                      framed: inout [DataFraming: [UInt8]]) -> Bool {
        let message = outgoing.message, reliable = outgoing.reliable
        let toSDK = endpoint.openChannels.contains { DataEnvelope.isEnvelopeLabel($0.parameters.label) }
        let framing: DataFraming? = toSDK ? receiver.dataFraming : nil
        let encoded: [UInt8]?
        if let framing {
            if framed[framing] == nil { framed[framing] = message.framed(framing, reliable: reliable) }
            encoded = framed[framing].flatMap { $0.isEmpty ? nil : $0 }
        } else {
            encoded = message.payload
        }
        // Nothing this receiver can read (a LiveKit RPC for one of our clients).
        guard let bytes = encoded else { return false }
        guard receiver.dataMaxMessageSize == 0 || bytes.count <= receiver.dataMaxMessageSize else {
            context.counters.dataMessagesDropped += 1
            return false
        }
        var parameters = outgoing.channel
        if toSDK {
            parameters = reliable ? DataEnvelope.reliableChannel : DataEnvelope.lossyChannel
        } else if outgoing.fromSDK {
            parameters.label = message.topic.isEmpty ? outgoing.channel.label : message.topic
        }
        do {
            let stream = try endpoint.channel(labelled: parameters.label)?.stream ?? endpoint.open(parameters)
            relay(bytes, binary: toSDK || outgoing.binary, on: stream, reliable: parameters.reliability == .reliable, to: receiver, endpoint: endpoint)
            return true
        } catch {
            context.counters.dataMessagesDropped += 1
            return false
        }
    }

    /// Keeps a reliable message for a receiver whose data channels are not up yet (at most
    /// ``Participant/maxDataPendingBytes``, for ``Participant/dataPendingMaxAgeNs``); past that it
    /// is dropped, counted when the receiver has data channels coming (negotiated).
    private func hold(_ outgoing: OutgoingData, for receiver: Participant) {
        // A LiveKit packet other than user data (an RPC) is counted at a typical size, not encoded here.
        let size = outgoing.message.payload?.count ?? 256
        while let first = receiver.dataPending.first, outgoing.atNs &- first.atNs > Participant.dataPendingMaxAgeNs {
            receiver.dataPending.removeFirst()
            receiver.dataPendingBytes -= first.size
            if receiver.publisher?.dataChannels != nil { context.counters.dataMessagesDropped += 1 }
        }
        guard receiver.dataPendingBytes + size <= Participant.maxDataPendingBytes else {
            if receiver.publisher?.dataChannels != nil { context.counters.dataMessagesDropped += 1 }
            return
        }
        var held = outgoing
        held.size = size
        receiver.dataPending.append(held)
        receiver.dataPendingBytes += size
    }

    /// `participant`'s data channels take messages now: what waited for them goes, in order (the
    /// expired dropped and counted).
    func dataBecameReady(_ participant: Participant) {
        guard !participant.dataReady, directory.contains(participant), let endpoint = participant.publisher?.dataChannels, endpoint.isConnected
        else { return }
        participant.dataReady = true
        let waiting = participant.dataPending
        participant.dataPending = []
        participant.dataPendingBytes = 0
        let now = context.monotonicClock()
        for outgoing in waiting {
            guard now &- outgoing.atNs <= Participant.dataPendingMaxAgeNs else {
                context.counters.dataMessagesDropped += 1
                continue
            }
            var framed: [DataFraming: [UInt8]] = [:]
            _ = send(outgoing, to: participant, on: endpoint, framed: &framed)
        }
    }

    /// Sends on a receiver's channel. A reliable message its SCTP send buffer cannot take now
    /// waits (in order, at most ``Participant/maxDataBacklogBytes``) and is sent as the buffer
    /// drains; a lossy one is dropped, as the channel allows.
    private func relay(_ bytes: [UInt8], binary: Bool, on stream: UInt16, reliable: Bool, to receiver: Participant, endpoint: DataChannelEndpoint) {
        if receiver.dataBacklog.isEmpty {
            do {
                try endpoint.send(bytes, binary: binary, on: stream)
                context.counters.dataMessagesOut += 1
                return
            } catch where !error.isTooLarge && reliable {
                // Full: waits below.
            } catch {
                context.counters.dataMessagesDropped += 1
                return
            }
        } else if !reliable {
            context.counters.dataMessagesDropped += 1
            return
        }
        guard receiver.dataBacklogBytes + bytes.count <= Participant.maxDataBacklogBytes else {
            context.counters.dataMessagesDropped += 1
            return
        }
        receiver.dataBacklog.append((bytes, binary, stream))
        receiver.dataBacklogBytes += bytes.count
        scheduleDataRetry(receiver, endpoint: endpoint)
    }

    private func scheduleDataRetry(_ receiver: Participant, endpoint: DataChannelEndpoint) {
        guard !receiver.dataRetryScheduled else { return }
        receiver.dataRetryScheduled = true
        loop.scheduleTask(in: .milliseconds(5)) { [weak self, weak receiver] in
            guard let self, let receiver else { return }
            receiver.dataRetryScheduled = false
            guard self.directory.contains(receiver), receiver.publisher?.dataChannels === endpoint else {
                receiver.dataBacklog.removeAll()
                receiver.dataBacklogBytes = 0
                return
            }
            while let next = receiver.dataBacklog.first {
                do {
                    try endpoint.send(next.bytes, binary: next.binary, on: next.stream)
                    self.context.counters.dataMessagesOut += 1
                } catch let error as DataChannelEndpoint.Error where error.isTooLarge {
                    self.context.counters.dataMessagesDropped += 1
                } catch {
                    return self.scheduleDataRetry(receiver, endpoint: endpoint)
                }
                receiver.dataBacklog.removeFirst()
                receiver.dataBacklogBytes -= next.bytes.count
            }
        }
    }
}

/// A message for one receiver, as ``SFU/deliver`` was asked to send it (kept while the
/// receiver's data channels are not up).
struct OutgoingData {
    let message: RelayedData
    let reliable: Bool
    let channel: DCEPMessage.DataChannelParameters
    let fromSDK: Bool
    let binary: Bool
    /// When it was relayed (monotonic ns).
    let atNs: UInt64
    /// Its bytes, counted against the receiver's bound while it waits.
    var size = 0
}

/// One data channel message on its way through the relay, read once in the sender's framing:
/// who it is for, and the payload and topic when it is user data.
struct RelayedData {
    let destinations: [String]
    let topic: String
    /// The user data, for plain peers and our envelope; nil for LiveKit packets of other kinds.
    let payload: [UInt8]?
    /// A LiveKit packet as it came, with the sender stamped (kept whole for LiveKit's clients).
    let packet: LKDataPacket?
    let sender: String
    let senderSid: String

    struct Unreadable: Error {}

    /// A message from the server itself (the API's `SendData`): no sender.
    init(serverPayload: [UInt8], topic: String, destinations: [String]) {
        self.destinations = destinations
        self.topic = topic
        payload = serverPayload
        packet = nil
        sender = ""
        senderSid = ""
    }

    /// A LiveKit packet from the server itself (an RPC request): for LiveKit's clients only.
    init(serverPacket: LKDataPacket, destinations: [String]) {
        self.destinations = destinations
        topic = ""
        payload = nil
        packet = serverPacket
        sender = serverPacket.participantIdentity
        senderSid = ""
    }

    /// `framing` nil: a plain peer's message (its label is the topic).
    init(_ data: [UInt8], framedBy framing: DataFraming?, label: String, sender: Participant) throws {
        self.sender = sender.uid
        senderSid = sender.sid
        switch framing {
        case nil:
            destinations = []
            topic = label
            payload = data
            packet = nil
        case .envelope:
            guard let envelope = try? DataEnvelope(parsing: data) else { throw Unreadable() }
            destinations = envelope.destinations
            topic = envelope.topic
            payload = envelope.payload
            packet = nil
        case .liveKit:
            guard let parsed = LiveKitData.packet(data) else { throw Unreadable() }
            let stamped = LiveKitData.stamped(parsed, sender: sender.uid, senderSid: sender.sid)
            destinations = LiveKitData.destinations(of: stamped)
            let user = LiveKitData.userPayload(of: stamped)
            topic = user?.topic ?? ""
            payload = user?.payload
            packet = stamped
        }
    }

    /// The message in a receiver's framing; empty when it has none there.
    func framed(_ framing: DataFraming, reliable: Bool) -> [UInt8] {
        switch framing {
        case .envelope:
            guard let payload else { return [] }
            return DataEnvelope(topic: topic, destinations: destinations, sender: sender, payload: payload).serialized
        case .liveKit:
            if let packet { return LiveKitData.serialized(packet) }
            guard let payload else { return [] }
            return LiveKitData.serialized(LiveKitData.user(payload: payload, topic: topic, sender: sender, senderSid: senderSid, reliable: reliable))
        }
    }
}
