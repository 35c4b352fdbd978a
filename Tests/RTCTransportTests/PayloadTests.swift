import NIOCore
import Testing
@testable import RTCTransport

/// A fake VP8 frame: a real keyframe or interframe header followed by filler bytes.
func vp8Frame(keyframe: Bool, size: Int, width: Int = 640, height: Int = 360, seed: UInt8 = 0) -> [UInt8] {
    var bytes: [UInt8] = keyframe
        ? [0x50, 0x01, 0x00, 0x9D, 0x01, 0x2A, UInt8(width & 0xFF), UInt8(width >> 8), UInt8(height & 0xFF), UInt8(height >> 8)]
        : [0x51, 0x01, 0x00]
    while bytes.count < size { bytes.append(UInt8(truncatingIfNeeded: bytes.count) &+ seed) }
    return bytes
}

@Suite("VP8 payload (RFC 7741)")
struct VP8PayloadTests {
    /// The descriptor layouts of RFC 7741 §4.2, byte for byte.
    static let descriptors: [(String, [UInt8], VP8PayloadDescriptor)] = [
        ("required byte only: S=1, PID=0", hex("10"), VP8PayloadDescriptor(startOfPartition: true)),
        ("N=1, PID=3, continuation", hex("23"), VP8PayloadDescriptor(nonReference: true, startOfPartition: false, partitionIndex: 3)),
        ("7-bit PictureID (M=0)", hex("90 80 11"), VP8PayloadDescriptor(startOfPartition: true, pictureID: 0x11, longPictureID: false)),
        ("15-bit PictureID (M=1)", hex("90 80 9234"), VP8PayloadDescriptor(startOfPartition: true, pictureID: 0x1234)),
        ("PictureID, TL0PICIDX, TID=2 with Y, KEYIDX", hex("90 f0 8001 05 b3"),
         VP8PayloadDescriptor(startOfPartition: true, pictureID: 1, tl0PictureIndex: 5, temporalLayer: 2, layerSync: true, keyIndex: 19)),
        ("TL0PICIDX and TID only", hex("80 60 ff 40"),
         VP8PayloadDescriptor(startOfPartition: false, tl0PictureIndex: 255, temporalLayer: 1)),
    ]

    @Test("descriptors parse and serialize byte for byte", arguments: descriptors)
    func descriptor(name: String, wire: [UInt8], expected: VP8PayloadDescriptor) throws {
        var input = buffer(wire + [0xAB])
        let parsed = try VP8PayloadDescriptor(parsing: &input)
        #expect(parsed == expected, "\(name)")
        #expect(bytes(input) == [0xAB])
        var out = ByteBuffer()
        parsed.write(to: &out)
        #expect(bytes(out) == wire && parsed.serializedSize == wire.count, "\(name)")
        expectEveryPrefixFails(wire, name) { prefix in
            var cursor = buffer(prefix)
            _ = try VP8PayloadDescriptor(parsing: &cursor)
            if prefix.isEmpty { return }
            // A prefix can be a complete shorter descriptor only if it stops right after the first byte
            // with X=0, which these vectors never do unless they are one byte long.
        }
    }

    @Test("the packetizer respects the MTU, marks the start and counts PictureIDs", arguments: [1, 1199, 1200, 5000, 30000])
    func packetizer(size: Int) throws {
        var packetizer = VP8Packetizer(maxPayloadSize: 1200, initialPictureID: 0x7FFF)
        let frame = vp8Frame(keyframe: true, size: max(size, 10))
        let payloads = packetizer.packetize(buffer(frame))
        #expect(payloads.allSatisfy { $0.readableBytes <= 1200 })
        #expect(payloads.count == (frame.count + 1195) / 1196)  // 4-byte descriptor with a 15-bit PictureID
        var reassembled: [UInt8] = []
        for (index, payload) in payloads.enumerated() {
            var cursor = payload
            let descriptor = try VP8PayloadDescriptor(parsing: &cursor)
            #expect(descriptor.startOfPartition == (index == 0) && descriptor.pictureID == 0x7FFF)
            reassembled += bytes(cursor)
        }
        #expect(reassembled == frame)
        #expect(packetizer.pictureID == 0)  // wrapped at 15 bits
    }

    @Test("temporal layers carry TL0PICIDX and TID")
    func temporalLayers() throws {
        var packetizer = VP8Packetizer(initialTL0PictureIndex: 254)
        var seen: [(UInt8?, UInt8?)] = []
        for (index, layer) in [UInt8(0), 1, 0, 1].enumerated() {
            var payload = packetizer.packetize(buffer(vp8Frame(keyframe: index == 0, size: 50)), temporalLayer: layer,
                                               layerSync: layer == 1)[0]
            let descriptor = try VP8PayloadDescriptor(parsing: &payload)
            seen.append((descriptor.tl0PictureIndex, descriptor.temporalLayer))
        }
        #expect(seen.map(\.0) == [255, 255, 0, 0] && seen.map(\.1) == [0, 1, 0, 1])
    }

    /// Packets of three frames (keyframe, two interframes) as (sequence, timestamp, marker, payload).
    func stream(startSequence: UInt16 = 65530) -> [(UInt16, UInt32, Bool, ByteBuffer)] {
        var packetizer = VP8Packetizer(maxPayloadSize: 300)
        var packets: [(UInt16, UInt32, Bool, ByteBuffer)] = []
        var sequence = startSequence
        for (index, size) in [1000, 700, 650].enumerated() {
            let payloads = packetizer.packetize(buffer(vp8Frame(keyframe: index == 0, size: size, seed: UInt8(index))))
            for (offset, payload) in payloads.enumerated() {
                packets.append((sequence, UInt32(index * 3000), offset == payloads.count - 1, payload))
                sequence &+= 1
            }
        }
        return packets
    }

