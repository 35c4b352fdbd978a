import Testing
import RTCTransport
import Signaling

@Suite("RFC 7983 demultiplexing")
struct DemultiplexerTests {
    @Test("the first byte picks the protocol", arguments: [
        ([0x00, 0x01], DatagramKind.stun),        // STUN binding request
        ([0x01, 0x01], .stun),                    // STUN binding success
        ([0x16, 0xFE, 0xFD], .dtls),              // DTLS handshake record, version 1.2
        ([0x17, 0xFE, 0xFD], .dtls),              // DTLS application data
        ([0x80, 0x60], .rtp),                     // RTP, PT 96
        ([0x80, 0xE0], .rtp),                     // RTP, PT 96 with marker
        ([0x80, 0xC8], .rtcp),                    // RTCP SR (200)
        ([0x81, 0xCD], .rtcp),                    // RTCP RTPFB (205)
        ([0x40, 0x00], .turnChannel),
        ([0x10], .zrtp),
        ([0xFF], .unknown),
        ([], .unknown),
    ] as [([UInt8], DatagramKind)])
    func classify(bytes: [UInt8], kind: DatagramKind) {
        #expect(PacketDemultiplexer.classify(bytes) == kind)
    }

    @Test("protocol versions parse, compare and check compatibility")
    func versions() {
        #expect(ProtocolVersion("1.2") == ProtocolVersion(major: 1, minor: 2))
        #expect(ProtocolVersion("1") == nil && ProtocolVersion("a.b") == nil && ProtocolVersion("1.-1") == nil)
        #expect(ProtocolVersion(major: 1, minor: 0) < ProtocolVersion(major: 1, minor: 3))
        #expect(ProtocolVersion.current.isCompatible(with: ProtocolVersion(major: 1, minor: 9)))
        #expect(!ProtocolVersion.current.isCompatible(with: ProtocolVersion(major: 2, minor: 0)))
    }
}
