import ArgumentParser
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOPosix
import RTCCore
import RTCServer
import Signaling
import ServerCommandLine

/// One screen share (`1001_sub`, a `rtc-cli join` process) watched in turns by a Swift bot (an
/// RTCEngine) and by headless Chromium running the web client (`Web/`, through
/// `Tests/Tools/browser_peer.py`): time to the first decoded frame of the share and frames decoded
/// in the first N seconds, runs interleaved so machine load hits both alike.
struct BrowserBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "browser",
        abstract: "The same _sub screen share watched by a Swift bot and by headless Chromium: first-frame time and frames in 10 s.")

    @Option(help: "Runs per viewer (interleaved).") var runs: Int = 3
    @Option(help: "Seconds each viewer watches.") var seconds: Int = 10
    @Option(help: "The browser driver (default: the repository's Tests/Tools/browser_peer.py).") var driver: String?
    @Option(name: .customLong("web-root"), help: "The web client's directory (default: the repository's Web/).") var webRoot: String?

    func validate() throws {
        guard runs >= 1, (3...60).contains(seconds) else { throw ValidationError("--runs >= 1 and --seconds 3...60") }
    }

    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    func run() async throws {
        let driver = self.driver ?? Self.repository.appendingPathComponent("Tests/Tools/browser_peer.py").path
        let webRoot = self.webRoot ?? Self.repository.appendingPathComponent("Web").path
        guard FileManager.default.fileExists(atPath: driver) else { throw CLIError("no browser driver at \(driver) (--driver)") }
        guard WebRoot.existing(webRoot) != nil else { throw CLIError("no web client at \(webRoot) (--web-root)") }
        let room = try await WatchedShare.start(channel: "bench-share", lasting: runs * 2 * (seconds + 15) + 30) { $0.webRoot = webRoot }
        let (url, port, channel) = (room.url, room.port, room.channel)
        let token = room.token
        print("one 1280x720 _sub screen share (pattern, 15 fps), watched \(runs) times each by a Swift bot and by headless Chromium; "
              + "\(seconds) s per watch, interleaved, loopback")
        print("run   viewer     first frame (from join)   first frame (from start)   frames in \(seconds) s")
        var swift: [(first: Double, frames: Int)] = [], chromium: [(first: Double, fromOpen: Double, frames: Int)] = []
        for index in 0..<runs {
            for swiftFirst in index % 2 == 0 ? [true, false] : [false, true] {
                if swiftFirst {
                    let result = try await Self.watchWithEngine(url: url, channel: channel, uid: "swift\(index)", token: token("swift\(index)"),
                                                                seconds: seconds)
                    swift.append(result)
                    print("\(String(index + 1).padding(6))swift      \(milliseconds(result.first).padding(26))\(milliseconds(result.first).padding(27))\(result.frames)")
                } else {
                    let page = "http://127.0.0.1:\(port)/?channel=\(channel)&uid=web\(index)&mode=watch&token=\(token("web\(index)"))"
                    let result = try watchWithChromium(driver: driver, page: page)
                    chromium.append(result)
                    print("\(String(index + 1).padding(6))chromium   \(milliseconds(result.first).padding(26))\(milliseconds(result.fromOpen).padding(27))\(result.frames)")
                }
                try await Task.sleep(for: .milliseconds(600))  // past the server's keyframe-request throttle
            }
        }
        await room.stop()
        let swiftFirst = median(swift.map(\.first)), chromiumFirst = median(chromium.map(\.first))
        let swiftFrames = median(swift.map(\.frames)), chromiumFrames = median(chromium.map(\.frames))
        print("median      swift: first frame \(milliseconds(swiftFirst)) ms, \(swiftFrames) frames   chromium: first frame \(milliseconds(chromiumFirst)) ms "
              + "(\(milliseconds(median(chromium.map(\.fromOpen)))) ms from opening the page), \(chromiumFrames) frames")
        print("ratio (chromium / swift): first frame \(String(format2: chromiumFirst / swiftFirst)), frames \(String(format2: Double(chromiumFrames) / Double(max(1, swiftFrames))))")
        print("first frame from join: the Swift bot from its join() call; the page from its client.join() call (joinStartMs), "
              + "both to the first decoded frame of the share; frames counted from the same start")
    }

    /// A Swift bot (an RTCEngine) watching `channel` for `seconds`: ms from its join() call to the
    /// first decoded video frame, and the frames decoded within `seconds` of that call.
    static func watchWithEngine(url: String, channel: String, uid: String, token: String, seconds: Int) async throws -> (first: Double, frames: Int) {
        let engine = RTCEngine(configuration: RTCEngineConfiguration(serverURL: url))
        let decoded = NIOLockedValueBox<[Int64]>([])
        engine.setRemoteVideoSink { _ in decoded.withLockedValue { $0.append(MediaClock.monotonicUs()) } }
        let start = MediaClock.monotonicUs()
        try await engine.join(token: token, channel: channel, uid: uid)
        try await Task.sleep(for: .seconds(seconds))
        await engine.leave()
        let times = decoded.withLockedValue { $0 }
        let end = start + Int64(seconds) * 1_000_000
        return (times.first.map { Double($0 - start) / 1000 } ?? .nan, times.filter { $0 <= end }.count)
    }

    /// The page watches for `seconds` (the driver's goal is never met, so it reports at the end).
    private func watchWithChromium(driver: String, page: String) throws -> (first: Double, fromOpen: Double, frames: Int) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", driver, page, "--expect-videos", "1", "--min-frames", "1000000", "--seconds", "\(seconds + 3)"]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus != 2 else { throw CLIError("Chromium or chromedriver could not start (browser_peer.py exit 2)") }
        let line = String(decoding: data, as: UTF8.self).split(separator: "\n").last.map(String.init) ?? ""
        guard let json = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] else {
            throw CLIError("browser_peer.py printed no JSON: \(line.prefix(200))")
        }
        let videos = json["videos"] as? [[String: Any]] ?? []
        let video = videos.first { $0["source"] as? String == "screen" } ?? videos.first ?? [:]
        let firstFrame = (video["firstFrameMs"] as? Double) ?? (video["firstFrameMs"] as? Int).map(Double.init) ?? .nan
        let joinStart = (json["joinStartMs"] as? Double) ?? (json["joinStartMs"] as? Int).map(Double.init) ?? 0
        // Frames decoded within `seconds` of the join call, from the page's frame times when it has them.
        var frames = video["frames"] as? Int ?? 0
        if let times = video["frameTimesMs"] as? [Double] {
            frames = times.filter { $0 <= joinStart + Double(seconds) * 1000 }.count
        } else if let times = video["frameTimesMs"] as? [Int] {
            frames = times.filter { Double($0) <= joinStart + Double(seconds) * 1000 }.count
        }
        return (firstFrame - joinStart, firstFrame, frames)
    }
}

