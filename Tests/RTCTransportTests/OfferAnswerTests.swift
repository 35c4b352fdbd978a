import Foundation
import NIOCore
import Testing
@testable import RTCTransport

/// Offers from browsers (Chromium captured here; Firefox ESR and Safari written from their
/// published formats: `Fixtures/offers/README.md`) answered as the SFU answers publishers, and the
/// answer checked field by field against facts read from each offer by hand (`expected.json`).
@Suite("Offer/answer with browsers' offers")
struct OfferAnswerTests {
    struct Expected: Decodable {
        struct Section: Decodable {
            var mid: String?
            var kind: String
            var direction: String?
            var codec: String?
            var payloadType: Int?
            var rtxPayloadType: Int?
            var ssrc: UInt32?
            var rtxSSRC: UInt32?
            var rids: [String]?
            var extmap: [String: Int]?
            var rtcpFb: [String]?
        }
        var bundle: [String]?
        var extmapAllowMixed: Bool?
        var sections: [Section]
    }

    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/offers")
    static let expected: [String: Expected] = {
        guard let data = try? Data(contentsOf: directory.appendingPathComponent("expected.json")),
              let decoded = try? JSONDecoder().decode([String: Expected].self, from: data)
        else { return [:] }
        return decoded
    }()
    static let fixtures = [
        "chromium-camera.sdp", "chromium-video-first.sdp", "chromium-audio-only.sdp", "chromium-screen.sdp", "chromium-simulcast.sdp",
        "chromium-datachannel.sdp", "chromium-recvonly.sdp", "firefox-esr-camera.sdp", "safari-camera.sdp",
    ]

    static func transport() throws -> TransportParameters {
        TransportParameters(ice: .random(), fingerprint: try DTLSCertificate().fingerprint,
                            candidates: [try SocketAddress(ipAddress: "10.77.0.1", port: 7882)], dtlsRole: .server)
    }

    @Sendable static func serverDirection(_ offered: MediaSectionDescription.Direction) -> MediaSectionDescription.Direction {
        offered == .sendrecv || offered == .sendonly ? .recvonly : .inactive
    }

    @Test("a sender's x-google-* parameters on its VP8 (LiveKit's SDKs ask for a 1 Mbps start) come back in the answer's fmtp, and nothing else of that line; an offer without them gets no VP8 fmtp")
    func senderParametersEchoed() throws {
        let text = try String(contentsOf: Self.directory.appendingPathComponent("chromium-camera.sdp"), encoding: .utf8)
        let offer = try SessionDescription(parsing: text)
        let vp8 = try #require(offer.media.first { $0.mediaLine.kind == "video" }?.rtpMaps.first { $0.encoding == "VP8" }?.payloadType)
        func answer(_ sdp: String) throws -> MediaDescription? {
            let negotiated = try SessionDescription(parsing: sdp).negotiate(.sfu)
            let written = SessionDescription.answer(to: negotiated, sessionID: 7, transport: try Self.transport(), iceLite: true,
                                                    setup: "passive", direction: Self.serverDirection).serialized
            let parsed = try SessionDescription(parsing: written)
            return parsed.media.first { $0.mediaLine.kind == "video" }
        }
        #expect(try answer(text)?.formatParameters[vp8] == nil, "a browser's offer: no VP8 fmtp in the answer")
        let marker = "a=rtpmap:\(vp8) VP8/90000\r\n"
        let asked = text.replacingOccurrences(of: marker, with: marker
            + "a=fmtp:\(vp8) x-google-start-bitrate=1000;profile-id=0; x-google-max-bitrate=2000;x-google-bad value=1\r\n")
        #expect(asked != text)
        #expect(try answer(asked)?.formatParameters[vp8] == "x-google-start-bitrate=1000;x-google-max-bitrate=2000")
    }

    @Test("x-google-* parameters kept from a codec's fmtp", arguments: [
        ("x-google-start-bitrate=1000", "x-google-start-bitrate=1000"), ("profile-id=0", nil), ("", nil),
        ("X-Google-Min-Bitrate=100; x-google-start-bitrate=300", "X-Google-Min-Bitrate=100;x-google-start-bitrate=300"),
        ("x-google-" + String(repeating: "a", count: 80) + "=1", nil),
    ] as [(String, String?)])
    func senderParameters(fmtp: String, kept: String?) {
        #expect(SessionDescription.senderParameters(fmtp) == kept)
    }

