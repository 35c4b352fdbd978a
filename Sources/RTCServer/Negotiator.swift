import NIOCore
import RTCTransport
import Signaling

/// The SDP side of a participant's two transports. Publisher transport: the client offers, this
/// answers (ICE-lite, `setup:passive`), connecting the transport on the first offer and restarting
/// ICE when an offer brings new client credentials. Subscriber transport: this offers (`actpass`),
/// one offer outstanding at a time, and takes the client's answer, connecting the transport on the
/// first and restarting ICE on new credentials. It changes transports and negotiation state; what
/// the sections mean for tracks and subscriptions is the SFU's to apply. On the SFU's event loop.
struct Negotiator {
    let context: SFUContext

    /// A publisher's offer, parsed and negotiated (``SessionDescription/negotiate(_:)``).
    struct PublisherOffer {
        let description: SessionDescription
        let negotiated: NegotiatedOffer
        let remote: TransportParameters
        /// The id the offer maps the transport-wide sequence number to.
        var transportWideSequenceID: UInt8? { negotiated.extensionID(for: RTPExtensionURI.transportWideSequence) }
        /// The accepted sections the client sends media on, with the simulcast layers received of each.
        var sending: [(section: MediaSectionDescription, simulcastLayers: [String])] {
            negotiated.sections.compactMap { entry in
                guard let section = entry.section, section.direction == .sendonly || section.direction == .sendrecv else { return nil }
                return (section, entry.simulcastLayers)
            }
        }
        /// The publisher's extension ids → the SFU's numbering, for what is forwarded.
        var upstreamExtensions: ExtensionIDMap {
            ExtensionIDMap(source: negotiated.extensionURIs, target: SDPCodecs.extensionIDs, carried: SDPCodecs.forwardedExtensionURIs)
        }
    }

    /// Parses and negotiates an offer for the publisher transport; the error is the reason to tell
    /// the client. Sections the server cannot receive are rejected in the answer (port 0) and logged.
    func parsePublisherOffer(_ message: SessionDescriptionMessage, uid: String) -> Result<PublisherOffer, NegotiationFailure> {
        guard message.transport == .publisher else {
            return refuse("the client offers only for its publisher transport", uid: uid)
        }
        let description: SessionDescription
        let remote: TransportParameters
        let negotiated: NegotiatedOffer
        do {
            description = try SessionDescription(parsing: message.sdp)
            remote = try description.transportParameters(offererRole: .client)
        } catch { return refuse("bad offer: \(error)", uid: uid) }
        do {
            negotiated = try description.negotiate(.sfu)
        } catch { return refuse("offer refused: \(error.reason)", uid: uid) }
        for section in negotiated.sections where !section.isAccepted {
            context.logger.info("offer section rejected", metadata: [
                "uid": "\(uid)", "mid": "\(section.mid ?? "-")", "media": "\(section.media)", "reason": "\(section.rejection ?? "")",
            ])
        }
        return .success(PublisherOffer(description: description, negotiated: negotiated, remote: remote))
    }

    private func refuse(_ reason: String, uid: String) -> Result<PublisherOffer, NegotiationFailure> {
        context.logger.info("offer refused", metadata: ["uid": "\(uid)", "reason": "\(reason)"])
        return .failure(NegotiationFailure(reason))
    }

    /// Takes `offer`'s transport: returns a new publisher session (for the caller to wire up and
    /// keep) on the first offer, and when new client credentials come with another BUNDLE tag (the
    /// client stopped the section its transport was tagged with and made a new transport, DTLS
    /// included, as Chromium does); restarts ICE (RFC 8445 §9: new credentials on both sides,
    /// checks start over) when only the credentials changed; otherwise nothing.
    func connectPublisher(_ participant: Participant, offer: PublisherOffer) -> MediaSession? {
        let tag = offer.negotiated.bundleTag
        defer { participant.publisherBundleTag = tag }
        if let session = participant.publisher, let ice = participant.publisherICE, offer.remote.ice.ufrag != ice.remoteUfrag,
           tag != participant.publisherBundleTag {
            context.port.removeOnLoop(session)
            participant.publisher = nil
            participant.publisherICE = nil
            context.logger.info("new publisher transport", metadata: ["uid": "\(participant.uid)", "bundleTag": "\(tag ?? "-")"])
        }
        guard let session = participant.publisher, let ice = participant.publisherICE else {
            let session = context.port.makeSessionOnLoop(remote: offer.remote)
            participant.publisherICE = (session.localParameters.ice, offer.remote.ice.ufrag)
            return session
        }
        if offer.remote.ice.ufrag != ice.remoteUfrag {
            let local = ICECredentials.random()
            session.restartICE(local: local, remote: offer.remote)
            participant.publisherICE = (local, offer.remote.ice.ufrag)
            context.counters.iceRestarts += 1
        }
        return nil
    }

