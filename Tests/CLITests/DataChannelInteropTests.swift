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

    @Test("a reliable message sent the moment another participant joins reaches it: aiortc peer a sends 30 as soon as the server announces b, before b's data channel is up; b gets all 30, once, in order (they wait at the server for its channels)")
    func messagesBeforeChannelsUp() async throws {
        let (server, url, _) = try await Self.server()
        defer { server.stop() }
        func peer(_ uid: String, _ extra: [String]) throws -> ChildProcess {
            try ChildProcess(["python3", Self.tool, "--server", url, "--channel", "early", "--uid", uid, "--token",
                              testToken(uid: uid, channel: "early"), "--seconds", "30"] + extra)
        }
        let sender = try peer("a", ["--count", "30", "--send-on-join", "--linger", "3"])
        defer { sender.stop() }
        try await Task.sleep(for: .seconds(2))  // a's channel is up and it waits for b's join
        let receiver = try peer("b", ["--count", "0", "--expect", "30"])
        defer { receiver.stop() }
        let receiverEnded = await receiver.wait(40), senderEnded = await sender.wait(40)
        #expect(receiverEnded != nil && senderEnded != nil, "a peer did not finish")
        let report = try Self.report(receiver)
        let received = (report["received"] as? [String: [String]])?["chat"] ?? []
        #expect(received == (0..<30).map { "a \($0)" }, "b received \(received)")
    }

    static func browserTool(_ name: String) -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Tools/\(name)").path
    }

    @Test("headless Chromium and Firefox (plain-JS RTCDataChannel, no SDK) and aiortc in one room, with the web client in Chromium (our SDK's envelopes) and a Swift bot: each plain peer gets the others' messages once, in order, and the SDK clients' too; the SDK clients get everyone's")
    func browsersAndAiortc() async throws {
        let (server, url, port) = try await Self.server()
        defer { server.stop() }
        // All five at once. Each says hello until it has heard all four others (the server relays
        // only to participants whose channels are up, and a browser under load can take seconds to
        // get there), then sends its 20 messages.
        let page = "http://127.0.0.1:\(port)/?channel=mixed&uid=web&mode=watch&token=\(testToken(uid: "web", channel: "mixed"))"
            + "&data=1&sendData=web&dataHear=4&dataCount=20"
        // It stays past its goal (data from all four) while its 20 messages go out.
        let web = try ChildProcess(["python3", Self.browserTool("browser_peer.py"), page, "--expect-data", "4", "--hold", "15", "--seconds", "75"])
        defer { web.stop() }
        let common = ["--raw-data", url, "--channel", "mixed", "--data-count", "20", "--data-expect", "80", "--data-peers", "4", "--seconds", "70"]
        let chromium = try ChildProcess(["python3", Self.browserTool("browser_peer.py"), "--uid", "chromium",
                                         "--token", testToken(uid: "chromium", channel: "mixed")] + common)
        let firefox = try ChildProcess(["python3", Self.browserTool("firefox_peer.py"), "--uid", "firefox",
                                        "--token", testToken(uid: "firefox", channel: "mixed")] + common)
        let aiortc = try ChildProcess(["python3", Self.tool, "--server", url, "--channel", "mixed", "--uid", "aiortc", "--token",
                                       testToken(uid: "aiortc", channel: "mixed"), "--count", "20", "--expect", "80", "--peers", "4", "--seconds", "70"])
        let swift = try Self.bot(url, channel: "mixed", uid: "swift", send: "swift {n}@0.5",
                                 extra: ["--data-topic", "chat", "--data-count", "20", "--data-wait-peers", "4"], seconds: 60)
        defer { swift.stop() }
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
            // From the SDK clients: their payloads, unwrapped, all of them in order.
            for sdk in ["swift", "web"] {
                #expect(Self.numbers(received, prefix: sdk) == Array(0..<20), "\(uid) from \(sdk): \(Self.numbers(received, prefix: sdk))")
            }
        }
        _ = await web.wait(60)
        let state = try Self.report(web)
        let atWeb = state["data"] as? [[String: Any]] ?? []
        #expect(state["ok"] as? Bool == true, "\(state["reason"] ?? "") \(atWeb.prefix(4))")
        for other in ["chromium", "firefox", "aiortc", "swift"] {
            let texts = atWeb.filter { $0["from"] as? String == other && $0["topic"] as? String == "chat" }.compactMap { $0["text"] as? String }
            let numbers = Self.numbers(texts, prefix: other)
            #expect(!numbers.isEmpty && numbers == Array(numbers[0]..<(numbers[0] + numbers.count)), "web from \(other): \(texts.prefix(5))")
        }
        swift.stop()
        _ = await swift.wait(10)
        let atSwift = Self.received(swift)
        for other in ["chromium", "firefox", "aiortc", "web"] {
            #expect(!Self.numbers(atSwift.filter { $0.uid == other }.map(\.text), prefix: other).isEmpty, "swift from \(other)")
        }
    }

    /// `rtc-cli join` as a data bot: no media, printing what it receives, sending `send` if given.
    static func bot(_ url: String, channel: String, uid: String, send: String? = nil, extra: [String] = [], seconds: Int = 10) throws -> ChildProcess {
        try ChildProcess([cliPath, "join", "--server", url, "--channel", channel, "--uid", uid, "--token", testToken(uid: uid, channel: channel),
                          "--video", "none", "--audio", "none", "--quiet", "--print-data", "--duration", "\(seconds)"]
                         + (send.map { ["--send-data", $0] } ?? []) + extra)
    }

    /// `data <µs> <uid> <topic> <bytes> <text>` lines a bot printed, as (uid, topic, text).
    static func received(_ bot: ChildProcess) -> [(uid: String, topic: String, text: String)] {
        bot.output.compactMap { line in
            let parts = line.split(separator: " ", maxSplits: 5, omittingEmptySubsequences: false)
            guard parts.count == 6, parts[0] == "data" else { return nil }
            return (String(parts[2]), String(parts[3]), String(parts[5]))
        }
    }

    /// The numbers of "<prefix> <n>" texts, in arrival order.
    static func numbers(_ texts: [String], prefix: String) -> [Int] {
        texts.compactMap { text in text.hasPrefix(prefix + " ") ? Int(text.dropFirst(prefix.count + 1)) : nil }
    }

    @Test("a Swift bot (the SDK's data streams), aiortc and Chromium (plain data channels) in one room: messages both ways, senders and topics as the server wrote them, once and in order")
    func sdkAndPlainPeers() async throws {
        let (server, url, _) = try await Self.server()
        defer { server.stop() }
        let swift = try Self.bot(url, channel: "mix", uid: "swift", send: "swift {n}@0.05", extra: ["--data-topic", "chat"], seconds: 12)
        let aiortc = try ChildProcess(["python3", Self.tool, "--server", url, "--channel", "mix", "--uid", "aiortc", "--token",
                                       testToken(uid: "aiortc", channel: "mix"), "--count", "20", "--expect", "40", "--peers", "2", "--seconds", "30"])
        let chromium = try ChildProcess(["python3", Self.browserTool("browser_peer.py"), "--raw-data", url, "--channel", "mix", "--uid", "chromium",
                                         "--token", testToken(uid: "chromium", channel: "mix"), "--data-count", "20", "--data-expect", "40",
                                         "--data-peers", "2", "--seconds", "30"])
        _ = await aiortc.wait(45)
        _ = await chromium.wait(45)
        _ = await swift.wait(30)
        // The plain peers get the Swift bot's payloads on a channel named by its topic, consecutive.
        for (name, peer) in [("aiortc", aiortc), ("chromium", chromium)] {
            let report = try Self.report(peer)
            #expect(report["ok"] as? Bool == true, "\(name): \(report)")
            let chat = (report["received"] as? [String: [String]])?["chat"] ?? []
            let fromSwift = Self.numbers(chat, prefix: "swift")
            #expect(fromSwift.count >= 20, "\(name) got \(fromSwift.count) from swift")
            #expect(fromSwift == Array((fromSwift.first ?? 0)..<((fromSwift.first ?? 0) + fromSwift.count)), "\(name): once and in order")
            let other = name == "aiortc" ? "chromium" : "aiortc"
            #expect(Self.numbers(chat, prefix: other) == Array(0..<20), "\(name) from \(other)")
        }
        // The Swift bot gets the plain peers' messages in envelopes: the sender as the server wrote it,
        // their channel's label as the topic.
        let got = Self.received(swift)
        for other in ["aiortc", "chromium"] {
            let texts = got.filter { $0.uid == other && $0.topic == "chat" }.map(\.text)
            #expect(Self.numbers(texts, prefix: other) == Array(0..<20), "swift from \(other): \(texts.prefix(30))")
        }
        #expect(!got.contains { $0.uid == "swift" }, "its own messages do not come back")
    }

    @Test("a message addressed to one uid reaches that uid only; lossy messages arrive whole")
    func destinations() async throws {
        let (server, url, _) = try await Self.server()
        defer { server.stop() }
        let b = try Self.bot(url, channel: "to", uid: "b", seconds: 10)
        let c = try Self.bot(url, channel: "to", uid: "c", seconds: 10)
        try await Task.sleep(for: .seconds(2))
        let a = try Self.bot(url, channel: "to", uid: "a", send: "for-b {n}@0.05", extra: ["--data-to", "b", "--data-topic", "private"], seconds: 5)
        let lossy = try Self.bot(url, channel: "to", uid: "l", send: "lossy {n}@0.05", extra: ["--data-lossy"], seconds: 5)
        for bot in [a, lossy, b, c] { _ = await bot.wait(30) }
        let atB = Self.received(b), atC = Self.received(c)
        let privateAtB = atB.filter { $0.uid == "a" && $0.topic == "private" }.map(\.text)
        #expect(Self.numbers(privateAtB, prefix: "for-b").count >= 20, "b got \(privateAtB.count)")
        #expect(!atC.contains { $0.uid == "a" }, "c got a message addressed to b")
        // Lossy (unordered, never retransmitted) on loopback: whole messages, none twice.
        for received in [atB, atC] {
            let numbers = Self.numbers(received.filter { $0.uid == "l" }.map(\.text), prefix: "lossy")
            #expect(numbers.count >= 20 && Set(numbers).count == numbers.count, "\(numbers)")
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

    @Test("a flood past the sender's rate is dropped and counted, and never reaches the others past the rate; two other peers in the room exchange all their messages meanwhile")
    func floodDropped() async throws {
        let (server, url, port) = try await Self.server(["--data-messages-per-second", "20"])
        defer { server.stop() }
        func peer(_ uid: String, count: Int, expect: Int, peers: Int) throws -> ChildProcess {
            try ChildProcess(["python3", Self.tool, "--server", url, "--channel", "flood", "--uid", uid, "--token", testToken(uid: uid, channel: "flood"),
                              "--count", "\(count)", "--expect", "\(expect)", "--peers", "\(peers)", "--linger", "2", "--seconds", "15"])
        }
        // Two peers that talk at their normal pace (20 each) and listen for 15 s, and one that sends
        // 3000 at once; a burst of 10 s at 20 a second lets about 200 of the flood through.
        let a = try peer("a", count: 20, expect: 100_000, peers: 2), b = try peer("b", count: 20, expect: 100_000, peers: 2)
        let flooder = try peer("flooder", count: 3000, expect: 0, peers: 2)
        for process in [a, b, flooder] { _ = await process.wait(60) }
        for (uid, other, process) in [("a", "b", a), ("b", "a", b)] {
            let received = (try Self.report(process)["received"] as? [String: [String]])?["chat"] ?? []
            #expect(received.filter { $0.hasPrefix(other + " ") } == (0..<20).map { "\(other) \($0)" }, "\(uid) from \(other)")
            let flood = received.filter { $0.hasPrefix("flooder ") }.count
            #expect(flood < 400, "\(uid) got \(flood) of the flood's 3000")
        }
        let metrics = try runTool(["python3", "-c", "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())",
                                   "http://127.0.0.1:\(port)/metrics"])
        let dropped = metrics.out.split(separator: "\n").first { $0.hasPrefix("rtc_data_messages_dropped_total ") }
        #expect((dropped?.split(separator: " ").last.flatMap { Double($0) } ?? 0) >= 2000, "\(dropped ?? "no counter")")
    }

    @Test("rtc-cli bench data: every reliable message of a burst arrives (the engine and the relay wait for SCTP's buffer instead of dropping), with the latency and throughput figures next to aiortc's")
    func benchData() throws {
        let run = try runTool([cliPath, "bench", "data", "--messages", "100", "--throughput-messages", "300"], timeout: 240)
        #expect(run.status == 0, "\(run.out.suffix(600)) \(run.err.suffix(600))")
        print(run.out.split(separator: "\n").suffix(5).joined(separator: "\n"))
        #expect(run.out.contains("(100 of 100 arrived)"), "\(run.out)")
        #expect(run.out.contains("(300 of 300 arrived; the relay dropped 0"), "\(run.out)")
        #expect(run.out.contains("aiortc → aiortc:") && !run.out.contains("aiortc → aiortc: nan"), "\(run.out)")
    }
}