    @Test("every fixture has its hand-read facts")
    func fixturesListed() throws {
        #expect(Set(Self.expected.keys) == Set(Self.fixtures))
    }

    @Test("the answer keeps the offer's numbering, field by field", arguments: fixtures)
    func answerMirrorsOffer(name: String) throws {
        let expected = try #require(Self.expected[name], "\(name) is not in expected.json")
        let text = try String(contentsOf: Self.directory.appendingPathComponent(name), encoding: .utf8)
        let offer = try SessionDescription(parsing: text)
        let negotiated = try offer.negotiate(.sfu)
        let answer = try SessionDescription(parsing: SessionDescription.answer(
            to: negotiated, sessionID: 7, transport: try Self.transport(), iceLite: true, setup: "passive",
            direction: Self.serverDirection).serialized)

        #expect(answer.media.count == expected.sections.count, "one answer m-line per offer m-line, in order")
        #expect(!answer.sessionAttributes("extmap-allow-mixed").isEmpty == (expected.extmapAllowMixed ?? false))
        var acceptedMids: [String] = []
        for (index, facts) in expected.sections.enumerated() where index < answer.media.count {
            let section = answer.media[index]
            let label = "\(name) m-line \(index) (\(facts.kind) mid \(facts.mid ?? "-"))"
            #expect(section.mediaLine.kind == facts.kind, "\(label): media type")
            #expect(section.mid == facts.mid, "\(label): mid mirrored")
            if facts.kind == "application" {
                // Data channels (RFC 8841): answered with our SCTP port and message size.
                acceptedMids.append(facts.mid ?? "")
                #expect(section.mediaLine.port != "0" && section.mediaLine.proto == "UDP/DTLS/SCTP", "\(label): accepted")
                #expect(section.attributes("sctp-port") == ["5000"] && section.attributes("max-message-size") == ["262144"], "\(label)")
                #expect(negotiated.dataChannel != nil, "\(label): the offer's data channel")
                continue
            }
            let receivable = (facts.kind == "video" && facts.codec == "VP8") || (facts.kind == "audio" && facts.codec == "opus")
            guard receivable, let payloadType = facts.payloadType else {
                #expect(section.mediaLine.port == "0", "\(label): rejected with port 0")
                #expect(negotiated.sections[index].rejection != nil, "\(label): a reason to log")
                continue
            }
            acceptedMids.append(facts.mid ?? "")
            #expect(section.mediaLine.port != "0", "\(label): accepted")
            #expect(section.mediaLine.payloadTypes.first == UInt8(payloadType), "\(label): the offer's payload type")
            let codec = try #require(section.rtpMaps.first, "\(label): an rtpmap")
            #expect(codec.payloadType == UInt8(payloadType) && codec.encoding.lowercased() == facts.codec?.lowercased(), "\(label): codec")
            // RFC 4588 answered with the offer's rtx format, `apt=` the codec, when the offer names its FID
            // SSRC, or for simulcast layers the repaired stream id their repairs carry.
            let repairsNamed = !negotiated.sections[index].simulcastLayers.isEmpty && facts.extmap?[RTPExtensionURI.repairedRTPStreamID] != nil
            if let rtx = facts.rtxPayloadType, facts.rtxSSRC != nil || repairsNamed {
                #expect(section.mediaLine.payloadTypes == [UInt8(payloadType), UInt8(rtx)], "\(label): rtx format kept")
                #expect(section.formatParameters[UInt8(rtx)] == "apt=\(payloadType)", "\(label): apt mapping")
            } else {
                #expect(section.mediaLine.payloadTypes == [UInt8(payloadType)], "\(label): no rtx without an FID SSRC or repaired ids")
            }
            // Extension ids: exactly the offered ones the server uses, under the offer's ids.
            let supported = AnswerCapabilities.sfu.extensions[facts.kind == "video" ? .video : .audio] ?? []
            let wantedExtensions = (facts.extmap ?? [:]).filter { supported.contains($0.key) }
            let answered = Dictionary(section.extensionMaps.map { ($0.uri, Int($0.id)) }, uniquingKeysWith: { first, _ in first })
            #expect(answered == wantedExtensions, "\(label): extmap ids")
            // Feedback: the offered ones the server acts on, in the server's order.
            let feedback = section.rtcpFeedback.map(\.feedback)
            let wantedFeedback = (AnswerCapabilities.sfu.feedback[facts.kind == "video" ? .video : .audio] ?? [])
                .filter { (facts.rtcpFb ?? []).contains($0) }
            #expect(feedback == wantedFeedback, "\(label): rtcp-fb")
            #expect(section.rtcpFeedback.allSatisfy { $0.payloadType == String(payloadType) }, "\(label): feedback for the codec")
            // Direction: the server receives what the offer sends and sends nothing on this transport.
            let offered = facts.direction ?? "sendrecv"
            #expect(section.direction == (offered == "sendrecv" || offered == "sendonly" ? "recvonly" : "inactive"), "\(label): direction")
            // Simulcast: every layer the offer sends (at most three), in its order.
            if let rids = facts.rids, !rids.isEmpty {
                let layers = Array(rids.prefix(3))
                #expect(section.rids.map(\.id) == layers && section.rids.allSatisfy { $0.direction == "recv" }, "\(label): every rid received")
                #expect(section.simulcast == "recv " + layers.joined(separator: ";"), "\(label): simulcast answered with those layers")
                #expect(negotiated.sections[index].simulcastLayers == layers)
            } else {
                #expect(section.rids.isEmpty && section.simulcast == nil, "\(label): no simulcast")
            }
            #expect(section.iceUfrag != nil && section.fingerprint != nil && section.setup == "passive" && section.rtcpMux)
        }
        #expect(answer.bundleGroups == [acceptedMids], "\(name): BUNDLE of the accepted mids")
        #expect(answer.sessionAttributes("ice-lite") == [""])
        // What the SFU must read from the publisher: the offer's ids.
        for uri in [RTPExtensionURI.transportWideSequence, RTPExtensionURI.absSendTime] {
            let offeredID = expected.sections.lazy.compactMap { $0.extmap?[uri] }.first
            #expect(negotiated.extensionID(for: uri).map(Int.init) == offeredID, "\(name): \(uri)")
        }
        // The sections the SFU makes tracks of carry the offer's SSRCs and payload types.
        for (facts, section) in zip(expected.sections, negotiated.sections) where section.isAccepted {
            #expect(section.section?.ssrc == facts.ssrc && section.section?.payloadType == facts.payloadType.map(UInt8.init))
            #expect(section.section?.rtxSSRC == facts.rtxSSRC)
        }
    }

