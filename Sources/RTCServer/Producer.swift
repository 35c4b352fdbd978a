import NIOCore
import RTCTransport

/// The publisher side of the packet path (mediasoup's Producer): every RTP and RTCP packet a
/// publisher sends arrives here. A packet is recorded (transport-wide arrival, RFC 4588 unwrap,
/// reception statistics, the track's cache, gaps to ask for again) and then sent on every live
/// subscription of its track, rewritten and stamped with the subscriber leg's own transport-wide
/// number. It owns no state of its own: that is the publisher's (``Participant/inbound``, its
/// ``PublishedTrack``s) and the subscriptions'. Runs on the SFU's event loop, synchronously per packet.
final class Producer: @unchecked Sendable {
    private let context: SFUContext
    /// Picks a layer for a subscription that has none yet (its track's first layers just arrived).
    weak var layers: LayerController?

    init(context: SFUContext) { self.context = context }

    /// One RTP datagram from `publisher`: to every subscriber of its track. Each leg's copy is
    /// written into a buffer of a datagram the port already sent (``SharedMediaPort/buffer(minimumCapacity:)``):
    /// no allocation once the port has sent a fan-out's worth.
    func forward(_ datagram: ByteBuffer, from publisher: Participant) {
        let startNs = context.monotonicClock()
        guard var packet = try? RTPPacket(parsing: datagram) else {
            context.counters.packetsDropped += 1
            return
        }
        context.counters.packetsIn += 1
        context.counters.bytesIn += datagram.readableBytes
        let arrivalUs = Int64(startNs / 1000)
        // Every packet with the transport-wide number counts for feedback, probes included.
        var repair = false
        switch publisher.inbound.receive(&packet, arrivalUs: arrivalUs) {
        case .media, .discarded(.unexpectedPayloadType): break  // not the repair stream's format: looked up as media
        case .repair: repair = true
        case .discarded(.padding), .discarded(.malformed):
            context.counters.rtxDropped += 1
            return
        }
        guard let (track, stream) = publisher.stream(ssrc: packet.header.ssrc) ?? unboundStream(for: packet.header, of: publisher) else {
            if !repair { learnRepairStream(packet.header, of: publisher) }
            context.counters.packetsDropped += 1
            return
        }
        // From here on the packet is in the SFU's extension numbering (cache, legs, repairs).
        publisher.upstreamExtensions.apply(to: &packet.header)  // allocates only when something changes
        if repair {
            // RFC 4588: the original, unless it is already here (a probe's copy).
            guard stream.cache.packet(packet.header.sequenceNumber) == nil else {
                context.counters.rtxDropped += 1
                return
            }
            context.counters.rtxRepairs += 1
        }
        if stream.ssrc == nil {
            stream.ssrc = packet.header.ssrc
            if !track.isSimulcast { track.info.ssrc = packet.header.ssrc }
            publisher.refreshRepairStreams()  // its repair stream can be unwrapped now
        }
        if stream.statistics == nil { stream.statistics = ReceptionStatistics(ssrc: packet.header.ssrc, clockRate: track.clockRate) }
        stream.statistics?.record(sequenceNumber: packet.header.sequenceNumber, rtpTimestamp: packet.header.timestamp, arrivalUs: arrivalUs)
        stream.cache.insert(packet, sequence: packet.header.sequenceNumber)
        if track.info.kind == .video {
            stream.nack.received(packet.header.sequenceNumber, nowUs: arrivalUs)
            if stream.nack.missingCount > 0, !context.upstreamGapsOpen {
                context.upstreamGapsOpen = true
                context.onUpstreamGapOpened?()
            }
            // Only while a keyframe request is unanswered, or until the track's size is known (no
            // request announced it): the descriptor is read for those alone.
            if stream.keyframeThrottle.outstanding || (track.info.width == nil && !track.isSimulcast), let layout = VP8DescriptorLayout(payload: packet.payload),
               layout.startsKeyframe {
                stream.keyframeThrottle.answered()
                if track.info.width == nil, !track.isSimulcast, let width = layout.keyframeWidth, let height = layout.keyframeHeight, width > 0, height > 0 {
                    track.info.width = width
                    track.info.height = height
                    context.onTrackSizeLearned?(track)
                }
            }
        }
        guard !track.info.muted else { return }
        // Who speaks: the audio level the publisher wrote (RFC 6464), read in place.
        if track.info.kind == .audio, let level = packet.header.extensionData(id: RTPExtensionID.audioLevel),
           let byte = level.getInteger(at: level.readerIndex, as: UInt8.self) {
            track.levels.record(byte)
        }
        if track.isSimulcast {
            stream.received(bytes: datagram.readableBytes, sequence: packet.header.sequenceNumber, nowUs: arrivalUs)
            sendLayer(&packet, of: track, stream: stream, arrivalUs: arrivalUs)
        } else {
            // A screen's VP8 may carry temporal layers: their upper layer can be left out per subscriber.
            var temporal: (layer: UInt8, startsFrame: Bool)?
            if track.info.kind == .video, track.info.source == .screen || stream.hasTemporalLayers,
               let layout = VP8DescriptorLayout(payload: packet.payload), let layer = layout.temporalLayer {
                temporal = (layer, layout.startsFrame)
                stream.hasTemporalLayers = true
                stream.received(bytes: datagram.readableBytes, sequence: packet.header.sequenceNumber, nowUs: arrivalUs)
                if layer == 0 { stream.baseRate.add(bytes: datagram.readableBytes, nowUs: arrivalUs) }
            }
            send(&packet, of: track, temporal: temporal, arrivalUs: arrivalUs)
        }
        let elapsed = Int64(bitPattern: context.monotonicClock() &- startNs)
        context.counters.recordForward(microseconds: Double(elapsed) / 1000)
    }

