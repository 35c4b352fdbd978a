import Testing
@testable import RTCCore

/// Encodes `frames` frames of a synthetic clip and decodes them again, returning the PSNR of every
/// decoded frame against its source (frames the encoder dropped are counted, not compared).
func vp8RoundTrip(kind: PatternKind, size: VideoSize, frames: Int, bitrateKbps: Int)
    throws -> (psnr: Double, decoded: Int, bytes: Int)
{
    let generator = try PatternGenerator(kind: kind, size: size)
    let encoder = try VP8Encoder(configuration: VP8EncoderConfiguration(
        width: size.width, height: size.height, bitrateKbps: bitrateKbps, frameRate: 30,
        contentType: kind == .screen ? .screen : .camera))
    let decoder = try VP8Decoder()
    var psnr = PSNRAccumulator()
    var bytes = 0
    for index in 0..<frames {
        let source = generator.frame(at: index)
        for packet in try encoder.encode(source) {
            bytes += packet.data.count
            let decoded = try #require(try decoder.decode(packet.data))
            try psnr.add(reference: source, distorted: decoded)
        }
    }
    return (psnr.psnr, psnr.frames, bytes)
}

@Suite("VP8 encoder and decoder")
struct VP8Tests {
    @Test("720p round trip at 1500 kbps keeps quality over the whole clip",
          arguments: [(PatternKind.camera, 34.0), (PatternKind.screen, 38.0)])
    func roundTripQuality(kind: PatternKind, minimumPSNR: Double) throws {
        let frames = 150
        let result = try vp8RoundTrip(kind: kind, size: VideoSize(width: 1280, height: 720), frames: frames,
                                      bitrateKbps: 1500)
        #expect(result.psnr >= minimumPSNR, "\(kind) PSNR \(result.psnr) dB")
        // Frames may be dropped only for screen content, and only a few.
        #expect(result.decoded >= (kind == .camera ? frames : frames * 9 / 10))
        // And the stream keeps to its budget (1500 kbps over 5 s, with CBR's tolerance).
        let kbps = Double(result.bytes * 8) / (Double(frames) / 30) / 1000
        #expect(kbps <= 1500 * 1.2, "\(kind) used \(kbps) kbps")
    }

    @Test("a keyframe request gives a keyframe on the very next frame")
    func keyframeOnDemand() throws {
        let size = VideoSize(width: 320, height: 180)
        let generator = try PatternGenerator(kind: .camera, size: size)
        let encoder = try VP8Encoder(configuration: VP8EncoderConfiguration(width: 320, height: 180, bitrateKbps: 300))
        var keyframes: [Int] = []
        for index in 0..<40 {
            if index == 17 || index == 30 { encoder.requestKeyframe() }
            for packet in try encoder.encode(generator.frame(at: index)) where packet.isKeyframe {
                keyframes.append(index)
            }
        }
        #expect(keyframes == [0, 17, 30])
    }

    @Test("a bitrate change reaches the new target within 2 s of content",
          arguments: [(1200, 500), (400, 1000)])
    func bitrateChange(from: Int, to: Int) throws {
        let size = VideoSize(width: 640, height: 360)
        let generator = try PatternGenerator(kind: .camera, size: size)
        let encoder = try VP8Encoder(configuration: VP8EncoderConfiguration(
            width: size.width, height: size.height, bitrateKbps: from, frameRate: 30))
        var bytesPerFrame: [Int] = []
        for index in 0..<180 {
            if index == 90 { try encoder.setBitrate(kbps: to) }
            bytesPerFrame.append(try encoder.encode(generator.frame(at: index)).reduce(0) { $0 + $1.data.count })
        }
        // The second second after the change: frames 120..<150, at most 2 s after it.
        let measured = Double(bytesPerFrame[120..<150].reduce(0, +) * 8) / 1000
        #expect(abs(measured - Double(to)) <= Double(to) * 0.15, "measured \(measured) kbps, target \(to)")
        #expect(encoder.configuration.bitrateKbps == to)
    }

    @Test("temporal layers follow the 0-1 and 0-2-1-2 patterns", arguments: [(2, [0, 1, 0, 1, 0, 1, 0, 1]), (3, [0, 2, 1, 2, 0, 2, 1, 2])])
    func temporalLayers(layers: Int, pattern: [Int]) throws {
        let size = VideoSize(width: 320, height: 180)
        let generator = try PatternGenerator(kind: .camera, size: size)
        let encoder = try VP8Encoder(configuration: VP8EncoderConfiguration(
            width: 320, height: 180, bitrateKbps: 400, temporalLayers: layers))
        let decoder = try VP8Decoder()
        var seen: [Int] = []
        for index in 0..<8 {
            for packet in try encoder.encode(generator.frame(at: index)) {
                seen.append(packet.temporalLayer)
                #expect(try decoder.decode(packet.data) != nil)
            }
        }
        #expect(seen == pattern)
    }

