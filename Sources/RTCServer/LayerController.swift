import NIOCore
import RTCTransport
import Signaling

/// Simulcast on the SFU's side, run on its timer (every 250 ms) and on requests:
/// - picks each subscription's layer (``LayerSelector``) from the subscriber's request, its leg's
///   estimate and the layers being sent, and asks the publisher for a keyframe of a layer a
///   subscription waits to switch to (the switch itself happens in ``Producer`` at that keyframe);
/// - probes a leg whose estimate holds a subscriber below what it asked for: a short cluster of
///   RFC 4588 copies of recent packets, so the estimate can grow past what the leg is being sent
///   (without it a leg moved to a small layer would stay there: it only ever sees the small rate);
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

    /// How often a leg held below its request is probed, and for how long a probe lasts.
    static let probeIntervalUs: Int64 = 2_000_000
    static let probeDurationMs = 80
    static let probeBursts = 8
    /// How long a layer nobody wants keeps being sent before the publisher is told to pause it.
    static let pauseGraceUs: Int64 = 2_000_000

    func tick(nowUs: Int64) {
        for participant in directory.allParticipants {
            var neededBps = 0.0
            for subscription in participant.subscriptions where subscription.track.isSimulcast {
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
        let layers = track.streams.enumerated().map { $1.layerState(index: $0, nowUs: nowUs) }
        let request = subscription.subscriber.videoPreference(for: track.owner.uid)
        let budget = RTCPTerminator.videoShare(of: subscription.subscriber, nowUs: nowUs)
        guard let (index, reason) = LayerSelector.select(layers, request: request, budgetBps: budget, current: subscription.currentLayer)
        else { return 0 }
        let reasonChanged = reason != subscription.layerReason
        subscription.layerReason = reason
        // What it would get if every layer were sent: dynacast keeps that layer wanted, so a layer
        // the publisher stopped on its own (its uplink) comes back when it can.
        let everyLayer = layers.map { layer in var layer = layer; layer.selectable = true; return layer }
        subscription.desiredLayer = LayerSelector.select(everyLayer, request: request, budgetBps: budget, current: subscription.currentLayer)?.index
        if index != subscription.targetLayer {
            subscription.targetLayer = index
            subscription.targetSinceUs = index == subscription.currentLayer ? nil : nowUs
        }
        if index != subscription.currentLayer {
            consumer.requestKeyframe(track, stream: track.streams[index], nowUs: nowUs)  // throttled per stream
        } else if reasonChanged {
            subscription.announceLayer()
        }
        guard reason == .estimate, let budget else { return 0 }
        // What the layer it asked for would take beyond the budget.
        let unlimited = LayerSelector.select(layers, request: request, budgetBps: nil, current: subscription.currentLayer)
        guard let wanted = unlimited.map({ layers[$0.index] }) else { return 0 }
        return max(0, wanted.bitrateBps * LayerSelector.upHeadroom - budget)
    }

    /// Runs ``update(_:nowUs:)`` for every layered subscription of `participant` (its request changed).
    func updateAll(of participant: Participant, nowUs: Int64) {
        for subscription in participant.subscriptions where subscription.track.isSimulcast { update(subscription, nowUs: nowUs) }
    }

    // MARK: Probing

    private func probeIfDue(_ participant: Participant, neededBps: Double, nowUs: Int64) {
        guard nowUs - (participant.lastProbeUs ?? .min / 2) >= Self.probeIntervalUs,
              participant.downstream.mayProbe(nowUs: nowUs), let estimate = participant.downstream.estimateBps(nowUs: nowUs),
              let session = participant.subscriber,
              let source = participant.subscriptions.first(where: { $0.rtxPayloadType != nil && $0.currentStream?.newestSequence != nil })
        else { return }
        participant.lastProbeUs = nowUs
        // Enough above the estimate to tell whether the wanted layer fits, never less than 1.5 times it.
        let bps = min(DownstreamCongestion.maximumBps, max(1.5 * estimate, estimate + 1.25 * neededBps))
        let cluster = participant.downstream.makeProbeCluster()
        context.counters.legProbes += 1
        let bytesPerBurst = Int(bps * Double(Self.probeDurationMs) / 1000 / 8) / Self.probeBursts
        for burst in 0..<Self.probeBursts {
            context.loop.scheduleTask(in: .milliseconds(Int64(burst * Self.probeDurationMs / Self.probeBursts))) {
                [weak self, weak participant, weak source, weak session] in
                guard let self, let participant, let source, let session, participant.subscriber === session else { return }
                self.sendPadding(bytes: bytesPerBurst, on: source, session: session, cluster: cluster, from: UInt16(burst * 4 % 32))
            }
        }
    }

    /// Sends about `bytes` of RFC 4588 copies of the newest packets `subscription` was sent (from
    /// `offset` packets back, over the last 32), logged in probe cluster `cluster`.
    private func sendPadding(bytes: Int, on subscription: Subscription, session: MediaSession, cluster: Int, from offset: UInt16) {
        let subscriber = subscription.subscriber
        guard let stream = subscription.currentStream, let newest = stream.newestSequence, let payloadType = subscription.rtxPayloadType,
              let layer = subscription.currentLayer, subscription.rewriter.layer == layer
        else { return }
        var sent = 0
        var back = offset
        var tries = 0
        while sent < bytes, tries < 64 {
            tries += 1
            defer { back = (back + 1) % 32 }
            guard var packet = stream.cache.packet(newest &- back) else { continue }
            _ = Producer.renumber(&packet.header, for: subscriber, sequenceAt: nil)
            var rewriter = subscription.rewriter
            rewriter.rewrite(&packet.header)
            packet = RTXPacket.wrap(packet, ssrc: subscription.rtxSSRC, payloadType: payloadType, sequenceNumber: subscription.rtxSequence)
            subscription.rtxSequence &+= 1
            var out = packet.serialized
            let at = DownstreamCongestion.sequenceOffset(in: packet.header, sourceID: subscriber.downstream.extensionID)
            subscriber.downstream.stamp(&out, at: at, nowUs: context.nowUs, probeCluster: cluster)
            sent += out.readableBytes
            context.counters.bytesOut += out.readableBytes
            session.sendRTP(out)
        }
    }

    // MARK: Dynacast

    /// Tells `track`'s publisher which layers to send: those a subscription gets, waits for or would
    /// get were every layer sent (the
    /// smallest when nobody subscribes, so a newcomer starts at once); a layer stops being wanted
    /// only after ``pauseGraceUs``. Only publishers that speak protocol 1.4 are told.
    private func dynacast(_ track: PublishedTrack, nowUs: Int64) {
        guard track.owner.speaksLayers else { return }
        var wanted = Set<Int>()
        for subscription in track.subscriptions {
            if let layer = subscription.currentLayer { wanted.insert(layer) }
            if let layer = subscription.targetLayer { wanted.insert(layer) }
            if let layer = subscription.desiredLayer { wanted.insert(layer) }
        }
        if wanted.isEmpty {
            let layers = track.streams.enumerated().map { $1.layerState(index: $0, nowUs: nowUs) }
            if let smallest = layers.min(by: { ($0.pixels, $0.bitrateBps, $0.index) < ($1.pixels, $1.bitrateBps, $1.index) }) {
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
