import Foundation
import LiveKitProtocol
import Signaling
import Testing

/// The client side of LiveKit's protocol (``LiveKitClientTranslator``), checked against the server
/// side (``LiveKitTranslator``) on one table: what our engine sends, made LiveKit's by the client and
/// ours again by the server, is what it sent; what the core says, made LiveKit's by the server and
/// ours again by the client, is what it said. The same ``LiveKitMapping`` serves both.
@Suite("LiveKit protocol, client side: both translators on one table")
struct LiveKitClientProtocolTests {
    /// A joined pair: the server's translator for alice and alice's client translator, both having
    /// seen the same join (bob in the room, publishing simulcast video and audio).
    static func pair() -> (server: LiveKitTranslator, client: LiveKitClientTranslator) {
        var server = LiveKitProtocolTests.translator()
        var client = LiveKitClientTranslator(identity: "alice")
        let bob = ParticipantInfo(uid: "bob", sid: "PA_2", role: .broadcaster, kind: .normal,
                                  tracks: [TrackInfo(sid: "TR_8", kind: .video, source: .camera, simulcastLayers: ["q", "h", "f"]),
                                           TrackInfo(sid: "TR_9", kind: .audio, source: .microphone)], version: 2)
        let join = server.translate(ServerEnvelope(.joined(JoinResponse(participant: ParticipantInfo(uid: "alice", sid: "PA_1", role: .broadcaster,
                                                                                                    kind: .normal),
                                                                       others: [bob]))), nowMs: 0)
        for response in join.toClient { _ = client.translate(response) }
        return (server, client)
    }

    /// Our message through the client translator and back through the server's.
    static func throughBoth(_ message: ClientMessage, _ pair: inout (server: LiveKitTranslator, client: LiveKitClientTranslator)) throws -> [ClientMessage] {
        let (requests, _) = try pair.client.translate(message)
        return requests.flatMap { pair.server.translate($0, nowMs: 0).toCore.map(\.message) }
    }

    static let upstream: [(String, ClientMessage, ClientMessage?)] = [
        ("mute", .mute(MuteRequest(trackSid: "TR_1", muted: true)), nil),
        ("subscription by sid", .updateSubscription(SubscriptionUpdate(trackSids: ["TR_8"], subscribe: false)), nil),
        ("subscription by uid: all its tracks", .updateSubscription(SubscriptionUpdate(trackSids: [], subscribe: false, uids: ["bob"])),
         .updateSubscription(SubscriptionUpdate(trackSids: ["TR_8", "TR_9"], subscribe: false))),
        ("subscription by kind", .updateSubscription(SubscriptionUpdate(trackSids: [], subscribe: true, kind: .video)),
         .updateSubscription(SubscriptionUpdate(trackSids: ["TR_8"], subscribe: true))),
        ("low layer", .setVideoPreference(VideoPreference(uid: "bob", streamType: .low)), nil),
        ("render size", .setVideoPreference(VideoPreference(uid: "bob", renderWidth: 320, renderHeight: 180)), nil),
        ("leave", .leave(reason: .clientRequest), nil),
        ("ping", .ping(timestamp: 1234), nil),
        ("metadata", .updateMetadata(MetadataUpdate(metadata: "m", attributes: ["k": "v"])), nil),
        ("permission", .setSubscriptionPermission(SubscriptionPermission(allowAll: false, allowed: [.init(uid: "bob"), .init(uid: "carol", trackSids: ["TR_1"])])),
         nil),
        ("subscriber answer", .answer(SessionDescriptionMessage(transport: .subscriber, sdp: "v=0\r\n")), nil),
    ]

    @Test("what our engine sends reaches the core unchanged through both translators", arguments: upstream.indices)
    func upstreamRoundTrip(_ index: Int) throws {
        let (_, message, expected) = Self.upstream[index]
        var pair = Self.pair()
        #expect(try Self.throughBoth(message, &pair) == [expected ?? message], "\(Self.upstream[index].0)")
    }

