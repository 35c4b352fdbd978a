import Foundation
import Testing
@testable import Signaling

@Suite("Signaling envelope and messages")
struct EnvelopeTests {
    static let participant = ParticipantInfo(uid: "1001_sub", sid: "PA_1", role: .broadcaster, kind: .screenShare(owner: "1001"),
                                             tracks: [TrackInfo(sid: "TR_1", kind: .video, source: .screen, ssrc: 42, mid: "0")],
                                             version: 3)

    static let clientMessages: [ClientMessage] = [
        .join(JoinRequest(token: "t", channel: "ScreenShare", uid: "1001_sub", role: .broadcaster, autoSubscribe: false,
                          ignoreScreenShare: true)),
        .offer(SessionDescriptionMessage(transport: .publisher, sdp: "v=0\r\n")),
        .answer(SessionDescriptionMessage(transport: .subscriber, sdp: "v=0\r\n")),
        .publishTrack(PublishTrackRequest(kind: .audio, source: .microphone, mid: "1", ssrc: 7)),
        .unpublishTrack(trackSid: "TR_1"),
        .mute(MuteRequest(trackSid: "TR_1", muted: true)),
        .updateSubscription(SubscriptionUpdate(trackSids: ["TR_1", "TR_2"], subscribe: false)),
        .join(JoinRequest(token: "t", channel: "ScreenShare", uid: "1001", ignoreScreenShare: true, pinnedUIDs: ["1001_sub"])),
        .updateSubscription(SubscriptionUpdate(trackSids: [], subscribe: true, uids: ["1001_sub"])),
        .leave(reason: .clientRequest),
        .ping(timestamp: 1_700_000_000_123),
        .refreshToken(token: "new"),
        .resume(ResumeRequest(token: "t", participantSid: "PA_1")),
        .restartICE(transport: .subscriber),
        .setVideoPreference(VideoPreference(uid: "1001", streamType: .low)),
        .setVideoPreference(VideoPreference(renderWidth: 640, renderHeight: 360)),
        .updateMetadata(MetadataUpdate(name: "Ada", metadata: "ready", attributes: ["hand": "up", "role": ""])),
        // Protocol 1.8.
        .setSubscriptionPermission(SubscriptionPermission(allowAll: false, allowed: [.init(uid: "carol"), .init(uid: "dave", trackSids: ["TR_1"])])),
        .setSubscriptionPermission(.everyone),
    ]