    /// The stream a packet from an SSRC no stream has yet belongs to: one of a track of its payload
    /// type, of the section its mid extension names and, for simulcast, of the layer its RFC 8852
    /// stream id names. A section offered without SSRCs is found this way.
    private func unboundStream(for header: RTPHeader, of publisher: Participant) -> (track: PublishedTrack, stream: PublishedStream)? {
        // No array per packet: this runs for every packet of an unknown stream.
        let candidate = { (track: PublishedTrack) in
            track.payloadType == header.payloadType && track.streams.contains { $0.ssrc == nil }
        }
        guard publisher.tracks.contains(where: candidate) else { return nil }
        let mid = publisher.midExtensionID.flatMap { header.extensionData(id: $0) }.map { String(buffer: $0) }
        let rid = publisher.ridExtensionID.flatMap { header.extensionData(id: $0) }.map { String(buffer: $0) }
        for track in publisher.tracks where candidate(track) && (mid == nil || track.info.mid == mid) {
            if track.isSimulcast {
                // A layer is bound by its stream id only (it comes with the first packets).
                guard let rid, let stream = track.streams.first(where: { $0.rid == rid && $0.ssrc == nil }) else { continue }
                return (track, stream)
            }
            return (track, track.streams[0])
        }
        return nil
    }

    /// A repair from an SSRC nobody announced: a simulcast layer's RFC 4588 stream, named by its
    /// repaired stream id (browsers and this SDK list no SSRCs for layers). Bound for what follows;
    /// this repair itself is lost (the subscriber's NACK asks again).
    private func learnRepairStream(_ header: RTPHeader, of publisher: Participant) {
        guard let id = publisher.repairedRidExtensionID, let data = header.extensionData(id: id) else { return }
        let rid = String(buffer: data)
        for track in publisher.tracks where track.isSimulcast && track.rtxPayloadType == header.payloadType {
            guard let stream = track.streams.first(where: { $0.rid == rid }), stream.ssrc != nil,
                  track.stream(rtxSSRC: header.ssrc) == nil
            else { continue }
            stream.rtxSSRC = header.ssrc
            publisher.refreshRepairStreams()
            return
        }
    }

    /// A packet's header in the SFU's numbering as `subscriber`'s leg numbers it (renumbered only
    /// when its answer renumbered or dropped extensions), and where the leg's transport-wide
    /// number goes: `sequenceAt` when nothing changed.
    static func renumber(_ header: inout RTPHeader, for subscriber: Participant,
                         sequenceAt: (id: UInt8, offset: Int)?) -> (id: UInt8, offset: Int)? {
        guard !subscriber.downstreamExtensions.isIdentity, subscriber.downstreamExtensions.apply(to: &header) else { return sequenceAt }
        return DownstreamCongestion.sequenceOffset(in: header, sourceID: subscriber.downstream.extensionID)
    }

