import Foundation
import RTCTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Budgets that are deterministic enough to be tests (docs/testing.md): what the shipped binaries
/// link, and the sharers' peak resident memory. They run on the release build (`make release`:
/// static Swift runtime, as shipped) that `make test` makes beside the other tests and runs these
/// after, not on the tests' debug build.
@Suite("Budgets: what the binaries link, the sharers' peak memory", .serialized)
struct BudgetTests {
    /// Where `make release` puts the release binaries.
    static let release = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent(".build/release").path

    static func binary(_ name: String) throws -> String {
        let path = release + "/" + name
        try #require(FileManager.default.isExecutableFile(atPath: path), "\(path) is missing: `make test` builds it before these tests (`make release`)")
        return path
    }

    /// The sonames `ldd` lists for a binary.
    static func linked(_ name: String) throws -> [String] {
        let run = try runTool(["ldd", try binary(name)])
        try #require(run.status == 0, "ldd \(name): \(run.err)")
        return run.out.split(separator: "\n").compactMap { $0.split(separator: " ").first.map { String($0.trimmingCharacters(in: .whitespaces)) } }
    }

    /// Libraries of the client side: codecs, conversion, audio processing, X11, libavformat's family.
    static let clientLibraries = ["libvpx", "libopus", "libwebrtc_audio_processing", "libyuv", "libX11", "libXext",
                                  "libavformat", "libavcodec", "libavutil", "libswresample", "libx264", "libx265", "libdav1d"]

    @Test("rtc-server links no codec, X11 or libav* library")
    func serverLinksOnlyTheServer() throws {
        let libraries = try Self.linked("rtc-server")
        let client = libraries.filter { library in Self.clientLibraries.contains { library.hasPrefix($0 + ".") || library.hasPrefix($0 + "-") } }
        #expect(client.isEmpty, "rtc-server links \(client)")
        #expect(libraries.contains { $0.hasPrefix("libcrypto.") }, "OpenSSL (DTLS, SRTP) is there: \(libraries)")
    }

    @Test("no binary links libsrtp2 or NSS (SRTP is ours, over OpenSSL), nor libavformat (loaded when a WebM starts)",
          arguments: ["rtc-cli", "rtc-server", "rtc-sharer", "rtc-capture"])
    func noLibsrtpNoLibav(name: String) throws {
        let libraries = try Self.linked(name)
        let unwanted = libraries.filter { $0.hasPrefix("libsrtp2") || $0.hasPrefix("libnss3") || $0.hasPrefix("libnspr4") || $0.hasPrefix("libav") }
        #expect(unwanted.isEmpty, "\(name) links \(unwanted)")
        #expect(libraries.count <= 40, "\(name) links \(libraries.count) libraries: \(libraries)")
    }

