import Foundation
import RTCTestSupport

/// A/V sync measurement: a test clip whose white flashes and 1 kHz beeps coincide at every whole second,
/// and ffmpeg-based detection of both in a recording, on the recording's own container timeline.
enum AVSyncProbe {
    struct Onsets: Sendable, Equatable {
        var flashes: [Double]
        var beeps: [Double]
    }

    static let dark: UInt8 = 40, white: UInt8 = 235
    static let sampleRate = 48_000
    /// Beep length and peak amplitude (full scale 1).
    static let beepSeconds = 0.06, beepAmplitude = 0.5
    /// A beep counts only after this much quiet, so the start of a recording taken mid-beep is not an onset.
    static let quietSeconds = 0.3

    /// Writes `clip.y4m` (I420, dark gray, frames k*fps and k*fps+1 white) and `clip.wav` (48 kHz mono s16,
    /// a 60 ms 1 kHz beep at every whole second) into `directory`, one frame / one second at a time.
    static func writeClip(directory: String, seconds: Int, fps: Int, width: Int, height: Int) throws -> (y4m: String, wav: String) {
        guard seconds > 0, seconds <= 3600, fps > 0, width > 0, height > 0 else {
            throw AVSyncProbeError("writeClip: bad parameters seconds=\(seconds) fps=\(fps) size=\(width)x\(height)")
        }
        let y4m = directory + "/clip.y4m", wav = directory + "/clip.wav"
        let chroma = ((width + 1) / 2) * ((height + 1) / 2)
        func frame(_ luma: UInt8) -> Data {
            Data("FRAME\n".utf8) + Data(repeating: luma, count: width * height) + Data(repeating: 128, count: 2 * chroma)
        }
        let darkFrame = frame(dark), whiteFrame = frame(white)
        try write(y4m) { file in
            try file.write(contentsOf: Data("YUV4MPEG2 W\(width) H\(height) F\(fps):1 Ip A1:1 C420jpeg\n".utf8))
            for index in 0..<(seconds * fps) {
                try file.write(contentsOf: index % fps < 2 ? whiteFrame : darkFrame)
            }
        }

        // One second of audio: the beep, then silence; written `seconds` times.
        var second = Data(count: 2 * sampleRate)
        let beepSamples = Int(beepSeconds * Double(sampleRate))
        second.withUnsafeMutableBytes { raw in
            for index in 0..<beepSamples {
                let value = beepAmplitude * 32767 * sin(2 * Double.pi * 1000 * Double(index) / Double(sampleRate))
                raw.storeBytes(of: Int16(value.rounded()).littleEndian, toByteOffset: 2 * index, as: Int16.self)
            }
        }
        let dataBytes = UInt32(second.count * seconds)
        var header = Data("RIFF".utf8)
        func le32(_ value: UInt32) { withUnsafeBytes(of: value.littleEndian) { header.append(contentsOf: $0) } }
        func le16(_ value: UInt16) { withUnsafeBytes(of: value.littleEndian) { header.append(contentsOf: $0) } }
        le32(36 + dataBytes)
        header.append(contentsOf: Data("WAVEfmt ".utf8))
        le32(16)  // fmt chunk: PCM, mono, rate, byte rate, block align, bits
        le16(1); le16(1); le32(UInt32(sampleRate)); le32(UInt32(2 * sampleRate)); le16(2); le16(16)
        header.append(contentsOf: Data("data".utf8))
        le32(dataBytes)
        try write(wav) { file in
            try file.write(contentsOf: header)
            for _ in 0..<seconds { try file.write(contentsOf: second) }
        }
        return (y4m, wav)
    }

    /// Flash and beep onsets (seconds) in `file`. Both are read with `-copyts`, so the times are the container's
    /// own timestamps: video frames by their pts, audio samples as index / 48000 after aresample has padded or
    /// trimmed the decoded audio to its timestamps (from 0, and across gaps of more than 1 ms).
    static func detect(file: String) throws -> Onsets {
        guard FileManager.default.fileExists(atPath: file) else { throw AVSyncProbeError("detect: no such file \(file)") }
        return Onsets(flashes: try flashes(file), beeps: try beeps(file))
    }

    /// For each beep, beep minus the nearest flash within ±0.5 s (positive: audio late). Unpaired beeps are skipped.
    static func offsets(_ onsets: Onsets) -> [Double] {
        onsets.beeps.compactMap { beep in
            onsets.flashes.map { beep - $0 }.filter { abs($0) <= 0.5 }.min { abs($0) < abs($1) }
        }
    }

