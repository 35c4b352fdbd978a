import Testing
@testable import RTCCore

@Suite("VP8 multi-resolution (simulcast) encoder")
struct VP8MultiResEncoderTests {
    /// Encodes `frames` frames of the camera pattern and decodes every layer with its own decoder.
    /// `before` runs before each frame's encode (with the frame index) and may change the encoder;
    /// `forceKeyframe` gives the flags of a frame. Returns per layer the encoded frames (one entry per
    /// captured frame, nil when the layer gave none) and the sizes they decoded to.
    private func run(_ encoder: VP8MultiResEncoder, frames: Int,
                     before: (Int) throws -> Void = { _ in },
                     forceKeyframe: (Int) -> [Bool] = { _ in [] })
        throws -> (encoded: [[EncodedVideoFrame?]], decoded: [[VideoSize]])
    {
        let size = VideoSize(width: encoder.layers[0].width, height: encoder.layers[0].height)
        let generator = try PatternGenerator(kind: .camera, size: size)
        let decoders = try encoder.layers.map { _ in try VP8Decoder() }
        var encoded = Array(repeating: [EncodedVideoFrame?](), count: encoder.layers.count)
        var decoded = Array(repeating: [VideoSize](), count: encoder.layers.count)
        for index in 0..<frames {
            try before(index)
            let output = try encoder.encode(generator.frame(at: index), forceKeyframe: forceKeyframe(index))
            #expect(output.count == encoder.layers.count)
            for (layer, packets) in output.enumerated() {
                #expect(packets.count <= 1, "layer \(layer) gave \(packets.count) packets for one frame")
                encoded[layer].append(packets.first)
                for packet in packets {
                    let picture = try #require(try decoders[layer].decode(packet.data))
                    decoded[layer].append(VideoSize(width: picture.width, height: picture.height))
                }
            }
        }
        return (encoded, decoded)
    }

    @Test("1, 2 and 3 layers of 720p give 1280x720, 640x360 and 320x180 streams that decode to those sizes",
          arguments: [
            [1700],
            [1700, 500],
            [1700, 500, 150],
          ])
    func layerSizes(bitrates: [Int]) throws {
        let expected = [VideoSize(width: 1280, height: 720), VideoSize(width: 640, height: 360),
                        VideoSize(width: 320, height: 180)].prefix(bitrates.count)
        let encoder = try VP8MultiResEncoder(width: 1280, height: 720, frameRate: 30, layerBitratesKbps: bitrates)
        #expect(encoder.layers.map { VideoSize(width: $0.width, height: $0.height) } == Array(expected))
        let frames = 10
        let result = try run(encoder, frames: frames)
        for (layer, size) in expected.enumerated() {
            let packets = result.encoded[layer].compactMap { $0 }
            #expect(packets.count == frames, "layer \(layer) encoded \(packets.count) of \(frames) frames")
            #expect(packets.allSatisfy { $0.width == size.width && $0.height == size.height })
            #expect(packets.first?.isKeyframe == true)
            #expect(packets.dropFirst().allSatisfy { !$0.isKeyframe })
            #expect(result.decoded[layer] == Array(repeating: size, count: frames), "layer \(layer)")
        }
    }

    @Test("a keyframe forced on one layer is a keyframe there, and only there", arguments: [0, 1, 2])
    func forcedKeyframe(layer: Int) throws {
        let encoder = try VP8MultiResEncoder(width: 640, height: 360, layerBitratesKbps: [800, 300, 100])
        let result = try run(encoder, frames: 12, forceKeyframe: { index in
            index == 7 ? (0..<3).map { $0 == layer } : []
        })
        for other in 0..<3 {
            let keyframes = result.encoded[other].indices.filter { result.encoded[other][$0]?.isKeyframe == true }
            #expect(keyframes == (other == layer ? [0, 7] : [0]), "layer \(other)")
            // Every layer stays decodable across the others' keyframes.
            #expect(result.decoded[other].count == 12, "layer \(other)")
        }
    }

    @Test("requestKeyframe(layer:) gives a keyframe on that layer's next frame")
    func requestedKeyframe() throws {
        let encoder = try VP8MultiResEncoder(width: 640, height: 360, layerBitratesKbps: [800, 300])
        let result = try run(encoder, frames: 8, before: { index in
            if index == 5 { try encoder.requestKeyframe(layer: 1) }
        })
        #expect(result.encoded[1].indices.filter { result.encoded[1][$0]?.isKeyframe == true } == [0, 5])
        #expect(result.encoded[0].indices.filter { result.encoded[0][$0]?.isKeyframe == true } == [0])
    }

