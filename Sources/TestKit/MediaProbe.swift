import Foundation

// What Debian's ffmpeg says about a file: ffprobe's streams (with every frame decoded or every
// packet read) and the psnr filter's average against a reference clip. The one copy the test
// targets share.

/// ffprobe's view of a media file's streams.
public struct MediaProbe: Sendable {
    /// One stream: ffprobe's fields (`codec_type`, `codec_name`, `width`, `height`, `nb_read_frames`,
    /// `nb_read_packets`, `sample_rate`, `channels`, `duration`) as it printed them.
    public struct Stream: Sendable {
        public var fields: [String: String]
        public var codec: String? { fields["codec_name"] }
        public var type: String? { fields["codec_type"] }
        public var width: Int? { fields["width"].flatMap { Int($0) } }
        public var height: Int? { fields["height"].flatMap { Int($0) } }
        /// `"<width>x<height>"`, or `"?x?"` for a field ffprobe did not give.
        public var size: String { "\(fields["width"] ?? "?")x\(fields["height"] ?? "?")" }
        /// Frames decoded (with `count: .frames`).
        public var frames: Int? { fields["nb_read_frames"].flatMap { Int($0) } }
        /// Packets read (with `count: .packets`).
        public var packets: Int? { fields["nb_read_packets"].flatMap { Int($0) } }
    }

    /// What ffprobe counts: every frame decoded (`-count_frames`) or every packet read (`-count_packets`).
    public enum Count: Sendable { case frames, packets }

    public let streams: [Stream]
    public let status: Int32
    /// ffprobe's error output: empty when it read the file without a complaint.
    public let errors: String

    /// ffprobe exited 0 and said nothing on its error output.
    public var isClean: Bool { status == 0 && errors.isEmpty }
    public var first: Stream? { streams.first }
    public var video: Stream? { streams.first { $0.type == "video" } }
    public var audio: Stream? { streams.first { $0.type == "audio" } }
    public var codecs: [String] { streams.compactMap(\.codec) }
    /// The first stream's count (frames decoded, or packets read) when ffprobe read the file
    /// cleanly; nil otherwise.
    public var frames: Int? { isClean ? first.flatMap { $0.frames ?? $0.packets } : nil }

    /// Runs ffprobe on `path`, on every stream or on those `select` picks (`"v:0"`, `"a:0"`, `"0"`).
    public init(_ path: String, select: String? = nil, count: Count = .frames) throws(ChildProcessError) {
        let counting = count == .frames ? "-count_frames" : "-count_packets"
        let run = try runTool(["ffprobe", "-v", "error", counting] + (select.map { ["-select_streams", $0] } ?? []) + [
            "-show_entries", "stream=codec_type,codec_name,width,height,nb_read_frames,nb_read_packets,sample_rate,channels,duration",
            "-of", "default", path,
        ])
        var streams: [Stream] = []
        for line in run.out.split(separator: "\n") {
            if line == "[STREAM]" {
                streams.append(Stream(fields: [:]))
            } else if let equals = line.firstIndex(of: "="), !streams.isEmpty {
                streams[streams.count - 1].fields[String(line[..<equals])] = String(line[line.index(after: equals)...])
            }
        }
        self.streams = streams
        status = run.status
        errors = run.err
    }
}

/// ffmpeg's psnr filter run over a recording and the clip it came from.
public struct PSNRMeasurement: Sendable {
    /// The average PSNR over every frame paired (dB), nil when ffmpeg gave none.
    public let average: Double?
    public let status: Int32
    /// ffmpeg's error output (its psnr summary is there).
    public let errors: String

    /// How the frames of the two files are paired.
    public enum Pairing: Sendable, Equatable {
        /// By timestamp; `shortest` ends at the shorter file (otherwise its last frame is repeated).
        case timestamps(shortest: Bool)
        /// The n-th frame of one with the n-th of the other, both re-timed at `fps`.
        case index(fps: Int)
        /// By timestamp with the reference starting `n` frames in (a recording that began late).
        case referenceSkipping(Int)
    }

    /// Runs `ffmpeg -i distorted -i reference` through the psnr filter.
    public init(_ distorted: String, reference: String, pairing: Pairing = .timestamps(shortest: true)) throws(ChildProcessError) {
        let graph = switch pairing {
        case .timestamps(let shortest): shortest ? "[0:v][1:v]psnr=shortest=1" : "[0:v][1:v]psnr"
        case .index(let fps): "[0:v]settb=1/\(fps),setpts=N[r];[1:v]settb=1/\(fps),setpts=N[s];[r][s]psnr=shortest=1"
        case .referenceSkipping(let frames): "[1:v]trim=start_frame=\(frames),setpts=PTS-STARTPTS[clip];[0:v][clip]psnr=shortest=1"
        }
        let run = try runTool(["ffmpeg", "-hide_banner", "-nostats", "-i", distorted, "-i", reference, "-lavfi", graph, "-f", "null", "-"])
        average = run.err.range(of: "average:").map { run.err[$0.upperBound...].prefix { $0 == "." || $0.isNumber } }.flatMap { Double($0) }
        status = run.status
        errors = run.err
    }
}
