import COpenSSL
import Foundation
import LiveKitProtocol
import Signaling
import Testing

/// LiveKit's side of the protocol without a network: tokens, connect URLs, the subscriber offer's
/// stream ids, the translation both ways and the data packets the relay rewrites (docs/livekit.md).
@Suite("LiveKit protocol: tokens, connects, translation, data packets")
struct LiveKitProtocolTests {
    static let keys = ["APIkey": "a-secret-of-some-length"]

    // MARK: Tokens

    struct TokenCase: Sendable, CustomTestStringConvertible {
        let name: String
        let video: LiveKitVideoGrant
        let grants: TokenGrants
        var testDescription: String { name }
    }

    static let tokenCases: [TokenCase] = [
        TokenCase(name: "defaults: all but data as ours say", video: LiveKitVideoGrant(roomJoin: true, room: "r"),
                  grants: TokenGrants(join: true, publishAudio: true, publishVideo: true, publishScreen: true, subscribe: true, publishData: nil)),
        TokenCase(name: "no roomJoin", video: LiveKitVideoGrant(room: "r"),
                  grants: TokenGrants(join: false, publishData: nil)),
        TokenCase(name: "canPublish false", video: LiveKitVideoGrant(roomJoin: true, room: "r", canPublish: false, canPublishData: true),
                  grants: TokenGrants(join: true, publishAudio: false, publishVideo: false, publishScreen: false, subscribe: true, publishData: true)),
        TokenCase(name: "sources: camera and screen share", video: LiveKitVideoGrant(roomJoin: true, room: "r", canPublishSources: ["camera", "screen_share"]),
                  grants: TokenGrants(join: true, publishAudio: false, publishVideo: true, publishScreen: true, subscribe: true, publishData: nil)),
        TokenCase(name: "subscribe and data off", video: LiveKitVideoGrant(roomJoin: true, room: "r", canSubscribe: false, canPublishData: false),
                  grants: TokenGrants(join: true, subscribe: false, publishData: false)),
    ]

    @Test("LiveKit grants in our terms", arguments: tokenCases)
    func grants(_ testCase: TokenCase) throws {
        let token = LiveKitClaims(apiKey: "APIkey", identity: "alice", video: testCase.video, now: 1_000_000).signed(secret: Self.keys["APIkey"]!)
        let claims = try LiveKitClaims.verifySignature(token, keys: Self.keys)
        #expect(claims.identity == "alice" && claims.room == "r")
        #expect(claims.grants == testCase.grants)
        let ours = claims.accessToken(room: "r")
        #expect(ours.uid == "alice" && ours.channel == "r" && ours.notBefore == 1_000_000 && ours.expiresAt == 1_003_600 && ours.appID == "APIkey")
    }

    @Test("a LiveKit token from livekit-api's JSON (numbers with fractions, unknown claims) is read")
    func foreignClaims() throws {
        let claims = #"{"iss":"APIkey","sub":"bob","nbf":1000.0,"exp":4600.5,"name":"Bob","kind":"standard","sha256":"x","#
            + #""video":{"roomJoin":true,"room":"demo","canPublish":true,"canPublishSources":["microphone"],"ingressAdmin":false}}"#
        let header = #"{"alg":"HS256","typ":"JWT"}"#
        func b64(_ text: String) -> String {
            Data(text.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: "")
        }
        let input = b64(header) + "." + b64(claims)
        let good = JWTTestSigner.sign(input, secret: Self.keys["APIkey"]!)
        let parsed = try LiveKitClaims.verifySignature(good, keys: Self.keys)
        #expect(parsed.name == "Bob" && parsed.room == "demo" && parsed.grants.publishAudio && !parsed.grants.publishVideo)
        #expect(parsed.accessToken(room: "demo").expiresAt == 4600)
    }