    static let serverMessages: [ServerMessage] = [
        .joined(JoinResponse(participant: participant, others: [], iceServers: [ICEServer(urls: ["stun:127.0.0.1:3478"])])),
        .error(SignalingError(.tokenExpired, "expired", requestID: 4)),
        .offer(SessionDescriptionMessage(transport: .subscriber, sdp: "v=0\r\n")),
        .answer(SessionDescriptionMessage(transport: .publisher, sdp: "v=0\r\n")),
        .trackPublished(TrackInfo(sid: "TR_9", kind: .audio, source: .screenAudio, muted: true)),
        .participantUpdate([participant]),
        .participantLeft(uid: "1001_sub", reason: .ownerLeft),
        .pong(timestamp: 5),
        .tokenWillExpire(expiresAt: 99),
        .tokenRefreshed(expiresAt: 199),
        .leave(reason: .serverShutdown),
        .resumed(JoinResponse(participant: participant, others: [participant])),
        .trackPublished(TrackInfo(sid: "TR_8", kind: .video, source: .camera, simulcastLayers: ["f", "h", "q"])),
        .videoLayers(VideoLayersRequest(trackSid: "TR_8", activeLayers: ["q"])),
        .layerChanged(LayerChange(uid: "1001", trackSid: "TR_8", layer: "h", width: 640, height: 360, reason: .estimate)),
        // Protocol 1.6: what the server's API sets (docs/server-api.md).
        .participantUpdate([ParticipantInfo(uid: "1001", sid: "PA_3", role: .broadcaster, kind: .normal, version: 4, name: "Ada",
                                            metadata: #"{"hand":true}"#, attributes: ["role": "host"])]),
        .joined(JoinResponse(participant: participant, others: [], roomMetadata: "agenda")),
        .roomUpdate(RoomUpdate(metadata: "agenda v2")),
        .trackMuted(MuteRequest(trackSid: "TR_8", muted: true)),
        .leave(reason: .roomDeleted),
        .activeSpeakers(ActiveSpeakers(speakers: [.init(uid: "1001", sid: "PA_2", level: 0.31), .init(uid: "1001_sub", sid: "PA_3", level: 0.1)])),
        // Protocol 1.8.
        .subscriptionPermission(SubscriptionPermissionUpdate(uid: "1001", trackSid: "TR_8", allowed: false)),
        .connectionQuality(ConnectionQuality(participants: [.init(uid: "1001", up: 1, down: 4), .init(uid: "2001", up: 0, down: 6)])),
    ]

    @Test("every client message round trips", arguments: clientMessages)
    func clientRoundTrip(message: ClientMessage) throws {
        let bytes = ClientEnvelope(message, requestID: 12).encoded()
        let decoded = try ClientEnvelope.decode(bytes)
        #expect(decoded.message == message && decoded.requestID == 12 && decoded.version == .current)
    }

    @Test("every server message round trips", arguments: serverMessages)
    func serverRoundTrip(message: ServerMessage) throws {
        #expect(try ServerEnvelope.decode(ServerEnvelope(message).encoded()).message == message)
    }

    @Test("the wire form is a versioned envelope with a type and a payload")
    func wireForm() throws {
        let text = String(decoding: ClientEnvelope(.ping(timestamp: 5), requestID: 1).encoded(), as: UTF8.self)
        #expect(text == #"{"id":1,"payload":{"timestamp":5},"type":"ping","v":"\#(ProtocolVersion.current)"}"#)
        #expect(ProtocolVersion.current == ProtocolVersion(major: 1, minor: 8))
        // Unknown fields anywhere are ignored; a newer minor version is accepted.
        let newer = #"{"v":"1.9","type":"ping","extra":true,"payload":{"timestamp":9,"future":[1,2]}}"#
        #expect(try ClientEnvelope.decode(Array(newer.utf8)).message == .ping(timestamp: 9))
    }

    @Test("a subscription permission (1.8): everyone, the uids listed, or only the tracks listed for a uid")
    func permission() {
        let some = SubscriptionPermission(allowAll: false, allowed: [.init(uid: "carol"), .init(uid: "dave", trackSids: ["TR_1"])])
        #expect(SubscriptionPermission.everyone.permits(uid: "anyone", trackSid: "TR_1"))
        #expect(some.permits(uid: "carol", trackSid: "TR_2") && some.permits(uid: "dave", trackSid: "TR_1"))
        #expect(!some.permits(uid: "dave", trackSid: "TR_2") && !some.permits(uid: "eve", trackSid: "TR_1"))
        #expect(!SubscriptionPermission(allowAll: false).permits(uid: "carol", trackSid: "TR_1"))
    }

    @Test("a track's end-to-end encryption (1.7): written only when declared, read back; a 1.6 peer's tracks read as not encrypted")
    func trackEncryption() throws {
        let request = ClientEnvelope(.publishTrack(PublishTrackRequest(kind: .video, source: .camera, mid: "v0", encryption: .gcm)), requestID: 3)
        let text = String(decoding: request.encoded(), as: UTF8.self)
        #expect(text.contains(#""encryption":"gcm""#), "\(text)")
        guard case .publishTrack(let decoded) = try ClientEnvelope.decode(Array(text.utf8)).message else {
            Issue.record("not a publishTrack: \(text)")
            return
        }
        #expect(decoded.encryption == .gcm)
        let plain = String(decoding: ClientEnvelope(.publishTrack(PublishTrackRequest(kind: .audio, source: .microphone))).encoded(), as: UTF8.self)
        #expect(!plain.contains("encryption"), "\(plain)")
        let older = #"{"v":"1.6","type":"publishTrack","payload":{"kind":"audio","source":"microphone"}}"#
        guard case .publishTrack(let old) = try ClientEnvelope.decode(Array(older.utf8)).message else {
            Issue.record("not a publishTrack")
            return
        }
        #expect(old.encryption == nil)
        let unknown = #"{"v":"1.7","type":"publishTrack","payload":{"kind":"audio","source":"microphone","encryption":"quantum"}}"#
        #expect(throws: (any Error).self) { try ClientEnvelope.decode(Array(unknown.utf8)) }
    }

    @Test("bad messages become protocol errors with their own codes", arguments: [
        (#"not json"#, SignalingError.Code.malformedMessage),
        (#"{"v":"1.0","type":"ping"}"#, .malformedMessage),
        (#"{"v":"1.0","type":"ping","payload":{"timestamp":"soon"}}"#, .malformedMessage),
        (#"{"v":"1.0","type":"teleport","payload":{}}"#, .unknownMessageType),
        (#"{"v":"2.0","type":"ping","payload":{"timestamp":1}}"#, .protocolVersionMismatch),
        (#"{"v":"x","type":"ping","payload":{"timestamp":1}}"#, .protocolVersionMismatch),
        (#"{"type":"ping","payload":{"timestamp":1}}"#, .malformedMessage),
    ])
    func badMessages(text: String, code: SignalingError.Code) {
        #expect { try ClientEnvelope.decode(Array(text.utf8)) } throws: { ($0 as? SignalingError)?.code == code }
    }

    @Test("oversized messages are refused before parsing")
    func oversized() {
        let big = [UInt8](repeating: 0x20, count: ClientEnvelope.maxSize + 1)
        #expect { try ClientEnvelope.decode(big) } throws: { ($0 as? SignalingError)?.code == .messageTooLarge }
    }

    @Test("a request id survives into the error about that request")
    func requestIDInError() {
        #expect {
            try ClientEnvelope.decode(Array(#"{"v":"1.0","id":77,"type":"warp","payload":{}}"#.utf8))
        } throws: { ($0 as? SignalingError)?.requestID == 77 }
    }
}

@Suite("Access tokens (HS256 JWT)")
struct AccessTokenTests {
    let secret = "s3cret-for-tests"

    @Test("a minted token verifies and carries its claims")
    func roundTrip() throws {
        let token = AccessToken(uid: "1001", channel: "ScreenShare", grants: TokenGrants(publishScreen: false), now: 1000, ttl: 60)
        let jwt = token.signed(secret: secret)
        #expect(jwt.split(separator: ".").count == 3 && !jwt.contains("="))
        let claims = try AccessToken.verify(jwt, secret: secret, now: 1030)
        #expect(claims == token && !claims.grants.publishScreen && claims.grants.subscribe)
    }

    @Test("forged, expired, early and malformed tokens are refused, each with its own kind")
    func refusals() {
        let jwt = AccessToken(uid: "1", channel: "c", now: 1000, ttl: 60).signed(secret: secret)
        func kind(_ token: String, now: Int64 = 1010, secret: String? = nil) -> TokenError.Kind? {
            do {
                _ = try AccessToken.verify(token, secret: secret ?? self.secret, now: now)
                return nil
            } catch { return error.kind }
        }
        #expect(kind(jwt, secret: "another-secret") == .badSignature)
        var parts = jwt.split(separator: ".").map(String.init)
        parts[1] = Base64URL.encode(Array(#"{"iss":"x","sub":"admin","channel":"c","grants":{"join":true,"publishAudio":true,"publishVideo":true,"publishScreen":true,"subscribe":true},"iat":0,"nbf":0,"exp":99999999999}"#.utf8))
        #expect(kind(parts.joined(separator: ".")) == .badSignature)  // claims changed, signature kept
        #expect(kind(jwt, now: 1066) == .expired)
        #expect(kind(jwt, now: 900) == .notYetValid)
        #expect(kind("") == .malformed)
        #expect(kind("a.b") == .malformed)
        #expect(kind("a.b.c!") == .malformed)
        let none = Base64URL.encode(Array(#"{"alg":"none"}"#.utf8)) + "." + parts[1] + "."
        #expect(kind(none) == .malformed)
    }

    @Test("grant lists parse, and unknown names are refused")
    func grants() {
        #expect(TokenGrants(list: "join,subscribe") == TokenGrants(join: true, publishAudio: false, publishVideo: false,
                                                                    publishScreen: false, subscribe: true, publishData: false))
        #expect(TokenGrants(list: "join,publishData")?.publishData == true)
        // Absent publishData: allowed, but for a screen share.
        #expect(TokenGrants.all.maySendData(screenShare: false) && !TokenGrants.all.maySendData(screenShare: true))
        #expect(TokenGrants(publishData: true).maySendData(screenShare: true))
        // A token without the claim decodes as absent.
        let old = try? JSONDecoder().decode(TokenGrants.self, from: Data(#"{"join":true,"publishAudio":true,"publishVideo":true,"publishScreen":true,"subscribe":true}"#.utf8))
        #expect(old?.publishData == nil)
        #expect(TokenGrants(list: "join, publishScreen")?.publishScreen == true)
        #expect(TokenGrants(list: "join,fly") == nil)
    }

    @Test("base64url round trips every length")
    func base64() {
        for length in 0..<40 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 * 97 + 250) }
            #expect(Base64URL.decode(Base64URL.encode(bytes)) == bytes)
        }
    }
}

import RTCFuzzHarness

@Suite("Signaling fuzz corpus replay")
struct SignalingCorpusTests {
    @Test("every corpus input runs through the fuzz entry point, and the message seeds decode")
    func replay() throws {
        let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Fuzz/Corpus/signaling")
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
        #expect(files.count >= 3)
        for file in files {
            let bytes = [UInt8](try Data(contentsOf: folder.appendingPathComponent(file)))
            FuzzHarness.signaling(bytes)
            if file == "join" { #expect(throws: Never.self) { try ClientEnvelope.decode(bytes) } }
            if file == "participant-update" || file == "error" { #expect(throws: Never.self) { try ServerEnvelope.decode(bytes) } }
        }
    }
}

@Suite("Signaling URL authority")
struct SignalingURLTests {
    static let cases: [(String, String?, Int?)] = [
        ("10.77.0.1:7880", "10.77.0.1", 7880),
        ("example.com:443", "example.com", 443),
        ("[fd77::1]:7880", "fd77::1", 7880),
        ("[::1]:80", "::1", 80),
        ("fd77::1:7880", nil, nil),  // an IPv6 address needs brackets
        ("[fd77::1]", nil, nil),
        ("[fd77::1:7880", nil, nil),
        ("host:0", nil, nil),
        ("host:99999", nil, nil),
        (":7880", nil, nil),
        ("[]:7880", nil, nil),
    ]

    @Test("host and port, an IPv6 address in brackets (RFC 3986)", arguments: cases)
    func authority(text: String, host: String?, port: Int?) {
        let parsed = SignalingClient.hostAndPort(Substring(text))
        #expect(parsed?.0 == host && parsed?.1 == port, "\(text) → \(String(describing: parsed))")
    }
}