    /// Sends `packet` on every live subscription of `track`, but the upper temporal layers of those
    /// held to the base layer (a change of that takes effect at a frame's start).
    private func send(_ packet: inout RTPPacket, of track: PublishedTrack, temporal: (layer: UInt8, startsFrame: Bool)?, arrivalUs: Int64) {
        let original = packet.header
        // The rewrite leaves the extension block alone: one lookup for every leg.
        let sequenceAt = DownstreamCongestion.sequenceOffset(in: original, sourceID: RTPExtensionID.transportWideSequence)
        var wrote = false
        for subscription in track.subscriptions {
            // One strong load of the unowned subscriber per leg (each read of it is an atomic check).
            let subscriber = subscription.subscriber
            guard !subscription.declined, let session = subscriber.subscriber else { continue }
            if let temporal {
                // A late packet (a repair) is placed where it belongs; only the stream's own next
                // frame start may change what is forwarded, and a late one is judged by the cap
                // in force at its place (its frame was forwarded whole or left out whole).
                let position = subscription.rewriter.extended(original.sequenceNumber)
                if temporal.startsFrame, !subscription.rewriter.isLate(position) {
                    let cap: UInt8? = subscription.wantsBaseLayerOnly ? 0 : nil
                    if subscription.temporalCap.set(cap, from: position ?? .min) {
                        context.counters.recordLayerSwitch(up: cap == nil)
                        subscription.announceLayer()
                    }
                }
                if let cap = subscription.temporalCap.cap(at: position ?? .max), temporal.layer > cap {
                    if let hole = subscription.rewriter.drop(input: original.sequenceNumber) {
                        sendFiller(hole, like: original, sequenceAt: sequenceAt, on: subscription, of: subscriber, session: session, nowUs: arrivalUs)
                        wrote = true
                    }
                    continue
                }
            }
            packet.header = original
            let legSequenceAt = Self.renumber(&packet.header, for: subscriber, sequenceAt: sequenceAt)
            guard subscription.rewriter.rewrite(&packet.header) else { continue }
            var out = context.port.buffer(minimumCapacity: packet.serializedSize + SRTPProfile.maxTrailer)
            packet.write(to: &out)
            emit(&out, payloadBytes: packet.payload.readableBytes, on: subscription, of: subscriber, session: session, at: legSequenceAt, nowUs: arrivalUs)
            wrote = true
        }
        // One flush for all subscribers: NIO hands the datagrams to the kernel with one sendmmsg.
        if wrote { context.port.flush() }
    }

    /// Sends a simulcast layer's packet to the subscriptions that forward that layer, and switches
    /// those waiting for it at its keyframe: the output continues one stream (sequence numbers,
    /// timestamps, VP8 picture ids and TL0PICIDX re-based at the switch).
    private func sendLayer(_ packet: inout RTPPacket, of track: PublishedTrack, stream: PublishedStream, arrivalUs: Int64) {
        guard let layer = track.index(of: stream) else { return }
        let layout = track.info.kind == .video ? VP8DescriptorLayout(payload: packet.payload) : nil
        if let layout, layout.startsKeyframe, let width = layout.keyframeWidth, let height = layout.keyframeHeight {
            stream.width = width
            stream.height = height
        }
        let inputPicture = layout?.pictureID(inPayload: packet.payload)
        let inputTL0 = layout?.tl0PictureIndex(inPayload: packet.payload)
        let original = packet.header
        let sequenceAt = DownstreamCongestion.sequenceOffset(in: original, sourceID: RTPExtensionID.transportWideSequence)
        var wrote = false
        for subscription in track.subscriptions {
            // One strong load of the unowned subscriber per leg (each read of it is an atomic check).
            let subscriber = subscription.subscriber
            guard !subscription.declined, let session = subscriber.subscriber else { continue }
            if subscription.targetLayer == nil { layers?.update(subscription, nowUs: arrivalUs) }
            if subscription.currentLayer != layer {
                guard subscription.targetLayer == layer, layout?.startsKeyframe == true else { continue }
                subscription.rewriter.switchSource(to: layer, header: original, pictureID: inputPicture, tl0: inputTL0,
                                                   nowUs: arrivalUs, clockRate: track.clockRate)
                let up = subscription.currentLayer.map { track.streams[$0].rate.lastBitsPerSecond < stream.rate.lastBitsPerSecond } ?? true
                subscription.currentLayer = layer
                subscription.targetSinceUs = nil
                if subscription.shedsCurrentLayer {
                    startPacing(subscription, nowUs: arrivalUs)
                } else if subscription.pacer != nil {
                    endPacing(subscription, session: session, nowUs: arrivalUs)
                }
                subscription.shedsCurrentLayer = false
                context.counters.recordLayerSwitch(up: up)
                context.logger.debug("layer switch", metadata: ["uid": "\(subscription.subscriber.uid)", "layer": "\(layer)", "atMs": "\(arrivalUs / 1000)"])
                subscription.announceLayer()
            } else if subscription.shedsCurrentLayer {
                if let hole = subscription.rewriter.drop(input: original.sequenceNumber) {
                    sendFiller(hole, like: original, sequenceAt: sequenceAt, on: subscription, of: subscriber, session: session, nowUs: arrivalUs)
                    wrote = true
                }
                continue
            }
            packet.header = original
            let legSequenceAt = Self.renumber(&packet.header, for: subscriber, sequenceAt: sequenceAt)
            guard subscription.rewriter.rewrite(&packet.header, nowUs: arrivalUs) else { continue }
            let vp8 = subscription.rewriter.rewriteVP8(pictureID: inputPicture, tl0: inputTL0)
            var out = context.port.buffer(minimumCapacity: packet.serializedSize + SRTPProfile.maxTrailer)
            packet.write(to: &out)
            if let layout, vp8.pictureID != nil || vp8.tl0 != nil {
                layout.write(pictureID: vp8.pictureID, tl0: vp8.tl0, into: &out, payloadStart: out.writerIndex - packet.payload.readableBytes)
            }
            if let pacer = subscription.pacer {
                if !pacer.enqueue(LegPacer.Item(packet: out, payloadBytes: packet.payload.readableBytes, sequenceAt: legSequenceAt)) {
                    context.counters.packetsDropped += 1
                }
                continue
            }
            emit(&out, payloadBytes: packet.payload.readableBytes, on: subscription, of: subscriber, session: session, at: legSequenceAt, nowUs: arrivalUs)
            wrote = true
        }
        if wrote { context.port.flush() }
    }

