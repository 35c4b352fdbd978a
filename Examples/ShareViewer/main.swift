// A viewer that shows both the host's camera and its screen share (here: prints what arrives).
//
//   swift run example-share-viewer ws://127.0.0.1:7880/rtc ScreenShare 2001 <token> 30
import Glibc
import NIOConcurrencyHelpers
import RTCCore

let arguments = CommandLine.arguments
guard arguments.count == 6, let seconds = Double(arguments[5]) else {
    print("usage: example-share-viewer SERVER_URL CHANNEL UID TOKEN SECONDS")
    exit(2)
}
// Everyone but the owner sees the share by default, so nothing special is needed to receive it.
let engine = RTCEngine(configuration: RTCEngineConfiguration(serverURL: arguments[1], clientRole: .audience))
let frames = NIOLockedValueBox<[String: Int]>([:])
engine.setRemoteVideoSink { frame in
    let key = "\(frame.uid) \(frame.source.rawValue) \(frame.frame.width)x\(frame.frame.height)"
    frames.withLockedValue { $0[key, default: 0] += 1 }
}
let events = engine.events
Task {
    for await event in events {
        switch event {
        case .userJoined(let uid): print("\(uid) joined\(isScreenShareUID(uid) ? " (a screen share)" : "")")
        case .userOffline(let uid, let reason): print("\(uid) left: \(reason)")
        case .firstRemoteVideoFrameDecoded(let uid, let source, let size, let elapsed): print("first \(source) frame of \(uid): \(size) after \(elapsed) ms")
        default: break
        }
    }
}
try await engine.join(token: arguments[4], channel: arguments[2], uid: arguments[3])
try await Task.sleep(for: .milliseconds(Int(seconds * 1000)))
await engine.leave()
for (key, count) in frames.withLockedValue({ $0 }).sorted(by: { $0.key < $1.key }) { print("\(key): \(count) frames") }