    @Test("a paused layer gives no frames, the others go on, and it resumes with a keyframe", arguments: [0, 1, 2])
    func pausedLayer(layer: Int) throws {
        let encoder = try VP8MultiResEncoder(width: 640, height: 360, layerBitratesKbps: [800, 300, 100])
        let result = try run(encoder, frames: 16, before: { index in
            if index == 4 { try encoder.setPaused(true, layer: layer) }
            if index == 10 { try encoder.setPaused(false, layer: layer) }
        })
        for other in 0..<3 {
            let present = result.encoded[other].indices.filter { result.encoded[other][$0] != nil }
            let keyframes = result.encoded[other].indices.filter { result.encoded[other][$0]?.isKeyframe == true }
            if other == layer {
                #expect(present == Array(0..<4) + Array(10..<16), "paused layer \(other)")
                #expect(keyframes == [0, 10], "paused layer \(other)")
            } else {
                #expect(present == Array(0..<16), "layer \(other)")
                #expect(keyframes == [0], "layer \(other)")
            }
            #expect(result.decoded[other].count == present.count, "layer \(other) decodes after the pause")
        }
        #expect(encoder.layers.allSatisfy { !$0.isPaused })
    }

    @Test("each layer keeps to its own bitrate, before and after setBitrates")
    func layerBitrates() throws {
        let encoder = try VP8MultiResEncoder(width: 640, height: 360, layerBitratesKbps: [800, 300, 100])
        let result = try run(encoder, frames: 180, before: { index in
            if index == 90 { try encoder.setBitrates(kbps: [400, 150, 50]) }
        })
        func kbps(_ layer: Int, _ frames: Range<Int>) -> Double {
            let bytes = result.encoded[layer][frames].reduce(0) { $0 + ($1?.data.count ?? 0) }
            return Double(bytes * 8) / (Double(frames.count) / 30) / 1000
        }
        // The second second after the start and after the change, within CBR's tolerance.
        for (layer, (before, after)) in [(800.0, 400.0), (300, 150), (100, 50)].enumerated() {
            let first = kbps(layer, 30..<90), second = kbps(layer, 120..<180)
            #expect(abs(first - before) <= before * 0.25, "layer \(layer): \(first) kbps, target \(before)")
            #expect(abs(second - after) <= after * 0.25, "layer \(layer): \(second) kbps, target \(after)")
        }
        #expect(encoder.layers.map(\.bitrateKbps) == [400, 150, 50])
    }

    @Test("a bad configuration throws a clear error",
          arguments: [
            (1280, 720, [Int](), "0 layers requested"),
            (1280, 720, [1700, 500, 150, 50], "4 layers requested"),
            (1281, 720, [1700], "must be even"),
            (1280, 721, [1700, 500], "must be even"),
            (0, 720, [1700], "out of range"),
            (1280, 0, [1700], "out of range"),
            (-2, 720, [1700], "out of range"),
            (40, 40, [300, 100, 50], "under 16x16"),
            (1280, 720, [1700, 5], "layer 1 bitrate 5 kbps"),
          ])
    func badConfiguration(width: Int, height: Int, bitrates: [Int], message: String) {
        do {
            _ = try VP8MultiResEncoder(width: width, height: height, layerBitratesKbps: bitrates)
            Issue.record("\(width)x\(height) with \(bitrates.count) layers was accepted")
        } catch {
            #expect(error.kind == .invalidConfiguration)
            #expect(error.message.contains(message), "\(error.message)")
        }
    }

    @Test("misuse after init throws instead of trapping")
    func misuse() throws {
        let encoder = try VP8MultiResEncoder(width: 320, height: 180, layerBitratesKbps: [300, 100])
        let generator = try PatternGenerator(kind: .camera, size: VideoSize(width: 640, height: 360))
        #expect(throws: CodecError.self) { try encoder.encode(generator.frame(at: 0)) }
        let right = try PatternGenerator(kind: .camera, size: VideoSize(width: 320, height: 180))
        #expect(throws: CodecError.self) { try encoder.encode(right.frame(at: 0), forceKeyframe: [true]) }
        #expect(throws: CodecError.self) { try encoder.setBitrates(kbps: [300]) }
        #expect(throws: CodecError.self) { try encoder.setBitrates(kbps: [300, 0]) }
        #expect(throws: CodecError.self) { try encoder.setPaused(true, layer: 2) }
        #expect(throws: CodecError.self) { try encoder.requestKeyframe(layer: -1) }
        // Nothing of the above changed the encoder, which still works.
        #expect(encoder.layers.map(\.bitrateKbps) == [300, 100])
        #expect(try encoder.encode(right.frame(at: 0)).map(\.count) == [1, 1])
    }

    @Test("layer sizes halve, rounded up to even as libvpx sizes them")
    func sizes() {
        #expect(VP8MultiResEncoder.layerSizes(width: 1280, height: 720, count: 3).map(\.description)
                == ["1280x720", "640x360", "320x180"])
        #expect(VP8MultiResEncoder.layerSizes(width: 1918, height: 1078, count: 3).map(\.description)
                == ["1918x1078", "960x540", "480x270"])
        #expect(VP8MultiResEncoder.layerSizes(width: 642, height: 362, count: 3).map(\.description)
                == ["642x362", "322x182", "162x92"])
    }
}
