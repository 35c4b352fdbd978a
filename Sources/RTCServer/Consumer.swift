import NIOCore
import RTCTransport

/// The subscriber side of the packet path (mediasoup's Consumer): what a subscriber's RTCP asks
/// of the server. NACKs are answered from the publisher's cache (as RFC 4588 repairs where the
/// subscriber accepted them) within the leg's retransmission budget; PLI and FIR become keyframe
/// requests to the publisher, at most one per track per interval; transport-wide feedback feeds
/// the leg's estimate. The state is the subscriber's (``Participant/downstream``, its
/// ``Subscription``s) and the track's keyframe throttle. On the SFU's event loop.
final class Consumer: @unchecked Sendable {
    private let context: SFUContext
    private let terminator: RTCPTerminator
    /// Picks layers again at once for a leg whose estimate just fell (``LayerController``).
    weak var layers: LayerController?

    init(context: SFUContext, terminator: RTCPTerminator) {
        self.context = context
        self.terminator = terminator
    }

    /// One RTCP compound packet from `subscriber`'s transport.
    func receivedRTCP(_ datagram: ByteBuffer, from subscriber: Participant, nowUs: Int64) {
        guard let packets = try? RTCPPacket.parseCompound(datagram) else { return }
        for packet in packets {
            switch packet {
            case .pictureLossIndication(let pli):
                if let subscription = subscriber.subscriptions.first(where: { $0.rewriter.outputSSRC == pli.mediaSSRC }) {
                    requestKeyframe(for: subscription, nowUs: nowUs)
                }
            case .fullIntraRequest(let fir):
                for entry in fir.entries {
                    if let subscription = subscriber.subscriptions.first(where: { $0.rewriter.outputSSRC == entry.ssrc }) {
                        requestKeyframe(for: subscription, nowUs: nowUs)
                    }
                }
            case .transportFeedback(let feedback):
                context.counters.downstreamFeedback += 1
                subscriber.downstream.received(feedback, nowUs: nowUs, rttMs: 100)
                // A leg being paced: the pace follows what the leg now measures (``LegPacer/retune(to:)``).
                for subscription in subscriber.subscriptions {
                    guard let pacer = subscription.pacer, pacer.keyframeSent, let stream = subscription.currentStream else { continue }
                    let layer = pacer.layerBps(measured: stream.rate.costBitsPerSecond(nowUs: nowUs), nowUs: nowUs)
                    pacer.retune(to: Producer.pacingRate(subscription, nowUs: nowUs, layerBps: layer))
                }
                // A leg that just lost capacity: its publishers hear it now, not within the second.
                if context.configuration.publisherLimitFloorKbps != nil, let estimate = subscriber.downstream.estimateBps(nowUs: nowUs),
                   estimate < 0.9 * (subscriber.downstream.reportedBps ?? .infinity) {
                    terminator.sendPublisherLimits(nowUs: nowUs)
                }
                // ... and its layers are picked again now, not at the next tick (up to 250 ms later).
                if let estimate = subscriber.downstream.estimateBps(nowUs: nowUs),
                   estimate < 0.85 * (subscriber.downstream.layersChosenAtBps ?? .infinity) {
                    context.logger.debug("leg estimate fell", metadata: [
                        "uid": "\(subscriber.uid)", "estimate": "\(Int(estimate))", "atMs": "\(nowUs / 1000)",
                        "queueMs": "\(Int(subscriber.downstream.estimator.queueDelayMs))", "usage": "\(subscriber.downstream.estimator.usage)",
                    ])
                    layers?.updateAll(of: subscriber, nowUs: nowUs)
                }
            case .nack(let nack):
                context.counters.nacksReceived += 1
                guard let subscription = subscriber.subscriptions.first(where: { $0.rewriter.outputSSRC == nack.mediaSSRC }) else { continue }
                repair(nack.lostSequenceNumbers, on: subscription, nowUs: nowUs)
            default:
                break
            }
        }
    }

    /// Sends again what a subscriber NACKed, from the track's cache, while the leg's budget lasts.
    private func repair(_ lost: [UInt16], on subscription: Subscription, nowUs: Int64) {
        let subscriber = subscription.subscriber
        guard let session = subscriber.subscriber else { return }
        var skippedLayer = 0, skippedBudget = 0, missing = 0, recent = 0, sent = 0
        defer {
            context.logger.debug("nack", metadata: [
                "uid": "\(subscriber.uid)", "lost": "\(lost.count)", "repaired": "\(sent)", "otherLayer": "\(skippedLayer)",
                "overBudget": "\(skippedBudget)", "uncached": "\(missing)", "recent": "\(recent)", "atMs": "\(nowUs / 1000)",
            ])
        }
        for sequence in lost {
            let source = subscription.rewriter.source(of: sequence)
            // Only the layer forwarded now is repaired: what was sent of another one came before
            // the keyframe of this one (a switch happens at a keyframe), and the decoder needs
            // nothing from before a keyframe. A layer being left for a narrowed link is not
            // repaired either: its repairs would queue ahead of the smaller layer's keyframe.
            if source.layer != subscription.currentLayer || subscription.shedsCurrentLayer {
                context.counters.retransmissionsSkipped += 1
                skippedLayer += 1
                continue
            }
            guard !subscription.repairs.repairedLately(sequence, nowUs: nowUs, holdUs: RepairHistory.holdUs(queueDelayMs: subscriber.downstream.estimator.queueDelayMs)) else {
                context.counters.retransmissionsSkipped += 1
                recent += 1
                continue
            }
            guard var packet = subscription.packetAsSent(sequence) else {
                missing += 1
                continue
            }
            // A late packet left out (an upper temporal layer): its number is repaired with padding.
            if subscription.rewriter.isFiller(sequence) { packet = RTPPacket.filler(packet.header) }
            guard subscriber.downstream.mayRetransmit(bytes: packet.payload.readableBytes + 30, nowUs: nowUs) else {
                context.counters.retransmissionsSkipped += 1
                skippedBudget += 1
                continue
            }
            sent += 1
            subscription.repairs.record(sequence, nowUs: nowUs)
            packet = subscription.retransmission(of: packet)
            context.counters.retransmissions += 1
            var out = packet.serialized
            let at = DownstreamCongestion.sequenceOffset(in: packet.header, sourceID: subscriber.downstream.extensionID)
            subscriber.downstream.stamp(&out, at: at, nowUs: nowUs)
            session.sendRTP(out)
        }
    }

