import Foundation
import RTCTestSupport
import Testing

/// How fast a libwebrtc publisher (LiveKit's Python SDK) reaches its full size through our server.
/// LiveKit's SDKs put `x-google-start-bitrate=1000` on their VP8 offer, and libwebrtc reads a
/// sender's start bitrate from the remote description only: a server that does not answer it back
/// leaves the encoder at 300 kbps, which drops the first 640x360 frame and steps down to 480x270
/// until libwebrtc's quality scaler (60 frames, checked every 2 s) steps up again.
@Suite("A libwebrtc publisher's ramp to its full size", .serialized)
struct RampUpTests {
    typealias LK = LiveKitInteropTests

    /// One publisher and one subscriber on `extra`'s server: the subscriber's first frame (ms since
    /// its start), its first 640x360 frame, and the sizes it decoded.
    static func ramp(_ extra: [String], room: String) async throws -> (first: Double?, full: Double?, sizes: [String: Int]) {
        let (server, url, _) = try await LK.server(extra)
        defer { server.stop() }
        let viewer = try LK.peer("bot", url, ["--room", room, "--identity", "viewer", "--duration", "10"])
        try await Task.sleep(for: .seconds(1))
        let publisher = try LK.peer("bot", url, ["--room", room, "--identity", "camera", "--publish", "--size", "640x360", "--no-audio",
                                                 "--duration", "9"])
        defer { publisher.stop() }
        let report = try await LK.report(viewer)
        let video = LK.track(report, identity: "camera", kind: "video")
        let first = video?["firstFrameMs"] as? Double
        let full = (video?["firstSizeMs"] as? [String: Double])?["640x360"]
        return (first, full, video?["sizes"] as? [String: Int] ?? [:])
    }

    @Test("LiveKit's Python SDK publishing 640x360: with its start bitrate answered back, the subscriber's first frames are 640x360; beside it the same SDK against a server that does not answer it (the step down and the climb), one run")
    func startBitrateAnswered() async throws {
        let answered = try await Self.ramp([], room: "ramp")
        let withheld = try await Self.ramp(["--no-answer-sender-parameters"], room: "ramp-off")
        func rampMs(_ run: (first: Double?, full: Double?, sizes: [String: Int])) -> Double? {
            guard let first = run.first, let full = run.full else { return nil }
            return full - first
        }
        // Deterministic: at a 1 Mbps start libwebrtc encodes 640x360 from its first frame.
        // (The peer stamps a frame and its size with two clock reads: the same frame is a few tenths of a ms apart.)
        #expect(rampMs(answered).map { abs($0) < 5 } == true, "answered: first frame at \(answered.first ?? -1) ms, 640x360 at \(answered.full ?? -1) ms, sizes \(answered.sizes)")
        #expect(answered.sizes.keys.allSatisfy { $0 == "640x360" }, "answered: \(answered.sizes)")
        print(String(format: "libwebrtc ramp to 640x360 after the first frame: start bitrate answered %@ ms (sizes %@); withheld %@ ms (sizes %@)",
                     rampMs(answered).map { String(format: "%.0f", $0) } ?? "never", "\(answered.sizes)",
                     rampMs(withheld).map { String(format: "%.0f", $0) } ?? "never", "\(withheld.sizes)"))
    }
}
