import NIOCore
import RTCTransport
import Signaling

/// Simulcast on the SFU's side, run on its timer (every 250 ms) and on requests:
/// - picks each subscription's layer (``LayerSelector``) from the subscriber's request, its leg's
///   estimate and the layers being sent, and asks the publisher for a keyframe of a layer a
///   subscription waits to switch to (the switch itself happens in ``Producer`` at that keyframe);
/// - probes a leg whose estimate holds a subscriber below what it asked for, one layer up at a
///   time (``LegProbe``): a second of RFC 4588 copies of recent packets on top of its media,
///   so the estimate can grow past what the leg is being sent (without it a leg moved to a small
///   layer would stay there: it only ever sees the small rate);
/// - tells each publisher which layers some subscriber wants (dynacast); the others it pauses after
///   a grace period, and starts again as soon as one is wanted.
/// On the SFU's event loop.
final class LayerController: @unchecked Sendable {
    private let context: SFUContext
    private let directory: RoomDirectory
    private let consumer: Consumer

    init(context: SFUContext, directory: RoomDirectory, consumer: Consumer) {
        self.context = context
        self.directory = directory
        self.consumer = consumer
    }

    /// How often a leg held below its request is probed (at first, and at most after failed
    /// probes), how long a probe lasts and how often it sends padding.
    static let probeIntervalUs: Int64 = 2_000_000
    static let maxProbeIntervalUs: Int64 = 4_000_000
    /// A second: the later half of a probe must come after whatever a token bucket lets through
    /// at once (16 kB is common), so that it arrives at the path's own rate.
    static let probeDurationMs = 1000
    static let probeBurstMs = 20
    /// What a new subscriber's first layer must fit before its leg has an estimate.
    static let startBudgetBps = 1_000_000.0
    /// How long a layer nobody wants keeps being sent before the publisher is told to pause it.
    static let pauseGraceUs: Int64 = 2_000_000

    func tick(nowUs: Int64) {
        for participant in directory.allParticipants {
            participant.downstream.layersChosenAtBps = participant.downstream.estimateBps(nowUs: nowUs)
            var neededBps = 0.0
            for subscription in participant.subscriptions where subscription.track.hasLayers {
                neededBps += update(subscription, nowUs: nowUs)
            }
            if neededBps > 0 { probeIfDue(participant, neededBps: neededBps, nowUs: nowUs) }
        }
        for participant in directory.allParticipants {
            for track in participant.tracks where track.isSimulcast { dynacast(track, nowUs: nowUs) }
        }
    }