    /// The answer to a publisher's offer, in the offer's numbering (payload types, extension ids,
    /// mids): the server receives on every accepted section (RFC 4588 where the section names its
    /// FID SSRC, one layer of a simulcast section) and sends nothing on this transport.
    func publisherAnswer(to offer: PublisherOffer, for participant: Participant, session: MediaSession) -> SessionDescriptionMessage {
        var negotiated = offer.negotiated
        if !context.configuration.answersSenderParameters {
            for index in negotiated.sections.indices { negotiated.sections[index].section?.codecParameters = nil }
        }
        let answer = SessionDescription.answer(
            to: negotiated, sessionID: UInt64(truncatingIfNeeded: participant.sid.hashValue),
            transport: context.port.localParameters(credentials: participant.publisherICE?.local ?? session.localParameters.ice),
            iceLite: true, setup: "passive",
            direction: { offered in offered == .sendrecv || offered == .sendonly ? .recvonly : .inactive })
        return SessionDescriptionMessage(transport: .publisher, sdp: answer.serialized)
    }

    /// The subscriber transport's next offer (its sections as they are), or nil when an answer is
    /// still awaited: the offer is then marked due for when it comes.
    func subscriberOffer(for participant: Participant) -> SessionDescriptionMessage? {
        guard !participant.awaitingSubscriberAnswer else {
            participant.subscriberNeedsOffer = true
            return nil
        }
        participant.subscriberOfferVersion += 1
        participant.awaitingSubscriberAnswer = true
        participant.subscriberNeedsOffer = false
        let offer = SessionDescription.make(
            sessionID: UInt64(truncatingIfNeeded: participant.sid.hashValue) &+ 1, version: participant.subscriberOfferVersion,
            transport: context.port.localParameters(credentials: participant.subscriberCredentials), iceLite: true, setup: "actpass",
            sections: participant.subscriberSections)
        return SessionDescriptionMessage(transport: .subscriber, sdp: offer.serialized)
    }

    /// The SFU's ids of what it forwards, id → URI.
    static let forwardedIDs: [UInt8: String] = Dictionary(
        uniqueKeysWithValues: SDPCodecs.extensionIDs.filter { SDPCodecs.forwardedExtensionURIs.contains($0.key) }.map { ($1, $0) })

    /// What a subscriber's answer did to its transport.
    enum SubscriberAnswerOutcome {
        /// The first answer: a new session for the caller to wire up and keep.
        case connected(MediaSession)
        /// An answer on a running transport (ICE restarted if the client's credentials changed).
        case updated
    }

    /// Takes the subscriber transport's answer: transport-wide CC on the leg where the answer kept
    /// the extension, RFC 4588 repairs where it kept the rtx format, the transport's ICE.
    func takeSubscriberAnswer(_ message: SessionDescriptionMessage, from participant: Participant)
        -> Result<SubscriberAnswerOutcome, NegotiationFailure> {
        guard message.transport == .subscriber, participant.awaitingSubscriberAnswer else {
            return .failure(NegotiationFailure("no subscriber offer is waiting for an answer"))
        }
        participant.awaitingSubscriberAnswer = false
        // Parsed once: its sections (RTX) and its transport parameters (ICE).
        var answer: SessionDescription?
        var remote: TransportParameters?
        var parseError: ParseError?
        do {
            answer = try SessionDescription(parsing: message.sdp)
            remote = try answer?.transportParameters(offererRole: .server)
        } catch { parseError = error }
        if let answer {
            participant.downstream.extensionID = answer.extensionID(for: RTPExtensionURI.transportWideSequence)
            // What the SFU sends in its own numbering, as the answer kept it (an answer should keep
            // the offer's ids; one that renumbers or drops an extension gets packets to match).
            var kept: [String: UInt8] = [:]
            for ext in answer.media.flatMap(\.extensionMaps) where kept[ext.uri] == nil { kept[ext.uri] = ext.id }
            participant.downstreamExtensions = ExtensionIDMap(source: Self.forwardedIDs, target: kept, carried: SDPCodecs.forwardedExtensionURIs)
            let answered = answer.sections
            let declined = Set(answer.media.filter { $0.mediaLine.port == "0" || $0.direction == "inactive" }.compactMap(\.mid))
            for subscription in participant.subscriptions {
                let section = answered.first { $0.mid == subscription.mid }
                // The leg's numbering is the answer's: a codec (and its repair format, whose apt
                // names it) numbered otherwise than offered is sent under the answer's numbers.
                let codec = section?.payloadType
                subscription.rewriter.payloadType = codec != nil && codec != subscription.track.payloadType ? codec : nil
                subscription.rtxPayloadType = section?.rtxPayloadType
                subscription.declined = declined.contains(subscription.mid)
            }
        }
        guard let session = participant.subscriber else {
            guard let remote else { return .failure(NegotiationFailure("bad answer: \(parseError.map { "\($0)" } ?? "")")) }
            participant.subscriberRemoteUfrag = remote.ice.ufrag
            return .success(.connected(context.port.makeSessionOnLoop(remote: remote, local: participant.subscriberCredentials)))
        }
        // New client credentials answer an offer that restarted ICE (ours are in that offer).
        if let remote, remote.ice.ufrag != participant.subscriberRemoteUfrag {
            session.restartICE(local: participant.subscriberCredentials, remote: remote)
            participant.subscriberRemoteUfrag = remote.ice.ufrag
            context.counters.iceRestarts += 1
        }
        return .success(.updated)
    }
}

/// Why a negotiation failed (sent to the client as `negotiationFailed`).
struct NegotiationFailure: Error {
    let reason: String
    init(_ reason: String) { self.reason = reason }
}