    /// Frames whose luma average (signalstats YAVG) crosses the dark/white midpoint upwards. Frames are shrunk to
    /// 64x64 by area first (same average, 5x faster at 720p). The output is pairs of lines:
    /// `frame:N pts:P pts_time:T`, then `lavfi.signalstats.YAVG=V`.
    static func flashes(_ file: String) throws -> [Double] {
        let filter = "scale=64:64:flags=area,signalstats,metadata=print:key=lavfi.signalstats.YAVG:file=-"
        let run = try runTool(["ffmpeg", "-hide_banner", "-nostdin", "-nostats", "-loglevel", "error", "-copyts", "-i", file,
                               "-map", "0:v:0", "-vf", filter, "-f", "null", "-"])
        guard run.status == 0 else { throw AVSyncProbeError("ffmpeg (video) exited \(run.status) on \(file)", stderr: run.err) }
        let midpoint = (Double(dark) + Double(white)) / 2
        var onsets: [Double] = [], time: Double?, wasDark: Bool?, frames = 0
        for line in run.out.split(whereSeparator: \.isNewline) {
            if let range = line.range(of: "pts_time:") {
                time = Double(line[range.upperBound...].prefix { !$0.isWhitespace })
            } else if let range = line.range(of: "YAVG="), let luma = Double(line[range.upperBound...].prefix { !$0.isWhitespace }) {
                frames += 1
                // A first frame that is already white may be the middle of a flash: only a seen dark-to-white counts.
                if let at = time, wasDark == true, luma > midpoint { onsets.append(at) }
                wasDark = luma <= midpoint
                time = nil
            }
        }
        guard frames > 0 else { throw AVSyncProbeError("ffmpeg printed no video frames for \(file)", stderr: run.err) }
        return onsets
    }

    /// Samples whose magnitude first exceeds 0.1 of full scale (3277) after at least `quietSeconds` below it.
    static func beeps(_ file: String) throws -> [Double] {
        // runTool returns text, so the PCM goes through a temporary file.
        let pcm = NSTemporaryDirectory() + "avsync-\(UUID().uuidString).s16"
        defer { try? FileManager.default.removeItem(atPath: pcm) }
        let run = try runTool(["ffmpeg", "-hide_banner", "-nostdin", "-nostats", "-loglevel", "error", "-copyts", "-i", file,
                               "-map", "0:a:0", "-af", "aresample=async=1:min_hard_comp=0.001:first_pts=0",
                               "-ac", "1", "-ar", String(sampleRate), "-f", "s16le", "-y", pcm])
        guard run.status == 0 else { throw AVSyncProbeError("ffmpeg (audio) exited \(run.status) on \(file)", stderr: run.err) }
        guard let handle = FileHandle(forReadingAtPath: pcm) else { throw AVSyncProbeError("ffmpeg wrote no audio for \(file)", stderr: run.err) }
        defer { try? handle.close() }
        let threshold = 3277, quiet = Int(quietSeconds * Double(sampleRate))
        var onsets: [Double] = [], index = 0, lastLoud: Int?, carry: UInt8?
        while let chunk = try handle.read(upToCount: 1 << 16), !chunk.isEmpty {
            var bytes = [UInt8](chunk)
            if let first = carry { bytes.insert(first, at: 0) }
            carry = bytes.count % 2 == 1 ? bytes.removeLast() : nil
            for pair in stride(from: 0, to: bytes.count, by: 2) {
                let sample = Int(Int16(bitPattern: UInt16(bytes[pair]) | UInt16(bytes[pair + 1]) << 8))
                if abs(sample) > threshold {
                    // The start of the file counts as loud: a recording may begin mid-beep.
                    if index - (lastLoud ?? 0) >= quiet { onsets.append(Double(index) / Double(sampleRate)) }
                    lastLoud = index
                }
                index += 1
            }
        }
        guard index > 0 else { throw AVSyncProbeError("ffmpeg decoded no audio samples for \(file)", stderr: run.err) }
        return onsets
    }

    private static func write(_ path: String, _ body: (FileHandle) throws -> Void) throws {
        guard FileManager.default.createFile(atPath: path, contents: nil), let file = FileHandle(forWritingAtPath: path) else {
            throw AVSyncProbeError("cannot create \(path)")
        }
        defer { try? file.close() }
        try body(file)
    }
}

struct AVSyncProbeError: Error, CustomStringConvertible {
    var description: String

    init(_ message: String, stderr: String = "") {
        let tail = stderr.trimmingCharacters(in: .whitespacesAndNewlines).suffix(2000)
        description = tail.isEmpty ? message : "\(message): \(tail)"
    }
}
