import NIOConcurrencyHelpers
import NIOCore
import RTCTransport
import Signaling

/// The transport local media leaves on, and everything that sends on it: the pacer, send-side
/// congestion control, the local video and audio senders, the offer and its ICE restarts, and the
/// RTCP the server sends back (keyframe requests, NACKs, transport-wide feedback, REMB, receiver
/// reports).
///
/// Ownership: `lock` guards the senders, their track sids, the ICE credentials and the offer
/// version; it is held only to read or write them, never across an `await`, a thread join or a
/// call out. RTCP arrives on the transport's event loop and takes the lock once per compound
/// packet to find the senders.
final class PublisherTransport: Sendable {
    let transport: MediaTransport
    let pacer: Pacer
    let sequencer: TransportSequencer
    /// The one capture clock of this transport's tracks (their RTP timestamps and sender reports).
    let captureClock = CaptureClock()
    private let rtcpSSRC: UInt32
    private let lock = NIOLockedValueBox(State())

    private struct State {
        var video: LocalVideoSender?
        var audio: LocalAudioSender?
        var videoTrackSid: String?
        var audioTrackSid: String?
        /// Local ICE credentials after an ICE restart (nil: those the transport was made with).
        var ice: ICECredentials?
        var offerVersion = 0
        /// Made mids unique on this transport (a republished track gets a new one).
        var nextMid = 0
        /// Offers carry a data channel section (``enableDataChannels()``).
        var dataChannel = false
    }

    /// From now on offers carry a data channel section.
    func enableDataChannels() { lock.withLockedValue { $0.dataChannel = true } }
    var offersDataChannel: Bool { lock.withLockedValue { $0.dataChannel } }

    /// A new local track to announce: the sender, and what `publishTrack` says about it.
    enum NewSender {
        case video(LocalVideoSender)
        case audio(LocalAudioSender)
    }

    private init(transport: MediaTransport, rtcpSSRC: UInt32) {
        self.transport = transport
        self.rtcpSSRC = rtcpSSRC
        let sequencer = TransportSequencer()
        self.sequencer = sequencer
        pacer = Pacer(loop: transport.channel.eventLoop, sequencer: sequencer) { [weak transport] packets in
            transport?.sendRTP(batch: packets)
        }
    }

    /// Binds the transport's socket. `onStateChange` is called on the transport's event loop.
    static func bind(_ configuration: MediaTransportConfiguration, group: EventLoopGroup, rtcpSSRC: UInt32,
                     onStateChange: @escaping @Sendable (MediaTransportState) -> Void) async throws -> PublisherTransport {
        let transport = try await MediaTransport.bind(configuration, group: group)
        let publisher = PublisherTransport(transport: transport, rtcpSSRC: rtcpSSRC)
        transport.onStateChange = onStateChange
        transport.onRTCP = { [weak publisher] datagram in publisher?.received(rtcp: datagram) }
        return publisher
    }

    // MARK: Senders

    var videoSender: LocalVideoSender? { lock.withLockedValue { $0.video } }
    var audioSender: LocalAudioSender? { lock.withLockedValue { $0.audio } }
    var senders: (video: LocalVideoSender?, audio: LocalAudioSender?) { lock.withLockedValue { ($0.video, $0.audio) } }

    func trackSid(_ kind: TrackKind) -> String? {
        lock.withLockedValue { kind == .video ? $0.videoTrackSid : $0.audioTrackSid }
    }

    /// A mid for a new section of this transport.
    func makeMid(_ kind: TrackKind) -> String {
        lock.withLockedValue { state in
            defer { state.nextMid += 1 }
            return "\(kind == .video ? "v" : "a")\(state.nextMid)"
        }
    }

    /// A video sender of 1 to 3 simulcast layers.
    func makeVideoSender(source: TrackSource, configuration: VideoEncoderConfiguration, simulcastLayers: Int = 1,
                         encryption: FrameEncryption? = nil) -> LocalVideoSender {
        let sender = LocalVideoSender(ssrc: UInt32.random(in: 1...UInt32.max), mid: makeMid(.video), source: source,
                                      configuration: configuration, simulcastLayers: simulcastLayers, sequencer: sequencer,
                                      pacer: pacer, clock: captureClock, encryption: encryption)
        setVideoBounds(configuration, layers: sender.layers.count)
        return sender
    }

    /// Congestion control's video bounds: all layers' maximum, and the least the smallest layer needs.
    private func setVideoBounds(_ configuration: VideoEncoderConfiguration, layers: Int) {
        let floor = layers == 1 ? SendSideCongestion.encoderFloorKbps(for: configuration)
            : VideoLayer.make(count: layers, firstSSRC: 1).last!.minimumKbps(of: configuration)
        sequencer.congestion.setMaximumVideo(kbps: LocalVideoSender.maximumKbps(for: configuration, simulcastLayers: layers), floorKbps: floor)
    }

    func makeAudioSender(source: TrackSource, processing: Bool, encryption: FrameEncryption? = nil) -> LocalAudioSender {
        LocalAudioSender(ssrc: UInt32.random(in: 1...UInt32.max), mid: makeMid(.audio), source: source, processing: processing,
                         pacer: pacer, clock: captureClock, encryption: encryption)
    }

