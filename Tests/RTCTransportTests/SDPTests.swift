import Testing
@testable import RTCTransport

@Suite("SDP (RFC 8866, WebRTC subset)")
struct SDPTests {
    @Test("Chromium offers parse and serialize back to the same text", arguments: ["chromium-audio-video.sdp", "chromium-simulcast.sdp"])
    func chromiumRoundTrip(name: String) throws {
        let text = try fixture(name)
        let description = try SessionDescription(parsing: text)
        #expect(description.serialized == text)
        #expect(try SessionDescription(parsing: description.serialized) == description)
    }

    @Test("the audio+video offer exposes every attribute we use")
    func chromiumAttributes() throws {
        let offer = try SessionDescription(parsing: try fixture("chromium-audio-video.sdp"))
        #expect(offer.bundleGroups == [["0", "1"]])
        #expect(offer.media.map(\.mediaLine.kind) == ["audio", "video"])
        #expect(offer.media.allSatisfy { $0.mediaLine.proto == "UDP/TLS/RTP/SAVPF" && $0.rtcpMux && $0.direction == "sendrecv" })
        #expect(offer.media.map(\.mid) == ["0", "1"])
        let ufrag = try #require(offer.iceUfrag)
        #expect(ufrag.count >= 4 && (offer.icePwd?.count ?? 0) >= 22)
        let fingerprint = try #require(offer.fingerprint)
        #expect(fingerprint.algorithm == "sha-256" && fingerprint.digest.count == 32)
        #expect(offer.media[0].setup == "actpass")

        let audio = offer.media[0]
        let opus = try #require(audio.rtpMaps.first { $0.encoding == "opus" })
        #expect(opus.clockRate == 48000 && opus.channels == 2)
        #expect(audio.formatParameters[opus.payloadType]?.contains("useinbandfec=1") == true)
        #expect(audio.extensionMaps.contains { $0.uri == RTPExtensionURI.audioLevel })
        #expect(audio.extensionMaps.contains { $0.uri == RTPExtensionURI.mid })
        #expect(!audio.candidates.isEmpty && audio.candidates.allSatisfy { $0.type == "host" && $0.component == 1 })

        let video = offer.media[1]
        let vp8 = try #require(video.rtpMaps.first { $0.encoding == "VP8" })
        #expect(vp8.clockRate == 90000)
        let feedback = video.rtcpFeedback.filter { $0.payloadType == String(vp8.payloadType) }.map(\.feedback)
        #expect(Set(feedback).isSuperset(of: ["nack", "nack pli", "ccm fir", "transport-cc"]))
        #expect(video.extensionMaps.contains { $0.uri == RTPExtensionURI.transportWideSequence })
        #expect(video.extensionMaps.contains { $0.uri == RTPExtensionURI.absSendTime })
        #expect(video.extensionMaps.contains { $0.uri == RTPExtensionURI.videoOrientation })
        #expect(!video.ssrcs.isEmpty && video.ssrcGroups.contains { $0.semantics == "FID" && $0.ssrcs.count == 2 })
        #expect(video.ssrcAttributes.contains { $0.attribute == "cname" } && video.msid != nil)
    }

    @Test("the simulcast offer exposes rids and the simulcast line")
    func simulcast() throws {
        let offer = try SessionDescription(parsing: try fixture("chromium-simulcast.sdp"))
        let video = try #require(offer.media.first { $0.mediaLine.kind == "video" })
        #expect(video.rids.map(\.id) == ["q", "h", "f"] && video.rids.allSatisfy { $0.direction == "send" })
        #expect(video.simulcast == "send q;h;f")
    }

    @Test("typed values serialize to what they parse from", arguments: [
        "1 1 udp 2113937151 192.168.1.7 54321 typ host generation 0 network-cost 999",
        "2 1 udp 1677729535 203.0.113.5 40000 typ srflx raddr 192.168.1.7 rport 54321 generation 0",
    ])
    func candidates(value: String) throws {
        #expect(try ICECandidate(parsing: value).value == value)
        #expect(try ICECandidate(parsing: "candidate:" + value).value == value)
    }

    @Test("rtpmap, extmap and fingerprint values round trip")
    func values() throws {
        for value in ["111 opus/48000/2", "96 VP8/90000"] { #expect(RTPMap(parsing: value)?.value == value) }
        for value in ["4 urn:ietf:params:rtp-hdrext:sdes:mid", "2/sendonly http://x/y attr"] {
            #expect(ExtensionMap(parsing: value)?.value == value)
        }
        #expect(ExtensionMap(parsing: "/sendonly urn:x") == nil)  // fuzz regression: no ID before the slash
        let fingerprint = "sha-256 0A:FF:10"
        #expect(SDPFingerprint(parsing: fingerprint)?.value == fingerprint)
        #expect(SDPFingerprint(parsing: "sha-256 0A:F") == nil)
    }

    @Test("malformed descriptions are errors", arguments: [
        "", "x", "v=1\r\n", "o=- 1 1 IN IP4 0.0.0.0\r\n", "v=0\r\nm=audio\r\n", "v=0\r\nA=b\r\n", "v=0\r\nbogus\r\n",
    ])
    func invalid(text: String) {
        #expect(throws: ParseError.self) { try SessionDescription(parsing: text) }
    }

    @Test("a bad candidate line is an error")
    func badCandidate() {
        #expect(throws: ParseError.self) { try ICECandidate(parsing: "1 udp x 1.2.3.4 5 typ host") }
        #expect(throws: ParseError.self) { try ICECandidate(parsing: "1 1 udp 1 1.2.3.4 5 typ host raddr") }
    }
}