func milliseconds(_ value: Double) -> String { value.isNaN ? "-" : String(format1: value) }

/// The room the viewer benches watch: a server in this process, host `1001` (the server takes a
/// share only while its host is in the channel) and its `1001_sub` screen share (a `rtc-cli join`
/// process, pattern at 1280x720), publishing before `start` returns.
struct WatchedShare {
    let app: RTCServerApp
    let url: String
    let port: Int
    let channel: String
    let secret: String
    let owner: RTCEngine
    let share: pid_t

    static func start(channel: String, lasting seconds: Int, configure: (inout ServerConfiguration) -> Void = { _ in }) async throws -> WatchedShare {
        var configuration = ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: ServerCommand.randomSecret())
        configure(&configuration)
        let app = try await RTCServerApp.start(configuration: configuration, group: MultiThreadedEventLoopGroup.singleton,
                                               logger: Logger(label: "rtc.bench") { _ in SwiftLogNoOpLogHandler() })
        let port = app.signalingAddress?.port ?? 0
        let url = "ws://127.0.0.1:\(port)/rtc", secret = configuration.secret
        let owner = try await presentOwner(url: url, token: token("1001", channel: channel, secret: secret), uid: "1001", channel: channel)
        let share = try ProcessRunner.spawn([ProcessRunner.selfPath, "join", "--server", url, "--channel", channel, "--uid", "1001_sub",
                                             "--token", token("1001_sub", channel: channel, secret: secret), "--source", "pattern", "--quiet",
                                             "--duration", "\(seconds)"])
        let room = WatchedShare(app: app, url: url, port: port, channel: channel, secret: secret, owner: owner, share: share)
        let deadline = Date().addingTimeInterval(15)
        while try await app.sfu.participants(in: channel).get().flatMap(\.tracks).isEmpty {
            guard Date() < deadline else {
                await room.stop()
                throw CLIError("the share did not publish within 15 s")
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        try await Task.sleep(for: .seconds(1))
        return room
    }

    func token(_ uid: String) -> String { Self.token(uid, channel: channel, secret: secret) }

    static func token(_ uid: String, channel: String, secret: String) -> String {
        AccessToken(uid: uid, channel: channel, now: Int64(Date().timeIntervalSince1970), ttl: 3600).signed(secret: secret)
    }

    func stop() async {
        kill(share, SIGTERM)
        var status: Int32 = 0
        waitpid(share, &status, 0)
        await owner.leave()
        await app.shutdown()
    }
}
