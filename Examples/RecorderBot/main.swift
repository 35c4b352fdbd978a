// A recorder bot: join, record every remote track to IVF/WAV and every participant to one
// synchronized WebM for a while, leave.
//
//   swift run example-recorder ws://127.0.0.1:7880/rtc demo recorder <token> out/rec 30
import Glibc
import RTCCore
import RTCRecording

let arguments = CommandLine.arguments
guard arguments.count == 7, let seconds = Double(arguments[6]), seconds > 0 else {
    print("usage: example-recorder SERVER_URL CHANNEL UID TOKEN DIRECTORY SECONDS")
    exit(2)
}

let engine = RTCEngine(configuration: RTCEngineConfiguration(serverURL: arguments[1], clientRole: .audience))
let recorder = ChannelRecorder(directory: arguments[5], options: ChannelRecorder.Options(layout: .both))
recorder.attach(to: engine)
do {
    try await engine.join(token: arguments[4], channel: arguments[2], uid: arguments[3])
} catch {
    print("join failed: \(error)")
    exit(1)
}
try await Task.sleep(for: .milliseconds(Int(seconds * 1000)))
await engine.leave()
for file in recorder.finish() { print("\(file.path): \(file.frames) frames, \(file.durationMs) ms of audio") }
for error in recorder.errors { print("error: \(error)") }
