import Foundation
import RTCTestSupport
import Testing

/// A Swift bot speaking LiveKit's protocol across namespaces (docs/livekit.md, "Our SDK in a
/// LiveKit room"): its network cut off for 5 s (every packet, TCP too, dropped at the router),
/// then back: its media and LiveKit's Python SDK's are back at each other within 10 s (the times printed).
@Suite("A Swift bot on LiveKit's protocol across hosts", .serialized)
struct LiveKitClientNetworkTests {
    static let apiKey = QualityNetworkTests.apiKey, apiSecret = QualityNetworkTests.apiSecret

    /// The monotonic µs of the frames a `--frame-log` shows of `uid`.
    static func frames(_ path: String, of uid: String) -> [Int64] {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ")
            return fields.count >= 2 && fields[1] == uid ? Int64(fields[0]) : nil
        }
    }

    static func monotonicMicroseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1000
    }

    @Test("the Swift bot's path cut for 5 s: LiveKit's Python SDK on another host decodes its video again, and it decodes the SDK's, within 10 s of the path returning (times printed)")
    func pathCut() async throws {
        guard NetworkLab.availableOrKnownIssue() else { return }
        let lab = try NetworkLab()
        defer { lab.close() }
        let serverHost = try lab.addHost("s"), swiftHost = try lab.addHost("a"), liveKitHost = try lab.addHost("b")
        let server = try await QualityNetworkTests.server(lab, on: serverHost)
        defer { server.stop() }
        let dir = temporaryDirectory("lab-livekit-client")
        let frames = dir + "/frames.txt"
        let swift = try LabProcess(lab.command(in: swiftHost, [cliPath, "join", "--protocol", "livekit", "--server", "ws://\(serverHost.address):7880",
                                                               "--api-key", Self.apiKey, "--api-secret", Self.apiSecret, "--channel", "lab",
                                                               "--uid", "swift", "--quiet", "--size", "640x360", "--audio", "tone",
                                                               "--frame-log", frames, "--duration", "34"]))
        defer { swift.stop() }
        let liveKit = try LabProcess(lab.command(in: liveKitHost, ["python3", QualityNetworkTests.peerTool, "bot", "--url", "ws://\(serverHost.address):7880",
                                                                   "--api-key", Self.apiKey, "--api-secret", Self.apiSecret, "--room", "lab",
                                                                   "--identity", "lk", "--publish", "--size", "640x360", "--duration", "30"]))
        defer { liveKit.stop() }
        #expect(await eventually(20) { Self.frames(frames, of: "lk").count >= 30 }, "before the cut: \(Self.frames(frames, of: "lk").count) frames")
        try await Task.sleep(for: .seconds(2))
        let cutAt = Self.monotonicMicroseconds()
        try lab.cut(swiftHost)
        try await Task.sleep(for: .seconds(5))
        try lab.restore()
        let backAt = Self.monotonicMicroseconds()
        _ = await liveKit.wait(60)
        _ = await swift.wait(60)
        let report = try #require(liveKit.output.last { $0.hasPrefix("{") }.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] },
                                  "no report: \(liveKit.errorText.suffix(500))")
        // At the Swift bot: the first frame of LiveKit's video after the path returned.
        let atSwift = Self.frames(frames, of: "lk").first { $0 > backAt }.map { Double($0 - backAt) / 1e6 } ?? .infinity
        // At LiveKit's SDK: the Swift bot's video, either the same track resuming (its longest gap
        // ends after the cut began) or a new one after a rejoin (its first frame).
        let tracks = (report["tracks"] as? [[String: Any]] ?? []).filter { $0["identity"] as? String == "swift" && $0["kind"] as? String == "video" }
        var atLiveKit = Double.infinity
        for track in tracks {
            guard let firstMono = (track["firstFrameMono"] as? NSNumber)?.int64Value, let firstMs = (track["firstFrameMs"] as? NSNumber)?.doubleValue
            else { continue }
            let startedMono = Double(firstMono) - firstMs  // the report's ms are from the SDK's start
            if firstMono * 1000 > backAt {
                atLiveKit = min(atLiveKit, Double(firstMono * 1000 - backAt) / 1e6)
            } else if let gapEnd = (track["maxGapEndMs"] as? NSNumber)?.doubleValue, (track["maxGapMs"] as? NSNumber)?.doubleValue ?? 0 > 4000 {
                atLiveKit = min(atLiveKit, ((startedMono + gapEnd) * 1000 - Double(backAt)) / 1e6)
            }
        }
        // 10 s tells "back" from "never" or a backoff run away; the times are figures (printed),
        // which a loaded CI machine stretches (LiveKit's SDK backs off from 300 ms, doubling).
        #expect(atSwift <= 10, "LiveKit's video at the Swift bot \(atSwift) s after the path returned")
        #expect(atLiveKit <= 10, "the Swift bot's video at LiveKit \(atLiveKit) s after the path returned: \(tracks.map { $0.filter { $0.key != "psnr" } })")
        print(String(format: "a 5 s cut of the Swift LiveKit-protocol bot's path (%.1f s measured): back after the path returned: LiveKit→Swift %.2f s, Swift→LiveKit %.2f s",
                     Double(backAt - cutAt) / 1e6, atSwift, atLiveKit))
    }
}
