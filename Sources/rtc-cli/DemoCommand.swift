#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import RTCCore

/// Until the end-to-end demo exists: the codec round trip on synthetic media.
struct DemoCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Run the media round trip on a synthetic screen clip and tone, and print where the files went.")

    @Option(help: "Output folder.") var dir: String = "out/demo"
    @Option(help: "Frames in the clip.") var frames: Int = 90

    func run() throws {
        try makeDirectories(dir)
        let clip = "\(dir)/screen.y4m", ivf = "\(dir)/screen.ivf", decoded = "\(dir)/screen-decoded.y4m"
        let wav = "\(dir)/tone.wav", ogg = "\(dir)/tone.ogg", back = "\(dir)/tone-decoded.wav"
        print("1. synthetic screen clip");
        try PatternCommand.parse(["--output", clip, "--size", "1280x720", "--frames", "\(frames)", "--kind", "screen",
                                  "--fps", "30"]).run()
        print("2. VP8 encode (screen content, 1500 kbps)")
        try EncodeCommand.parse(["--input", clip, "--output", ivf, "--screen", "--bitrate", "1500"]).run()
        print("3. VP8 decode")
        try DecodeCommand.parse(["--input", ivf, "--output", decoded]).run()
        let psnr = try reporting { try clipPSNR(clip, decoded) }
        print("   PSNR over the clip as a viewer sees it (a dropped frame shows the previous picture): \(String(format2: psnr)) dB")
        print("4. a 2 s tone, Opus encode and decode")
        try reporting { try writeTone(path: wav, seconds: 2) }
        try EncodeAudioCommand.parse(["--input", wav, "--output", ogg]).run()
        try DecodeAudioCommand.parse(["--input", ogg, "--output", back]).run()
        print("done: \(clip), \(ivf), \(decoded), \(wav), \(ogg), \(back)")
        print("try: ffprobe \(ivf); ffplay \(decoded)")
    }
}

func makeDirectories(_ path: String) throws {
    var prefix = path.hasPrefix("/") ? "/" : ""
    for part in path.split(separator: "/") {
        prefix += part + "/"
        mkdir(prefix, 0o755)
    }
}

/// PSNR between two Y4M clips of the same size, frame by frame, over the whole clip.
func clipPSNR(_ referencePath: String, _ distortedPath: String) throws -> Double {
    let reference = try Y4MReader(path: referencePath)
    let distorted = try Y4MReader(path: distortedPath)
    var psnr = PSNRAccumulator()
    while let a = try reference.readFrame(), let b = try distorted.readFrame() {
        try psnr.add(reference: a, distorted: b)
    }
    return psnr.psnr
}

/// Writes a 440 Hz + 660 Hz stereo tone at 48 kHz.
func writeTone(path: String, seconds: Int) throws {
    let writer = try WAVWriter(path: path, sampleRate: 48000, channels: 2)
    for block in 0..<(seconds * 100) {
        var samples: [Int16] = []
        samples.reserveCapacity(960)
        for index in 0..<480 {
            let t = Double(block * 480 + index) / 48000
            samples.append(Int16(8000 * sin(2 * Double.pi * 440 * t)))
            samples.append(Int16(8000 * sin(2 * Double.pi * 660 * t)))
        }
        try writer.write(int16: samples)
    }
    try writer.finish()
}
