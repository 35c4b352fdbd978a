import Testing
@testable import RTCCore

/// The engine's side of transport-wide congestion control (the estimator and the send log it
/// uses are tested beside them, in RTCTransportTests).
@Suite("Send side of transport-wide congestion control")
struct SendSideCongestionTests {
    @Test("the server's REMB holds the video target under it (less the audio reserve) until it goes stale")
    func receiverLimit() {
        let congestion = SendSideCongestion(videoKbps: 2000)
        congestion.setMaximumVideo(kbps: 2000, floorKbps: 100)
        // No feedback yet: the target is the app's 2000 kbps; a 600 kbps limit takes it to 552.
        let limited = congestion.limit(toBps: 600_000, nowUs: 1_000_000)
        #expect(limited == 552)
        // Refreshed a second later at 1 Mbps: 952.
        let raised = congestion.limit(toBps: 1_000_000, nowUs: 2_000_000)
        #expect(raised == 952)
        // A limit under the floor still leaves the floor (the encoder cannot go lower).
        let floored = congestion.limit(toBps: 60_000, nowUs: 3_000_000)
        #expect(floored == 100)
        // Stale after 3 s: a later limit far above the estimate gives the estimate back.
        let stale = congestion.limit(toBps: 50_000_000, nowUs: 7_000_000)
        #expect(stale == 2000)
    }

    @Test("the encoder's floor follows pixels and frame rate; a track that may scale gets a half-size floor")
    func encoderFloor() {
        let hd = VideoSize(width: 1280, height: 720)
        #expect(SendSideCongestion.encoderFloorKbps(size: hd, frameRate: 30) == 394)
        #expect(SendSideCongestion.encoderFloorKbps(size: hd, frameRate: 15) == 197)
        #expect(SendSideCongestion.encoderFloorKbps(size: VideoSize(width: 160, height: 90), frameRate: 15) == SendSideCongestion.minimumVideoKbps)
        let camera = VideoEncoderConfiguration(dimensions: hd, frameRate: 30, bitrateKbps: 2500)
        #expect(SendSideCongestion.encoderFloorKbps(for: camera) == SendSideCongestion.encoderFloorKbps(size: hd.scaled(down: 2), frameRate: 30))
        let screen = VideoEncoderConfiguration(dimensions: hd, frameRate: 15, bitrateKbps: 2500, degradationPreference: .maintainResolution)
        #expect(SendSideCongestion.encoderFloorKbps(for: screen) == 197)
    }
}
