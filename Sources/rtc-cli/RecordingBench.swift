#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import RTCCore
import RTCRecording
import ServerCommandLine

/// What recording costs per received frame: the WebM muxer (libavformat, whole clusters) next to
/// the IVF writer, on the same encoded frames; and the WebM's size next to `ffmpeg -c copy` of the
/// same streams (an IVF and an Ogg Opus) into WebM.
struct RecordingBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "recording",
        abstract: "WebM muxing cost per frame against the IVF writer, and the WebM's size against ffmpeg -c copy.")

    @Option(help: "Video frames (30 fps, 640x360 camera pattern); audio covers the same time in 20 ms Opus packets.")
    var frames: Int = 900
    @Option(help: "Runs per writer (interleaved).") var runs: Int = 5
    @Option(help: "Where the files are written.") var dir: String = "/tmp/rtc-bench-recording"

    func validate() throws {
        guard frames >= 30, runs >= 1 else { throw ValidationError("--frames must be >= 30 and --runs >= 1") }
    }

    func run() throws {
        mkdir(dir, 0o755)
        let (video, audio) = try encodeStreams()
        let bytes = video.reduce(0) { $0 + $1.data.count } + audio.reduce(0) { $0 + $1.count }
        print("recording: \(video.count) VP8 frames (640x360, 30 fps) and \(audio.count) Opus packets, \(bytes / 1024) KiB of payload; "
            + "\(runs) interleaved runs, medians")
        var ivfNs: [Double] = [], webmNs: [Double] = [], webmVideoOnlyNs: [Double] = []
        for run in 0..<runs {
            let order = run % 2 == 0 ? [0, 1, 2] : [2, 1, 0]
            for which in order {
                switch which {
                case 0: ivfNs.append(try timeIVF(video) / Double(video.count))
                case 1: webmVideoOnlyNs.append(try timeWebM(video, []) / Double(video.count))
                default: webmNs.append(try timeWebM(video, audio) / Double(video.count + audio.count))
                }
            }
        }
        let ivf = median(ivfNs), webmVideo = median(webmVideoOnlyNs), webm = median(webmNs)
        print("writer                     µs per frame   ratio to IVF")
        print("\("IVF (video)".padding(26)) \(String(format2: ivf / 1000).padding(14)) 1.00")
        print("\("WebM (video only)".padding(26)) \(String(format2: webmVideo / 1000).padding(14)) \(String(format2: webmVideo / ivf))")
        print("\("WebM (video + audio)".padding(26)) \(String(format2: webm / 1000).padding(14)) \(String(format2: webm / ivf))   (per frame or packet)")

        // Size: ours against ffmpeg's muxer given the same streams.
        let oursPath = "\(dir)/ours.webm", ivfPath = "\(dir)/video.ivf", oggPath = "\(dir)/audio.opus", ffmpegPath = "\(dir)/ffmpeg.webm"
        _ = try timeWebM(video, audio, path: oursPath)
        _ = try timeIVF(video, path: ivfPath)
        try writeOgg(audio, path: oggPath)
        unlink(ffmpegPath)
        let remux = try ProcessRunner.run(["ffmpeg", "-hide_banner", "-nostdin", "-loglevel", "error", "-i", ivfPath, "-i", oggPath,
                                           "-map", "0:v", "-map", "1:a", "-c", "copy", "-f", "webm", ffmpegPath])
        guard remux.exitCode == 0 else { throw CLIError("ffmpeg -c copy exited with \(remux.exitCode)") }
        let ours = fileSize(oursPath), theirs = fileSize(ffmpegPath)
        print("size: ours \(ours) bytes, ffmpeg -c copy \(theirs) bytes, ratio \(String(format2: Double(ours) / Double(max(theirs, 1)))); "
            + "payload \(bytes) bytes (container overhead: ours \(ours - bytes), ffmpeg \(theirs - bytes))")
        print("ffmpeg -c copy took \(String(format2: remux.seconds * 1000)) ms as a process (\(String(format2: remux.seconds * 1e6 / Double(video.count + audio.count))) µs "
            + "per frame or packet, start-up included)")
    }

    private func encodeStreams() throws -> ([EncodedVideoFrame], [[UInt8]]) {
        let size = VideoSize(width: 640, height: 360)
        let generator = try PatternGenerator(kind: .camera, size: size, frameRate: FrameRate(30))
        let encoder = try VP8Encoder(configuration: VP8EncoderConfiguration(width: 640, height: 360, bitrateKbps: 1000, frameRate: 30))
        var video: [EncodedVideoFrame] = []
        for index in 0..<frames {
            var frame = generator.frame(at: index)
            frame.timestampUs = Int64(index) * 33_333
            video += try encoder.encode(frame)
        }
        let opus = try OpusEncoder(configuration: OpusEncoderConfiguration(sampleRate: 48000, channels: 2, application: .audio, bitrate: 64000))
        var audio: [[UInt8]] = []
        for packet in 0..<(frames * 100 / 60) {
            let samples = (0..<1920).map { offset -> Int16 in
                Int16(8000 * sin(2 * Double.pi * 440 * Double(packet * 960 + offset / 2) / 48000))
            }
            audio.append(try opus.encode(AudioFrame(samples: .int16(samples), sampleRate: 48000, channels: 2)))
        }
        return (video, audio)
    }

    /// Nanoseconds to write every frame as the recorder does (one write per frame, the header once a second).
    private func timeIVF(_ video: [EncodedVideoFrame], path: String? = nil) throws -> Double {
        let target = path ?? "\(dir)/bench.ivf"
        unlink(target)
        let start = MediaClock.monotonicUs()
        let writer = try IVFWriter(output: try DirectFileOutput(path: target, exclusive: true),
                                   header: IVFHeader(width: 640, height: 360, timebaseNumerator: 1, timebaseDenominator: 90000))
        for (index, frame) in video.enumerated() {
            try writer.write(frame.data, timestamp: UInt64(index) * 3000)
            if index % 30 == 0 { try writer.updateHeader() }
        }
        try writer.finish()
        return Double(MediaClock.monotonicUs() - start) * 1000
    }

    /// Nanoseconds to mux the streams in time order into a WebM.
    private func timeWebM(_ video: [EncodedVideoFrame], _ audio: [[UInt8]], path: String? = nil) throws -> Double {
        let target = path ?? "\(dir)/bench.webm"
        unlink(target)
        let start = MediaClock.monotonicUs()
        let writer = try WebMWriter(output: try DirectFileOutput(path: target, exclusive: true),
                                    tracks: WebMWriter.Tracks(video: VideoSize(width: 640, height: 360), audio: !audio.isEmpty))
        var nextVideo = 0, nextAudio = 0
        while nextVideo < video.count || nextAudio < audio.count {
            let videoMs = Int64(nextVideo) * 100 / 3, audioMs = Int64(nextAudio) * 20
            if nextVideo < video.count && (nextAudio >= audio.count || videoMs <= audioMs) {
                try writer.writeVideo(video[nextVideo].data, ptsMs: videoMs, keyframe: video[nextVideo].isKeyframe)
                nextVideo += 1
            } else {
                try writer.writeAudio(audio[nextAudio], ptsMs: audioMs)
                nextAudio += 1
            }
        }
        try writer.finish()
        return Double(MediaClock.monotonicUs() - start) * 1000
    }

    private func writeOgg(_ audio: [[UInt8]], path: String) throws {
        unlink(path)
        let writer = try OggOpusWriter(output: try DirectFileOutput(path: path, exclusive: true),
                                       head: OpusHead(channels: 2, preSkip: WebMWriter.opusPreSkip, inputSampleRate: 48000))
        for packet in audio { try writer.write(packet, samples: 960) }
        try writer.finish()
    }

    private func fileSize(_ path: String) -> Int {
        var info = stat()
        return stat(path, &info) == 0 ? Int(info.st_size) : 0
    }
}
