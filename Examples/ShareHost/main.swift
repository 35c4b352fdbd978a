// A host app that shares its screen through an auxiliary user: it joins as UID, launches the
// sharer process (rtc-sharer, standing in for a broadcast upload extension), watches it and
// force-stops it after SECONDS.
//
//   swift run example-share-host ws://127.0.0.1:7880/rtc ScreenShare 1001 <token> <token for 1001_sub> 20 [.build/debug/rtc-sharer]
import Glibc
import ScreenShareUser

let arguments = CommandLine.arguments
guard arguments.count >= 7, let seconds = Double(arguments[6]) else {
    print("usage: example-share-host SERVER_URL CHANNEL UID TOKEN SUB_TOKEN SECONDS [RTC_SHARER_PATH]")
    exit(2)
}
let (server, channel, uid) = (arguments[1], arguments[2], arguments[3])
let sharerPath = arguments.count > 7 ? arguments[7] : ".build/debug/rtc-sharer"

// The host joins normally; the owner filter keeps its own share out of its subscriptions.
let engine = RTCEngine(configuration: RTCEngineConfiguration(serverURL: server))
try await engine.join(token: arguments[4], channel: channel, uid: uid)

// The link lives in a directory both processes see (the app-group container on iOS).
let host = try ScreenShareHost(linkPath: "/tmp/example-share-\(getpid()).sock")
try host.launchSharer(executable: sharerPath, arguments: ["--link", host.linkPath])
let watching = Task {
    for await event in host.events {
        switch event {
        case .started: print("share started")
        case .paused: print("share paused")
        case .resumed: print("share resumed")
        case .stats(let stats): print("share: \(Int(stats.framesPerSecond)) fps, \(Int(stats.bitrateKbps)) kbps, \(stats.width)x\(stats.height)")
        case .finished(let reason): print("share finished: \(reason)")
        }
    }
}
try await host.start(ScreenShareSetup(
    configuration: ScreenShareConfiguration(serverURL: server, channel: channel, hostUID: uid, token: arguments[5],
                                            policy: ScreenSharePolicy(profile: .default)),
    mode: .standalone, source: "pattern"))
try await Task.sleep(for: .milliseconds(Int(seconds * 1000)))
await host.stop()  // force-stop: finished(requestedByHost) follows
host.waitForSharer()
await watching.value
await engine.leave()
