import NIOCore
import RTCTransport
import Testing

/// One VP8 descriptor parser and one keyframe rule (RFC 7741 §4.2, RFC 6386 §9.1) for the client
/// and the server: the server's borrowed view (``VP8DescriptorLayout``), the client's descriptor
/// (``VP8PayloadDescriptor``, read through it) and its frame header (``VP8FrameHeader``) agree on
/// every payload of this table. The payloads are written from the RFCs' layouts as browsers and
/// libvpx send them (descriptor forms, keyframe and delta tags), plus the broken ones.
@Suite("VP8: one descriptor parser, one keyframe rule")
struct VP8KeyframeTableTests {
    struct Row: Sendable, CustomTestStringConvertible {
        var name: String
        var hex: String
        /// nil: the descriptor does not parse.
        var startsFrame: Bool?
        var keyframe: Bool
        var size: String?
        var pictureID: UInt16?
        var tl0: UInt8?
        var temporalLayer: UInt8?
        var testDescription: String { name }
    }

    static let rows: [Row] = [
        Row(name: "keyframe, no extension (S=1)", hex: "10 50 02 00 9d 01 2a 80 02 68 01 00", startsFrame: true, keyframe: true, size: "640x360"),
        Row(name: "keyframe, 15-bit picture id", hex: "90 80 80 01 50 02 00 9d 01 2a 00 05 d0 02 00", startsFrame: true, keyframe: true,
            size: "1280x720", pictureID: 1),
        Row(name: "keyframe, 7-bit picture id, TL0PICIDX and TID 0 (a screen's base layer)", hex: "90 e0 2a 07 20 50 02 00 9d 01 2a 80 07 38 04",
            startsFrame: true, keyframe: true, size: "1920x1080", pictureID: 42, tl0: 7, temporalLayer: 0),
        Row(name: "delta frame, TID 1 with layer sync", hex: "90 e0 80 05 07 60 51 02 00 01 02", startsFrame: true, keyframe: false,
            pictureID: 5, tl0: 7, temporalLayer: 1),
        Row(name: "a P=0 tag without the start code is no keyframe", hex: "10 50 02 00 00 00 00 80 02 68 01", startsFrame: true, keyframe: false),
        Row(name: "start code cut short (the size missing)", hex: "10 50 02 00 9d 01 2a 80", startsFrame: true, keyframe: false),
        Row(name: "partition 1 of a keyframe does not start it", hex: "11 50 02 00 9d 01 2a 80 02 68 01", startsFrame: false, keyframe: false),
        Row(name: "a continuation packet (S=0)", hex: "00 50 02 00 9d 01 2a 80 02 68 01", startsFrame: false, keyframe: false),
        Row(name: "KEYIDX without TID", hex: "90 10 05 51 02 00", startsFrame: true, keyframe: false),
        Row(name: "picture id announced, missing", hex: "90 80", startsFrame: nil, keyframe: false),
        Row(name: "15-bit picture id cut in half", hex: "90 80 80", startsFrame: nil, keyframe: false),
        Row(name: "TL0PICIDX announced, missing", hex: "90 40", startsFrame: nil, keyframe: false),
        Row(name: "empty payload", hex: "", startsFrame: nil, keyframe: false),
    ]

    static func bytes(_ hex: String) -> [UInt8] { hex.split(separator: " ").compactMap { UInt8($0, radix: 16) } }

    @Test("the layout, the descriptor and the frame header agree", arguments: rows)
    func agree(row: Row) {
        let payload = ByteBuffer(bytes: Self.bytes(row.hex))
        let layout = VP8DescriptorLayout(payload: payload)
        var cursor = payload
        let descriptor = try? VP8PayloadDescriptor(parsing: &cursor)
        #expect((layout == nil) == (row.startsFrame == nil) && (descriptor == nil) == (row.startsFrame == nil), "parses")
        guard let layout, let descriptor else { return }
        #expect(layout.startsFrame == row.startsFrame)
        #expect((descriptor.startOfPartition && descriptor.partitionIndex == 0) == layout.startsFrame)
        #expect(layout.length == payload.readableBytes - cursor.readableBytes, "both end the descriptor at the same byte")
        // The client's rule: a frame that starts here and whose header says keyframe.
        let clientKeyframe = descriptor.startOfPartition && descriptor.partitionIndex == 0
            && (VP8FrameHeader(cursor.readableBytesView)?.isKeyframe ?? false)
        #expect(layout.startsKeyframe == row.keyframe && clientKeyframe == row.keyframe, "keyframe: server \(layout.startsKeyframe), client \(clientKeyframe)")
        #expect(layout.keyframeWidth.map { "\($0)x\(layout.keyframeHeight ?? 0)" } == row.size)
        #expect(descriptor.pictureID == row.pictureID && layout.pictureID(inPayload: payload) == row.pictureID)
        #expect(descriptor.tl0PictureIndex == row.tl0 && layout.tl0PictureIndex(inPayload: payload) == row.tl0)
        #expect(descriptor.temporalLayer == row.temporalLayer && layout.temporalLayer == row.temporalLayer)
    }

    @Test("a descriptor written by the packetizer's form reads back through the one parser", arguments: [
        VP8PayloadDescriptor(startOfPartition: true, pictureID: 300, tl0PictureIndex: 9, temporalLayer: 2, layerSync: true),
        VP8PayloadDescriptor(startOfPartition: false, partitionIndex: 3, pictureID: 17, longPictureID: false),
        VP8PayloadDescriptor(nonReference: true, startOfPartition: true, keyIndex: 4),
        VP8PayloadDescriptor(startOfPartition: true),
    ])
    func roundTrip(descriptor: VP8PayloadDescriptor) throws {
        var buffer = ByteBuffer()
        descriptor.write(to: &buffer)
        #expect(buffer.readableBytes == descriptor.serializedSize)
        var cursor = buffer
        #expect(try VP8PayloadDescriptor(parsing: &cursor) == descriptor && cursor.readableBytes == 0)
    }
}