    @Test("refused tokens say why", arguments: [
        ("not.a.jwt", "not a JWT"),
        ("", "not a JWT"),
    ])
    func refused(_ token: String, _ reason: String) {
        #expect(throws: TokenError.self) { try LiveKitClaims.verifySignature(token, keys: Self.keys) }
        do { _ = try LiveKitClaims.verifySignature(token, keys: Self.keys) } catch { #expect(error.reason.contains(reason), "\(error)") }
    }

    @Test("another key's or another secret's token is refused")
    func wrongKey() {
        let other = LiveKitClaims(apiKey: "other", identity: "a", video: LiveKitVideoGrant(roomJoin: true, room: "r"), now: 0).signed(secret: "x-secret-123")
        #expect { try LiveKitClaims.verifySignature(other, keys: Self.keys) } throws: { ($0 as? TokenError)?.reason.contains("unknown API key") == true }
        let forged = LiveKitClaims(apiKey: "APIkey", identity: "a", video: LiveKitVideoGrant(roomJoin: true, room: "r"), now: 0).signed(secret: "guess")
        #expect { try LiveKitClaims.verifySignature(forged, keys: Self.keys) } throws: { ($0 as? TokenError)?.kind == .badSignature }
    }

    // MARK: Connect URLs

    @Test("connect URLs as LiveKit's SDKs build them", arguments: [
        ("/rtc?sdk=python&protocol=18&auto_subscribe=1&adaptive_stream=0&version=1.2.0", "Bearer T", true, false, 18),
        ("/rtc?access_token=T&auto_subscribe=0", nil, false, false, 16),
        ("/rtc?access_token=T&reconnect=1&sid=PA_7", nil, true, true, 16),
        ("/rtc?access_token=T%2B&protocol=16", nil, true, false, 16),
    ] as [(String, String?, Bool, Bool, Int)])
    func connect(_ uri: String, _ authorization: String?, _ autoSubscribe: Bool, _ reconnect: Bool, _ version: Int) throws {
        #expect(LiveKitConnectRequest.isLiveKit(uri: uri, authorization: authorization))
        let request = try LiveKitConnectRequest(uri: uri, authorization: authorization)
        #expect(request.token.hasPrefix("T") && request.autoSubscribe == autoSubscribe && request.reconnect == reconnect
            && request.protocolVersion == version)
        if reconnect { #expect(request.participantSid == "PA_7") }
    }

    @Test("bad connect URLs get a reason, ours are not LiveKit's", arguments: [
        ("/rtc?protocol=abc&access_token=T", "protocol must be a number"),
        ("/rtc?access_token=T&auto_subscribe=maybe", "auto_subscribe must be"),
        ("/rtc?access_token=T&reconnect=1", "needs the session's sid"),
        ("/rtc?protocol=16", "no access_token"),
    ])
    func badConnect(_ uri: String, _ reason: String) {
        do {
            _ = try LiveKitConnectRequest(uri: uri, authorization: nil)
            Issue.record("\(uri) was accepted")
        } catch { #expect(error.reason.contains(reason), "\(error)") }
        #expect(!LiveKitConnectRequest.isLiveKit(uri: "/rtc", authorization: nil))
    }

    // MARK: SDP

    @Test("the subscriber offer's stream ids become PA_…|TR_…, and nothing else changes")
    func subscriberOffer() {
        let sdp = "v=0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\na=msid:PA_1 TR_2\r\na=ssrc:5 cname:x\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=msid:PA_1 TR_3\r\n"
        let rewritten = LiveKitSDP.subscriberOffer(sdp)
        #expect(rewritten == sdp.replacingOccurrences(of: "a=msid:PA_1 TR_2", with: "a=msid:PA_1|TR_2 TR_2")
            .replacingOccurrences(of: "a=msid:PA_1 TR_3", with: "a=msid:PA_1|TR_3 TR_3"))
        #expect(LiveKitSDP.subscriberOffer(rewritten) == rewritten, "idempotent")
        #expect(LiveKitSDP.subscriberOffer("a=msid:- t\r\n") == "a=msid:- t\r\n")
    }

    // MARK: Translation

    static func joined(_ translator: inout LiveKitTranslator, others: [Signaling.ParticipantInfo] = []) -> LKJoinResponse? {
        let out = translator.translate(ServerEnvelope(.joined(JoinResponse(participant: ParticipantInfo(uid: "alice", sid: "PA_1", role: .broadcaster,
                                                                                                      kind: .normal),
                                                                         others: others, iceServers: [ICEServer(urls: ["turn:t:3478"], username: "u",
                                                                                                                credential: "c")]))), nowMs: 5)
        if case .join(let join) = out.toClient.first?.message { return join }
        return nil
    }

    static func translator(identity: String = "alice") -> LiveKitTranslator {
        LiveKitTranslator(connect: LiveKitConnectRequest(token: "t"),
                          claims: LiveKitClaims(apiKey: "k", identity: identity, video: LiveKitVideoGrant(roomJoin: true, room: "r"), now: 0), room: "r")
    }

    @Test("the join: our join first, then a JoinResponse with LiveKit's ids, pings above zero, a semver server version, ICE servers")
    func join() throws {
        var translator = Self.translator()
        let start = translator.start(token: "ours")
        guard case .join(let request) = start.message else { Issue.record("\(start)"); return }
        #expect(request.uid == "alice" && request.channel == "r" && request.token == "ours" && request.dataFraming == .liveKit)
        let other = ParticipantInfo(uid: "1001_sub", sid: "PA_9", role: .broadcaster, kind: .screenShare(owner: "1001"),
                                    tracks: [TrackInfo(sid: "TR_4", kind: .video, source: .screen)], version: 3)
        let join = try #require(Self.joined(&translator, others: [other]))
        #expect(join.participant.sid == "PA_1" && join.participant.identity == "alice" && join.room.sid == "RM_r" && join.room.name == "r")
        #expect(join.pingInterval > 0 && join.pingTimeout > join.pingInterval && !join.subscriberPrimary)
        let parts = join.serverInfo.version.split(separator: ".").compactMap { Int($0) }
        #expect(parts.count == 3 && (parts[0], parts[1]) >= (1, 8), "RPC needs a semver of at least 1.8.0: \(join.serverInfo.version)")
        #expect(join.iceServers.first?.urls == ["turn:t:3478"] && join.iceServers.first?.credential == "c")
        let share = try #require(join.otherParticipants.first)
        #expect(share.sid == "PA_9" && share.attributes["screenShareOwner"] == "1001" && share.tracks.first?.source == .screenShare)
        #expect(share.tracks.first?.sid == "TR_4" && share.tracks.first?.mimeType == "video/VP8")
    }

    @Test("AddTrack: a publish request carrying the cid, the layers' stream ids and the size; TrackPublished answers the same cid")
    func addTrack() throws {
        var translator = Self.translator()
        _ = Self.joined(&translator)
        var add = LKAddTrackRequest()
        add.cid = "cid-video"
        add.type = .video
        add.source = .camera
        add.width = 1280
        add.height = 720
        add.layers = [LKVideoQuality.high, .medium, .low].map { quality in LKVideoLayer.with { $0.quality = quality } }
        add.simulcastCodecs = [LKSimulcastCodec.with { $0.codec = "vp8"; $0.cid = "cid-video" }]
        let out = translator.translate(.with { $0.addTrack = add }, nowMs: 0)
        let envelope = try #require(out.toCore.first)
        guard case .publishTrack(let request) = envelope.message else { Issue.record("\(envelope)"); return }
        #expect(request.kind == .video && request.source == .camera && request.trackID == "cid-video")
        #expect(request.simulcastLayers == ["q", "h", "f"] && request.width == 1280 && request.height == 720)
        let published = translator.translate(ServerEnvelope(.trackPublished(TrackInfo(sid: "TR_5", kind: .video, source: .camera)),
                                                            requestID: envelope.requestID), nowMs: 0)
        guard case .trackPublished(let response) = published.toClient.first?.message else { Issue.record("\(published)"); return }
        #expect(response.cid == "cid-video" && response.track.sid == "TR_5" && response.track.width == 1280 && response.track.layers.count == 3)
        #expect(response.track.layers.map(\.rid) == ["f", "h", "q"])
    }

    @Test("AddTrack for a codec the server does not forward, or a data track: refused at once, nothing reaches the core",
          arguments: [("h264", LKTrackType.video), ("vp9", .video), ("av1", .video), ("", .data)])
    func refusedTrack(_ codec: String, _ type: LKTrackType) {
        var translator = Self.translator()
        _ = Self.joined(&translator)
        var add = LKAddTrackRequest()
        add.cid = "c"
        add.type = type
        if !codec.isEmpty { add.simulcastCodecs = [LKSimulcastCodec.with { $0.codec = codec }] }
        let out = translator.translate(.with { $0.addTrack = add }, nowMs: 0)
        #expect(out.toCore.isEmpty)
        guard case .requestResponse(let response) = out.toClient.first?.message else { Issue.record("\(out.toClient)"); return }
        #expect(response.reason == .unsupportedType && !response.message.isEmpty)
    }

    @Test("requests in our terms", arguments: [0, 1, 2, 3, 4, 5])
    func requests(_ index: Int) {
        var translator = Self.translator()
        _ = Self.joined(&translator, others: [ParticipantInfo(uid: "bob", sid: "PA_2", role: .broadcaster, kind: .normal,
                                                              tracks: [TrackInfo(sid: "TR_8", kind: .video, source: .camera, simulcastLayers: ["q", "h", "f"])])])
        let requests: [(LKSignalRequest, ClientMessage)] = [
            (.with { $0.offer = .with { $0.type = "offer"; $0.sdp = "v=0" } }, .offer(SessionDescriptionMessage(transport: .publisher, sdp: "v=0"))),
            (.with { $0.answer = .with { $0.type = "answer"; $0.sdp = "v=1" } }, .answer(SessionDescriptionMessage(transport: .subscriber, sdp: "v=1"))),
            (.with { $0.mute = .with { $0.sid = "TR_1"; $0.muted = true } }, .mute(MuteRequest(trackSid: "TR_1", muted: true))),
            (.with { $0.subscription = .with { $0.trackSids = ["TR_8"]; $0.subscribe = false } },
             .updateSubscription(SubscriptionUpdate(trackSids: ["TR_8"], subscribe: false))),
            (.with { $0.trackSetting = .with { $0.trackSids = ["TR_8"]; $0.quality = .low } },
             .setVideoPreference(VideoPreference(uid: "bob", streamType: .low))),
            (.with { $0.leave = .with { $0.reason = .clientInitiated } }, .leave(reason: .clientRequest)),
        ]
        let (request, expected) = requests[index]
        let out = translator.translate(request, nowMs: 0)
        #expect(out.toCore.map(\.message) == [expected])
    }

    @Test("pings: the kind the client sends is the kind it gets back")
    func pings() {
        var translator = Self.translator()
        _ = Self.joined(&translator)
        let asMessage = translator.translate(.with { $0.pingReq = .with { $0.timestamp = 77 } }, nowMs: 0)
        #expect(asMessage.toCore.map(\.message) == [.ping(timestamp: 77)])
        guard case .pongResp(let pong) = translator.translate(ServerEnvelope(.pong(timestamp: 77)), nowMs: 90).toClient.first?.message else {
            Issue.record("no pong_resp"); return
        }
        #expect(pong.lastPingTimestamp == 77 && pong.timestamp == 90)
        _ = translator.translate(.with { $0.ping = 5 }, nowMs: 0)
        guard case .pong(let value) = translator.translate(ServerEnvelope(.pong(timestamp: 5)), nowMs: 9).toClient.first?.message else {
            Issue.record("no pong"); return
        }
        #expect(value == 5)
    }

    @Test("a participant who leaves: an update saying DISCONNECTED, with a newer version and its reason")
    func left() throws {
        var translator = Self.translator()
        _ = Self.joined(&translator, others: [ParticipantInfo(uid: "bob", sid: "PA_2", role: .broadcaster, kind: .normal, version: 4)])
        let out = translator.translate(ServerEnvelope(.participantLeft(uid: "bob", reason: .timeout)), nowMs: 0)
        guard case .update(let update) = out.toClient.first?.message else { Issue.record("\(out.toClient)"); return }
        let bob = try #require(update.participants.first)
        #expect(bob.sid == "PA_2" && bob.state == .disconnected && bob.version == 5 && bob.disconnectReason == .connectionTimeout)
        #expect(translator.translate(ServerEnvelope(.participantLeft(uid: "bob", reason: .timeout)), nowMs: 0).toClient.isEmpty, "once")
    }

    @Test("a refused join: a LeaveRequest and the connection's end, the reason kept")
    func refusedJoin() {
        var translator = Self.translator()
        let out = translator.translate(ServerEnvelope(.error(SignalingError(.limitExceeded, "r is full"))), nowMs: 0)
        guard case .leave(let leave) = out.toClient.first?.message else { Issue.record("\(out)"); return }
        #expect(leave.reason == .joinFailure && out.close == "r is full")
    }

    @Test("a leave: a server going down asks for a full reconnect (action and the older can_reconnect), every other reason is final",
          arguments: [(LeaveReason.serverShutdown, LKLeaveRequest.Action.reconnect, LKDisconnectReason.serverShutdown),
                      (.clientRequest, .disconnect, .clientInitiated), (.ownerLeft, .disconnect, .participantRemoved),
                      (.duplicateIdentity, .disconnect, .duplicateIdentity), (.tokenExpired, .disconnect, .participantRemoved),
                      (.timeout, .disconnect, .connectionTimeout), (.kicked, .disconnect, .participantRemoved),
                      (.roomDeleted, .disconnect, .roomDeleted)])
    func leaveAction(reason: LeaveReason, action: LKLeaveRequest.Action, sent: LKDisconnectReason) {
        var translator = Self.translator()
        _ = Self.joined(&translator)
        let out = translator.translate(ServerEnvelope(.leave(reason: reason)), nowMs: 0)
        guard case .leave(let leave) = out.toClient.first?.message else { Issue.record("\(out)"); return }
        #expect(leave.action == action && leave.canReconnect == (action == .reconnect) && leave.reason == sent)
    }

    @Test("a join refused by a draining server: a LeaveRequest asking the SDK to reconnect, not a final join failure")
    func joinWhileDraining() {
        var translator = Self.translator()
        let out = translator.translate(ServerEnvelope(.error(SignalingError(.shuttingDown, "the server is shutting down"))), nowMs: 0)
        guard case .leave(let leave) = out.toClient.first?.message else { Issue.record("\(out)"); return }
        #expect(leave.action == .reconnect && leave.canReconnect && leave.reason == .serverShutdown)
        #expect(out.close == "the server is shutting down")
    }

    @Test("subscription permissions both ways: LiveKit's grants by identity or sid become ours; our update names the publisher's sid")
    func subscriptionPermissions() {
        var translator = Self.translator()
        _ = Self.joined(&translator, others: [ParticipantInfo(uid: "bob", sid: "PA_2", role: .broadcaster, kind: .normal, version: 1)])
        var request = LKSubscriptionPermission()
        request.allParticipants = false
        request.trackPermissions = [.with { $0.participantIdentity = "carol"; $0.allTracks = true },
                                    .with { $0.participantSid = "PA_2"; $0.trackSids = ["TR_1"] },
                                    .with { $0.participantSid = "PA_unknown"; $0.allTracks = true }]
        let out = translator.translate(.with { $0.subscriptionPermission = request }, nowMs: 0)
        guard case .setSubscriptionPermission(let permission) = out.toCore.first?.message else { Issue.record("\(out)"); return }
        #expect(permission == SubscriptionPermission(allowAll: false, allowed: [.init(uid: "carol"), .init(uid: "bob", trackSids: ["TR_1"])]))
        let told = translator.translate(ServerEnvelope(.subscriptionPermission(SubscriptionPermissionUpdate(uid: "bob", trackSid: "TR_5", allowed: false))), nowMs: 0)
        guard case .subscriptionPermissionUpdate(let update) = told.toClient.first?.message else { Issue.record("\(told)"); return }
        #expect(update.participantSid == "PA_2" && update.trackSid == "TR_5" && !update.allowed)
    }

    @Test("connection quality: ours (the worse direction) as LiveKit's four levels, its own under its sid; unknown and strangers left out",
          arguments: [(1, 1, LKConnectionQuality.excellent), (1, 2, .good), (3, 1, .good), (4, 1, .poor), (2, 5, .poor), (6, 1, .lost), (0, 2, .good)])
    func connectionQuality(up: Int, down: Int, expected: LKConnectionQuality) {
        var translator = Self.translator()
        _ = Self.joined(&translator, others: [ParticipantInfo(uid: "bob", sid: "PA_2", role: .broadcaster, kind: .normal, version: 1)])
        let out = translator.translate(ServerEnvelope(.connectionQuality(ConnectionQuality(participants: [
            .init(uid: "alice", up: up, down: down), .init(uid: "bob", up: 0, down: 0), .init(uid: "stranger", up: 1, down: 1)]))), nowMs: 0)
        guard case .connectionQuality(let update) = out.toClient.first?.message else { Issue.record("\(out)"); return }
        #expect(update.updates.map(\.participantSid) == ["PA_1"] && update.updates.first?.quality == expected)
    }

    @Test("dynacast: the layers the core wants, as LiveKit's qualities")
    func dynacast() {
        let update = LiveKitTranslator.qualityUpdate(VideoLayersRequest(trackSid: "TR_1", activeLayers: ["q", "h"]))
        #expect(update.trackSid == "TR_1" && update.subscribedQualities.map(\.enabled) == [true, true, false])
        #expect(update.subscribedCodecs.first?.codec == "vp8")
    }

    // MARK: Data packets

    @Test("data packets: destinations read from either place, the sender stamped over what the client wrote, other kinds kept whole")
    func dataPackets() throws {
        var packet = LKDataPacket()
        packet.destinationIdentities = ["bob"]
        packet.participantIdentity = "mallory"
        packet.value = .user(.with { $0.payload = Data("hi".utf8); $0.topic = "chat" })
        let stamped = LiveKitData.stamped(try #require(LiveKitData.packet(LiveKitData.serialized(packet))), sender: "alice", senderSid: "PA_1")
        #expect(stamped.participantIdentity == "alice" && stamped.participantSid == "PA_1" && LiveKitData.destinations(of: stamped) == ["bob"])
        #expect(LiveKitData.userPayload(of: stamped).map { String(decoding: $0.payload, as: UTF8.self) + "/" + $0.topic } == "hi/chat")
        var old = LKDataPacket()
        old.value = .user(.with { $0.destinationIdentities = ["carol"] })
        #expect(LiveKitData.destinations(of: old) == ["carol"])
        // A stream chunk (field 14) this file does not declare survives the round trip.
        var rpc = LKDataPacket()
        rpc.value = .rpcRequest(.with { $0.id = "1"; $0.method = "m" })
        var bytes = LiveKitData.serialized(rpc)
        bytes += [0x72, 0x02, 0x0A, 0x00]  // field 14, length 2: an unknown message
        let kept = try #require(LiveKitData.packet(bytes))
        #expect(LiveKitData.userPayload(of: kept) == nil)
        let again = LiveKitData.serialized(LiveKitData.stamped(kept, sender: "a", senderSid: "PA_3"))
        #expect(again.suffix(4) == [0x72, 0x02, 0x0A, 0x00] || again.contains(0x72), "unknown fields kept")
        let made = LiveKitData.user(payload: Array("x".utf8), topic: "t", sender: "1001", senderSid: "PA_4", reliable: false)
        #expect(made.kind == .lossy && made.participantIdentity == "1001" && LiveKitData.userPayload(of: made)?.topic == "t")
        #expect(LiveKitData.packet([0xFF, 0xFF, 0xFF]) == nil)
    }
}

/// HMAC-SHA256 signing of an arbitrary JWT body (OpenSSL's one-shot HMAC), for tokens made as
/// other JWT libraries make them: the JSON is theirs, not our encoder's.
enum JWTTestSigner {
    static func sign(_ input: String, secret: String) -> String {
        var mac = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 32
        let key = Array(secret.utf8), message = Array(input.utf8)
        _ = HMAC(EVP_sha256(), key, Int32(key.count), message, message.count, &mac, &length)
        return input + "." + Data(mac).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}

import RTCFuzzHarness

@Suite("LiveKit fuzz corpus replay")
struct LiveKitCorpusTests {
    @Test("every corpus input runs through the fuzz entry point, and the request seeds decode to what the translator handles")
    func replay() throws {
        let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Fuzz/Corpus/livekit")
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
        #expect(files.count >= 10)
        for file in files {
            let bytes = [UInt8](try Data(contentsOf: folder.appendingPathComponent(file)))
            FuzzHarness.liveKit(bytes)
            if ["offer", "answer", "mute", "leave", "ping-req", "add-track-simulcast"].contains(file) {
                #expect((try? LKSignalRequest(serializedBytes: bytes))?.message != nil, "\(file)")
            }
            if file.hasPrefix("data-") { #expect(LiveKitData.packet(bytes) != nil, "\(file)") }
        }
    }

    @Test("RoomService request bodies: each method reads protobuf and JSON, names the grant it needs; unknown methods and bad bodies are Twirp refusals",
          arguments: [
              ("ListRooms", [UInt8](), false, "list"),
              ("CreateRoom", Array(#"{"name":"a","emptyTimeout":30}"#.utf8), true, "create"),
              ("DeleteRoom", [0x0a, 0x01, 0x61], false, "create"),
              ("ListParticipants", [0x0a, 0x03, 0x61, 0x70, 0x69], false, "admin api"),
              ("UpdateParticipant", Array(#"{"room":"api","identity":"lk","metadata":"m","attributes":{"k":"v"},"unknownField":1}"#.utf8), true, "admin api"),
              ("SendData", Array(#"{"room":"r","data":"aGk=","kind":"RELIABLE","topic":"t"}"#.utf8), true, "admin r"),
              ("MutePublishedTrack", Array(#"{"room":"r","identity":"u","trackSid":"TR_1","muted":true}"#.utf8), true, "admin r"),
              ("NoSuchMethod", [UInt8](), false, "bad_route"),
              ("ListParticipants", [0xff, 0xff, 0xff], false, "malformed"),
              ("ListParticipants", Array("{not json".utf8), true, "malformed"),
              ("ListParticipants", Array(#"{"room": 5}"#.utf8), true, "malformed"),
          ])
    func roomServiceRequests(method: String, body: [UInt8], json: Bool, expected: String) {
        let outcome: String
        do {
            let request = try RoomServiceRequest(method: method, body: body, json: json)
            outcome = switch request.grant {
            case .list: "list"
            case .create: "create"
            case .admin(let room): "admin \(room)"
            }
        } catch {
            outcome = error.code
            #expect(!error.message.isEmpty)
        }
        #expect(outcome == expected, "\(method) \(json ? "JSON" : "protobuf")")
    }
}
