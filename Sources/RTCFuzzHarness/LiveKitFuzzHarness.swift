import LiveKitProtocol
import Signaling

extension FuzzHarness {
    /// LiveKit's side of the server on untrusted bytes: a SignalRequest through a joined
    /// connection's translator (and a SignalResponse decoded as a client would), a DataPacket as
    /// the data relay reads and rewrites it, the bytes as a LiveKit token and as a connect URL.
    public static func liveKit(_ bytes: [UInt8]) {
        if let request = try? LKSignalRequest(serializedBytes: bytes) {
            var translator = LiveKitTranslator(connect: LiveKitConnectRequest(token: "t"),
                                               claims: LiveKitClaims(apiKey: "key", identity: "fuzz", video: LiveKitVideoGrant(roomJoin: true, room: "r"),
                                                                     now: 0),
                                               room: "r")
            _ = translator.translate(ServerEnvelope(.joined(JoinResponse(participant: ParticipantInfo(uid: "fuzz", sid: "PA_1", role: .broadcaster,
                                                                                                      kind: .normal),
                                                                         others: []))), nowMs: 0)
            let out = translator.translate(request, nowMs: 0)
            for envelope in out.toCore { precondition(try! ClientEnvelope.decode(envelope.encoded()) == envelope, "translated message round trip") }
            for response in out.toClient { _ = try! response.serializedBytes() as [UInt8] }
        }
        if let response = try? LKSignalResponse(serializedBytes: bytes) {
            // The client direction: our SDK's translator reads what a LiveKit server sends.
            var client = LiveKitClientTranslator(identity: "fuzz")
            _ = client.translate(.with { $0.join = .with { $0.participant = .with { $0.sid = "PA_1"; $0.identity = "fuzz" } } })
            for inbound in client.translate(response) {
                if case .event(let message) = inbound {
                    precondition(try! ServerEnvelope.decode(ServerEnvelope(message).encoded()).message == message, "client message round trip")
                }
            }
        }
        if var packet = LiveKitData.packet(bytes) {
            packet = LiveKitData.stamped(packet, sender: "fuzz", senderSid: "PA_1")
            precondition(LiveKitData.packet(LiveKitData.serialized(packet)) != nil, "data packet round trip")
            _ = LiveKitData.destinations(of: packet)
        }
        // The server API's request bodies (Twirp), as protobuf and as JSON, for every method.
        for method in RoomServiceRequest.methods {
            for json in [false, true] {
                if let request = try? RoomServiceRequest(method: method, body: bytes, json: json) { _ = request.grant }
            }
        }
        let text = String(decoding: bytes, as: UTF8.self)
        _ = try? LiveKitClaims.verifySignature(text, keys: ["key": "secret"])
        _ = try? LiveKitConnectRequest(uri: "/rtc?" + text, authorization: text)
        _ = LiveKitSDP.subscriberOffer(text)
        _ = LiveKitSDP.ourStreamIDs(text)
        _ = LiveKitSDP.withTrackIDs(text, ["0": "cid"])
        _ = LiveKitData.incoming(bytes)
    }
}
