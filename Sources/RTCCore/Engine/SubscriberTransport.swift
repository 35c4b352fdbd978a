import NIOConcurrencyHelpers
import NIOCore
import RTCTransport
import Signaling

/// The transport remote media arrives on (the server offers it, we answer), and everything that
/// receives on it: a receiver per remote stream, the RFC 4588 repair streams, transport-wide
/// feedback about this downstream leg, NACKs, keyframe requests and receiver reports.
///
/// Ownership: the per-packet state (the inbound stream map and the receivers by SSRC) is confined
/// to the transport's event loop: a packet takes no lock on its way to its receiver. A new offer
/// changes that state with one hop onto the loop. The playout thread and the stats read
/// `snapshot`, a copy of the receiver lists swapped under a small lock at negotiation only.
/// Receivers that end are stopped (their decode threads joined) off the loop, with no lock held.
final class SubscriberTransport: @unchecked Sendable {
    let transport: MediaTransport
    private let loop: EventLoop
    private let rtcpSSRC: UInt32
    /// The receivers' callbacks (set once in `init`).
    private var outputs: ReceiverOutputs
    // MARK: Confined to `loop`
    private var inbound = InboundStreamMap()
    private var videoReceivers: [UInt32: RemoteVideoReceiver] = [:]
    private var audioReceivers: [UInt32: RemoteAudioReceiver] = [:]
    private var feedbackTask: RepeatedTask?
    // MARK: Shared
    private let snapshot = NIOLockedValueBox(Receivers())
    private let ice = NIOLockedValueBox(ICEState())

    /// The receivers now, for the playout thread, RTCP and stats.
    struct Receivers {
        var video: [RemoteVideoReceiver] = []
        var audio: [RemoteAudioReceiver] = []
    }

    private struct ICEState {
        /// The server's ufrag: an offer with another one restarts ICE.
        var remoteUfrag: String?
        /// Our credentials after an ICE restart (nil: those the transport was made with).
        var local: ICECredentials?
    }

    private init(transport: MediaTransport, rtcpSSRC: UInt32, outputs: ReceiverOutputs) {
        self.transport = transport
        loop = transport.channel.eventLoop
        self.rtcpSSRC = rtcpSSRC
        self.outputs = outputs
        // Receivers ask for keyframes and repairs through this transport.
        self.outputs.requestKeyframe = { [weak self] ssrc in self?.sendPictureLoss(ssrc: ssrc) }
        self.outputs.sendNack = { [weak self] ssrc, sequences in self?.sendNack(ssrc: ssrc, sequences: sequences) }
    }

    /// Binds the transport's socket. `outputs` carries the app's sinks and the first-frame event;
    /// keyframe requests and NACKs go out on this transport. `onStateChange` is called on its loop.
    static func bind(_ configuration: MediaTransportConfiguration, group: EventLoopGroup, rtcpSSRC: UInt32, outputs: ReceiverOutputs,
                     onStateChange: @escaping @Sendable (MediaTransportState) -> Void) async throws -> SubscriberTransport {
        let transport = try await MediaTransport.bind(configuration, group: group)
        let subscriber = SubscriberTransport(transport: transport, rtcpSSRC: rtcpSSRC, outputs: outputs)
        transport.onStateChange = onStateChange
        transport.onRTP = { [weak subscriber] datagram in subscriber?.received(rtp: datagram) }
        transport.onRTCP = { [weak subscriber] datagram in subscriber?.received(rtcp: datagram) }
        try await subscriber.loop.submit {
            subscriber.feedbackTask = subscriber.loop.scheduleRepeatedTask(initialDelay: .milliseconds(50), delay: .milliseconds(50)) {
                [weak subscriber] _ in subscriber?.sendFeedback()
            }
        }.get()
        return subscriber
    }

    var receivers: Receivers { snapshot.withLockedValue { $0 } }

    // MARK: Negotiation