    /// Installs a sender, under its track sid once the server has given one.
    func install(_ sender: NewSender, trackSid: String?) {
        lock.withLockedValue { state in
            switch sender {
            case .video(let video): state.video = video; state.videoTrackSid = trackSid
            case .audio(let audio): state.audio = audio; state.audioTrackSid = trackSid
            }
        }
    }

    /// Takes a kind's sender out, stops it (with no lock held: its thread is joined) and returns
    /// its track sid.
    @discardableResult
    func removeSender(_ kind: TrackKind) -> String? {
        let (video, audio, sid) = lock.withLockedValue { state -> (LocalVideoSender?, LocalAudioSender?, String?) in
            if kind == .video {
                defer { state.video = nil; state.videoTrackSid = nil }
                return (state.video, nil, state.videoTrackSid)
            }
            defer { state.audio = nil; state.audioTrackSid = nil }
            return (nil, state.audio, state.audioTrackSid)
        }
        video?.stop()
        audio?.stop()
        return sid
    }

    /// Applies a new encoder configuration to the video track (if any) and to congestion control's bounds.
    func reconfigureVideo(_ configuration: VideoEncoderConfiguration) {
        let sender = videoSender
        sender?.reconfigure(configuration)
        setVideoBounds(configuration, layers: sender?.layers.count ?? 1)
    }

    /// Congestion control's current target (for stats).
    var estimatedBandwidthKbps: Int { Int(sequencer.congestion.targetBps / 1000) }

    // MARK: Negotiation

    /// Offers the transport's sections with local credentials `ice` (nil: the current ones) and
    /// returns the server's answer.
    func negotiate(signaling: any SignalingChannel, streamID: String, sessionID: UInt64, ice: ICECredentials? = nil) async throws
        -> SessionDescriptionMessage {
        let offer = makeOffer(streamID: streamID, sessionID: sessionID, ice: ice)
        return try accept(reply: try await signaling.request(.offer(offer)))
    }

    /// The offer of the transport's sections (a sender added but not yet announced is offered
    /// under its mid), with local credentials `ice` (nil: the current ones).
    func makeOffer(streamID: String, sessionID: UInt64, ice: ICECredentials? = nil) -> SessionDescriptionMessage {
        let (sections, version, current, data) = lock.withLockedValue { state -> ([MediaSectionDescription], Int, ICECredentials?, Bool) in
            var sections: [MediaSectionDescription] = []
            if let video = state.video {
                let layered = !video.simulcastRids.isEmpty
                // Simulcast layers list no SSRCs: each packet names its layer (RFC 8852), as browsers do.
                var section = MediaSectionDescription(mid: video.mid, kind: .video, direction: .sendonly, ssrc: layered ? nil : video.state.ssrc,
                                                      streamID: streamID, trackID: state.videoTrackSid,
                                                      rtxPayloadType: SDPCodecs.rtxPayloadType, rtxSSRC: layered ? nil : video.rtxSSRC)
                section.simulcastRids = video.simulcastRids
                sections.append(section)
            }
            if let audio = state.audio {
                sections.append(MediaSectionDescription(mid: audio.mid, kind: .audio, direction: .sendonly, ssrc: audio.state.ssrc,
                                                        streamID: streamID, trackID: state.audioTrackSid))
            }
            state.offerVersion += 1
            return (sections, state.offerVersion, state.ice, state.dataChannel)
        }
        var parameters = transport.localParameters
        if let ice = ice ?? current { parameters.ice = ice }
        let offer = SessionDescription.make(sessionID: sessionID, version: version, transport: parameters, iceLite: false,
                                            setup: "actpass", sections: sections, dataChannel: data)
        return SessionDescriptionMessage(transport: .publisher, sdp: offer.serialized)
    }

    /// Takes the server's reply to an offer: the answer's header extensions and retransmissions.
    func accept(reply: ServerMessage) throws -> SessionDescriptionMessage {
        guard case .answer(let answer) = reply else {
            throw RTCEngineError(.unexpectedReply, "the server answered the publisher offer with \(reply.type)")
        }
        let parsed = try? SessionDescription(parsing: answer.sdp)
        if let parsed {
            // Header extensions as the answer kept them (a standard answer keeps the offer's ids).
            var kept: [String: UInt8] = [:]
            for ext in parsed.media.flatMap(\.extensionMaps) where kept[ext.uri] == nil { kept[ext.uri] = ext.id }
            let offered = Dictionary(uniqueKeysWithValues: SDPCodecs.extensions.map { ($0.id, $0.uri) })
            pacer.setNegotiatedExtensions(ExtensionIDMap(source: offered, target: kept, carried: Set(offered.values)))
        }
        // RFC 4588 retransmissions (and probes made of them) once the server's answer accepts them.
        if let video = videoSender, let rtx = parsed?.sections.first(where: { $0.mid == video.mid })?.rtxPayloadType {
            video.enableRTX(payloadType: rtx)
            pacer.setPaddingSource { [weak video] in video?.paddingPacket() }
        }
        return answer
    }