    /// Picks `subscription`'s layer now; returns the extra bits per second its leg would need for
    /// the layer it asked for when the estimate holds it lower (0 otherwise).
    @discardableResult
    func update(_ subscription: Subscription, nowUs: Int64) -> Double {
        let track = subscription.track
        if !track.isSimulcast { return updateTemporal(subscription, nowUs: nowUs) }
        let layers = track.streams.enumerated().map { $1.layerState(index: $0, nowUs: nowUs) }
        let request = subscription.subscriber.videoPreference(for: track.owner.uid)
        // A leg with no feedback yet starts from what a browser's estimate starts at, not from
        // the full layer: a path that cannot carry it would be flooded before it says so.
        let budget = RTCPTerminator.videoShare(of: subscription.subscriber, nowUs: nowUs)
            ?? (subscription.currentLayer == nil ? Self.startBudgetBps : nil)
        let upBudget = RTCPTerminator.share(of: subscription.subscriber.downstream.upSwitchBps(nowUs: nowUs), for: subscription.subscriber)
        guard let selected = LayerSelector.select(layers, request: request, budgetBps: budget, upBudgetBps: upBudget,
                                                  current: subscription.currentLayer)
        else { return 0 }
        var index = selected.index
        let reason = selected.reason
        // A move down on a leg that queues (its link just narrowed): straight to the smallest layer,
        // whose keyframe is the quickest through the narrowed link (a step to a middle layer costs
        // a keyframe of it and often a second step down), and the current layer stops at once
        // rather than at that keyframe: each packet more of it only lengthens the queue the
        // keyframe waits behind. The leg climbs back by probes. Measured through a 400 kbit/s tbf
        // with 300 ms of queue (`SimulcastNetworkTests.cappedViewer`).
        let ranked = LayerSelector.ranked(layers)
        let rank = { (layer: Int?) in ranked.firstIndex { $0.index == layer } }
        let downward = rank(index).map { at in rank(subscription.currentLayer).map { at < $0 } ?? false } ?? false
        let congested = downward && reason == .estimate && subscription.subscriber.downstream.isCongested
        if congested, let smallest = ranked.first(where: \.selectable) {
            index = smallest.index
        }
        if index == subscription.currentLayer {
            subscription.shedsCurrentLayer = false
        } else if congested {
            subscription.shedsCurrentLayer = true
        }
        let reasonChanged = reason != subscription.layerReason
        subscription.layerReason = reason
        // What it would get if every layer were sent: dynacast keeps that layer wanted, so a layer
        // the publisher stopped on its own (its uplink) comes back when it can.
        let everyLayer = layers.map { layer in var layer = layer; layer.selectable = true; return layer }
        subscription.desiredLayer = LayerSelector.select(everyLayer, request: request, budgetBps: budget, upBudgetBps: upBudget,
                                                         current: subscription.currentLayer)?.index
        if index != subscription.targetLayer {
            context.logger.debug("layer target", metadata: [
                "uid": "\(subscription.subscriber.uid)", "layer": "\(index)", "reason": "\(reason)", "budget": "\(budget.map { Int($0) } ?? -1)",
                "atMs": "\(nowUs / 1000)", "congested": "\(congested)",
                "up": "\(upBudget.map { Int($0) } ?? -1)",
                "layers": "\(layers.map { "\($0.index):\($0.width ?? 0)x\($0.height ?? 0)@\(Int($0.bitrateBps / 1000))\($0.selectable ? "" : "-")" })",
            ])
            subscription.targetLayer = index
            subscription.targetSinceUs = index == subscription.currentLayer ? nil : nowUs
        }
        if index != subscription.currentLayer {
            // A layer paused for want of viewers is asked back now, not at the next tick.
            if track.streams[index].pausedByServer { dynacast(track, nowUs: nowUs) }
            consumer.requestKeyframe(track, stream: track.streams[index], nowUs: nowUs)  // throttled per stream
        } else if reasonChanged {
            subscription.announceLayer()
        }
        guard reason == .estimate, budget != nil else { return 0 }
        // What the next layer up (towards the one asked for) would add to the leg: probes go one
        // layer at a time, so a capped leg is never flooded with what the full layer needs.
        guard let at = rank(index),
              let next = ranked[(at + 1)...].first(where: { $0.selectable && $0.bitrateBps > 0 })
        else { return 0 }
        return max(0, next.bitrateBps * LayerSelector.upHeadroom - (subscription.currentStream?.rate.lastBitsPerSecond ?? 0))
    }

    /// A single stream with temporal layers: the base layer alone for a subscriber that asks for
    /// `.low` or whose budget is under the whole stream's rate, all of it again once a probe vouches
    /// for the whole rate with 15 % to spare. Returns what the leg would need beyond its budget.
    private func updateTemporal(_ subscription: Subscription, nowUs: Int64) -> Double {
        let stream = subscription.track.streams[0]
        let full = stream.rate.costBitsPerSecond(nowUs: nowUs), base = stream.baseRate.costBitsPerSecond(nowUs: nowUs)
        let subscriber = subscription.subscriber
        let budget = RTCPTerminator.videoShare(of: subscriber, nowUs: nowUs)
        let upBudget = RTCPTerminator.share(of: subscriber.downstream.upSwitchBps(nowUs: nowUs), for: subscriber)
        let baseOnly: Bool, reason: LayerReason
        if subscriber.videoPreference(for: subscription.track.owner.uid).streamType == .low {
            (baseOnly, reason) = (true, .request)
        } else if let budget, full > 0 {
            let held = subscription.wantsBaseLayerOnly && subscription.layerReason == .estimate
            let fits = held ? full * LayerSelector.upHeadroom <= min(budget, upBudget ?? budget) : full <= budget
            (baseOnly, reason) = fits ? (false, .request) : (true, .estimate)
        } else {
            (baseOnly, reason) = (false, .request)
        }
        if baseOnly != subscription.wantsBaseLayerOnly || reason != subscription.layerReason {
            subscription.wantsBaseLayerOnly = baseOnly
            subscription.layerReason = reason
            if (subscription.maxTemporalLayer == 0) == baseOnly { subscription.announceLayer() }
        }
        guard baseOnly, reason == .estimate else { return 0 }
        return max(0, full * LayerSelector.upHeadroom - base)
    }

