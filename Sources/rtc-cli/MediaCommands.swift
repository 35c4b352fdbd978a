import ArgumentParser
import RTCCore
import ServerCommandLine

struct PatternCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pattern", abstract: "Write a synthetic Y4M test clip (camera-like or screen-like).")

    @Option(name: .shortAndLong, help: "Output .y4m file.") var output: String
    @Option(help: "Frame size, WIDTHxHEIGHT (even numbers).") var size: VideoSize = VideoSize(width: 1280, height: 720)
    @Option(help: "Number of frames.") var frames: Int = 150
    @Option(help: "Frames per second.") var fps: Int = 30
    @Option(help: "screen or camera.") var kind: PatternKind = .camera

    func validate() throws {
        guard frames > 0 else { throw ValidationError("--frames must be positive") }
        guard (1...240).contains(fps) else { throw ValidationError("--fps must be 1...240") }
    }

    func run() throws {
        try reporting {
            let generator = try PatternGenerator(kind: kind, size: size, frameRate: FrameRate(fps))
            let writer = try Y4MWriter(path: output, header: Y4MHeader(width: size.width, height: size.height,
                                                                       frameRate: FrameRate(fps)))
            for index in 0..<frames { try writer.write(generator.frame(at: index)) }
            try writer.finish()
            print("wrote \(frames) \(kind.rawValue) frames of \(size) to \(output)")
        }
    }
}

struct EncodeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "encode", abstract: "Encode a Y4M clip to VP8 in IVF.")

    @Option(name: .shortAndLong, help: "Input .y4m file (8-bit 4:2:0).") var input: String
    @Option(name: .shortAndLong, help: "Output .ivf file.") var output: String
    @Option(help: "Target bitrate, kbps (constant bitrate).") var bitrate: Int = 1500
    @Option(help: "Frame rate; default: the input's.") var fps: Int?
    @Option(name: .customLong("max-size"), help: "Shrink to fit inside WIDTHxHEIGHT, keeping the aspect ratio.")
    var maxSize: VideoSize?
    @Flag(help: "Tune for screen content.") var screen = false
    @Option(name: .customLong("cpu-used"), help: "libvpx speed, -16...16.") var cpuUsed: Int = -6
    @Option(help: "Encoder threads.") var threads: Int = 1
    @Option(name: .customLong("temporal-layers"), help: "1, 2 or 3.") var temporalLayers: Int = 1

    func validate() throws {
        guard (10...100_000).contains(bitrate) else { throw ValidationError("--bitrate must be 10...100000 kbps") }
        if let maxSize, maxSize.width % 2 != 0 || maxSize.height % 2 != 0 || maxSize.width < 16 || maxSize.height < 16 {
            throw ValidationError("--max-size \(maxSize) must have even width and height of at least 16")
        }
        if let fps, !(1...240).contains(fps) { throw ValidationError("--fps must be 1...240") }
    }

    func run() throws {
        let summary = try reporting { try VideoFileEncoder.encode(self) }
        print(summary)
    }
}

/// The `encode` pipeline: Y4M reader → (scaler) → VP8 encoder → IVF writer, frame by frame.
enum VideoFileEncoder {
    static func encode(_ options: EncodeCommand) throws -> String {
        let reader = try Y4MReader(path: options.input)
        let header = reader.header
        let rate = options.fps.map { FrameRate($0) } ?? header.frameRate
        let source = VideoSize(width: header.width, height: header.height)
        let target = options.maxSize.map { source.fitted(into: $0) } ?? source
        let encoder = try VP8Encoder(configuration: VP8EncoderConfiguration(
            width: target.width, height: target.height, bitrateKbps: options.bitrate, frameRate: rate.framesPerSecond,
            cpuUsed: options.cpuUsed, threads: options.threads, contentType: options.screen ? .screen : .camera,
            temporalLayers: options.temporalLayers))
        let writer = try IVFWriter(path: options.output, header: IVFHeader(
            width: target.width, height: target.height, timebaseNumerator: rate.denominator,
            timebaseDenominator: rate.numerator))
        let converter = FrameConverter()
        var index: UInt64 = 0
        var bytes = 0
        while var frame = try reader.readFrame() {
            frame.timestampUs = Int64(index) * rate.frameDurationUs
            let scaled = try converter.scale(frame, to: target)
            for packet in try encoder.encode(scaled) {
                try writer.write(packet.data, timestamp: index)
                bytes += packet.data.count
            }
            index += 1
        }
        let written = writer.header.frameCount
        try writer.finish()
        guard index > 0 else { throw CLIError("\(options.input) has no frames") }
        let seconds = Double(index) / rate.framesPerSecond
        let kbps = Double(bytes * 8) / seconds / 1000
        return "encoded \(index) frames (\(written) written) of \(target) to \(options.output): \(Int(kbps.rounded())) kbps"
    }
}

