import NIOCore
import RTCTransport
import Signaling

/// Publishing and subscribing: tracks made from requests and offers, subscriptions made from
/// auto-subscription, pins and requests, and the negotiations (``Negotiator``) that follow.
extension SFU {
    // MARK: Publishing

    /// Why `participant` may not publish a `kind` track from `source` (nil: it may): the role, the
    /// token's grant for the source, and a source that fits the kind (a microphone is audio).
    func mayPublish(_ participant: Participant, kind: TrackKind, source: TrackSource) -> String? {
        guard participant.role == .broadcaster else { return "an audience member cannot publish" }
        let fits = switch source {
        case .camera, .screen: kind == .video
        case .microphone, .screenAudio: kind == .audio
        }
        guard fits else { return "a \(kind.rawValue) track cannot come from the \(source.rawValue)" }
        switch source {
        case .screen, .screenAudio: return participant.grants.publishScreen ? nil : "the token does not grant publishScreen"
        case .microphone: return participant.grants.publishAudio ? nil : "the token does not grant publishAudio"
        case .camera: return participant.grants.publishVideo ? nil : "the token does not grant publishVideo"
        }
    }

    /// Why a track declared with `encryption` may not be published in `participant`'s room (nil:
    /// it may): a room that requires end-to-end encryption takes only encrypted tracks.
    func mayPublish(_ participant: Participant, encryption: TrackEncryption?) -> String? {
        guard configuration.requireEncryption || participant.room.requireEncryption else { return nil }
        guard let encryption, encryption != .none else {
            return "room \(participant.room.name) requires end-to-end encryption: publish with a key (docs/e2ee.md)"
        }
        return nil
    }

    func publishTrack(_ request: PublishTrackRequest, participant: Participant, requestID: UInt32?, fail: Fail) {
        if let reason = mayPublish(participant, kind: request.kind, source: request.source) { return fail(.permissionDenied, reason) }
        if let reason = mayPublish(participant, encryption: request.encryption) { return fail(.permissionDenied, reason) }
        // The offer came first and made this track (as a camera or microphone): the request names
        // its source, it does not add a second track for the same section.
        if let mid = request.mid, let track = participant.tracks.first(where: { $0.info.mid == mid && $0.info.kind == request.kind }) {
            if track.info.source != request.source {
                track.info.source = request.source
                participantChanged(participant)
            }
            return participant.send(.trackPublished(track.info), requestID: requestID)
        }
        guard participant.tracks.count < configuration.limits.maxTracksPerParticipant else {
            return fail(.limitExceeded, "at most \(configuration.limits.maxTracksPerParticipant) tracks per participant")
        }
        let track = addTrack(to: participant, kind: request.kind, source: request.source, mid: request.mid, ssrc: request.ssrc,
                             announced: request)
        participant.send(.trackPublished(track.info), requestID: requestID)
    }

    /// A new track, with the formats of its offer section when it comes from one (before anyone
    /// subscribes: a subscription starts from what the track is, one stream or layers).
    private func addTrack(to participant: Participant, kind: TrackKind, source: TrackSource, mid: String?, ssrc: UInt32?,
                          announced: PublishTrackRequest? = nil, offered: (section: MediaSectionDescription, layers: [String])? = nil) -> PublishedTrack {
        let track = PublishedTrack(info: TrackInfo(sid: makeID("TR"), kind: kind, source: source, ssrc: ssrc, mid: mid),
                                   owner: participant, keyframeIntervalMs: configuration.keyframeRequestInterval)
        if let announced {
            track.info.encryption = announced.encryption == TrackEncryption.none ? nil : announced.encryption
            // What the request says of the coming offer, until the offer says it itself.
            track.announcedTrackID = announced.trackID.map { String($0.prefix(256)) }
            if kind == .video, let layers = announced.simulcastLayers, (2...3).contains(layers.count), layers.allSatisfy({ $0.utf8.count <= 16 }) {
                track.info.simulcastLayers = layers
            }
            if let width = announced.width, let height = announced.height, (1...8192).contains(width), (1...8192).contains(height) {
                track.info.width = width
                track.info.height = height
            }
        }
        if let offered {
            track.adoptFormats(of: offered.section, simulcastLayers: offered.layers)
            track.info.simulcastLayers = offered.layers.isEmpty ? nil : offered.layers
        }
        participant.tracks.append(track)
        participantChanged(participant)
        context.onEvent?(.trackPublished(participant.room.view, participant.view, track.info))
        for other in participant.room.participants.values
        where other.grants.subscribe && other.sees(participant) && other.subscribesAutomatically(to: track) {
            subscribe(other, to: [track])
        }
        return track
    }