    /// A release `rtc-server` on free ports, for the sharers to join.
    static func server() async throws -> (process: ChildProcess, url: String) {
        let process = try ChildProcess([try binary("rtc-server"), "--secret", testSecret, "--port", "0", "--udp-port", "0",
                                        "--media-threads", "1", "--allow-ownerless-share",
                                        "--api-key", LiveKitInteropTests.apiKey, "--api-secret", LiveKitInteropTests.apiSecret])
        var url: String?
        _ = await eventually(15) {
            url = process.output.first { $0.hasPrefix("signaling: ") }.flatMap { $0.split(separator: " ").dropFirst().first.map(String.init) }
            return url != nil
        }
        return (process, try #require(url, "rtc-server did not start: \(process.errorText)"))
    }

    /// Peak resident memory (KiB) of a command run under /usr/bin/time, whose own small footprint
    /// is what the command's exec starts from (a child spawned by this large test process would
    /// start its high-water mark at ours).
    static func peakKiB(_ arguments: [String], timeout: Double = 60) throws -> (kib: Int, output: String) {
        let report = temporaryDirectory("budget") + "/time-\(UInt32.random(in: 0...UInt32.max)).txt"
        let run = try runTool(["/usr/bin/time", "-f", "%M", "-o", report] + arguments, timeout: timeout)
        try #require(run.status == 0, "\(arguments.first ?? "") failed: \(run.err.suffix(600))")
        let text = try String(contentsOfFile: report, encoding: .utf8)
        return (try #require(Int(text.trimmingCharacters(in: .whitespacesAndNewlines)), "time said \(text)"), run.out)
    }

    @Test("rtc-cli join --uid 1001_sub, a 1920x1080 Y4M shared as 1280x720 at 15 fps, peaks at 50 MB or less, on our protocol and on LiveKit's",
          arguments: ["native", "livekit"])
    func subJoinPeak(signaling: String) async throws {
        let directory = temporaryDirectory("budget")
        let clip = directory + "/screen-1080p.y4m"
        let cli = try Self.binary("rtc-cli")
        if !FileManager.default.fileExists(atPath: clip) {
            let made = try runTool([cli, "pattern", "--output", clip, "--size", "1920x1080", "--frames", "30", "--fps", "15", "--kind", "screen"])
            try #require(made.status == 0, "\(made.err)")
        }
        let (server, url) = try await Self.server()
        defer { server.stop() }
        let credentials = signaling == "livekit"
            ? ["--protocol", "livekit", "--api-key", LiveKitInteropTests.apiKey, "--api-secret", LiveKitInteropTests.apiSecret]
            : ["--token", testToken(uid: "1001_sub", channel: "budget")]
        let (kib, output) = try Self.peakKiB([cli, "join", "--server", url, "--channel", "budget", "--uid", "1001_sub", "--source", clip,
                                              "--duration", "8"] + credentials)
        // It shared: stats lines at 1280x720 (the cap), not an early exit.
        #expect(output.contains("1280x720"), "\(output.suffix(600))")
        #expect(kib <= 50 * 1024, "peak \(kib / 1024) MB, budget 50 MB")
        print("rtc-cli join --uid 1001_sub (\(signaling) signaling) peak RSS: \(String(format: "%.1f", Double(kib) / 1024)) MB (budget 50)")
    }

    @Test("rtc-capture, the relay sharer (it captures; its host publishes), peaks at 20 MB or less")
    func relayCapturePeak() async throws {
        let (server, url) = try await Self.server()
        defer { server.stop() }
        let capture = try Self.binary("rtc-capture")
        let report = temporaryDirectory("budget") + "/capture-time.txt"
        try? FileManager.default.removeItem(atPath: report)
        // The host: `rtc-cli join --share-screen --relay` starts the sharer given by --sharer (here
        // rtc-capture under /usr/bin/time), hands it the setup over its link and publishes its frames.
        let host = try ChildProcess([try Self.binary("rtc-cli"), "join", "--server", url, "--channel", "budget", "--uid", "1002",
                                     "--token", testToken(uid: "1002", channel: "budget"), "--share-token", testToken(uid: "1002_sub", channel: "budget"),
                                     "--share-screen", "--relay", "--video", "none", "--audio", "none", "--duration", "8",
                                     "--sharer", "/usr/bin/time -f %M -o \(report) \(capture)"])
        let status = await host.wait(40)
        #expect(status == 0, "\(host.output.suffix(10)) \(host.errorText.suffix(600))")
        #expect(host.output.contains { $0.contains("1280x720") }, "\(host.output.suffix(10))")
        let text = try String(contentsOfFile: report, encoding: .utf8)
        let kib = try #require(Int(text.trimmingCharacters(in: .whitespacesAndNewlines)), "time said \(text)")
        #expect(kib <= 20 * 1024, "peak \(kib / 1024) MB, budget 20 MB")
        print("rtc-capture peak RSS: \(String(format: "%.1f", Double(kib) / 1024)) MB (budget 20)")
    }
}
