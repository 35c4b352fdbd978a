import ArgumentParser
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOPosix
import RTCCore
import RTCServer
import Signaling
import ServerCommandLine

/// Data messages through the server, side by side in one run: one-way latency of 1 KB messages
/// from a Swift bot to another over the data channels (two legs: sender → server → receiver),
/// next to the signaling WebSocket's round trip through the same server (two legs: client →
/// server → client; our protocol relays no application data over signaling); and the reliable
/// throughput of one sender through the server, Swift bots next to aiortc's (its own SCTP).
struct DataBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "data",
        abstract: "Data channel latency (next to the signaling WebSocket's) and reliable throughput through the server, ours next to aiortc's.")

    @Option(help: "1 KB messages for the latency figures (sent at 50 a second).") var messages: Int = 500
    @Option(name: .customLong("throughput-messages"), help: "Messages of --throughput-size for the throughput figures.") var throughputMessages: Int = 400
    @Option(name: .customLong("throughput-size"), help: "Bytes per throughput message.") var throughputSize: Int = 16_000
    @Option(help: "The aiortc data peer (default: the repository's Tests/Tools/aiortc_data.py).") var driver: String?

    func validate() throws {
        guard (10...100_000).contains(messages), (10...100_000).contains(throughputMessages), (100...60_000).contains(throughputSize) else {
            throw ValidationError("--messages and --throughput-messages 10...100000, --throughput-size 100...60000")
        }
    }

    func run() async throws {
        let driver = self.driver ?? BrowserBench.repository.appendingPathComponent("Tests/Tools/aiortc_data.py").path
        var configuration = ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: ServerCommand.randomSecret())
        // The relay's limits raised past what the bench sends: it measures the path, not the policy.
        configuration.limits.dataMessagesPerSecond = 100_000
        configuration.limits.dataBytesPerSecond = 1_000_000_000
        // The ping connection never joins: past the join deadline the server would close it.
        configuration.limits.joinDeadlineSeconds = 3600
        let app = try await RTCServerApp.start(configuration: configuration, group: MultiThreadedEventLoopGroup.singleton,
                                               logger: Logger(label: "rtc.bench") { _ in SwiftLogNoOpLogHandler() })
        let url = "ws://127.0.0.1:\(app.signalingAddress?.port ?? 0)/rtc"
        let secret = configuration.secret
        func token(_ uid: String, _ channel: String) -> String {
            AccessToken(uid: uid, channel: channel, now: Int64(Date().timeIntervalSince1970), ttl: 3600).signed(secret: secret)
        }

        // Two Swift bots with their data channels open.
        let sender = RTCEngine(configuration: RTCEngineConfiguration(serverURL: url))
        let receiver = RTCEngine(configuration: RTCEngineConfiguration(serverURL: url))
        let arrivals = NIOLockedValueBox<[(sentNs: UInt64, arrivedNs: UInt64, bytes: Int)]>([])
        let events = receiver.events
        let listener = Task {
            for await event in events {
                guard case .streamMessage(_, _, let data, _) = event, data.count >= 8 else { continue }
                let now = DispatchTime.now().uptimeNanoseconds
                let sent = data.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
                arrivals.withLockedValue { $0.append((sent, now, data.count)) }
            }
        }
        defer { listener.cancel() }
        try await receiver.join(token: token("b", "bench-data"), channel: "bench-data", uid: "b", options: JoinOptions(autoSubscribeAudio: false, autoSubscribeVideo: false))
        try await sender.join(token: token("a", "bench-data"), channel: "bench-data", uid: "a", options: JoinOptions(autoSubscribeAudio: false, autoSubscribeVideo: false))
        _ = try await receiver.createDataStream()
        _ = try await sender.createDataStream()
        // Until a message gets through (both channels up, the relay knows both).
        let ready = Date().addingTimeInterval(10)
        while arrivals.withLockedValue({ $0.isEmpty }) {
            guard Date() < ready else { throw CLIError("no data message got through within 10 s") }
            try? await sender.publishData(Self.stamped(size: 1024), reliable: true, topic: "warmup")
            try await Task.sleep(for: .milliseconds(100))
        }
        try await Task.sleep(for: .milliseconds(300))
        arrivals.withLockedValue { $0.removeAll() }

        print("data through rtc-server on loopback: \(messages) messages of 1 KB at 50 a second; \(throughputMessages) of \(throughputSize) B as fast as they go")
        // Latency over the data channels.
        for _ in 0..<messages {
            try await send(Self.stamped(size: 1024), from: sender)
            try await Task.sleep(for: .milliseconds(20))
        }
        try await Task.sleep(for: .seconds(1))
        let latencies = arrivals.withLockedValue { $0.map { Double($0.arrivedNs - $0.sentNs) / 1e6 } }
        // The signaling WebSocket's round trip, measured the same way.
        let signaling = try SignalingClient(url: url, group: MultiThreadedEventLoopGroup.singleton)
        try await signaling.connect()
        var roundTrips: [Double] = []
        for _ in 0..<messages {
            let start = DispatchTime.now().uptimeNanoseconds
            _ = try await signaling.request(.ping(timestamp: Int64(start)))
            roundTrips.append(Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6)
            try await Task.sleep(for: .milliseconds(20))
        }
        await signaling.close()
        print("latency     data channel a → server → b (1 KB): p50 \(String(format2: percentile(latencies, 0.5))) ms, p95 \(String(format2: percentile(latencies, 0.95))) ms "
              + "(\(latencies.count) of \(messages) arrived)")
        print("            signaling WebSocket a → server → a (ping): p50 \(String(format2: percentile(roundTrips, 0.5))) ms, p95 \(String(format2: percentile(roundTrips, 0.95))) ms")

        // Throughput: the Swift bots.
        arrivals.withLockedValue { $0.removeAll() }
        // As fast as the engine takes them (it refuses past its backlog; `send` waits then).
        for _ in 0..<throughputMessages { try await send(Self.stamped(size: throughputSize), from: sender) }
        let deadline = Date().addingTimeInterval(60)
        while arrivals.withLockedValue({ $0.count }) < throughputMessages && Date() < deadline { try await Task.sleep(for: .milliseconds(10)) }
        let got = arrivals.withLockedValue { $0 }
        let counters = try await app.sfu.counterSnapshot.get()
        // From the first arrival to the last, as for aiortc below (its sender is another process).
        let swiftMBps = got.count > 1 ? Double(got.count * throughputSize) / (Double(got[got.count - 1].arrivedNs - got[0].arrivedNs) / 1e9) / 1e6 : .nan
        await sender.leave()
        await receiver.leave()

        // Throughput: two aiortc peers through the same server.
        let aiortcMBps = try aiortcThroughput(driver: driver, url: url, token: token)
        await app.shutdown()
        print("throughput  swift → swift: \(String(format2: swiftMBps)) MB/s (\(got.count) of \(throughputMessages) arrived; the relay dropped "
              + "\(counters.dataMessagesDropped), relayed \(counters.dataMessagesOut) in all)   "
              + "aiortc → aiortc: \(String(format2: aiortcMBps)) MB/s   ratio (swift / aiortc) \(String(format2: swiftMBps / aiortcMBps))")
        print("throughput from the first arrival to the last, reliable and ordered channels, the same server and message size, "
              + "both senders as fast as their stacks take messages")
    }

    /// A message of `size` bytes starting with the send time (monotonic ns, big-endian).
    static func stamped(size: Int) -> [UInt8] {
        let now = DispatchTime.now().uptimeNanoseconds
        var bytes = (0..<8).map { UInt8(truncatingIfNeeded: now >> (56 - 8 * UInt64($0))) }
        bytes += [UInt8](repeating: 0x61, count: max(0, size - 8))
        return bytes
    }

    /// Sends, waiting while the channel's queue is full (the engine refuses rather than buffers without bound).
    private func send(_ message: [UInt8], from engine: RTCEngine) async throws {
        while true {
            do {
                return try await engine.publishData(message, reliable: true, topic: "bench")
            } catch where error.code == .messageRateExceeded {
                try await Task.sleep(for: .milliseconds(1))
            }
        }
    }

    /// Two aiortc_data.py peers: one sends `throughputMessages` messages of `throughputSize`
    /// bytes, the other reports when the first and the last arrived.
    private func aiortcThroughput(driver: String, url: String, token: (String, String) -> String) throws -> Double {
        func peer(_ uid: String, _ arguments: [String]) throws -> (Process, Pipe) {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = ["python3", driver, "--server", url, "--channel", "bench-aiortc", "--uid", uid, "--token", token(uid, "bench-aiortc"),
                                 "--seconds", "90"] + arguments
            let output = Pipe()
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            try process.run()
            return (process, output)
        }
        let (receiver, output) = try peer("r", ["--count", "0", "--expect", "\(throughputMessages)", "--size", "\(throughputSize)", "--linger", "0.2"])
        let (sender, _) = try peer("s", ["--count", "\(throughputMessages)", "--size", "\(throughputSize)", "--linger", "3"])
        let data = output.fileHandleForReading.readDataToEndOfFile()
        receiver.waitUntilExit()
        sender.terminate()
        sender.waitUntilExit()
        let line = String(decoding: data, as: UTF8.self).split(separator: "\n").last.map(String.init) ?? ""
        guard let json = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any],
              let first = json["firstNumberedMs"] as? Double, let last = json["lastNumberedMs"] as? Double, let count = json["numbered"] as? Int
        else { throw CLIError("aiortc_data.py printed no throughput figures: \(line.prefix(300))") }
        // From the first message's arrival to the last's (the sender's start is in another process).
        return Double(count * throughputSize) / max(0.001, (last - first) / 1000) / 1e6
    }
}