    func unpublish(_ track: PublishedTrack) {
        let owner = track.owner
        owner.tracks.removeAll { $0 === track }
        context.onEvent?(.trackUnpublished(owner.room.view, owner.view, track.info))
        owner.refreshRepairStreams()
        let affected = track.subscriptions.map(\.subscriber)
        for subscription in track.subscriptions { unsubscribe(subscription) }
        for subscriber in Set(affected.map(ObjectIdentifier.init)).compactMap({ id in affected.first { ObjectIdentifier($0) == id } }) {
            offerSubscriber(subscriber)
        }
    }

    /// A publisher offer: its transport (``Negotiator``), a track per sending section (matched by
    /// mid, else the first announced track of the kind without one, else a new one), the answer.
    func publisherOffer(_ description: SessionDescriptionMessage, participant: Participant, requestID: UInt32?, fail: Fail) {
        let offer: Negotiator.PublisherOffer
        switch negotiator.parsePublisherOffer(description, uid: participant.uid) {
        case .success(let parsed): offer = parsed
        case .failure(let failure): return fail(.negotiationFailed, failure.reason)
        }
        let sending = offer.sending
        // Every check first, so a refused offer changes nothing (no tracks, ids or transport).
        if !sending.isEmpty, participant.role == .audience { return fail(.permissionDenied, "an audience member cannot publish") }
        let screen: Bool = if case .screenShare = participant.kind { true } else { false }
        var claimed = Set<ObjectIdentifier>()
        var newTracks = 0
        for (section, _) in sending {
            let kind: TrackKind = section.kind == .video ? .video : .audio
            // Grants again, by what the offer really sends: a section announced as audio that
            // carries video, or a source the (possibly refreshed) token no longer grants.
            if let track = announcedTrack(for: section, kind: kind, in: participant, claimed: claimed) {
                claimed.insert(ObjectIdentifier(track))
                guard track.info.kind == kind else {
                    return fail(.permissionDenied, "mid \(section.mid) was announced as \(track.info.kind.rawValue); the offer sends \(kind.rawValue)")
                }
                if let reason = mayPublish(participant, kind: kind, source: track.info.source) { return fail(.permissionDenied, reason) }
            } else {
                let source: TrackSource = kind == .video ? (screen ? .screen : .camera) : (screen ? .screenAudio : .microphone)
                if let reason = mayPublish(participant, kind: kind, source: source) { return fail(.permissionDenied, reason) }
                // An offer alone declares no encryption (WHIP, a plain browser): refused where it is required.
                if let reason = mayPublish(participant, encryption: nil) { return fail(.permissionDenied, reason) }
                newTracks += 1
            }
        }
        guard participant.tracks.count + newTracks <= configuration.limits.maxTracksPerParticipant else {
            return fail(.limitExceeded, "at most \(configuration.limits.maxTracksPerParticipant) tracks per participant")
        }

        participant.inbound.transportWideSequenceID = offer.transportWideSequenceID
        participant.upstreamExtensions = offer.upstreamExtensions
        participant.midExtensionID = offer.negotiated.extensionID(for: RTPExtensionURI.mid)
        participant.ridExtensionID = offer.negotiated.extensionID(for: RTPExtensionURI.rtpStreamID)
        participant.repairedRidExtensionID = offer.negotiated.extensionID(for: RTPExtensionURI.repairedRTPStreamID)
        if let session = negotiator.connectPublisher(participant, offer: offer) {
            session.onRTP = { [weak self, weak participant] packet in
                guard let self, let participant else { return }
                self.producer.forward(packet, from: participant)
            }
            session.onRTCP = { [weak self, weak participant] packet in
                guard let self, let participant else { return }
                self.producer.receivedRTCP(packet, from: participant, nowUs: self.context.nowUs)
            }
            // A media-bound participant (WHIP) lives as long as this transport (SFU.tick).
            session.onStateChange = { [weak self, weak participant] state in
                guard let self, let participant else { return }
                participant.mediaTransport(state, now: self.clock())
            }
            participant.publisher = session
        }
        guard let session = participant.publisher else { return }
        if let offered = offer.negotiated.dataChannel, session.dataChannels == nil {
            enableData(for: participant, on: session, offered: offered)
        }
        defer { participant.refreshRepairStreams() }
        var changed = false
        for (section, layers) in sending {
            let kind: TrackKind = section.kind == .video ? .video : .audio
            if let track = announcedTrack(for: section, kind: kind, in: participant, claimed: []) {
                let before = track.info
                track.info.mid = section.mid
                track.adoptFormats(of: section, simulcastLayers: layers)
                track.info.simulcastLayers = layers.isEmpty ? nil : layers
                changed = changed || track.info != before
            } else {
                let source: TrackSource = kind == .video ? (screen ? .screen : .camera) : (screen ? .screenAudio : .microphone)
                let track = addTrack(to: participant, kind: kind, source: source, mid: section.mid, ssrc: section.ssrc,
                                     offered: (section, layers))
                participant.send(.trackPublished(track.info))
            }
        }
        if changed { participantChanged(participant) }
        participant.send(.answer(negotiator.publisherAnswer(to: offer, for: participant, session: session)), requestID: requestID)
    }