    @Test("Firefox's numbering: VP8 120 with rtx 124, opus 109, its own extension ids")
    func firefox() throws {
        let offer = try SessionDescription(parsing: try String(contentsOf: Self.directory.appendingPathComponent("firefox-esr-camera.sdp"),
                                                               encoding: .utf8))
        let negotiated = try offer.negotiate()
        let video = try #require(negotiated.accepted.first { $0.kind == .video })
        let audio = try #require(negotiated.accepted.first { $0.kind == .audio })
        #expect(video.payloadType == 120 && audio.payloadType == 109)
        #expect(video.rtxPayloadType == 124 && video.rtxSSRC != nil)
        // ESR 128 does not offer extmap-allow-mixed, so the answer must not claim it.
        #expect(!negotiated.extmapAllowMixed)
        #expect(negotiated.extensionID(for: RTPExtensionURI.transportWideSequence) == 7)
    }

    @Test("a bundle-only section (port 0, a=bundle-only, in the BUNDLE group) is received; port 0 outside the group is not")
    func bundleOnly() throws {
        var offer = try SessionDescription(parsing: try String(contentsOf: Self.directory.appendingPathComponent("firefox-esr-camera.sdp"),
                                                               encoding: .utf8))
        let video = try #require(offer.media.firstIndex { $0.mediaLine.kind == "video" })
        offer.media[video].mediaLine.port = "0"
        offer.media[video].lines.append(.attribute("bundle-only"))
        let negotiated = try offer.negotiate()
        #expect(negotiated.sections[video].isAccepted, "\(negotiated.sections[video].rejection ?? "")")
        let answer = SessionDescription.answer(to: negotiated, sessionID: 1, transport: try Self.transport(), iceLite: true,
                                               setup: "passive", direction: Self.serverDirection)
        #expect(answer.bundleGroups.first?.count == 2 && answer.media[video].mediaLine.port != "0")
        // Without being in the group, port 0 still means disabled.
        offer.sessionLines = offer.sessionLines.map { $0.attribute?.name == "group" ? .attribute("group", "BUNDLE 0") : $0 }
        #expect(try offer.negotiate().sections[video].rejection == "the offer disabled it (port 0)")
    }

