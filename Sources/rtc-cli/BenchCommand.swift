#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import RTCCore
import ServerCommandLine

struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench", abstract: "Benchmarks, measured side by side with a reference peer.",
        subcommands: [EncodeBench.self, RTPBench.self, TransportBench.self, SFUBench.self, JoinBench.self, LatencyBench.self, ShareMemoryBench.self, RecordingBench.self, BrowserBench.self, LiveKitBench.self, DataBench.self, ResilienceBench.self, AbuseBench.self, JanusLoadBench.self, WHIPBench.self, ServerCoresBench.self, SimulcastEncodeBench.self, E2EEBench.self])
}

/// VP8 encode speed of `rtc-cli encode` next to `ffmpeg -c:v libvpx` on the same clips and settings.
struct EncodeBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "encode",
        abstract: "VP8 encode of 720p screen and camera clips against ffmpeg's libvpx, interleaved runs, medians.")

    @Option(help: "Runs per tool and clip (interleaved).") var runs: Int = 5
    @Option(help: "Frames per clip.") var frames: Int = 150
    @Option(help: "Where the clips are written.") var dir: String = "/tmp/rtc-bench"
    @Option(name: .customLong("cpu-used")) var cpuUsed: Int = -8
    @Option(help: "kbps, constant bitrate.") var bitrate: Int = 1500

    func validate() throws {
        guard runs >= 1, frames >= 10 else { throw ValidationError("--runs must be >= 1 and --frames >= 10") }
    }

    func run() throws {
        mkdir(dir, 0o755)
        let me = ProcessRunner.selfPath
        print("VP8 encode, 1280x720, \(frames) frames, cpu-used \(cpuUsed), 1 thread, \(bitrate) kbps CBR; \(runs) interleaved runs")
        print("clip     ours fps   ffmpeg fps   ratio   ours peak RSS   ffmpeg peak RSS")
        for kind in [PatternKind.screen, .camera] {
            let clip = "\(dir)/\(kind.rawValue)-720p.y4m"
            let made = try ProcessRunner.run([me, "pattern", "--output", clip, "--size", "1280x720", "--frames",
                                              "\(frames)", "--kind", kind.rawValue])
            guard made.exitCode == 0 else { throw CLIError("could not write \(clip)") }
            let ours = [me, "encode", "--input", clip, "--output", "\(dir)/ours.ivf", "--bitrate", "\(bitrate)",
                        "--cpu-used=\(cpuUsed)", "--threads", "1"]
            let ffmpeg = ["ffmpeg", "-hide_banner", "-nostdin", "-loglevel", "error", "-y", "-i", clip,
                          "-c:v", "libvpx", "-deadline", "realtime", "-cpu-used", "\(cpuUsed)", "-threads", "1",
                          "-b:v", "\(bitrate)k", "-minrate", "\(bitrate)k", "-maxrate", "\(bitrate)k",
                          "-bufsize", "\(bitrate)k", "-rc_init_occupancy", "\(bitrate / 2)k",
                          "-qmin", "2", "-qmax", "56", "-lag-in-frames", "0", "-auto-alt-ref", "0",
                          "-error-resilient", "default", "-undershoot-pct", "100", "-overshoot-pct", "15",
                          "-static-thresh", "1", "-noise-sensitivity", "0", "-drop-threshold", "0",
                          "-max-intra-rate", "1500", "-g", "3000", "-f", "ivf", "\(dir)/ffmpeg.ivf"]
            var oursFPS: [Double] = [], ffmpegFPS: [Double] = [], oursRSS: [Int] = [], ffmpegRSS: [Int] = []
            for run in 0..<runs {
                // Alternate who goes first, so drift in machine load hits both alike.
                let order = run % 2 == 0 ? [true, false] : [false, true]
                for isOurs in order {
                    let cost = try ProcessRunner.run(isOurs ? ours : ffmpeg)
                    guard cost.exitCode == 0 else {
                        throw CLIError("\(isOurs ? "rtc-cli encode" : "ffmpeg") exited with \(cost.exitCode)")
                    }
                    if isOurs {
                        oursFPS.append(Double(frames) / cost.seconds)
                        oursRSS.append(cost.peakRSSKiB)
                    } else {
                        ffmpegFPS.append(Double(frames) / cost.seconds)
                        ffmpegRSS.append(cost.peakRSSKiB)
                    }
                }
            }
            let a = median(oursFPS), b = median(ffmpegFPS)
            let line = "\(kind.rawValue.padding(6))   \(format(a).padding(8))   \(format(b).padding(10))   "
                + "\(String(format2: a / b).padding(5))   \((format(Double(median(oursRSS)) / 1024) + " MB").padding(13))   "
                + "\(format(Double(median(ffmpegRSS)) / 1024)) MB"
            print(line)
        }
        print("ratio = ours / ffmpeg frames per second (median of \(runs)); whole process, including reading the Y4M")
    }
}

func median<T: Comparable>(_ values: [T]) -> T {
    let sorted = values.sorted()
    return sorted[sorted.count / 2]
}

func format(_ value: Double) -> String { String(format1: value) }

extension String {
    init(format1 value: Double) { self = Self.fixed(value, digits: 1) }
    init(format2 value: Double) { self = Self.fixed(value, digits: 2) }

    static func fixed(_ value: Double, digits: Int) -> String {
        guard value.isFinite else { return "\(value)" }
        var scale = 1.0
        for _ in 0..<digits { scale *= 10 }
        let rounded = (abs(value) * scale).rounded()
        let whole = Int(rounded / scale)
        var fraction = String(Int(rounded) - whole * Int(scale))
        while fraction.count < digits { fraction = "0" + fraction }
        return (value < 0 ? "-" : "") + "\(whole)" + (digits > 0 ? "." + fraction : "")
    }

    func padding(_ width: Int) -> String { count >= width ? self : self + String(repeating: " ", count: width - count) }
}