    @Test("temporal layers turned off and on again mid-stream: one layer, then the 0-1 pattern from a base frame; no keyframe, every frame decodes")
    func temporalLayersOffAndOn() throws {
        let generator = try PatternGenerator(kind: .screen, size: VideoSize(width: 320, height: 180))
        let encoder = try VP8Encoder(configuration: VP8EncoderConfiguration(
            width: 320, height: 180, bitrateKbps: 400, contentType: .screen, temporalLayers: 2, allowFrameDropping: false))
        let decoder = try VP8Decoder()
        var seen: [Int] = [], keyframes = 0
        for index in 0..<15 {
            if index == 5 { try encoder.setActiveTemporalLayers(1) }
            if index == 10 { try encoder.setActiveTemporalLayers(2) }
            for packet in try encoder.encode(generator.frame(at: index)) {
                seen.append(packet.temporalLayer)
                if packet.isKeyframe { keyframes += 1 }
                #expect(try decoder.decode(packet.data) != nil, "frame \(index)")
            }
        }
        #expect(seen == [0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0])
        #expect(keyframes == 1)
        #expect(encoder.activeTemporalLayers == 2)
        #expect(throws: CodecError.self) { try encoder.setActiveTemporalLayers(3) }
        #expect(throws: CodecError.self) { try encoder.setActiveTemporalLayers(0) }
    }

    @Test("NV12 and BGRA input are converted for the encoder", arguments: [PixelFormat.nv12, .bgra])
    func otherInputFormats(format: PixelFormat) throws {
        let pool = try #require(VideoFramePool(format: format, width: 64, height: 48))
        let buffer = pool.makeBuffer()
        for plane in 0..<format.planeCount {
            buffer.forEachRow(ofPlane: plane) { _, row in row.initializeMemory(as: UInt8.self, repeating: 128) }
        }
        let encoder = try VP8Encoder(configuration: VP8EncoderConfiguration(width: 64, height: 48, bitrateKbps: 100))
        let packets = try encoder.encode(VideoFrame(buffer: buffer, timestampUs: 0))
        #expect(packets.count == 1 && packets[0].isKeyframe)
    }

    @Test("bad settings and bad input are errors, not traps")
    func rejectsBadInput() throws {
        #expect(throws: CodecError.self) { try VP8Encoder(configuration: VP8EncoderConfiguration(width: 0, height: 720)) }
        #expect(throws: CodecError.self) {
            try VP8Encoder(configuration: VP8EncoderConfiguration(width: 640, height: 360, bitrateKbps: 1))
        }
        let encoder = try VP8Encoder(configuration: VP8EncoderConfiguration(width: 64, height: 48))
        #expect(throws: CodecError.self) { try encoder.setBitrate(kbps: -5) }
        let wrongSize = try PatternGenerator(kind: .camera, size: VideoSize(width: 32, height: 32)).frame(at: 0)
        #expect(throws: CodecError.self) { try encoder.encode(wrongSize) }
        let decoder = try VP8Decoder()
        #expect(throws: CodecError.self) { try decoder.decode([]) }
        #expect(throws: CodecError.self) { try decoder.decode([0x00, 0x01, 0x02, 0xFF, 0x12, 0x34]) }
    }

    /// A screen encoder that drops frames, through the sequence of a live share under a narrow
    /// uplink: the estimate falls from 2.5 Mbps to 294 kbps (its two temporal layers go to one),
    /// two keyframes are asked for, some
    /// frames are skipped for congestion, then 689 kbps. Once the path has room, it gives a frame
    /// for every captured one; when each frame's duration was its gap since the last, libvpx
    /// measured rates far off after the skips and dropped every other frame for seconds.
    @Test("a frame-dropping screen encoder, after frames were skipped, gives every frame once the rate has room")
    func screenAfterSkips() throws {
        var settings = VP8EncoderConfiguration(width: 1280, height: 720, bitrateKbps: 2500, frameRate: 15)
        settings.contentType = .screen
        settings.allowFrameDropping = true
        settings.keyframeInterval = 150
        settings.temporalLayers = 2
        let encoder = try VP8Encoder(configuration: settings)
        let generator = try PatternGenerator(kind: .screen, size: VideoSize(width: 1280, height: 720), frameRate: FrameRate(15))
        var given: [Bool] = []
        for index in 0..<90 {
            let kbps = index < 5 ? 2500 : index < 30 ? 294 : 689
            if kbps != encoder.configuration.bitrateKbps { try encoder.setBitrate(kbps: kbps) }
            if index == 5 { try encoder.setActiveTemporalLayers(1) }  // the estimate leaves no headroom
            if index == 8 || index == 15 { encoder.requestKeyframe() }
            if [5, 6, 7, 8, 9, 11, 40, 41, 42].contains(index) { continue }
            var frame = generator.frame(at: index)
            frame.timestampUs = Int64(index) * 66_667
            given.append(try !encoder.encode(frame).isEmpty)
        }
        // The 40 frames captured from 3 s on (after the last skip).
        let late = given.suffix(40)
        #expect(late.filter { !$0 }.count <= 3, "\(given.map { $0 ? "|" : "." }.joined()) dropped \(late.filter { !$0 }.count) of the last 40 frames")
    }
}