    @Test("session ids stay within 62 bits (Firefox refuses larger ones)")
    func sessionIDRange() throws {
        let offer = SessionDescription.make(sessionID: UInt64.max, transport: try Self.transport(), iceLite: true, setup: "actpass", sections: [])
        let origin = try #require(offer.sessionLines.first { $0.type == "o" }?.value.split(separator: " "))
        #expect(UInt64(origin[1]).map { $0 <= 0x3FFF_FFFF_FFFF_FFFF } == true, "\(origin)")
    }

    @Test("an offer with nothing the server can receive is refused with every section's reason")
    func nothingReceivable() throws {
        let text = """
        v=0\r
        o=- 1 2 IN IP4 127.0.0.1\r
        s=-\r
        t=0 0\r
        a=group:BUNDLE 0 1\r
        m=video 9 UDP/TLS/RTP/SAVPF 102 103\r
        a=mid:0\r
        a=ice-ufrag:abcd\r
        a=ice-pwd:abcdefghijklmnopqrstuvwx\r
        a=fingerprint:sha-256 00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF\r
        a=sendonly\r
        a=rtpmap:102 H264/90000\r
        a=rtpmap:103 rtx/90000\r
        a=fmtp:103 apt=102\r
        m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r
        a=mid:1\r
        a=sctp-port:5000\r

        """
        // The data channel section alone is answerable; the video is rejected with its reason.
        let offer = try SessionDescription(parsing: text)
        let negotiated = try offer.negotiate()
        #expect(negotiated.sections.map(\.isAccepted) == [false, true])
        #expect(negotiated.sections[0].rejection == "no VP8 (offered: H264, rtx)")
        #expect(negotiated.dataChannel == DataChannelOffer(sctpPort: 5000, maxMessageSize: 65536))
        #expect(negotiated.answerBundle == ["1"])
        // With the data section in another profile, nothing is: one error naming both reasons.
        let legacy = try SessionDescription(parsing: text.replacingOccurrences(of: "UDP/DTLS/SCTP webrtc-datachannel", with: "DTLS/SCTP 5000"))
        #expect(throws: NegotiationError.self) { try legacy.negotiate() }
        do {
            _ = try legacy.negotiate()
        } catch {
            #expect(error.reason.contains("no VP8 (offered: H264, rtx)"), "\(error.reason)")
            #expect(error.reason.contains("(wanted UDP/DTLS/SCTP webrtc-datachannel)"), "\(error.reason)")
        }
        let empty = try SessionDescription(parsing: "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n")
        #expect(throws: NegotiationError("the offer has no media sections")) { try empty.negotiate() }
    }

    @Test("simulcast layers: every one sent with an a=rid, in order, its first alternative, no paused ones, at most three", arguments: [
        ("send q;h;f", ["q", "h", "f"]), ("send f;h;q", ["f", "h", "q"]), ("send 1,2;3,4", ["1", "3"]), ("send q;~f", ["q"]),
        ("recv a;b", []), ("send", []), ("send q;x;f", ["q", "f"]), ("send q;h;f;1", ["q", "h", "f"]), ("send q;q", ["q"]),
    ] as [(String, [String])])
    func receivedLayers(value: String, layers: [String]) {
        let rids = ["q", "h", "f", "1", "3"].map { SDPLine.attribute("rid", "\($0) send") }
        let section = MediaDescription(mediaLine: MediaLine(kind: "video", port: "9", proto: "UDP/TLS/RTP/SAVPF", formats: ["96"]),
                                       lines: rids + [.attribute("rid", "x recv"), .attribute("simulcast", value)])
        #expect(SessionDescription.receivedLayers(of: section) == layers)
    }
}

@Suite("Extension renumbering")
struct ExtensionIDMapTests {
    static let chrome: [UInt8: String] = [
        2: RTPExtensionURI.absSendTime, 3: RTPExtensionURI.transportWideSequence, 13: RTPExtensionURI.videoOrientation,
        4: RTPExtensionURI.mid, 10: RTPExtensionURI.rtpStreamID,
    ]