    /// Paces `subscription` (just moved down to the smallest layer on a leg whose link collapsed)
    /// at a share of what its link delivered lately, until its queue is empty after
    /// ``LegPacer/durationUs`` (or the leg is calm again and nothing waits).
    private func startPacing(_ subscription: Subscription, nowUs: Int64) {
        subscription.pacer?.timer?.cancel()
        let steady = subscription.currentStream?.rate.steadyBitsPerSecond ?? 0
        let pacer = LegPacer(bps: Self.pacingRate(subscription, nowUs: nowUs),
                             steadyLayerBps: steady > 0 ? steady : subscription.currentStream?.rate.costBitsPerSecond(nowUs: nowUs) ?? 0, nowUs: nowUs)
        subscription.pacer = pacer
        context.counters.legPacings += 1
        context.logger.debug("leg paced", metadata: ["uid": "\(subscription.subscriber.uid)", "bps": "\(Int(pacer.bps))", "steadyLayerBps": "\(Int(pacer.steadyLayerBps))", "atMs": "\(nowUs / 1000)"])
        pacer.timer = context.loop.scheduleRepeatedTask(initialDelay: .zero, delay: LegPacer.tick) { [weak self, weak subscription, weak pacer] task in
            guard let self, let subscription, let pacer, subscription.pacer === pacer, let session = subscription.subscriber.subscriber else {
                // The leg is gone: nothing is held for it any more.
                if let subscription, subscription.pacer === pacer { subscription.pacer = nil }
                task.cancel()
                return
            }
            let now = self.context.nowUs
            guard now < pacer.giveUpUs else { return self.endPacing(subscription, session: session, nowUs: now) }
            let sent = pacer.drain(nowUs: now) { item in
                self.emit(&item.packet, payloadBytes: item.payloadBytes, on: subscription, of: subscription.subscriber, session: session, at: item.sequenceAt, nowUs: now)
            }
            if sent > 0 { self.context.port.flush() }
            // Done once nothing waits and the leg is calm, or nothing waits and its time is up.
            if pacer.isEmpty, now - nowUs > 300_000, now >= pacer.untilUs || !subscription.subscriber.downstream.isCongested {
                self.endPacing(subscription, session: session, nowUs: now)
            }
        }
    }

    /// The pace for `subscription` now (``LegPacer/rate(share:layerBps:)``), for a layer of
    /// `layerBps` (by default what the layer it is sent costs now).
    static func pacingRate(_ subscription: Subscription, nowUs: Int64, layerBps: Double? = nil) -> Double {
        let downstream = subscription.subscriber.downstream
        let delivered = min(downstream.estimator.acknowledgedBps ?? .infinity, downstream.estimateBps(nowUs: nowUs) ?? .infinity)
        let share = RTCPTerminator.share(of: LegPacer.share * delivered, for: subscription.subscriber) ?? 0
        let layer = layerBps ?? subscription.currentStream?.rate.costBitsPerSecond(nowUs: nowUs) ?? 0
        return LegPacer.rate(share: share, layerBps: layer)
    }