    /// Starts ICE and DTLS towards the server's answer and waits (up to 10 s) until connected.
    func connect(answer: SessionDescriptionMessage) async throws {
        let remote: TransportParameters
        do {
            remote = try SessionDescription(parsing: answer.sdp).transportParameters(offererRole: .client)
        } catch {
            throw RTCEngineError(.transportFailed, "the server's answer: \(error)")
        }
        transport.start(remote: remote)
        // The ICE agent gives up after its own 10 s; whichever gives up first, the error names what
        // was tried: a server announcing an address nobody can reach shows here.
        let deadline = MediaClock.monotonicUs() + 10_000_000
        var reason = "no answer within 10 s"
        while MediaClock.monotonicUs() < deadline {
            let state = try await transport.state.get()
            if state == .connected { return }
            if case .failed(let why) = state { reason = why; break }
            try await Task.sleep(for: .milliseconds(5))
        }
        throw RTCEngineError(.transportFailed, Self.notConnected(reason: reason, remote: remote))
    }

    /// "the publisher transport did not connect (<reason>; the server's candidates: udp 192.0.2.1:3478, …)".
    static func notConnected(reason: String, remote: TransportParameters) -> String {
        func shown(_ address: SocketAddress) -> String {
            let ip = address.ipAddress ?? "?"
            return ip.contains(":") ? "[\(ip)]:\(address.port ?? 0)" : "\(ip):\(address.port ?? 0)"
        }
        let tried = remote.candidates.map { "udp \(shown($0))" } + remote.tcpCandidates.map { "tcp \(shown($0))" }
        return "the publisher transport did not connect (\(reason); the server's candidates: "
            + (tried.isEmpty ? "none" : tried.joined(separator: ", ")) + ")"
    }

    /// Offers again with new ICE credentials and restarts the checks towards the candidates of the
    /// server's answer (RFC 8445 §9).
    func restartICE(signaling: any SignalingChannel, streamID: String, sessionID: UInt64) async throws {
        let ice = ICECredentials.random()
        let answer = try await negotiate(signaling: signaling, streamID: streamID, sessionID: sessionID, ice: ice)
        let remote = try SessionDescription(parsing: answer.sdp).transportParameters(offererRole: .client)
        transport.restartICE(local: ice, remote: remote)
        lock.withLockedValue { $0.ice = ice }
    }

    // MARK: RTCP

    /// Sender reports with the CNAME, once a second (from the session's RTCP timer).
    func sendReports(cname: String, nowMonoUs: Int64, wallUs: Int64) {
        let (video, audio) = senders
        let states = (video?.layers.map(\.state) ?? []) + [audio?.state].compactMap { $0 }
        let reports = states.compactMap { $0.senderReport(nowMonoUs: nowMonoUs, wallUs: wallUs) }
        guard !reports.isEmpty else { return }
        transport.sendRTCP(RTCPCompound.senderReports(reports, cname: cname))
    }

    /// On the transport's event loop: what the server says about our streams.
    private func received(rtcp datagram: ByteBuffer) {
        guard let packets = try? RTCPPacket.parseCompound(datagram) else { return }
        let (video, audio) = senders
        let now = MediaClock.wallUs()
        for packet in packets {
            switch packet {
            case .pictureLossIndication(let pli):
                video?.layer(ssrc: pli.mediaSSRC)?.requestKeyframe()
            case .fullIntraRequest(let fir):
                for entry in fir.entries { video?.layer(ssrc: entry.ssrc)?.requestKeyframe() }
            case .nack(let nack) where video?.layer(ssrc: nack.mediaSSRC) != nil:
                video?.retransmit(nack.lostSequenceNumbers, ssrc: nack.mediaSSRC)
            case .transportFeedback(let feedback):
                let rtt = video?.state.counters.withLock { $0.roundTripTimeMs }
                let congestion = sequencer.congestion
                if let kbps = congestion.received(feedback, rttMs: rtt, probing: pacer.canProbe) { video?.setTargetBitrate(kbps: kbps) }
                pacer.setEstimate(bps: congestion.targetBps)
                if let probe = congestion.takeProbe() { pacer.probe(probe) }
            case .remb(let remb) where remb.ssrcs.isEmpty || remb.ssrcs.contains { $0 == video?.state.ssrc }:
                // The server's limit for our slowest subscriber's path.
                let limit = Double(min(remb.bitrate, UInt64(Int64.max)))
                if let kbps = sequencer.congestion.limit(toBps: limit) { video?.setTargetBitrate(kbps: kbps) }
            case .receiverReport(let report):
                for block in report.reports {
                    if let layer = video?.layer(ssrc: block.ssrc) { layer.state.received(block, arrivalWallUs: now) }
                    if block.ssrc == audio?.state.ssrc {
                        audio?.state.received(block, arrivalWallUs: now)
                        audio?.setExpectedPacketLoss(percent: Int(block.fractionLost) * 100 / 256)
                    }
                }
            default:
                break
            }
        }
    }

    /// Stops the senders (joining their threads, no lock held), the pacer and the transport.
    func close() async {
        removeSender(.video)
        removeSender(.audio)
        pacer.stop()
        await transport.close()
    }
}
