import Foundation
import RTCTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The cluster across hosts: Redis, two nodes, a publisher behind a home NAT and a viewer, each in a
/// network namespace of its own (`NetworkLab`). Nothing shares loopback: the nodes find each other
/// and Redis over the lab's routes, and a relayed join must hand out the owner's announced address.
@Suite("Cluster across hosts", .serialized)
struct ClusterNetworkTests {
    static let secret = "lab-cluster-secret"

    /// A node on `host`: every interface, announcing the host's address (and so reached there by
    /// other nodes), sharing rooms through Redis on `redis`.
    func startNode(_ lab: NetworkLab, on host: NetworkLab.Host, id: String, redis: NetworkLab.Host) async throws -> LabProcess {
        let node = try LabProcess(lab.command(in: host, [cliPath, "server", "--host", "0.0.0.0", "--port", "7880", "--udp-port", "7882",
                                                         "--media-threads", "1", "--secret", Self.secret, "--announce-ip", host.address,
                                                         "--redis", "redis://\(redis.address):6379", "--node-id", id]))
        guard await eventually(15, { node.output.contains { $0.hasPrefix("cluster node \(id) at ws://\(host.address):7880") } }) else {
            throw NetworkLab.LabError(description: "node \(id) did not start: \(node.output) \(node.errorText)")
        }
        return node
    }

    @Test("Redis, node A, node B, a publisher behind NAT and a viewer on five hosts: the publisher joins A; the viewer joins B, is relayed to A and decodes ≥ 95 % of the frames from A's announced address; A killed: both move to B and media is back from B")
    func viewerRelayedAcrossHosts() async throws {
        guard NetworkLab.availableOrKnownIssue() else { return }
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/redis-server") else {
            Issue.record("redis-server is not installed (make test installs it)")
            return
        }
        let lab = try NetworkLab()
        defer { lab.close() }
        let redisHost = try lab.addHost("d"), hostA = try lab.addHost("a"), hostB = try lab.addHost("b")
        let viewerHost = try lab.addHost("v"), homeHost = try lab.addHost("n", behindNAT: true)
        let redis = try LabProcess(lab.command(in: redisHost, ["redis-server", "--bind", redisHost.address, "--port", "6379",
                                                              "--protected-mode", "no", "--save", "", "--appendonly", "no"]))
        defer { redis.stop() }
        #expect(await eventually(10) { redis.output.contains { $0.contains("Ready to accept connections") } }, "\(redis.output)")
        let nodeA = try await startNode(lab, on: hostA, id: "A", redis: redisHost)
        defer { nodeA.stop() }
        let nodeB = try await startNode(lab, on: hostB, id: "B", redis: redisHost)
        defer { nodeB.stop() }

        let dir = temporaryDirectory("lab-cluster"), clip = "\(dir)/clip.y4m", frameLog = "\(dir)/frames.txt"
        let made = try runTool([cliPath, "pattern", "--output", clip, "--size", "640x360", "--frames", "150", "--fps", "15", "--kind", "camera"])
        #expect(made.status == 0, "\(made.err)")
        let urlA = "ws://\(hostA.address):7880/rtc", urlB = "ws://\(hostB.address):7880/rtc"
        let publisher = try LabProcess(lab.command(in: homeHost, [
            cliPath, "join", "--server", urlA, "--fallback-server", urlB, "--channel", "spread", "--uid", "1001", "--secret", Self.secret,
            "--video", clip, "--audio", "tone", "--fps", "15", "--size", "640x360", "--bitrate", "1500", "--duration", "40", "--no-subscribe"]))
        defer { publisher.stop() }
        // The room is A's before the viewer arrives at B.
        #expect(await eventually(10) {
            (try? runTool(lab.command(in: redisHost, ["redis-cli", "-h", redisHost.address, "GET", "rtc:room:spread"]), timeout: 5))?.out.contains("A") == true
        }, "the room was not placed on A: \(nodeA.output.suffix(5)) \(publisher.output.suffix(3))")
        let viewer = try LabProcess(lab.command(in: viewerHost, [
            cliPath, "join", "--server", urlB, "--fallback-server", urlA, "--channel", "spread", "--uid", "2001", "--secret", Self.secret,
            "--role", "audience", "--video", "none", "--audio", "none", "--frame-log", frameLog, "--duration", "40"]))
        defer { viewer.stop() }
        func frames() -> [Int64] {
            ((try? String(contentsOfFile: frameLog, encoding: .utf8)) ?? "").split(separator: "\n").compactMap { Int64($0.split(separator: " ").first ?? "") }
        }

        // Relayed: its media comes from A's announced address (not B's, not a loopback one).
        #expect(await eventually(20) { frames().count >= 90 && viewer.output.contains { $0.contains("path down udp \(hostA.address):7882") } },
                "viewer: \(viewer.output.suffix(4)) \(viewer.errorText)")
        // Every frame from the first one on: at 15 fps over the span it was watched, ≥ 95 % decoded.
        let before = frames()
        let span = Double((before.last ?? 0) - (before.first ?? 0)) / 1e6
        let expected = Int(span * 15) + 1
        print("cluster across hosts: the viewer relayed from node B decoded \(before.count) frames from node A over \(String(format: "%.1f", span)) s "
              + "(\(expected) sent in that span)")
        #expect(Double(before.count) >= 0.95 * Double(expected), "\(before.count) of \(expected) frames")

        // Node A's host loses it: both rejoin at B (their --fallback-server), B takes the room, media is back.
        let killed = CrossHostTests.monotonicUs()
        kill(nodeA.pid, SIGKILL)
        func recovery() -> Double? {
            let times = frames()
            for (previous, next) in zip(times, times.dropFirst()) where next > killed && next - previous > 1_000_000 {
                return Double(next - killed) / 1e6
            }
            return nil
        }
        #expect(await eventually(40) { recovery() != nil && viewer.output.contains { $0.contains("path down udp \(hostB.address):7882") } },
                "viewer: \(viewer.output.suffix(6)); publisher: \(publisher.output.suffix(4)); node B: \(nodeB.errorText.suffix(800))")
        if let recovered = recovery() {
            print("cluster across hosts: media back at the viewer \(String(format: "%.2f", recovered)) s after node A was killed, now from node B")
        }
        #expect((try? runTool(lab.command(in: redisHost, ["redis-cli", "-h", redisHost.address, "GET", "rtc:room:spread"]), timeout: 5))?
            .out.contains("B") == true)
        // The viewer's resume against B while A's heartbeat expired was one loop, not a flood.
        let logB = nodeB.errorText
        #expect(!logB.contains("connections from this address"), "node B refused connections as over the per-address limit: \(logB.suffix(600))")
        let relayFailures = logB.components(separatedBy: "relay failed").count - 1
        print("cluster across hosts: node B logged \(relayFailures) failed relays to dead node A")
    }
}
