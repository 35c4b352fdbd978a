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
    /// Told the forwarding time of each packet, in nanoseconds (the metrics histogram).
    var onForwardLatency: (@Sendable (Int64) -> Void)?

    init(context: SFUContext) { self.context = context }

    /// One RTP datagram from `publisher`: to every subscriber of its track (no allocation beyond
    /// each leg's serialized copy).
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
        guard let track = publisher.tracks.first(where: { $0.info.ssrc == packet.header.ssrc }) ?? unboundTrack(for: packet.header, of: publisher)
        else {
            context.counters.packetsDropped += 1
            return
        }
        // From here on the packet is in the SFU's extension numbering (cache, legs, repairs).
        publisher.upstreamExtensions.apply(to: &packet.header)  // allocates only when something changes
        if repair {
            // RFC 4588: the original, unless it is already here (a probe's copy).
            guard track.cache.packet(packet.header.sequenceNumber) == nil else {
                context.counters.rtxDropped += 1
                return
            }
            context.counters.rtxRepairs += 1
        }
        if track.info.ssrc == nil {
            track.info.ssrc = packet.header.ssrc
            publisher.refreshRepairStreams()  // its repair stream can be unwrapped now
        }
        if track.statistics == nil { track.statistics = ReceptionStatistics(ssrc: packet.header.ssrc, clockRate: track.clockRate) }
        track.statistics?.record(sequenceNumber: packet.header.sequenceNumber, rtpTimestamp: packet.header.timestamp, arrivalUs: arrivalUs)
        track.cache.insert(packet, sequence: packet.header.sequenceNumber)
        if track.info.kind == .video { track.nack.received(packet.header.sequenceNumber, nowUs: arrivalUs) }
        guard !track.info.muted else { return }
        send(&packet, of: track, arrivalUs: arrivalUs)
        let elapsed = Int64(bitPattern: context.monotonicClock() &- startNs)
        context.counters.recordForward(microseconds: Double(elapsed) / 1000)
        onForwardLatency?(elapsed)
    }

    /// The track a packet from an SSRC no track has yet belongs to: one of its payload type without
    /// an SSRC, of the section its mid extension names and, for a simulcast section, of the layer
    /// forwarded (its RFC 8852 stream id). A section offered without SSRCs is found this way.
    private func unboundTrack(for header: RTPHeader, of publisher: Participant) -> PublishedTrack? {
        // No array per packet: this runs for every packet of a layer nobody forwards.
        let unbound = { (track: PublishedTrack) in track.info.ssrc == nil && track.payloadType == header.payloadType }
        guard publisher.tracks.contains(where: unbound) else { return nil }
        let mid = publisher.midExtensionID.flatMap { header.extensionData(id: $0) }.map { String(buffer: $0) }
        let rid = publisher.ridExtensionID.flatMap { header.extensionData(id: $0) }.map { String(buffer: $0) }
        // A layer's packets carry its stream id until the browser hears receiver reports for the
        // SSRC; a packet without one is taken as the one layer the answer accepted.
        return publisher.tracks.first { track in
            unbound(track) && (mid == nil || track.info.mid == mid) && (track.simulcastLayer == nil || rid == nil || track.simulcastLayer == rid)
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

    /// Sends `packet` on every live subscription of `track`.
    private func send(_ packet: inout RTPPacket, of track: PublishedTrack, arrivalUs: Int64) {
        let original = packet.header
        // The rewrite leaves the extension block alone: one lookup for every leg.
        let sequenceAt = DownstreamCongestion.sequenceOffset(in: original, sourceID: RTPExtensionID.transportWideSequence)
        var wrote = false
        for subscription in track.subscriptions {
            guard let session = subscription.subscriber.subscriber else { continue }
            packet.header = original
            let legSequenceAt = Self.renumber(&packet.header, for: subscription.subscriber, sequenceAt: sequenceAt)
            subscription.rewriter.rewrite(&packet.header)
            subscription.packetsForwarded += 1
            subscription.payloadBytesForwarded += packet.payload.readableBytes
            var out = packet.serialized
            subscription.subscriber.downstream.stamp(&out, at: legSequenceAt, nowUs: arrivalUs)
            context.counters.packetsOut += 1
            context.counters.bytesOut += out.readableBytes
            session.sendRTPOnLoop(out, flush: false)
            wrote = true
        }
        // One flush for all subscribers: NIO hands the datagrams to the kernel with one sendmmsg.
        if wrote { context.port.flush() }
    }

    /// RTCP from `publisher`: its sender reports, for the round-trip fields of our receiver reports,
    /// and passed on to every subscriber that has been sent the stream, on its rewritten clock, so
    /// receivers can place audio and video on the publisher's one clock (lip sync, recordings).
    func receivedRTCP(_ datagram: ByteBuffer, from publisher: Participant, nowUs: Int64) {
        guard let packets = try? RTCPPacket.parseCompound(datagram) else { return }
        var reports: [ObjectIdentifier: (session: MediaSession, reports: [SenderReport])] = [:]
        for case .senderReport(let report) in packets {
            guard let track = publisher.tracks.first(where: { $0.info.ssrc == report.ssrc }) else { continue }
            track.statistics?.recordSenderReport(compactNTP: report.compactNTP, arrivalUs: nowUs)
            guard !track.info.muted else { continue }
            for subscription in track.subscriptions where subscription.packetsForwarded > 0 {
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