    /// The track a sending section of an offer publishes: the one with its mid; else the one
    /// announced with its msid track id; else the first announced track of its kind with no section.
    private func announcedTrack(for section: MediaSectionDescription, kind: TrackKind, in participant: Participant,
                                claimed: Set<ObjectIdentifier>) -> PublishedTrack? {
        func open(_ track: PublishedTrack) -> Bool { track.info.mid == nil && !claimed.contains(ObjectIdentifier(track)) }
        return participant.tracks.first { $0.info.mid == section.mid }
            ?? section.trackID.flatMap { id in participant.tracks.first { open($0) && $0.announcedTrackID == id } }
            ?? participant.tracks.first { open($0) && $0.info.kind == kind }
    }

    // MARK: Subscribing

    func updateSubscription(_ update: SubscriptionUpdate, participant: Participant, fail: Fail) {
        guard participant.grants.subscribe else { return fail(.permissionDenied, "the token does not grant subscribe") }
        let all = participant.room.participants.values.flatMap(\.tracks)
        var tracks: [PublishedTrack] = []
        if let kind = update.kind {
            if case .screenShare = participant.kind, update.subscribe {
                return fail(.permissionDenied, "a screen share subscribes only to the users it pins (uids) or the tracks it names")
            }
            // Every track of the kind, now and later.
            if update.subscribe { participant.autoSubscribe.insert(kind) } else { participant.autoSubscribe.remove(kind) }
            tracks = participant.room.participants.values.filter { participant.sees($0) }.flatMap(\.tracks)
                .filter { $0.info.kind == kind }
        }
        if let uids = update.uids {
            let limits = configuration.limits
            guard participant.pinned.count + uids.count <= limits.maxPinned || !update.subscribe else {
                return fail(.limitExceeded, "at most \(limits.maxPinned) pinned users")
            }
            guard participant.revealed.union(uids).count <= limits.maxRevealed || !update.subscribe else {
                return fail(.limitExceeded, "at most \(limits.maxRevealed) users pinned over a session")
            }
            for uid in uids where uid != participant.uid {
                let other = participant.room.participants[uid]
                if update.subscribe {
                    let wasSeen = other.map(participant.sees) ?? false
                    participant.pinned.insert(uid)
                    participant.revealed.insert(uid)
                    // A user the filter hid until now: list it first, then subscribe.
                    if let other, !wasSeen { participant.send(.participantUpdate([other.info])) }
                } else {
                    participant.pinned.remove(uid)
                }
                tracks += other?.tracks ?? []
            }
        }
        for sid in update.trackSids {
            guard let track = all.first(where: { $0.info.sid == sid }), track.owner !== participant else {
                return fail(.trackNotFound, "no track \(sid)")
            }
            tracks.append(track)
        }
        if update.subscribe {
            subscribe(participant, to: tracks)
        } else {
            for subscription in participant.subscriptions where tracks.contains(where: { $0 === subscription.track }) {
                unsubscribe(subscription)
            }
            offerSubscriber(participant)
        }
    }