    /// Runs ``update(_:nowUs:)`` for every layered subscription of `participant` (its request changed).
    func updateAll(of participant: Participant, nowUs: Int64) {
        participant.downstream.layersChosenAtBps = participant.downstream.estimateBps(nowUs: nowUs)
        for subscription in participant.subscriptions where subscription.track.hasLayers { update(subscription, nowUs: nowUs) }
    }

    // MARK: Probing

    private func probeIfDue(_ participant: Participant, neededBps: Double, nowUs: Int64) {
        participant.downstream.abandonProbe(nowUs: nowUs)
        // A probe that found what it looked for probes again soon; one that did not, less and less often.
        if participant.downstream.probe == nil, let last = participant.downstream.lastProbe, participant.probeOutcomeSeen != participant.lastProbeUs {
            participant.probeOutcomeSeen = participant.lastProbeUs
            let found = (last.measuredBps ?? 0) >= 0.9 * last.targetBps
            context.logger.debug("leg probe", metadata: [
                "uid": "\(participant.uid)", "target": "\(Int(last.targetBps))", "measured": "\(last.measuredBps.map { Int($0) } ?? -1)",
            ])
            // Found: the next layer up is probed for at once (a lifted cap is climbed layer by layer in seconds).
            participant.probeIntervalUs = found ? 0 : min(2 * max(participant.probeIntervalUs, Self.probeIntervalUs / 2), Self.maxProbeIntervalUs)
        }
        guard nowUs - (participant.lastProbeUs ?? .min / 2) >= participant.probeIntervalUs else { return }
        guard participant.downstream.mayProbe(nowUs: nowUs) else {
            // Once a second at most: why a leg held below its request is not probed.
            if nowUs - (participant.probeHeldLoggedUs ?? .min / 2) >= 1_000_000 {
                participant.probeHeldLoggedUs = nowUs
                let downstream = participant.downstream, estimator = downstream.estimator
                context.logger.debug("leg probe held", metadata: [
                    "uid": "\(participant.uid)", "estimate": "\(downstream.estimateBps(nowUs: nowUs).map { Int($0) } ?? -1)",
                    "usage": "\(estimator.usage)", "queueMs": "\(Int(estimator.queueDelayMs))", "probing": "\(downstream.probe != nil)",
                    "sinceCutMs": "\(estimator.lastDecreaseUs.map { (nowUs - $0) / 1000 } ?? -1)",
                    "sinceFeedbackMs": "\(downstream.lastFeedbackUs.map { (nowUs - $0) / 1000 } ?? -1)", "atMs": "\(nowUs / 1000)",
                ])
            }
            return
        }
        guard let session = participant.subscriber,
              let source = participant.subscriptions.first(where: { $0.rtxPayloadType != nil && $0.currentStream?.newestSequence != nil })
        else { return }
        participant.lastProbeUs = nowUs
        // The leg as it is now, and padding for what the next layer adds (a little over it).
        let sending = participant.subscriptions.reduce(0.0) { sum, subscription in
            subscription.track.info.kind == .audio ? sum + 48_000 : sum + (subscription.currentStream?.rate.lastBitsPerSecond ?? 0)
        }
        let paddingBps = min(1.1 * neededBps, DownstreamCongestion.maximumBps)
        participant.downstream.startProbe(targetBps: sending + paddingBps, durationUs: Int64(Self.probeDurationMs) * 1000, nowUs: nowUs)
        context.counters.legProbes += 1
        let bytesPerBurst = Int(paddingBps * Double(Self.probeBurstMs) / 1000 / 8)
        for burst in 0..<(Self.probeDurationMs / Self.probeBurstMs) {
            context.loop.scheduleTask(in: .milliseconds(Int64(burst * Self.probeBurstMs))) {
                [weak self, weak participant, weak source, weak session] in
                guard let self, let participant, let source, let session, participant.subscriber === session,
                      participant.downstream.continueProbe(nowUs: self.context.nowUs)
                else { return }
                self.sendPadding(bytes: bytesPerBurst, on: source, session: session)
            }
        }
    }

