import NIOCore
import Testing
@testable import RTCTransport

@Suite("RTP (RFC 3550, RFC 8285)")
struct RTPTests {
    static let packets: [(String, [UInt8])] = [
        ("plain", hex("""
            80 60 1234 00000010 cafebabe   # V=2, PT 96, seq 0x1234, ts 16, SSRC
            01 02 03 04
            """)),
        ("marker and CSRCs", hex("""
            82 e0 ffff 12345678 00000001   # CC=2, M=1, PT 96
            00000002 00000003               # CSRCs
            aa bb
            """)),
        ("one-byte extensions", hex("""
            90 6f 0001 00000000 00000001   # X=1, PT 111
            bede 0003                      # one-byte profile, 3 words
            10 ff                          # id 1, 1 byte: audio level (voice, 127)
            22 0a bc de                    # id 2, 3 bytes: abs-send-time
            31 00 2a                       # id 3, 2 bytes: transport-wide seq 42
            00 00 00                       # padding
            fc                             # Opus payload
            """)),
        ("two-byte extensions", hex("""
            90 60 0002 00000000 00000001
            1000 0002                      # two-byte profile, 2 words
            04 01 7a                       # id 4, 1 byte
            05 00                          # id 5, 0 bytes
            00 00 00                       # padding
            10
            """)),
        ("padding", hex("""
            a0 60 0003 00000000 00000001   # P=1
            de ad                          # payload
            00 00 03                       # 3 bytes of padding
            """)),
    ]

    @Test("parse then serialize gives the same bytes", arguments: packets)
    func roundTrip(name: String, wire: [UInt8]) throws {
        let packet = try RTPPacket(parsing: buffer(wire))
        #expect(bytes(packet.serialized) == wire, "\(name)")
        #expect(packet.serializedSize == wire.count)
        #expect(try RTPPacket(parsing: packet.serialized) == packet)
    }

    @Test("fields and typed extensions are read correctly")
    func fields() throws {
        let packet = try RTPPacket(parsing: buffer(Self.packets[2].1))
        #expect(packet.header.payloadType == 111 && packet.header.sequenceNumber == 1 && packet.header.ssrc == 1)
        #expect(packet.header.extensionProfile == .oneByte && packet.header.extensions.count == 3)
        #expect(try AudioLevel(parsing: #require(packet.header.extensionData(id: 1))) == AudioLevel(voiceActivity: true, level: 127))
        #expect(try AbsSendTime(parsing: #require(packet.header.extensionData(id: 2))).value == 0x0ABCDE)
        #expect(try TransportSequenceNumber(parsing: #require(packet.header.extensionData(id: 3))).value == 42)
        #expect(bytes(packet.payload) == [0xFC])
        let marked = try RTPPacket(parsing: buffer(Self.packets[1].1))
        #expect(marked.header.marker && marked.header.csrcs == [2, 3])
        let padded = try RTPPacket(parsing: buffer(Self.packets[4].1))
        #expect(bytes(padded.payload) == [0xDE, 0xAD] && padded.paddingLength == 3)
    }

