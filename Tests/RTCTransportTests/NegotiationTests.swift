import NIOCore
import Testing
@testable import RTCTransport

@Suite("SDP negotiation helpers")
struct NegotiationTests {
    @Test("an offer we make parses back to the same sections and transport parameters")
    func roundTrip() throws {
        let transport = TransportParameters(ice: .random(), fingerprint: try DTLSCertificate().fingerprint,
                                            candidates: [try SocketAddress(ipAddress: "127.0.0.1", port: 7882)], dtlsRole: .server)
        let sections = [
            MediaSectionDescription(mid: "0", kind: .audio, direction: .sendonly, ssrc: 11, streamID: "s", trackID: "a"),
            MediaSectionDescription(mid: "1", kind: .video, direction: .sendonly, ssrc: 22, streamID: "s", trackID: "v"),
            MediaSectionDescription(mid: "2", kind: .video, direction: .recvonly),
            MediaSectionDescription(mid: "3", kind: .video, direction: .sendonly, ssrc: 33, streamID: "s", trackID: "w",
                                    rtxPayloadType: SDPCodecs.rtxPayloadType, rtxSSRC: 34),
            MediaSectionDescription(mid: "4", kind: .video, direction: .recvonly, rtxPayloadType: SDPCodecs.rtxPayloadType),
        ]
        let offer = SessionDescription.make(sessionID: 42, transport: transport, iceLite: true, setup: "actpass", sections: sections)
        let parsed = try SessionDescription(parsing: offer.serialized)
        #expect(parsed.sections == sections)
        #expect(parsed.bundleGroups == [["0", "1", "2", "3", "4"]] && parsed.sessionAttributes("ice-lite") == [""])
        let rtxSection = parsed.media[3]
        #expect(rtxSection.mediaLine.formats == ["96", "97"] && rtxSection.formatParameters[97] == "apt=96")
        #expect(rtxSection.ssrcGroups.contains { $0.semantics == "FID" && $0.ssrcs == [33, 34] })
        let parameters = try parsed.transportParameters(offererRole: .server)
        #expect(parameters == transport)
    }

    @Test("the apt parameter of an rtx format", arguments: [
        ("apt=96", UInt8(96)), ("apt=100;rtx-time=3000", 100), ("rtx-time=3000; apt=98", 98), ("apt=x", nil), ("", nil), ("apt=300", nil),
    ] as [(String, UInt8?)])
    func associatedPayloadType(parameters: String, expected: UInt8?) {
        #expect(SessionDescription.associatedPayloadType(parameters) == expected)
    }

    @Test("Chromium's offer yields its sections, skipping the RTX SSRC")
    func chromium() throws {
        let offer = try SessionDescription(parsing: try fixture("chromium-audio-video.sdp"))
        let sections = offer.sections
        #expect(sections.map(\.kind) == [.audio, .video] && sections.map(\.direction) == [.sendrecv, .sendrecv])
        #expect(sections[0].payloadType == 111 && sections[1].payloadType == 96)
        let video = offer.media[1]
        let fid = try #require(video.ssrcGroups.first { $0.semantics == "FID" })
        #expect(sections[1].ssrc == fid.ssrcs[0])
        // Its rtx format for VP8 (apt=96) and the FID partner are what retransmissions use.
        #expect(sections[1].rtxSSRC == fid.ssrcs[1] && sections[0].rtxPayloadType == nil)
        let rtx = try #require(sections[1].rtxPayloadType)
        #expect(video.formatParameters[rtx] == "apt=96")
        let parameters = try offer.transportParameters()
        #expect(parameters.dtlsRole == .client)  // actpass: the offerer lets the answerer choose; we pick client for it
    }
}
