@testable import RTCServer
import RTCTransport
import Testing

/// WHEP's per-leg numbering (`WHEPNegotiation.numbering`): the room's payload type for each format
/// → the viewer's, read from the two offers' sections.
@Suite("WHEP payload type numbering")
struct WHEPNumberingTests {
    static func section(_ kind: String, _ maps: [(UInt8, String)], fmtp: [(UInt8, String)] = []) throws -> MediaDescription {
        var lines = ["v=0", "o=- 1 1 IN IP4 0.0.0.0", "s=-", "t=0 0",
                     "m=\(kind) 9 UDP/TLS/RTP/SAVPF \(maps.map { String($0.0) }.joined(separator: " "))", "c=IN IP4 0.0.0.0", "a=mid:0"]
        lines += maps.map { "a=rtpmap:\($0.0) \($0.1)" }
        lines += fmtp.map { "a=fmtp:\($0.0) \($0.1)" }
        return try #require(try SessionDescription(parsing: lines.joined(separator: "\r\n") + "\r\n").media.first)
    }

    static let roomVideo: [(UInt8, String)] = [(96, "VP8/90000"), (97, "rtx/90000")]
    static let roomVideoFmtp: [(UInt8, String)] = [(97, "apt=96")]

    @Test("a viewer's own numbers: VP8 and its rtx (by apt), Opus; formats the viewer lacks are left out")
    func numbering() throws {
        let core = try Self.section("video", Self.roomVideo, fmtp: Self.roomVideoFmtp)
        let aiortc = try Self.section("video", [(97, "VP8/90000"), (98, "rtx/90000"), (99, "H264/90000")], fmtp: [(98, "apt=97")])
        #expect(try WHEPNegotiation.numbering(viewer: aiortc, core: core) == [96: 97, 97: 98])
        let same = try Self.section("video", Self.roomVideo, fmtp: Self.roomVideoFmtp)
        #expect(try WHEPNegotiation.numbering(viewer: same, core: core) == [96: 96, 97: 97])
        // An rtx whose apt names another codec is not VP8's: no repairs.
        let noRepairs = try Self.section("video", [(100, "VP8/90000"), (101, "rtx/90000"), (102, "VP9/90000")], fmtp: [(101, "apt=102")])
        #expect(try WHEPNegotiation.numbering(viewer: noRepairs, core: core) == [96: 100])
        let opus = try Self.section("audio", [(111, "opus/48000/2")])
        #expect(try WHEPNegotiation.numbering(viewer: try Self.section("audio", [(96, "opus/48000/2"), (0, "PCMU/8000")]), core: opus) == [111: 96])
    }

    @Test("a viewer without the room's codec in the section is refused with the reason")
    func missingCodec() throws {
        let core = try Self.section("video", Self.roomVideo, fmtp: Self.roomVideoFmtp)
        let h264Only = try Self.section("video", [(102, "H264/90000")])
        #expect(throws: WHEPNegotiation.Failure.self) { try WHEPNegotiation.numbering(viewer: h264Only, core: core) }
        do {
            _ = try WHEPNegotiation.numbering(viewer: h264Only, core: core)
        } catch {
            #expect(error.reason.contains("VP8/90000"), "\(error.reason)")
        }
    }
}