    /// Sends about `bytes` of padding-only packets on `subscription`'s RTX stream (RFC 4588 §4:
    /// no payload, RFC 3550 padding only), each with the leg's transport-wide number: they count
    /// in the leg's probe like its media, and a receiver drops them without looking further.
    /// Copies of the newest packets were sent before: on a paced leg those are still in its
    /// ``LegPacer``, the copies overtook them, and the viewer NACKed everything between (44 at
    /// once with no packet lost, in the collapse tests across namespaces) and froze.
    private func sendPadding(bytes: Int, on subscription: Subscription, session: MediaSession) {
        let subscriber = subscription.subscriber
        guard let payloadType = subscription.rtxPayloadType, let last = subscription.rewriter.lastOutput else { return }
        // One header for the burst (its extension block built once); each packet gets its own
        // RTX sequence number and, when stamped, its transport-wide number.
        var packet = RTPPacket(header: RTPHeader(payloadType: payloadType, sequenceNumber: 0, timestamp: last.timestamp, ssrc: subscription.rtxSSRC),
                               payload: ByteBuffer(), paddingLength: Self.paddingBytes)
        if let id = subscriber.downstream.extensionID { packet.header.setExtension(id: id, data: ByteBuffer(bytes: [0, 0])) }
        let at = DownstreamCongestion.sequenceOffset(in: packet.header, sourceID: subscriber.downstream.extensionID)
        var sent = 0
        while sent < bytes {
            packet.header.sequenceNumber = subscription.rtxSequence
            subscription.rtxSequence &+= 1
            var out = packet.serialized
            subscriber.downstream.stamp(&out, at: at, nowUs: context.nowUs)
            sent += out.readableBytes
            context.counters.bytesOut += out.readableBytes
            session.sendRTP(out)
        }
    }

    /// The most padding one RTP packet can carry (its last byte counts the padding).
    static let paddingBytes: UInt8 = 255

    // MARK: Dynacast

    /// Tells `track`'s publisher which layers to send: those a subscription gets, waits for or would
    /// get were every layer sent (the
    /// smallest when nobody subscribes, so a newcomer starts at once); a layer stops being wanted
    /// only after ``pauseGraceUs``. Only publishers that speak protocol 1.4 are told.
    private func dynacast(_ track: PublishedTrack, nowUs: Int64) {
        guard track.owner.speaksLayers else { return }
        var wanted = Set<Int>()
        for subscription in track.subscriptions where !subscription.declined {
            if let layer = subscription.currentLayer { wanted.insert(layer) }
            if let layer = subscription.targetLayer { wanted.insert(layer) }
            if let layer = subscription.desiredLayer { wanted.insert(layer) }
        }
        if wanted.isEmpty {
            let layers = track.streams.enumerated().map { $1.layerState(index: $0, nowUs: nowUs) }
            if let smallest = layers.min(by: LayerSelector.Layer.smaller) {
                wanted.insert(smallest.index)
            }
        }
        var active: [String] = []
        for (index, stream) in track.streams.enumerated() {
            guard let rid = stream.rid else { continue }
            if wanted.contains(index) {
                track.unwantedSinceUs[rid] = nil
                if stream.pausedByServer {
                    stream.pausedByServer = false
                    stream.resumedAtUs = nowUs
                }
                active.append(rid)
            } else {
                let since = track.unwantedSinceUs[rid] ?? nowUs
                track.unwantedSinceUs[rid] = since
                if nowUs - since >= Self.pauseGraceUs {
                    stream.pausedByServer = true
                } else {
                    active.append(rid)
                }
            }
        }
        guard active != (track.announcedLayers ?? track.streams.compactMap(\.rid)) else { return }
        track.announcedLayers = active
        context.counters.layerPauses += 1
        track.owner.send(.videoLayers(VideoLayersRequest(trackSid: track.info.sid, activeLayers: active)))
    }
}