    /// Ends `subscription`'s pacing: what it holds goes out now, in order, ahead of what follows.
    private func endPacing(_ subscription: Subscription, session: MediaSession, nowUs: Int64) {
        guard let pacer = subscription.pacer else { return }
        subscription.pacer = nil
        pacer.timer?.cancel()
        let sent = pacer.drainAll { item in
            emit(&item.packet, payloadBytes: item.payloadBytes, on: subscription, of: subscription.subscriber, session: session, at: item.sequenceAt, nowUs: nowUs)
        }
        if sent > 0 { context.port.flush() }
        context.logger.debug("leg pacing ended", metadata: ["uid": "\(subscription.subscriber.uid)", "released": "\(sent)", "atMs": "\(nowUs / 1000)"])
    }

    /// Fills output number `hole` of `subscription` with a padding-only packet (RFC 3550 §5.1):
    /// the late packet that had that place was left out, and a receiver that assembles frames in
    /// sequence must not wait for it (repairs of it are padding too, ``StreamRewriter/isFiller(_:)``).
    private func sendFiller(_ hole: UInt16, like original: RTPHeader, sequenceAt: (id: UInt8, offset: Int)?, on subscription: Subscription,
                            of subscriber: Participant, session: MediaSession, nowUs: Int64) {
        var header = original
        let legSequenceAt = Self.renumber(&header, for: subscriber, sequenceAt: sequenceAt)
        header.ssrc = subscription.rewriter.outputSSRC
        if let payloadType = subscription.rewriter.payloadType { header.payloadType = payloadType }
        header.sequenceNumber = hole
        header.timestamp &+= subscription.rewriter.timestampOffset
        let filler = RTPPacket.filler(header)
        var out = context.port.buffer(minimumCapacity: filler.serializedSize + SRTPProfile.maxTrailer)
        filler.write(to: &out)
        context.counters.fillersSent += 1
        // A paced leg: behind the media queued before it, as everything else on that leg.
        if let pacer = subscription.pacer {
            if !pacer.enqueue(LegPacer.Item(packet: out, payloadBytes: 0, sequenceAt: legSequenceAt)) { context.counters.packetsDropped += 1 }
            return
        }
        emit(&out, payloadBytes: 0, on: subscription, of: subscriber, session: session, at: legSequenceAt, nowUs: nowUs)
    }

    /// Counts a rewritten packet for its subscription, stamps the leg's transport-wide number and
    /// queues it (the caller flushes once for all legs).
    private func emit(_ out: inout ByteBuffer, payloadBytes: Int, on subscription: Subscription, of subscriber: Participant, session: MediaSession,
                      at sequenceAt: (id: UInt8, offset: Int)?, nowUs: Int64) {
        subscription.packetsForwarded += 1
        subscription.payloadBytesForwarded += payloadBytes
        subscriber.downstream.stamp(&out, at: sequenceAt, nowUs: nowUs)
        context.counters.packetsOut += 1
        context.counters.bytesOut += out.readableBytes
        session.sendRTPOnLoop(&out, flush: false)
    }

    /// RTCP from `publisher`: its sender reports, for the round-trip fields of our receiver reports,
    /// and passed on to every subscriber that has been sent the stream, on its rewritten clock, so
    /// receivers can place audio and video on the publisher's one clock (lip sync, recordings).
    func receivedRTCP(_ datagram: ByteBuffer, from publisher: Participant, nowUs: Int64) {
        guard let packets = try? RTCPPacket.parseCompound(datagram) else { return }
        var reports: [ObjectIdentifier: (session: MediaSession, reports: [SenderReport])] = [:]
        for case .senderReport(let report) in packets {
            guard let (track, stream) = publisher.stream(ssrc: report.ssrc) else { continue }
            stream.statistics?.recordSenderReport(compactNTP: report.compactNTP, arrivalUs: nowUs)
            guard !track.info.muted, let layer = track.index(of: stream) else { continue }
            // A layered track: each subscriber hears the report of the layer it is sent.
            for subscription in track.subscriptions where subscription.packetsForwarded > 0 && subscription.currentLayer == layer {
                guard let session = subscription.subscriber.subscriber else { continue }
                let translated = subscription.rewriter.rewrite(report, packets: subscription.packetsForwarded,
                                                               octets: subscription.payloadBytesForwarded)
                reports[ObjectIdentifier(session), default: (session, [])].reports.append(translated)
            }
        }
        // One compound per subscriber leg, as the publisher sent them together (audio and video
        // reports of one instant stay together).
        for (session, list) in reports.values {
            session.sendRTCP(RTCPCompound.senderReports(list, cname: publisher.sid))
        }
    }
}
