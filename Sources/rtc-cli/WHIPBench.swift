import ArgumentParser
import Foundation
import NIOConcurrencyHelpers
import RTCCore
import ServerCommandLine

/// The same publisher (aiortc sending its test pattern) over WHIP and over our signaling, turn
/// about, each watched by a Swift viewer joined before it: from the publisher's first signaling
/// step (WHIP's POST, our join) to the viewer's first decoded frame (docs/whip.md).
struct WHIPBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "whip",
        abstract: "First frame at a Swift viewer of aiortc's pattern published over WHIP and over our signaling, side by side.")

    @Option(help: "Publishes measured each way (taken in turns).") var runs: Int = 5
    @Option(help: "The folder of whip_client.py and aiortc_publisher.py (default: Tests/Tools of this repository).") var tools: String?

    func validate() throws {
        guard (1...50).contains(runs) else { throw ValidationError("--runs is 1...50") }
    }

    func run() async throws {
        let whipTool = try RepositoryTool.path("whip_client.py", override: tools.map { "\($0)/whip_client.py" })
        let signalingTool = try RepositoryTool.path("aiortc_publisher.py", override: tools.map { "\($0)/aiortc_publisher.py" })
        let server = try await BenchServer()
        let base = server.url.replacingOccurrences(of: "ws://", with: "http://").replacingOccurrences(of: "/rtc", with: "")
        var whip: [Double] = [], signaling: [Double] = []
        for run in 0..<(2 * runs) {
            let overWHIP = run % 2 == 0
            let room = "first\(run)"
            let viewer = RTCEngine(configuration: RTCEngineConfiguration(serverURL: server.url, clientRole: .audience))
            let events = viewer.events
            let firstFrame = Task { () -> Int64? in
                for await event in events {
                    if case .firstRemoteVideoFrameDecoded = event { return MediaClock.monotonicUs() }
                }
                return nil
            }
            try await viewer.join(token: server.token("viewer", room), channel: room, uid: "viewer")
            let token = server.token("pub", room)
            let report = overWHIP
                ? try await AbuseBench.attack(whipTool, ["publish", "--url", "\(base)/whip/\(room)", "--token", token, "--clip", "pattern", "--seconds", "1.5"])
                : try await AbuseBench.attack(signalingTool, ["--server", server.url, "--channel", room, "--uid", "pub", "--token", token, "--seconds", "1.5"])
            // The publisher has sent for 1.5 s (its first frame comes within a tenth of that): it is in, or it will not come.
            let timeout = Task {
                try? await Task.sleep(for: .seconds(2))
                firstFrame.cancel()
            }
            let first = await firstFrame.value
            timeout.cancel()
            await viewer.leave()
            guard let start = report[overWHIP ? "startMono" : "joinMono"] as? Double, let first else {
                throw CLIError("run \(run + 1) (\(overWHIP ? "WHIP" : "our signaling")): no first frame; the publisher said \(report)")
            }
            let ms = (Double(first) / 1e6 - start) * 1000
            if overWHIP { whip.append(ms) } else { signaling.append(ms) }
        }
        await server.app.shutdown()
        func row(_ name: String, _ values: [Double]) -> String {
            "\(name.padding(20)) p50 \(Int(percentile(values, 0.5))) ms   min \(Int(values.min() ?? .nan)) ms   max \(Int(values.max() ?? .nan)) ms   "
                + "(\(values.map { String(Int($0)) }.joined(separator: ", ")))"
        }
        print("first frame at a Swift viewer of aiortc's pattern (640x360), from the publisher's first signaling step, \(runs) publishes each way, loopback:")
        print(row("over WHIP", whip))
        print(row("over our signaling", signaling))
        print("WHIP / our signaling (p50): \(String(format2: percentile(whip, 0.5) / percentile(signaling, 0.5)))x")
    }
}