    @Test("typed extension values round trip")
    func extensionValues() throws {
        #expect(try VideoOrientation(parsing: VideoOrientation(rotation: 270, frontCamera: true).data)
            == VideoOrientation(rotation: 270, frontCamera: true))
        #expect(VideoOrientation(rotation: -90).rotation == 270)
        #expect(try SDESMid(parsing: SDESMid("video0").data).mid == "video0")
        #expect(AbsSendTime(microseconds: 1_500_000).value == 0x06_0000)  // 1.5 s in 6.18
        #expect(AbsSendTime(value: 0x06_0000).microseconds == 1_500_000)
        #expect(try TransportSequenceNumber(parsing: TransportSequenceNumber(65535).data).value == 65535)
        #expect(throws: ParseError.self) { try AbsSendTime(parsing: ByteBuffer(bytes: [1, 2])) }
    }

    @Test("extensions pick the one-byte form when they fit, two-byte otherwise")
    func profileChoice() throws {
        var header = RTPHeader(payloadType: 96, sequenceNumber: 1, timestamp: 2, ssrc: 3)
        header.setExtension(id: 3, data: SDESMid("0").data)
        header.setExtension(id: 5, data: VideoOrientation(rotation: 90).data)
        var packet = RTPPacket(header: header, payload: ByteBuffer(bytes: [1, 2, 3]))
        var parsed = try RTPPacket(parsing: packet.serialized)
        #expect(parsed.header.extensionProfile == .oneByte)
        #expect(try VideoOrientation(parsing: #require(parsed.header.extensionData(id: 5))).rotation == 90)
        packet.header.setExtension(id: 20, data: ByteBuffer(bytes: [UInt8](repeating: 7, count: 20)))
        parsed = try RTPPacket(parsing: packet.serialized)
        #expect(parsed.header.extensionProfile == .twoByte && parsed.header.extensions.count == 3)
        #expect(parsed.payload == packet.payload)
    }

    @Test("every prefix of a valid packet is an error, never a trap", arguments: packets)
    func truncation(name: String, wire: [UInt8]) {
        // A prefix that ends inside the payload is itself a valid packet, so check header prefixes
        // and, for padded packets, every prefix (the padding count then lies).
        let header = try! RTPPacket(parsing: buffer(wire)).header.serializedSize
        expectEveryPrefixFails(Array(wire[..<header]), name) { try _ = RTPPacket(parsing: buffer($0)) }
    }

    @Test("bad version and lying padding are errors")
    func invalid() {
        #expect(throws: ParseError.self) { try RTPPacket(parsing: buffer(hex("40 60 0001 00000000 00000001"))) }
        #expect(throws: ParseError.self) { try RTPPacket(parsing: buffer(hex("a0 60 0001 00000000 00000001 01 09"))) }
        #expect(throws: ParseError.self) { try RTPPacket(parsing: buffer(hex("a0 60 0001 00000000 00000001 00"))) }
    }

    @Test("RFC 4588: wrapping puts the OSN before the payload on the RTX stream; unwrapping restores the original")
    func rtxRoundTrip() throws {
        let original = try RTPPacket(parsing: buffer(Self.packets[2].1))  // one-byte extensions
        let rtx = RTXPacket.wrap(original, ssrc: 0xAABB_CCDD, payloadType: 97, sequenceNumber: 7)
        #expect(rtx.header.ssrc == 0xAABB_CCDD && rtx.header.payloadType == 97 && rtx.header.sequenceNumber == 7)
        #expect(rtx.header.timestamp == original.header.timestamp && rtx.header.extensions == original.header.extensions)
        #expect(bytes(rtx.payload) == [0x00, 0x01, 0xfc])  // OSN 1, then the Opus byte
        let wire = try RTPPacket(parsing: rtx.serialized)
        let restored = try #require(try RTXPacket.unwrap(wire, ssrc: original.header.ssrc, payloadType: original.header.payloadType))
        #expect(restored == original)
    }

    @Test("RFC 4588: a padding-only packet (a filled number) is sent again as its OSN and padding, and unwraps to a padding-only packet")
    func rtxFiller() throws {
        let filler = RTPPacket.filler(RTPHeader(marker: true, payloadType: 96, sequenceNumber: 4242, timestamp: 90, ssrc: 0x1234))
        #expect(filler.payload.readableBytes == 0 && filler.paddingLength > 0 && !filler.header.marker)
        let rtx = RTXPacket.wrap(filler, ssrc: 0xAA, payloadType: 97, sequenceNumber: 1)
        let wire = try RTPPacket(parsing: rtx.serialized)
        #expect(bytes(wire.payload) == [0x10, 0x92] && wire.paddingLength == filler.paddingLength)
        let restored = try #require(try RTXPacket.unwrap(wire, ssrc: 0x1234, payloadType: 96))
        #expect(restored == (try RTPPacket(parsing: filler.serialized)))
    }

    @Test("RTX payloads: padding only is no packet, one byte is an error", arguments: [
        ("padding only", "a0 61 0009 00000000 00000002 00 00 03", nil),
        ("OSN only", "80 61 0009 00000000 00000002 12 34", 0x1234),
        ("one byte", "80 61 0009 00000000 00000002 12", -1),
    ] as [(String, String, Int?)])
    func rtxPayloads(name: String, wire: String, osn: Int?) throws {
        let packet = try RTPPacket(parsing: buffer(hex(wire)))
        if osn == -1 {
            #expect(throws: ParseError.self, "\(name)") { try RTXPacket.unwrap(packet, ssrc: 1, payloadType: 96) }
            return
        }
        let unwrapped = try RTXPacket.unwrap(packet, ssrc: 1, payloadType: 96)
        #expect(unwrapped.map { Int($0.header.sequenceNumber) } == osn, "\(name)")
        #expect(unwrapped.map { $0.payload.readableBytes == 0 && $0.header.ssrc == 1 } ?? true)
    }
}