    @Test("a publish: AddTrack with a cid, the size and simulcast layers; the offer's section carries that cid; the server's TrackPublished answers it")
    func publish() throws {
        var pair = Self.pair()
        let request = PublishTrackRequest(kind: .video, source: .screen, mid: "0", width: 1280, height: 720, encryption: .gcm)
        var layered = request
        layered.simulcastLayers = ["f", "h", "q"]
        let (requests, reply) = try pair.client.translate(.publishTrack(layered))
        guard case .addTrack(let add)? = requests.first?.message, case .track(let cid)? = reply else { Issue.record("\(requests) \(String(describing: reply))"); return }
        #expect(add.cid == cid && add.type == .video && add.source == .screenShare && add.width == 1280 && add.encryption == .gcm)
        #expect(add.layers.map(\.rid) == ["q", "h", "f"] && add.layers.map(\.width) == [320, 640, 1280])
        // The server's side reads it as a publish with that cid as the section's track id.
        let out = pair.server.translate(requests[0], nowMs: 0)
        guard case .publishTrack(let core)? = out.toCore.first?.message else { Issue.record("\(out.toCore)"); return }
        #expect(core.trackID == cid && core.simulcastLayers == ["q", "h", "f"] && core.width == 1280 && core.source == .screen && core.encryption == .gcm)
        // The offer names the cid as the section's msid track id.
        let sdp = "v=0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\na=mid:0\r\na=msid:PA_1 track-0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:1\r\na=msid:PA_1 a\r\n"
        guard case .offer(let offer)? = try pair.client.translate(.offer(SessionDescriptionMessage(transport: .publisher, sdp: sdp))).requests.first?.message
        else { Issue.record("no offer"); return }
        #expect(offer.sdp.contains("a=mid:0\r\na=msid:PA_1 \(cid)\r\n") && offer.sdp.contains("a=msid:PA_1 a"), "\(offer.sdp)")
        // The core's answer comes back as TrackPublished with the cid, and the client reads ours from it.
        let published = pair.server.translate(ServerEnvelope(.trackPublished(TrackInfo(sid: "TR_5", kind: .video, source: .screen,
                                                                                        simulcastLayers: ["q", "h", "f"], width: 1280, height: 720,
                                                                                        encryption: .gcm)),
                                                             requestID: out.toCore[0].requestID), nowMs: 0)
        let inbound = published.toClient.flatMap { pair.client.translate($0) }
        guard case .reply(.track(let answered), .success(.trackPublished(let track)))? = inbound.first else { Issue.record("\(inbound)"); return }
        #expect(answered == cid && track.sid == "TR_5" && track.source == .screen && track.encryption == .gcm && track.width == 1280)
    }

    static let bob = ParticipantInfo(uid: "bob", sid: "PA_2", role: .broadcaster, kind: .normal,
                                     tracks: [TrackInfo(sid: "TR_8", kind: .video, source: .camera, simulcastLayers: ["q", "h", "f"])], version: 5,
                                     name: "Bob", metadata: "m", attributes: ["k": "v"])
    static let downstream: [(String, ServerMessage, [ServerMessage]?)] = [
        ("participant update", .participantUpdate([bob]), nil),
        ("a screen share", .participantUpdate([ParticipantInfo(uid: "bob_sub", sid: "PA_3", role: .broadcaster, kind: .screenShare(owner: "bob"),
                                                                tracks: [TrackInfo(sid: "TR_7", kind: .video, source: .screen)], version: 1)]), nil),
        ("left", .participantLeft(uid: "bob", reason: .kicked), nil),
        ("muted by the server", .trackMuted(MuteRequest(trackSid: "TR_1", muted: true)), nil),
        ("room metadata", .roomUpdate(RoomUpdate(metadata: "agenda")), nil),
        ("speakers", .activeSpeakers(ActiveSpeakers(speakers: [.init(uid: "bob", sid: "PA_2", level: 0.5)])), nil),
        ("quality", .connectionQuality(ConnectionQuality(participants: [.init(uid: "bob", up: 1, down: 1), .init(uid: "alice", up: 4, down: 4)])), nil),
        ("permission", .subscriptionPermission(SubscriptionPermissionUpdate(uid: "bob", trackSid: "TR_8", allowed: false)), nil),
        ("dynacast", .videoLayers(VideoLayersRequest(trackSid: "TR_1", activeLayers: ["q", "h"])), nil),
        ("a drain: join again", .leave(reason: .serverShutdown), nil),
        ("kicked", .leave(reason: .kicked), nil),
        ("pong", .pong(timestamp: 42), nil),
        ("subscriber offer", .offer(SessionDescriptionMessage(transport: .subscriber, sdp: "v=0\r\na=msid:PA_2 TR_8\r\n")), nil),
    ]

    @Test("what the core says reaches our engine unchanged through both translators", arguments: downstream.indices)
    func downstreamRoundTrip(_ index: Int) {
        let (name, message, expected) = Self.downstream[index]
        var pair = Self.pair()
        let responses = pair.server.translate(ServerEnvelope(message), nowMs: 0).toClient
        let events = responses.flatMap { pair.client.translate($0) }.compactMap { inbound -> ServerMessage? in
            if case .event(let message) = inbound { return message }
            return nil
        }
        #expect(events == (expected ?? [message]), "\(name): \(responses)")
    }