    @Test("frames come back whole, in order, from shuffled packets across a sequence wrap")
    func assemblerReorder() throws {
        var assembler = VP8FrameAssembler()
        var frames: [AssembledVP8Frame] = []
        var packets = stream()
        var generator = SystemRandomNumberGenerator()
        packets.shuffle(using: &generator)
        for (sequence, timestamp, marker, payload) in packets {
            frames += try assembler.insert(sequenceNumber: sequence, timestamp: timestamp, marker: marker, payload: payload)
        }
        #expect(frames.map(\.rtpTimestamp) == [0, 3000, 6000])
        #expect(frames.map { $0.data.readableBytes } == [1000, 700, 650])
        #expect(bytes(frames[1].data) == vp8Frame(keyframe: false, size: 700, seed: 1))
        #expect(frames[0].isKeyframe && frames[0].width == 640 && frames[0].height == 360 && !frames[1].isKeyframe)
        #expect(frames.map(\.partitionOffsets) == [[0], [0], [0]])
        #expect(assembler.missingSequenceNumbers.isEmpty && assembler.framesDropped == 0)
    }

    @Test("a missing packet holds the frame back and is reported; it completes when the packet comes")
    func assemblerMissing() throws {
        var assembler = VP8FrameAssembler()
        let packets = stream()
        let lost = 5  // inside the second frame
        var frames: [AssembledVP8Frame] = []
        for (index, (sequence, timestamp, marker, payload)) in packets.enumerated() where index != lost {
            frames += try assembler.insert(sequenceNumber: sequence, timestamp: timestamp, marker: marker, payload: payload)
        }
        #expect(frames.map(\.rtpTimestamp) == [0])  // the third frame waits behind the second
        #expect(assembler.missingSequenceNumbers == [packets[lost].0])
        let (sequence, timestamp, marker, payload) = packets[lost]
        frames += try assembler.insert(sequenceNumber: sequence, timestamp: timestamp, marker: marker, payload: payload)
        #expect(frames.map(\.rtpTimestamp) == [0, 3000, 6000])
    }

    @Test("giving up on a gap, or a keyframe after it, moves on and counts the dropped frame")
    func assemblerSkip() throws {
        var assembler = VP8FrameAssembler()
        let packets = stream()
        var frames: [AssembledVP8Frame] = []
        for (index, (sequence, timestamp, marker, payload)) in packets.enumerated() where index != 5 {
            frames += try assembler.insert(sequenceNumber: sequence, timestamp: timestamp, marker: marker, payload: payload)
        }
        frames += assembler.skipMissing()
        #expect(frames.map(\.rtpTimestamp) == [0, 6000] && assembler.framesDropped == 1)
        // A keyframe after a gap is given out at once.
        var packetizer = VP8Packetizer()
        let key = packetizer.packetize(buffer(vp8Frame(keyframe: true, size: 100)))[0]
        let next = packets.last!.0 &+ 3
        frames += try assembler.insert(sequenceNumber: next, timestamp: 99000, marker: true, payload: key)
        #expect(frames.last?.rtpTimestamp == 99000 && assembler.framesDropped == 2)
    }

    @Test("VP8 frame headers: keyframe size and interframe flag")
    func frameHeader() {
        let key = VP8FrameHeader(vp8Frame(keyframe: true, size: 20, width: 1280, height: 720))
        #expect(key?.isKeyframe == true && key?.width == 1280 && key?.height == 720)
        #expect(VP8FrameHeader(vp8Frame(keyframe: false, size: 20))?.isKeyframe == false)
        #expect(VP8FrameHeader([0x50, 0x01]) == nil)
        #expect(VP8FrameHeader([0x50, 0x01, 0x00, 0x00, 0x00, 0x00, 0, 0, 0, 0]) == nil)  // no start code
    }
}

@Suite("Opus payload (RFC 7587, RFC 6716 §3)")
struct OpusPayloadTests {
    @Test("TOC byte and frame-count code give the packet duration", arguments: [
        ([0x78], OpusPacketInfo.Mode.hybrid, false, 1, 960),          // config 15: hybrid FB 20 ms
        ([0xFC, 0x00], .celt, true, 1, 960),                           // config 31, stereo
        ([0x01, 0xAA, 0xBB], .silk, false, 2, 480),                     // config 0 (10 ms), code 1, equal halves
        ([0x0B, 0x83, 0x00, 0x00, 0x00], .silk, false, 3, 960),         // config 1 (NB 20 ms), code 3, 3 frames
        ([0x4A, 0x02], .silk, false, 2, 960),                           // config 9 (WB 20 ms), code 2
        ([0x18], .silk, false, 1, 2880),                                // config 3 (NB 60 ms)
    ] as [([UInt8], OpusPacketInfo.Mode, Bool, Int, Int)])
    func toc(packet: [UInt8], mode: OpusPacketInfo.Mode, stereo: Bool, frames: Int, samplesPerFrame: Int) throws {
        let info = try OpusPacketInfo(parsing: buffer(packet))
        #expect(info.mode == mode && info.stereo == stereo && info.frameCount == frames && info.samplesPerFrame == samplesPerFrame)
    }

    @Test("invalid packets are errors", arguments: [[], [0x01, 0xAA], [0x03, 0x00], [0x1B, 0x03]] as [[UInt8]])
    func invalid(packet: [UInt8]) {
        #expect(throws: ParseError.self) { try OpusPacketInfo(parsing: buffer(packet)) }
    }
}
