import Logging
import RTCTransport

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
                self.dataEvent(event, from: participant)
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
        // Two kinds of receiver: SDK clients, which opened the envelope channels (`_reliable`,
        // `_lossy`), and plain data channel peers. An envelope's sender is the server's to write
        // and its destinations choose the receivers; a plain peer's message reaches an SDK client
        // wrapped (its label as the topic), and an envelope reaches a plain peer unwrapped, on its
        // channel labelled with the topic (or the sender's label).
        let fromSDK = DataEnvelope.isEnvelopeLabel(channel.parameters.label)
        var envelope: DataEnvelope
        if fromSDK {
            guard let parsed = try? DataEnvelope(parsing: data) else {
                context.counters.dataMessagesDropped += 1
                return
            }
            envelope = parsed
        } else {
            envelope = DataEnvelope(topic: channel.parameters.label, payload: data)
        }
        envelope.sender = sender.uid
        let destinations = envelope.destinations.isEmpty ? nil : Set(envelope.destinations)
        let reliable = channel.parameters.reliability == .reliable
        let wrapped = envelope.serialized
        for receiver in sender.room.participants.values where receiver !== sender {
            if let destinations, !destinations.contains(receiver.uid) { continue }
            guard let endpoint = receiver.publisher?.dataChannels, endpoint.isConnected else { continue }
            let toSDK = endpoint.openChannels.contains { DataEnvelope.isEnvelopeLabel($0.parameters.label) }
            let bytes = toSDK ? wrapped : envelope.payload
            guard receiver.dataMaxMessageSize == 0 || bytes.count <= receiver.dataMaxMessageSize else {
                context.counters.dataMessagesDropped += 1
                continue
            }
            var parameters = channel.parameters
            if toSDK {
                parameters = reliable ? DataEnvelope.reliableChannel : DataEnvelope.lossyChannel
            } else if fromSDK {
                parameters.label = envelope.topic.isEmpty ? channel.parameters.label : envelope.topic
            }
            do {
                let stream = try endpoint.channel(labelled: parameters.label)?.stream ?? endpoint.open(parameters)
                try endpoint.send(bytes, binary: toSDK || binary, on: stream)
                context.counters.dataMessagesOut += 1
            } catch {
                context.counters.dataMessagesDropped += 1
            }
        }
    }
}
