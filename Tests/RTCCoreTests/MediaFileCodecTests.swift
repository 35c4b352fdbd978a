import Foundation
import TestKit
import Testing
@testable import RTCCore

/// The media-file tests that need the codecs (RTCCore): a Y4M round trip measured with PSNR, and
/// files exchanged with ffmpeg. The rest of the file tests are in RTCMediaTests.
@Suite("Media files with the codecs: Y4M PSNR, ffmpeg interop")
struct MediaFileCodecTests {
    @Test("Y4M round trip keeps every pixel, odd sizes included", arguments: [
        VideoSize(width: 16, height: 16), VideoSize(width: 17, height: 9), VideoSize(width: 1, height: 1),
    ])
    func y4mRoundTrip(size: VideoSize) throws {
        let header = Y4MHeader(width: size.width, height: size.height, frameRate: FrameRate(30000, 1001))
        let output = MemoryOutput()
        let writer = try Y4MWriter(output: output, header: header)
        let pool = try #require(VideoFramePool(format: .i420, width: size.width, height: size.height))
        var frames: [VideoFrame] = []
        for index in 0..<3 {
            let buffer = pool.makeBuffer()
            for plane in 0..<3 {
                buffer.forEachRow(ofPlane: plane) { row, bytes in
                    for x in 0..<bytes.count { bytes[x] = UInt8(truncatingIfNeeded: index * 31 + plane * 7 + row * 3 + x) }
                }
            }
            frames.append(VideoFrame(buffer: buffer, timestampUs: 0))
            try writer.write(frames[index])
        }
        try writer.finish()
        let reader = try Y4MReader(input: MemoryInput(output.bytes))
        #expect(reader.header == header)
        for frame in frames {
            let read = try #require(try reader.readFrame())
            var psnr = PSNRAccumulator()
            try psnr.add(reference: frame, distorted: read)
            #expect(psnr.squaredError == 0)
        }
        #expect(try reader.readFrame() == nil)
    }

    // MARK: Interop with ffmpeg

    @Test("ffprobe reads what our writers produce")
    func ffprobeReadsOurFiles() throws {
        let dir = temporaryDirectory("ffprobe")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let size = VideoSize(width: 320, height: 240)
        let generator = try PatternGenerator(kind: .camera, size: size)
        let y4m = try Y4MWriter(path: "\(dir)/a.y4m", header: Y4MHeader(width: 320, height: 240, frameRate: FrameRate(30)))
        let ivf = try IVFWriter(path: "\(dir)/a.ivf", header: IVFHeader(width: 320, height: 240, timebaseDenominator: 30))
        let encoder = try VP8Encoder(configuration: VP8EncoderConfiguration(width: 320, height: 240, bitrateKbps: 400))
        for index in 0..<12 {
            let frame = generator.frame(at: index)
            try y4m.write(frame)
            for packet in try encoder.encode(frame) { try ivf.write(packet.data, timestamp: UInt64(index)) }
        }
        try y4m.finish()
        try ivf.finish()
        let video = try probe("\(dir)/a.ivf")
        #expect(video["codec_name"] == "vp8" && video["width"] == "320" && video["height"] == "240")
        #expect(video["nb_read_frames"] == "12")
        let raw = try probe("\(dir)/a.y4m")
        #expect(raw["codec_name"] == "rawvideo" && raw["nb_read_frames"] == "12" && raw["width"] == "320")

        let wav = try WAVWriter(path: "\(dir)/a.wav", sampleRate: 48000, channels: 2)
        let opus = try OpusEncoder(configuration: OpusEncoderConfiguration(application: .audio, inbandFEC: false))
        let ogg = try OggOpusWriter(path: "\(dir)/a.ogg", head: OpusHead(channels: 2, preSkip: opus.lookahead, inputSampleRate: 48000))
        for index in 0..<50 {
            let pcm = tone(frequency: 440, sampleRate: 48000, channels: 2, samples: 960, offset: index * 960)
            let frame = AudioFrame(samples: .int16(pcm), sampleRate: 48000, channels: 2)
            try wav.write(frame)
            try ogg.write(try opus.encode(frame), samples: 960)
        }
        try wav.finish()
        try ogg.finish(totalSamples: 48000)
        let pcm = try probe("\(dir)/a.wav")
        #expect(pcm["codec_name"] == "pcm_s16le" && pcm["sample_rate"] == "48000" && pcm["channels"] == "2")
        #expect(pcm["nb_read_frames"] != nil)
        let audio = try probe("\(dir)/a.ogg")
        #expect(audio["codec_name"] == "opus" && audio["channels"] == "2")
        #expect(audio["nb_read_frames"] == "50")
    }

    @Test("our readers read what ffmpeg writes")
    func readFFmpegFiles() throws {
        let dir = temporaryDirectory("ffmpeg")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let commands: [[String]] = [
            ["-f", "lavfi", "-i", "testsrc=size=176x144:rate=25", "-frames:v", "10", "-pix_fmt", "yuv420p", "\(dir)/f.y4m"],
            ["-f", "lavfi", "-i", "testsrc=size=176x144:rate=25", "-frames:v", "10", "-c:v", "libvpx", "-b:v", "200k", "\(dir)/f.ivf"],
            ["-f", "lavfi", "-i", "sine=frequency=1000:sample_rate=48000", "-t", "0.5", "-ac", "2", "-c:a", "pcm_s16le", "\(dir)/f.wav"],
            ["-f", "lavfi", "-i", "sine=frequency=1000:sample_rate=48000", "-t", "0.5", "-c:a", "libopus", "\(dir)/f.ogg"],
        ]
        for command in commands {
            let result = try runTool(["ffmpeg", "-v", "error", "-y"] + command)
            try #require(result.status == 0, "ffmpeg failed: \(command)")
        }
        let y4m = try Y4MReader(path: "\(dir)/f.y4m")
        #expect(y4m.header.width == 176 && y4m.header.height == 144 && y4m.header.frameRate == FrameRate(25))
        var frames = 0
        while try y4m.readFrame() != nil { frames += 1 }
        #expect(frames == 10)

        let ivf = try IVFReader(path: "\(dir)/f.ivf")
        #expect(ivf.header.fourcc == "VP80" && ivf.header.width == 176)
        let decoder = try VP8Decoder()
        var decoded = 0
        while let frame = try ivf.readFrame() { if try decoder.decode(frame.data) != nil { decoded += 1 } }
        #expect(decoded == 10)

        let wav = try WAVReader(path: "\(dir)/f.wav")
        #expect(wav.format == WAVFormat(sampleRate: 48000, channels: 2))
        var samples: [Int16] = []
        while let block = try wav.read(samplesPerChannel: 4800) { samples += block.int16Samples }
        #expect(samples.count == 48000)
        #expect(toneShare(samples, channels: 2, frequency: 1000, sampleRate: 48000) > 0.95)

        let ogg = try OggOpusReader(path: "\(dir)/f.ogg")
        #expect(ogg.head.channels == 1)
        let opus = try OpusDecoder(sampleRate: 48000, channels: 1)
        var pcm: [Int16] = []
        while let packet = try ogg.readPacket() { pcm += try opus.decode(packet.data).int16Samples }
        #expect(pcm.count >= 24000)
        #expect(toneShare(Array(pcm[4800...]), channels: 1, frequency: 1000, sampleRate: 48000) > 0.9)
    }
}
