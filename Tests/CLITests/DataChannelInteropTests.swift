import Foundation
import RTCTestSupport
import Testing

/// Data channels through the server against a peer we did not write: aiortc (PyPI), whose SCTP is
/// its own Python implementation, offers a data-only publisher transport with one channel; the
/// server ends SCTP per participant and relays each message to the others on their channel of the
/// same label (`docs/data.md`).
@Suite("Data channels through rtc-server: aiortc, Chromium and Firefox peers", .serialized)
struct DataChannelInteropTests {
    static let tool = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Tools/aiortc_data.py").path
    static var serverPath: String { URL(fileURLWithPath: cliPath).deletingLastPathComponent().appendingPathComponent("rtc-server").path }

    /// `rtc-server` on free ports, and its signaling URL.
    static func server(_ extra: [String] = []) async throws -> (ChildProcess, String, Int) {
        let server = try ChildProcess([serverPath, "--secret", testSecret, "--port", "0", "--udp-port", "0", "--media-threads", "1",
                                       "--log-level", "warning"] + extra)
        var url: String?
        _ = await eventually(20) {
            url = server.output.lazy.compactMap { line in line.split(separator: " ").first { $0.hasPrefix("ws://") }.map(String.init) }.first
            return url != nil
        }
        let found = try #require(url, "rtc-server did not start: \(server.errorText)")
        let port = try #require(Int(found.split(separator: ":")[2].split(separator: "/")[0]))
        return (server, found, port)
    }

    /// The last line of an aiortc_data.py run, as JSON.
    static func report(_ process: ChildProcess) throws -> [String: Any] {
        let line = try #require(process.output.last { $0.hasPrefix("{") }, "no report: \(process.errorText.suffix(800))")
        return try #require(JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
    }

    @Test("two aiortc peers in one room: each gets the other's 50 reliable messages once, in order, on the channel's label")
    func twoAiortcPeers() async throws {
        let (server, url, port) = try await Self.server()
        defer { server.stop() }
        let peers = try ["a", "b"].map { uid in
            try ChildProcess(["python3", Self.tool, "--server", url, "--channel", "data", "--uid", uid, "--token",
                              testToken(uid: uid, channel: "data"), "--count", "50", "--expect", "50", "--seconds", "30"])
        }
        for peer in peers { #expect(await peer.wait(45) != nil, "an aiortc peer did not finish") }
        let reports = try peers.map(Self.report)
        for (uid, report) in zip(["a", "b"], reports) {
            let other = uid == "a" ? "b" : "a"
            #expect(report["ok"] as? Bool == true, "\(uid): \(report)")
            let received = (report["received"] as? [String: [String]])?["chat"] ?? []
            #expect(received == (0..<50).map { "\(other) \($0)" }, "\(uid) received \(received.prefix(60))")
        }
        // The server counted what it relayed.
        let metrics = try runTool(["python3", "-c", "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())",
                                   "http://127.0.0.1:\(port)/metrics"])
        let relayed = metrics.out.split(separator: "\n").first { $0.hasPrefix("rtc_data_messages_out_total ") }
        #expect((relayed?.split(separator: " ").last.flatMap { Double($0) } ?? 0) >= 100, "\(relayed ?? "no counter")")
    }

    static func browserTool(_ name: String) -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Tools/\(name)").path
    }

    @Test("headless Chromium and Firefox (plain-JS RTCDataChannel, no SDK) and aiortc in one room: each gets the others' messages once, in order")
    func browsersAndAiortc() async throws {
        let (server, url, _) = try await Self.server()
        defer { server.stop() }
        let common = ["--raw-data", url, "--channel", "mixed", "--data-count", "20", "--data-expect", "40", "--seconds", "60"]
        let chromium = try ChildProcess(["python3", Self.browserTool("browser_peer.py"), "--uid", "chromium",
                                         "--token", testToken(uid: "chromium", channel: "mixed")] + common)
        let firefox = try ChildProcess(["python3", Self.browserTool("firefox_peer.py"), "--uid", "firefox",
                                        "--token", testToken(uid: "firefox", channel: "mixed")] + common)
        let aiortc = try ChildProcess(["python3", Self.tool, "--server", url, "--channel", "mixed", "--uid", "aiortc", "--token",
                                       testToken(uid: "aiortc", channel: "mixed"), "--count", "20", "--expect", "40", "--seconds", "60"])
        let peers = [("chromium", chromium), ("firefox", firefox), ("aiortc", aiortc)]
        for (_, peer) in peers { _ = await peer.wait(90) }
        for (uid, peer) in peers {
            let report = try Self.report(peer)
            #expect(report["ok"] as? Bool == true, "\(uid): \(report)")
            let received = (report["received"] as? [String: [String]])?["chat"] ?? []
            for other in peers.map(\.0) where other != uid {
                let fromOther = received.filter { $0.hasPrefix(other + " ") }
                #expect(fromOther == (0..<20).map { "\(other) \($0)" }, "\(uid) from \(other): \(fromOther)")
            }
        }
    }

    @Test("a message over the server's size limit is dropped and counted; the channel goes on")
    func oversizeDropped() async throws {
        let (server, url, port) = try await Self.server(["--max-data-message-bytes", "1000"])
        defer { server.stop() }
        let sender = try ChildProcess(["python3", Self.tool, "--server", url, "--channel", "big", "--uid", "s", "--token",
                                       testToken(uid: "s", channel: "big"), "--count", "10", "--expect", "10", "--seconds", "25",
                                       "--pad", "2000", "--pad-every", "2"])
        let receiver = try ChildProcess(["python3", Self.tool, "--server", url, "--channel", "big", "--uid", "r", "--token",
                                         testToken(uid: "r", channel: "big"), "--count", "10", "--expect", "5", "--seconds", "25"])
        let receiverDone = await receiver.wait(40), senderDone = await sender.wait(40)
        #expect(receiverDone != nil && senderDone != nil)
        let got = (try Self.report(receiver)["received"] as? [String: [String]])?["chat"] ?? []
        // Every second message of the sender is 2000 bytes long: only the others arrive.
        #expect(got == stride(from: 1, to: 10, by: 2).map { "s \($0)" }, "\(got)")
        let metrics = try runTool(["python3", "-c", "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())",
                                   "http://127.0.0.1:\(port)/metrics"])
        let dropped = metrics.out.split(separator: "\n").first { $0.hasPrefix("rtc_data_messages_dropped_total ") }
        #expect((dropped?.split(separator: " ").last.flatMap { Double($0) } ?? 0) >= 5, "\(dropped ?? "no counter")")
    }
}