    /// A keyframe for what `subscription` needs: the layer it waits to switch to, else the one it gets.
    /// `newSubscriber`: its transport just connected (``Throttle/allow(nowMs:newSubscriber:)``).
    func requestKeyframe(for subscription: Subscription, nowUs: Int64, newSubscriber: Bool = false) {
        let streams = subscription.track.streams
        guard let layer = subscription.targetLayer ?? subscription.currentLayer, layer < streams.count else { return }
        requestKeyframe(subscription.track, stream: streams[layer], nowUs: nowUs, newSubscriber: newSubscriber)
    }

    /// Asks a track's publisher for a keyframe of one of its streams with a PLI, at most once per
    /// interval per stream; requests inside the interval coalesce into one sent when it ends.
    func requestKeyframe(_ track: PublishedTrack, stream: PublishedStream, nowUs: Int64, newSubscriber: Bool = false) {
        guard track.info.kind == .video, let ssrc = stream.ssrc, let session = track.owner.publisher else { return }
        let nowMs = nowUs / 1000
        guard stream.keyframeThrottle.allow(nowMs: nowMs, newSubscriber: newSubscriber) else {
            context.counters.keyframeRequestsThrottled += 1
            // Coalesce: one request goes out when the window ends, so a subscriber that asked
            // inside it (a new one, most often) is not left waiting for its own retry.
            if !stream.keyframeRequestDeferred {
                stream.keyframeRequestDeferred = true
                let owner = track.owner
                context.loop.scheduleTask(in: .milliseconds(stream.keyframeThrottle.waitMs(nowMs: nowMs) + 1)) {
                    [weak self, weak track, weak stream, weak owner] in
                    guard let self, let track, let stream, let owner, owner.tracks.contains(where: { $0 === track }),
                          track.streams.contains(where: { $0 === stream })
                    else { return }
                    stream.keyframeRequestDeferred = false
                    self.requestKeyframe(track, stream: stream, nowUs: self.context.nowUs)
                }
            }
            return
        }
        context.counters.keyframeRequestsForwarded += 1
        context.logger.debug("keyframe requested", metadata: ["ssrc": "\(ssrc)", "new": "\(newSubscriber)", "atMs": "\(nowMs)"])
        session.sendRTCP(RTCPCompound.pictureLoss(sender: context.serverSSRC, media: ssrc))
    }
}

extension Subscription {
    /// Output packet `output` as this subscriber was first sent it, rebuilt from its track's
    /// cache (the segment it went out in gives its sequence number, timestamp, picture id and
    /// TL0PICIDX); nil when the cache no longer holds it. The one way a packet is sent again, for
    /// repairs and for a probe's padding alike: a copy rewritten any other way reaches the
    /// subscriber as a different packet under the same number.
    func packetAsSent(_ output: UInt16) -> RTPPacket? {
        let source = rewriter.source(of: output)
        guard source.layer < track.streams.count, var packet = track.streams[source.layer].cache.packet(source.sequence) else { return nil }
        _ = Producer.renumber(&packet.header, for: subscriber, sequenceAt: nil)
        let segment = rewriter.rewriteRepair(&packet.header, output: output)
        if track.isSimulcast, let layout = VP8DescriptorLayout(payload: packet.payload) {
            let picture = layout.pictureID(inPayload: packet.payload).map { ($0 &+ segment.pictureIDOffset) & 0x7FFF }
            let tl0 = layout.tl0PictureIndex(inPayload: packet.payload).map { $0 &+ segment.tl0Offset }
            layout.write(pictureID: picture, tl0: tl0, into: &packet.payload, payloadStart: packet.payload.readerIndex)
        }
        return packet
    }

    /// `packet` (from ``packetAsSent(_:)``) as sent again: on the RTX stream when the subscriber
    /// negotiated one (RFC 4588), else as it is.
    func retransmission(of packet: RTPPacket) -> RTPPacket {
        guard let payloadType = rtxPayloadType else { return packet }
        defer { rtxSequence &+= 1 }
        return RTXPacket.wrap(packet, ssrc: rtxSSRC, payloadType: payloadType, sequenceNumber: rtxSequence)
    }
}