    /// Takes in the server's offer: receivers for new streams, ends those no longer offered, the
    /// repair streams and the feedback extension; answers it (over `signaling`), restarting ICE
    /// when the server's credentials changed. `track` names the remote track of a section.
    func answer(_ offer: SessionDescription, signaling: any SignalingChannel, sessionID: UInt64, fresh: Bool,
                track: @escaping @Sendable (MediaSectionDescription, TrackKind) -> RemoteTrackInfo) async throws {
        let outputs = self.outputs
        let ended = try await loop.submit { () -> [RemoteVideoReceiver] in
            var active = Set<UInt32>()
            for section in offer.sections where section.direction == .sendonly {
                guard let ssrc = section.ssrc else { continue }
                active.insert(ssrc)
                if self.videoReceivers[ssrc] != nil || self.audioReceivers[ssrc] != nil { continue }
                let kind: TrackKind = section.kind == .video ? .video : .audio
                let info = track(section, kind)
                if kind == .video {
                    self.videoReceivers[ssrc] = RemoteVideoReceiver(
                        info: info, ssrc: ssrc, outputs: outputs, orientationExtensionID: offer.extensionID(for: RTPExtensionURI.videoOrientation))
                } else {
                    self.audioReceivers[ssrc] = RemoteAudioReceiver(info: info, ssrc: ssrc, outputs: outputs)
                }
            }
            var ended: [RemoteVideoReceiver] = []
            for (ssrc, receiver) in self.videoReceivers where !active.contains(ssrc) {
                ended.append(receiver)
                self.videoReceivers[ssrc] = nil
            }
            for ssrc in self.audioReceivers.keys where !active.contains(ssrc) { self.audioReceivers[ssrc] = nil }
            self.inbound.transportWideSequenceID = offer.extensionID(for: RTPExtensionURI.transportWideSequence)
            var repairs: [UInt32: InboundStreamMap.RepairStream] = [:]
            for section in offer.sections where section.direction == .sendonly {
                if let ssrc = section.ssrc, let rtx = section.rtxSSRC, let rtxPayloadType = section.rtxPayloadType {
                    repairs[rtx] = InboundStreamMap.RepairStream(mediaSSRC: ssrc, payloadType: section.payloadType, rtxPayloadType: rtxPayloadType)
                }
            }
            self.inbound.replaceRepairStreams(repairs)
            let current = Receivers(video: Array(self.videoReceivers.values), audio: Array(self.audioReceivers.values))
            self.snapshot.withLockedValue { $0 = current }
            return ended
        }.get()
        for receiver in ended { receiver.stop() }

        let remote = try offer.transportParameters(offererRole: .server)
        // The server's new credentials restart ICE (after a resume, or when asked): ours change too (RFC 8445 §9).
        let (restart, local) = ice.withLockedValue { state -> (Bool, ICECredentials?) in
            let restart = !fresh && remote.ice.ufrag != state.remoteUfrag
            if restart { state.local = ICECredentials.random() }
            state.remoteUfrag = remote.ice.ufrag
            return (restart, state.local)
        }
        var parameters = transport.localParameters
        if let local { parameters.ice = local }
        let answer = SessionDescription.make(
            sessionID: sessionID, transport: parameters, iceLite: false, setup: "active",
            sections: offer.sections.map {
                MediaSectionDescription(mid: $0.mid, kind: $0.kind, direction: $0.reversed, payloadType: $0.payloadType,
                                        rtxPayloadType: $0.rtxPayloadType)
            })
        // The answer first: the server takes our new credentials from it before our checks arrive.
        try await signaling.send(.answer(SessionDescriptionMessage(transport: .subscriber, sdp: answer.serialized)))
        if restart, let local { transport.restartICE(local: local, remote: remote) }
        if fresh { transport.start(remote: remote) }
    }

    // MARK: The packet path (on the loop)

    private func received(rtp datagram: ByteBuffer) {
        guard var packet = try? RTPPacket(parsing: datagram) else { return }
        let now = MediaClock.monotonicUs()
        if case .discarded = inbound.receive(&packet, arrivalUs: now) { return }  // padding or a bad repair
        let ssrc = packet.header.ssrc
        if let video = videoReceivers[ssrc] {
            video.receive(packet, bytes: datagram.readableBytes, arrivalUs: now)
        } else if let audio = audioReceivers[ssrc] {
            audio.receive(packet, bytes: datagram.readableBytes, arrivalUs: now)
        }
    }

    /// The server's RTCP: the publishers' sender reports it passes on (each receiver's clock mapping).
    private func received(rtcp datagram: ByteBuffer) {
        guard let packets = try? RTCPPacket.parseCompound(datagram) else { return }
        let now = MediaClock.monotonicUs()
        for case .senderReport(let report) in packets {
            if let video = videoReceivers[report.ssrc] {
                video.state.received(report, arrivalUs: now)
            } else if let audio = audioReceivers[report.ssrc] {
                audio.state.received(report, arrivalUs: now)
            }
        }
    }

    /// Every 50 ms on the loop (as libwebrtc's receiver at these rates): transport-wide feedback,
    /// from which the server estimates this leg. A link that narrows at once shows in it 50 ms sooner
    /// than with the 100 ms it was.
    private func sendFeedback() {
        guard inbound.hasPendingFeedback else { return }
        let media = videoReceivers.keys.first ?? audioReceivers.keys.first ?? 0
        guard let feedback = inbound.makeFeedback(senderSSRC: rtcpSSRC, mediaSSRC: media) else { return }
        transport.sendRTCP(RTCPCompound.transportFeedback(sender: rtcpSSRC, feedback))
    }

    // MARK: RTCP out

    func sendPictureLoss(ssrc: UInt32) {
        transport.sendRTCP(RTCPCompound.pictureLoss(sender: rtcpSSRC, media: ssrc))
    }

    func sendNack(ssrc: UInt32, sequences: [UInt16]) {
        transport.sendRTCP(RTCPCompound.nack(sender: rtcpSSRC, media: ssrc, lost: sequences))
    }

    /// Once a second: receiver reports for every stream that has received, and the round trip
    /// handed to the video receivers (their NACK timing).
    func sendReports(nowUs: Int64) {
        let receivers = self.receivers
        transport.stats.whenSuccess { stats in
            guard let rtt = stats.roundTripTime else { return }
            for receiver in receivers.video { receiver.setRoundTrip(microseconds: Int64(rtt * 1e6)) }
        }
        let blocks = (receivers.video.map(\.state) + receivers.audio.map(\.state)).compactMap { $0.report(nowUs: nowUs) }
        guard !blocks.isEmpty else { return }
        transport.sendRTCP(RTCPCompound.receiverReports(ssrc: rtcpSSRC, blocks))
    }

    /// Ends every receiver (their threads joined off the loop) and the transport.
    func close() async {
        let video = (try? await loop.submit { () -> [RemoteVideoReceiver] in
            self.feedbackTask?.cancel()
            defer {
                self.videoReceivers = [:]
                self.audioReceivers = [:]
            }
            return Array(self.videoReceivers.values)
        }.get()) ?? []
        snapshot.withLockedValue { $0 = Receivers() }
        for receiver in video { receiver.stop() }
        await transport.close()
    }
}
