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
            participant.dataMessages = TokenBucket(ratePerSecond: limits.dataMessagesPerSecond, burst: limits.dataMessagesPerSecond * 2)
            participant.dataBytes = TokenBucket(ratePerSecond: limits.dataBytesPerSecond, burst: limits.dataBytesPerSecond * 2)
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
        guard data.count <= configuration.limits.maxDataMessageBytes,
              sender.dataMessages?.take(1, nowNs: nowNs) != false, sender.dataBytes?.take(Double(data.count), nowNs: nowNs) != false
        else {
            context.counters.dataMessagesDropped += 1
            return
        }
        for receiver in sender.room.participants.values where receiver !== sender {
            guard let endpoint = receiver.publisher?.dataChannels, endpoint.isConnected else { continue }
            guard receiver.dataMaxMessageSize == 0 || data.count <= receiver.dataMaxMessageSize else {
                context.counters.dataMessagesDropped += 1
                continue
            }
            do {
                let stream = try endpoint.channel(labelled: channel.parameters.label)?.stream ?? endpoint.open(channel.parameters)
                try endpoint.send(data, binary: binary, on: stream)
                context.counters.dataMessagesOut += 1
            } catch {
                context.counters.dataMessagesDropped += 1
            }
        }
    }
}