struct DecodeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "decode", abstract: "Decode VP8 in IVF to a Y4M clip.")

    @Option(name: .shortAndLong, help: "Input .ivf file (VP8).") var input: String
    @Option(name: .shortAndLong, help: "Output .y4m file.") var output: String

    func run() throws {
        try reporting {
            let reader = try IVFReader(path: input)
            let header = reader.header
            guard header.fourcc == "VP80" else {
                throw CLIError("\(input) holds '\(header.fourcc)', not VP8 (VP80)")
            }
            let decoder = try VP8Decoder()
            let rate = FrameRate(header.timebaseDenominator, header.timebaseNumerator)
            var writer: Y4MWriter?
            var frames = 0
            var last: (frame: VideoFrame, timestamp: UInt64)?
            while let packet = try reader.readFrame() {
                guard let frame = try decoder.decode(packet.data) else { continue }
                if writer == nil {
                    writer = try Y4MWriter(path: output, header: Y4MHeader(width: frame.width, height: frame.height,
                                                                           frameRate: rate))
                }
                // The timebase is one frame: a gap means the encoder dropped frames. Repeat the last
                // picture, as a player would show it, so the output keeps the input's timing.
                if let last, packet.timestamp > last.timestamp + 1, packet.timestamp - last.timestamp < 1000,
                   last.frame.width == frame.width, last.frame.height == frame.height {
                    for _ in 1..<(packet.timestamp - last.timestamp) { try writer?.write(last.frame) }
                }
                try writer?.write(frame)
                last = (frame, packet.timestamp)
                frames += 1
            }
            guard let writer else { throw CLIError("\(input) has no decodable frames") }
            try writer.finish()
            print("decoded \(frames) frames of \(writer.header.width)x\(writer.header.height) to \(output)")
        }
    }
}

struct EncodeAudioCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "encode-audio", abstract: "Encode a WAV file to Ogg Opus.")

    @Option(name: .shortAndLong, help: "Input .wav file (PCM or float; 8, 12, 16, 24 or 48 kHz; mono or stereo).")
    var input: String
    @Option(name: .shortAndLong, help: "Output .ogg file.") var output: String
    @Option(help: "Bitrate, kbps.") var bitrate: Int = 64

    func validate() throws {
        guard (6...510).contains(bitrate) else { throw ValidationError("--bitrate must be 6...510 kbps") }
    }

    func run() throws {
        try reporting {
            let reader = try WAVReader(path: input)
            let format = reader.format
            guard OpusEncoderConfiguration.sampleRates.contains(format.sampleRate) else {
                throw CLIError("\(input): \(format.sampleRate) Hz is not an Opus input rate (8000, 12000, 16000, 24000 or 48000 Hz); resample it first")
            }
            guard (1...2).contains(format.channels) else {
                throw CLIError("\(input): \(format.channels) channels; only mono and stereo are supported")
            }
            let encoder = try OpusEncoder(configuration: OpusEncoderConfiguration(
                sampleRate: format.sampleRate, channels: format.channels, application: .audio,
                bitrate: bitrate * 1000, inbandFEC: false, packetLossPercent: 0))
            let scale = 48000 / format.sampleRate
            let head = OpusHead(channels: format.channels, preSkip: encoder.lookahead * scale,
                                inputSampleRate: format.sampleRate)
            let writer = try OggOpusWriter(path: output, head: head)
            let frameSamples = encoder.configuration.samplesPerFrame
            var total: Int64 = 0
            var packets = 0
            var pending: [Int16] = []
            func flush(_ samples: [Int16]) throws {
                let frame = AudioFrame(samples: .int16(samples), sampleRate: format.sampleRate, channels: format.channels)
                try writer.write(try encoder.encode(frame), samples: frameSamples * scale)
                packets += 1
            }
            while let block = try reader.read(samplesPerChannel: frameSamples) {
                pending += block.int16Samples
                total += Int64(block.samplesPerChannel)
                while pending.count >= frameSamples * format.channels {
                    try flush(Array(pending.prefix(frameSamples * format.channels)))
                    pending.removeFirst(frameSamples * format.channels)
                }
            }
            // Pad the tail with silence until the packets cover the input plus the encoder's
            // lookahead, so the decoder can return every input sample.
            let needed = total + Int64(encoder.lookahead)
            while Int64(packets * frameSamples) < needed {
                pending += [Int16](repeating: 0, count: frameSamples * format.channels - pending.count)
                try flush(pending)
                pending = []
            }
            try writer.finish(totalSamples: total * Int64(scale))
            print("encoded \(total) samples in \(packets) Opus packets to \(output)")
        }
    }
}

struct DecodeAudioCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "decode-audio", abstract: "Decode Ogg Opus to a 48 kHz WAV file.")

    @Option(name: .shortAndLong, help: "Input .ogg file (Opus).") var input: String
    @Option(name: .shortAndLong, help: "Output .wav file.") var output: String

    func run() throws {
        try reporting {
            let reader = try OggOpusReader(path: input)
            let channels = reader.head.channels
            let decoder = try OpusDecoder(sampleRate: 48000, channels: channels)
            let writer = try WAVWriter(path: output, sampleRate: 48000, channels: channels)
            var skip = reader.head.preSkip
            var position: Int64 = 0  // samples decoded, including pre-skip
            var written: Int64 = 0
            while let packet = try reader.readPacket() {
                var pcm = try decoder.decode(packet.data).int16Samples
                var count = pcm.count / channels
                // The last page's granule position says where the stream really ends.
                if packet.isLast, let end = packet.granulePosition, end - position < Int64(count) {
                    count = Int(max(0, end - position))
                    pcm.removeLast(pcm.count - count * channels)
                }
                position += Int64(count)
                let dropped = min(skip, count)
                skip -= dropped
                let kept = Array(pcm.dropFirst(dropped * channels))
                if !kept.isEmpty { try writer.write(int16: kept) }
                written += Int64(kept.count / channels)
            }
            try writer.finish()
            print("decoded \(written) samples of \(channels)-channel 48 kHz audio to \(output)")
        }
    }
}
