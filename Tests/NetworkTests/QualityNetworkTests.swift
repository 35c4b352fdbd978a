import Foundation
import RTCTestSupport
import Testing

/// Connection quality (protocol 1.8; LiveKit's `ConnectionQualityUpdate`) across namespaces: a
/// Swift bot and LiveKit's Python SDK on two hosts, the server on a third; after a clean stretch
/// the router drops one UDP packet in ten each way, and both SDKs hear the levels fall.
@Suite("Connection quality across hosts", .serialized)
struct QualityNetworkTests {
    static let apiKey = "APIlabkey", apiSecret = "lab-api-secret-0123456789abcdef"
    static let peerTool = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Tools/livekit_peer.py").path

    /// `rtc-cli server` on `host` with the lab's LiveKit key, once it offers its candidates.
    static func server(_ lab: NetworkLab, on host: NetworkLab.Host) async throws -> LabProcess {
        let server = try LabProcess(lab.command(in: host, [cliPath, "server", "--host", "0.0.0.0", "--port", "7880", "--udp-port", "7882",
                                                           "--secret", CrossHostTests.secret, "--announce-ip", host.address,
                                                           "--api-key", apiKey, "--api-secret", apiSecret, "--log-level", "error"]))
        #expect(await eventually(15) { server.output.contains { $0.hasPrefix("media candidates:") } }, "server: \(server.errorText)")
        return server
    }

    /// `quality <µs> <uid> up U down D` lines of a bot: (µs, uid, worse of up and down).
    static func levels(_ lines: [String]) -> [(at: Int64, uid: String, level: Int)] {
        lines.compactMap { line in
            let fields = line.split(separator: " ")
            guard fields.count == 7, fields[0] == "quality", let at = Int64(fields[1]), let up = Int(fields[4]), let down = Int(fields[6]) else { return nil }
            return (at, String(fields[2]), max(up, down))
        }
    }

    @Test("a Swift bot and LiveKit's Python SDK hear every 2 s how each one's connection is; with 10 % of UDP dropped each way the levels fall (ours to 4-6, LiveKit's to POOR) and come from both directions")
    func qualityFallsWithLoss() async throws {
        guard NetworkLab.availableOrKnownIssue() else { return }
        let lab = try NetworkLab()
        defer { lab.close() }
        let serverHost = try lab.addHost("s"), swiftHost = try lab.addHost("a"), liveKitHost = try lab.addHost("b")
        let server = try await Self.server(lab, on: serverHost)
        defer { server.stop() }
        let swift = try LabProcess(lab.command(in: swiftHost, [cliPath, "join", "--server", "ws://\(serverHost.address):7880/rtc", "--channel", "lab",
                                                               "--uid", "swift", "--secret", CrossHostTests.secret, "--quiet", "--size", "640x360",
                                                               "--audio", "tone", "--print-quality", "--duration", "32"]))
        defer { swift.stop() }
        let liveKit = try LabProcess(lab.command(in: liveKitHost, ["python3", Self.peerTool, "bot", "--url", "ws://\(serverHost.address):7880",
                                                                   "--api-key", Self.apiKey, "--api-secret", Self.apiSecret, "--room", "lab",
                                                                   "--identity", "lk", "--publish", "--size", "640x360", "--duration", "28"]))
        defer { liveKit.stop() }
        try await Task.sleep(for: .seconds(12))
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let lossAt = Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1000
        try lab.dropUDP(oneIn: 10)
        _ = await liveKit.wait(60)
        _ = await swift.wait(60)
        let report = try #require(liveKit.output.last { $0.hasPrefix("{") }.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] },
                                  "no report: \(liveKit.errorText.suffix(500))")

        // Ours: both users, clean then lossy.
        let ours = Self.levels(swift.output)
        for uid in ["swift", "lk"] {
            let clean = ours.filter { $0.uid == uid && $0.at < lossAt && $0.at > lossAt - 6_000_000 }.map(\.level)
            let lossy = ours.filter { $0.uid == uid && $0.at > lossAt + 4_000_000 }.map(\.level)
            #expect(!clean.isEmpty && clean.allSatisfy { (1...2).contains($0) }, "\(uid) before the loss: \(clean)")
            #expect(!lossy.isEmpty && lossy.contains { $0 >= 4 }, "\(uid) with 10 % loss: \(lossy)")
        }
        let cadence = ours.filter { $0.uid == "swift" }.map(\.at)
        let gaps = zip(cadence, cadence.dropFirst()).map { Double($1 - $0) / 1e6 }
        #expect(!gaps.isEmpty && gaps.allSatisfy { $0 < 2.6 }, "an update at least every 2 s: \(gaps)")
        // LiveKit's SDK: its own and the Swift bot's, EXCELLENT then POOR (or LOST) after the loss began.
        let events = report["quality"] as? [[Any]] ?? []
        let lossMs = lossAt / 1000
        for identity in ["lk", "swift"] {
            let mine = events.filter { $0.first as? String == identity }
            let before = mine.filter { ($0.last as? Int64 ?? ($0.last as? Int).map(Int64.init) ?? 0) < lossMs }.map { $0[1] as? String ?? "" }
            let after = mine.filter { ($0.last as? Int64 ?? ($0.last as? Int).map(Int64.init) ?? 0) > lossMs }.map { $0[1] as? String ?? "" }
            #expect(before.contains("QUALITY_EXCELLENT"), "\(identity) at LiveKit before the loss: \(before)")
            #expect(after.contains { $0 == "QUALITY_POOR" || $0 == "QUALITY_LOST" }, "\(identity) at LiveKit with the loss: \(after)")
        }
        print("connection quality: ours before/after the loss: swift \(ours.filter { $0.uid == "swift" }.map(\.level)), "
              + "lk \(ours.filter { $0.uid == "lk" }.map(\.level)); LiveKit's events \(events.map { "\($0[0]) \($0[1])" })")
    }
}
