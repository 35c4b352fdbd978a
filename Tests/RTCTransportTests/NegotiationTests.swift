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
        ]
        let offer = SessionDescription.make(sessionID: 42, transport: transport, iceLite: true, setup: "actpass", sections: sections)
        let parsed = try SessionDescription(parsing: offer.serialized)
        #expect(parsed.sections == sections)
        #expect(parsed.bundleGroups == [["0", "1", "2"]] && parsed.sessionAttributes("ice-lite") == [""])
        let parameters = try parsed.transportParameters(offererRole: .server)
        #expect(parameters == transport)
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
        let parameters = try offer.transportParameters()
        #expect(parameters.dtlsRole == .client)  // actpass: the offerer lets the answerer choose; we pick client for it
    }
}
