import ArgumentParser
import Foundation
import LiveKitProtocol
import Logging
import NIOPosix
import RTCServer
import Signaling
import ServerCommandLine

/// One screen share (`1001_sub`, a `rtc-cli join` process) watched in turns by a Swift bot (an
/// RTCEngine, our signaling) and by LiveKit's official Python SDK (`Tests/Tools/livekit_peer.py`,
/// LiveKit's signaling, libwebrtc): time from the join call to the first decoded frame, and frames
/// decoded within N seconds of it, runs interleaved so machine load hits both alike.
struct LiveKitBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "livekit",
        abstract: "The same _sub screen share watched by a Swift bot and by LiveKit's Python SDK: first-frame time and frames in 10 s.")

    @Option(help: "Runs per viewer (interleaved).") var runs: Int = 3
    @Option(help: "Seconds each viewer watches.") var seconds: Int = 10
    @Option(help: "The LiveKit driver (default: the repository's Tests/Tools/livekit_peer.py).") var driver: String?

    func validate() throws {
        guard runs >= 1, (3...60).contains(seconds) else { throw ValidationError("--runs >= 1 and --seconds 3...60") }
    }

    func run() async throws {
        let driver = self.driver ?? BrowserBench.repository.appendingPathComponent("Tests/Tools/livekit_peer.py").path
        guard FileManager.default.fileExists(atPath: driver) else { throw CLIError("no LiveKit driver at \(driver) (--driver)") }
        let apiKey = "bench", apiSecret = ServerCommand.randomSecret()
        let room = try await WatchedShare.start(channel: "bench-livekit", lasting: runs * 2 * (seconds + 15) + 30) { $0.liveKitKeys = [apiKey: apiSecret] }
        let (url, port, channel) = (room.url, room.port, room.channel)
        let token = room.token
        print("one 1280x720 _sub screen share (pattern, 15 fps), watched \(runs) times each by a Swift bot and by LiveKit's Python SDK "
              + "(livekit 1.2, libwebrtc); \(seconds) s per watch, interleaved, loopback")
        print("run   viewer     first frame (from join)   frames in \(seconds) s")
        var swift: [(first: Double, frames: Int)] = [], liveKit: [(first: Double, frames: Int)] = []
        for index in 0..<runs {
            for swiftFirst in index % 2 == 0 ? [true, false] : [false, true] {
                let result: (first: Double, frames: Int)
                if swiftFirst {
                    result = try await BrowserBench.watchWithEngine(url: url, channel: channel, uid: "swift\(index)", token: token("swift\(index)"),
                                                                    seconds: seconds)
                    swift.append(result)
                } else {
                    result = try watchWithLiveKit(driver: driver, url: "ws://127.0.0.1:\(port)", room: channel, identity: "lk\(index)",
                                                  apiKey: apiKey, apiSecret: apiSecret)
                    liveKit.append(result)
                }
                print("\(String(index + 1).padding(6))\((swiftFirst ? "swift" : "livekit").padding(11))\(milliseconds(result.first).padding(26))\(result.frames)")
                try await Task.sleep(for: .milliseconds(600))  // past the server's keyframe-request throttle
            }
        }
        await room.stop()
        let swiftFirst = median(swift.map(\.first)), liveKitFirst = median(liveKit.map(\.first))
        let swiftFrames = median(swift.map(\.frames)), liveKitFrames = median(liveKit.map(\.frames))
        print("median      swift: first frame \(milliseconds(swiftFirst)) ms, \(swiftFrames) frames   livekit: first frame \(milliseconds(liveKitFirst)) ms, "
              + "\(liveKitFrames) frames")
        print("ratio (livekit / swift): first frame \(String(format2: liveKitFirst / swiftFirst)), frames \(String(format2: Double(liveKitFrames) / Double(max(1, swiftFrames))))")
        print("first frame from join: the Swift bot from its join() call, the LiveKit participant from its Room.connect() call (both "
              + "include signaling, ICE, DTLS and the first keyframe); frames counted from the same start")
    }

    /// One LiveKit participant watching for `seconds`: its report's first frame and frames within the window.
    private func watchWithLiveKit(driver: String, url: String, room: String, identity: String, apiKey: String, apiSecret: String) throws
        -> (first: Double, frames: Int) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", driver, "bot", "--url", url, "--api-key", apiKey, "--api-secret", apiSecret, "--room", room,
                             "--identity", identity, "--duration", "\(seconds)"]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let line = String(decoding: data, as: UTF8.self).split(separator: "\n").last.map(String.init) ?? ""
        guard let json = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] else {
            throw CLIError("livekit_peer.py printed no JSON (is `livekit` installed? make deps): \(line.prefix(200))")
        }
        if let error = json["connectError"] as? String { throw CLIError("the LiveKit participant could not connect: \(error)") }
        let video = (json["tracks"] as? [[String: Any]] ?? []).first { $0["kind"] as? String == "video" } ?? [:]
        let first = (video["firstFrameMs"] as? Double) ?? (video["firstFrameMs"] as? Int).map(Double.init) ?? .nan
        return (first, video["framesInWindow"] as? Int ?? 0)
    }
}