    @Test("a publisher's ids become the SFU's; a mid, a stream id and unknown elements stay behind")
    func renumbers() {
        let map = ExtensionIDMap(source: Self.chrome, target: SDPCodecs.extensionIDs, carried: SDPCodecs.forwardedExtensionURIs)
        #expect(!map.isIdentity)
        var header = RTPHeader(payloadType: 96, sequenceNumber: 1, timestamp: 2, ssrc: 3, extensions: [
            RTPHeaderExtension(id: 3, bytes: [0x12, 0x34]), RTPHeaderExtension(id: 13, bytes: [0x01]),
            RTPHeaderExtension(id: 4, bytes: Array("1".utf8)), RTPHeaderExtension(id: 10, bytes: Array("f".utf8)),
            RTPHeaderExtension(id: 14, bytes: [0, 0, 0]), RTPHeaderExtension(id: 2, bytes: [1, 2, 3]),
        ])
        #expect(map.apply(to: &header))
        #expect(header.extensions == [
            RTPHeaderExtension(id: RTPExtensionID.transportWideSequence, bytes: [0x12, 0x34]),
            RTPHeaderExtension(id: RTPExtensionID.videoOrientation, bytes: [0x01]),
            RTPHeaderExtension(id: RTPExtensionID.absSendTime, bytes: [1, 2, 3]),
        ])
    }

    @Test("the SDK's own numbering maps onto itself and changes nothing")
    func identity() {
        let own = Dictionary(uniqueKeysWithValues: SDPCodecs.extensionIDs.filter { SDPCodecs.forwardedExtensionURIs.contains($0.key) }
            .map { ($1, $0) })
        let map = ExtensionIDMap(source: own, target: SDPCodecs.extensionIDs, carried: SDPCodecs.forwardedExtensionURIs)
        // Not the identity (ids the session did not name are dropped), yet nothing changes for its own packets.
        #expect(!map.isIdentity && ExtensionIDMap.identity.isIdentity)
        var header = RTPHeader(payloadType: 96, sequenceNumber: 1, timestamp: 2, ssrc: 3,
                               extensions: [RTPHeaderExtension(id: RTPExtensionID.transportWideSequence, bytes: [0, 1])])
        let before = header
        #expect(!map.apply(to: &header) && header == before)
        var bare = RTPHeader(payloadType: 96, sequenceNumber: 1, timestamp: 2, ssrc: 3)
        #expect(!ExtensionIDMap.identity.apply(to: &bare))
    }

    @Test("an id the offer did not name is dropped, not passed on (a crafted mid under the SFU's own numbering)")
    func unnamedIDsDropped() {
        let own = Dictionary(uniqueKeysWithValues: SDPCodecs.extensionIDs.filter { SDPCodecs.forwardedExtensionURIs.contains($0.key) }
            .map { ($1, $0) })
        let map = ExtensionIDMap(source: own, target: SDPCodecs.extensionIDs, carried: SDPCodecs.forwardedExtensionURIs)
        var header = RTPHeader(payloadType: 96, sequenceNumber: 1, timestamp: 2, ssrc: 3, extensions: [
            RTPHeaderExtension(id: RTPExtensionID.transportWideSequence, bytes: [0, 1]),
            RTPHeaderExtension(id: RTPExtensionID.mid, bytes: Array("9".utf8)),
        ])
        #expect(map.apply(to: &header))
        #expect(header.extensions.map(\.id) == [RTPExtensionID.transportWideSequence])
    }

    @Test("a subscriber that dropped an extension is sent packets without it")
    func dropsWhatTheAnswerDid() {
        let own = Dictionary(uniqueKeysWithValues: SDPCodecs.extensionIDs.filter { SDPCodecs.forwardedExtensionURIs.contains($0.key) }
            .map { ($1, $0) })
        let kept = [RTPExtensionURI.transportWideSequence: UInt8(9)]
        let map = ExtensionIDMap(source: own, target: kept, carried: SDPCodecs.forwardedExtensionURIs)
        var header = RTPHeader(payloadType: 96, sequenceNumber: 1, timestamp: 2, ssrc: 3, extensions: [
            RTPHeaderExtension(id: RTPExtensionID.transportWideSequence, bytes: [0, 1]),
            RTPHeaderExtension(id: RTPExtensionID.audioLevel, bytes: [0x7F]),
        ])
        #expect(map.apply(to: &header))
        #expect(header.extensions == [RTPHeaderExtension(id: 9, bytes: [0, 1])])
        #expect(map.target(of: RTPExtensionID.audioLevel) == nil && map.target(of: RTPExtensionID.transportWideSequence) == 9)
    }
}