    @Test("speakers: LiveKit's changes (who started, who stopped) become the whole set, loudest first")
    func speakerDeltas() {
        var pair = Self.pair()
        var last: ActiveSpeakers?
        for speakers in [[ActiveSpeakers.Speaker(uid: "alice", sid: "PA_1", level: 0.6), .init(uid: "bob", sid: "PA_2", level: 0.2)],
                         [.init(uid: "alice", sid: "PA_1", level: 0.6)], []] {
            for response in pair.server.translate(ServerEnvelope(.activeSpeakers(ActiveSpeakers(speakers: speakers))), nowMs: 0).toClient {
                for case .event(.activeSpeakers(let now)) in pair.client.translate(response) { last = now }
            }
            #expect(last?.speakers.map(\.uid) == speakers.map(\.uid), "\(speakers)")
        }
    }

    @Test("refusals and gaps: a refused AddTrack fails its publish with the reason; a role switch or a resume says LiveKit has none; an unknown response kind and a JoinResponse without ICE servers are taken calmly")
    func refusals() throws {
        var pair = Self.pair()
        let (requests, _) = try pair.client.translate(.publishTrack(PublishTrackRequest(kind: .video, source: .camera, mid: "0")))
        guard case .addTrack(let add)? = requests.first?.message else { Issue.record("\(requests)"); return }
        let refused = LKSignalResponse.with {
            $0.requestResponse = .with { $0.reason = .notAllowed; $0.message = "room requires encryption"; $0.request = .addTrack(add) }
        }
        guard case .reply(.track(add.cid), .failure(let error))? = pair.client.translate(refused).first else { Issue.record("not refused"); return }
        #expect(error.code == .permissionDenied && error.reason == "room requires encryption")
        #expect(throws: SignalingError.self) { _ = try pair.client.translate(.setRole(.audience)) }
        #expect(throws: SignalingError.self) { _ = try pair.client.translate(.resume(ResumeRequest(token: "t", participantSid: "PA_1"))) }
        #expect(pair.client.translate(LKSignalResponse()).isEmpty)
        var fresh = LiveKitClientTranslator(identity: "x")
        guard case .reply(.join, .success(.joined(let joined)))? = fresh.translate(.with { $0.join = LKJoinResponse() }).first else {
            Issue.record("an empty JoinResponse")
            return
        }
        #expect(joined.iceServers.isEmpty && joined.pingInterval > 0 && joined.pingTimeout > joined.pingInterval)
    }

    @Test("a refused join reaches our client with its code through both translators: a screen share without its owner waits for it (3003) as on our protocol, a draining server is joined again",
          arguments: [(SignalingError.Code.screenShareOwnerAbsent, SignalingError.Code.screenShareOwnerAbsent),
                      (.shuttingDown, .shuttingDown), (.limitExceeded, .permissionDenied), (.tokenExpired, .permissionDenied)])
    func refusedJoin(_ refused: SignalingError.Code, _ seen: SignalingError.Code) {
        var server = LiveKitProtocolTests.translator(identity: "1001_sub")
        var client = LiveKitClientTranslator(identity: "1001_sub")
        let out = server.translate(ServerEnvelope(.error(SignalingError(refused, "no"))), nowMs: 0)
        let inbound = out.toClient.flatMap { client.translate($0) }
        guard case .reply(.join, .failure(let error))? = inbound.first else { Issue.record("\(inbound)"); return }
        #expect(error.code == seen, "\(error)")
    }

    @Test("random responses never trap the client translator", arguments: [0, 1, 2, 3])
    func randomResponses(_ seed: Int) {
        var generator = SystemRandomNumberGenerator()
        var pair = Self.pair()
        for _ in 0..<2000 {
            let bytes = (0..<Int.random(in: 0..<120, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            guard let response = try? LKSignalResponse(serializedBytes: bytes) else { continue }
            _ = pair.client.translate(response)
        }
    }

    @Test("the connect query a client opens /rtc with is the one the server's parser reads", arguments: [true, false])
    func connectQuery(_ autoSubscribe: Bool) throws {
        let sent = LiveKitConnectRequest(token: "a.b.c", autoSubscribe: autoSubscribe, sdk: "swift", sdkVersion: "0.1", reconnect: true,
                                         participantSid: "PA_1", adaptiveStream: false)
        #expect(try LiveKitConnectRequest(uri: "/rtc?" + sent.query, authorization: nil) == sent)
    }
}