    /// What a subscriber wants of layered video, for one user or by default; applied at once (the
    /// switch itself waits for the new layer's keyframe, asked for now).
    func setVideoPreference(_ preference: VideoPreference, participant: Participant, fail: Fail) {
        let sizes = [preference.renderWidth, preference.renderHeight].compactMap { $0 }
        guard sizes.allSatisfy({ (1...16384).contains($0) }), (preference.renderWidth == nil) == (preference.renderHeight == nil) else {
            return fail(.malformedMessage, "a render size needs a width and a height, each 1...16384")
        }
        let request = LayerSelector.Request(streamType: preference.streamType, renderWidth: preference.renderWidth,
                                            renderHeight: preference.renderHeight)
        if let uid = preference.uid {
            guard participant.videoPreferences[uid] != nil || participant.videoPreferences.count < configuration.limits.maxParticipantsPerRoom
            else { return fail(.limitExceeded, "at most \(configuration.limits.maxParticipantsPerRoom) video preferences") }
            participant.videoPreferences[uid] = request == LayerSelector.Request() ? nil : request
        } else {
            participant.defaultVideoPreference = request
        }
        layers.updateAll(of: participant, nowUs: context.nowUs)
    }

    func subscribe(_ participant: Participant, to tracks: [PublishedTrack]) {
        var added = false
        for track in tracks where !participant.subscriptions.contains(where: { $0.track === track }) {
            // Its publisher's permission first: a refused track waits until the permission allows it.
            guard track.owner.subscriptionPermission.permits(uid: participant.uid, trackSid: track.info.sid) else {
                if participant.refusedTrackSids.insert(track.info.sid).inserted { tellPermission(participant, track, allowed: false) }
                continue
            }
            let mid = String(participant.subscriberSections.count)
            let subscription = Subscription(track: track, subscriber: participant, mid: mid)
            participant.subscriptions.append(subscription)
            track.subscriptions.append(subscription)
            // A layered track: its first layer is picked now, so the keyframe asked for is that layer's.
            if track.isSimulcast { layers.update(subscription, nowUs: context.nowUs) }
            participant.subscriberSections.append(subscription.offeredSection)
            added = true
        }
        if added { offerSubscriber(participant) }
    }

    func unsubscribe(_ subscription: Subscription) {
        let participant = subscription.subscriber
        participant.forwardedHistory[ForwardedStream(uid: subscription.track.owner.uid, kind: subscription.track.info.kind), default: 0]
            += subscription.packetsForwarded
        participant.subscriptions.removeAll { $0 === subscription }
        subscription.track.subscriptions.removeAll { $0 === subscription }
        if let index = participant.subscriberSections.firstIndex(where: { $0.mid == subscription.mid }) {
            participant.subscriberSections[index].direction = .inactive
            participant.subscriberSections[index].ssrc = nil
        }
    }

    /// Sends the subscriber transport's offer (for a participant still in its room, with sections),
    /// or marks it due when an answer is still awaited.
    func offerSubscriber(_ participant: Participant) {
        guard !participant.subscriberSections.isEmpty, directory.contains(participant),
              let offer = negotiator.subscriberOffer(for: participant)
        else { return }
        participant.send(.offer(offer))
    }

    /// The subscriber transport's answer: the transport connects on the first (keyframes asked for
    /// when it does), and new subscriptions on a running one ask for keyframes at once.
    func subscriberAnswer(_ description: SessionDescriptionMessage, participant: Participant, fail: Fail) {
        switch negotiator.takeSubscriberAnswer(description, from: participant) {
        case .failure(let failure):
            context.logger.info("answer refused", metadata: ["uid": "\(participant.uid)", "reason": "\(failure.reason)"])
            return fail(.negotiationFailed, failure.reason)
        case .success(.connected(let session)):
            session.onRTCP = { [weak self, weak participant] packet in
                guard let self, let participant else { return }
                self.consumer.receivedRTCP(packet, from: participant, nowUs: self.context.nowUs)
            }
            session.onStateChange = { [weak self, weak participant] state in
                guard let self, let participant else { return }
                // A media-bound viewer (WHEP) lives as long as this transport (SFU.tick).
                if participant.publisher == nil { participant.mediaTransport(state, now: self.clock()) }
                guard state == .connected else { return }
                let nowUs = self.context.nowUs
                for subscription in participant.subscriptions { self.consumer.requestKeyframe(for: subscription, nowUs: nowUs, newSubscriber: true) }
            }
            participant.subscriber = session
        case .success(.updated):
            // New subscriptions on a running transport: their first frames need a keyframe.
            let nowUs = context.nowUs
            for subscription in participant.subscriptions { consumer.requestKeyframe(for: subscription, nowUs: nowUs) }
        }
        if participant.subscriberNeedsOffer { offerSubscriber(participant) }
    }
}
