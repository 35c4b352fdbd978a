// The smallest app: join a channel, publish nothing, print what the engine reports.
//
//   swift run example-stats ws://127.0.0.1:7880/rtc demo 3001 <token>
//
// (`rtc-cli server --dev` prints a server URL, and `rtc-cli token` mints tokens.)
import Glibc
import RTCCore

let arguments = CommandLine.arguments
guard arguments.count == 5 else {
    print("usage: example-stats SERVER_URL CHANNEL UID TOKEN")
    exit(2)
}

/// Prints the events an app usually shows: who is here and how the media is doing.
final class Printer: RTCEngineDelegate {
    func rtcEngine(_ engine: RTCEngine, didJoinChannel channel: String, uid: String, elapsedMs: Int) {
        print("joined \(channel) as \(uid) in \(elapsedMs) ms")
    }
    func rtcEngine(_ engine: RTCEngine, didJoinedOfUid uid: String) { print("\(uid) joined") }
    func rtcEngine(_ engine: RTCEngine, didOfflineOfUid uid: String, reason: UserOfflineReason) { print("\(uid) left (\(reason))") }
    func rtcEngine(_ engine: RTCEngine, connectionChangedTo state: ConnectionState, reason: ConnectionChangedReason) {
        print("connection \(state) (\(reason))")
    }
    func rtcEngine(_ engine: RTCEngine, reportRtcStats stats: RTCStats) {
        for track in stats.remote {
            print("  \(track.uid)/\(track.source): \(Int(track.bitrateKbps)) kbps, \(Int(track.framesPerSecond)) fps, lost \(track.packetsLost)")
        }
    }
}

let engine = RTCEngine(configuration: RTCEngineConfiguration(serverURL: arguments[1], clientRole: .audience))
let printer = Printer()
engine.delegate = printer
do {
    try await engine.join(token: arguments[4], channel: arguments[2], uid: arguments[3])
} catch {
    print("join failed: \(error)")
    exit(1)
}
try await Task.sleep(for: .seconds(3600))
