import Foundation
import NIOConcurrencyHelpers
@testable import RTCCore
import RTCTestSupport
import Signaling
import Testing

/// Layered video between engines through the SFU on loopback: the publisher encodes three layers
/// from one 720p capture; each viewer decodes the layer its request (and path) gives it, switched
/// at keyframes. The capped-path figures are in NetworkTests (`SimulcastNetworkTests`).
@Suite("Simulcast and dual stream end to end", .serialized)
struct SimulcastTests {
    /// Decoded frames of one viewer: when, and how large.
    final class FrameLog: Sendable {
        let frames = NIOLockedValueBox<[(us: Int64, width: Int, height: Int)]>([])

        init(_ engine: RTCEngine) {
            engine.setRemoteVideoSink { [frames] frame in
                frames.withLockedValue { $0.append((MediaClock.monotonicUs(), frame.frame.width, frame.frame.height)) }
            }
        }

        var all: [(us: Int64, width: Int, height: Int)] { frames.withLockedValue { $0 } }

        /// When the first frame after `since` for which `match` holds was decoded.
        func first(after since: Int64, _ match: @escaping (Int, Int) -> Bool) async -> Int64? {
            let deadline = MediaClock.monotonicUs() + 8_000_000
            while MediaClock.monotonicUs() < deadline {
                if let found = all.first(where: { $0.us > since && match($0.width, $0.height) }) { return found.us }
                try? await Task.sleep(for: .milliseconds(10))
            }
            return nil
        }
    }

    static let hd = VideoEncoderConfiguration(dimensions: VideoSize(width: 1280, height: 720), frameRate: 15, bitrateKbps: 1700,
                                              degradationPreference: .maintainResolution)

    @Test("three layers from one 720p capture: a viewer gets 1280x720, .low gives at most 640x360 at the next keyframe, .high 1280x720 again; it is told the layer and why")
    func streamType() async throws {
        let server = try await TestServer()
        let host = server.engine(), viewer = server.engine(), other = server.engine()
        try host.setVideoEncoderConfiguration(Self.hd)
        try await host.setSimulcast(layers: 3)
        try await host.enableVideo()
        let frames = FrameLog(viewer), otherFrames = FrameLog(other)
        let viewerEvents = EventLog(viewer)
        try await host.join(token: testToken(uid: "1001", channel: "layers"), channel: "layers", uid: "1001")
        try await viewer.join(token: testToken(uid: "2001", channel: "layers"), channel: "layers", uid: "2001")
        try await other.join(token: testToken(uid: "2002", channel: "layers"), channel: "layers", uid: "2002")
        let video = pushPattern(host, size: VideoSize(width: 1280, height: 720), fps: 15)
        defer { video.cancel() }
        #expect(await frames.first(after: 0) { $0 == 1280 && $1 == 720 } != nil)
        #expect(viewer.remoteVideoLayer(uid: "1001")?.layer == "f")

        let low = MediaClock.monotonicUs()
        try await viewer.setRemoteVideoStreamType(uid: "1001", .low)
        let lowAt = try #require(await frames.first(after: low) { $0 <= 640 && $1 <= 360 })
        print("simulcast: .low → a frame of at most 640x360 after \((lowAt - low) / 1000) ms")
        #expect(lowAt - low < 3_000_000)
        // From then on, only small frames; the other viewer kept the full layer all along.
        try await Task.sleep(for: .milliseconds(1000))
        #expect(frames.all.filter { $0.us > lowAt }.allSatisfy { $0.width <= 640 && $0.height <= 360 })
        #expect(otherFrames.all.filter { $0.us > lowAt }.allSatisfy { $0.width == 1280 && $0.height == 720 })
        #expect(otherFrames.all.filter { $0.us > lowAt }.count >= 10)
        let change = await viewerEvents.wait { event -> LayerChange? in
            if case .remoteVideoLayerChanged(let change) = event, change.layer == "q" { change } else { nil }
        }
        #expect(change?.width == 320 && change?.height == 180 && change?.reason == .request)

        let high = MediaClock.monotonicUs()
        try await viewer.setRemoteVideoStreamType(uid: "1001", .high)
        let highAt = try #require(await frames.first(after: high) { $0 == 1280 && $1 == 720 })
        print("simulcast: .high → 1280x720 after \((highAt - high) / 1000) ms")
        #expect(highAt - high < 3_000_000)
        // A render size picks the smallest layer covering it: 600x300 → 640x360.
        let sized = MediaClock.monotonicUs()
        try await viewer.setRemoteRenderSize(uid: "1001", size: VideoSize(width: 600, height: 300))
        #expect(await frames.first(after: sized) { $0 == 640 && $1 == 360 } != nil)
        // Bad input is a clear error, not a request.
        await #expect(throws: RTCEngineError.self) { try await viewer.setRemoteRenderSize(uid: "1001", size: VideoSize(width: 0, height: 9)) }
        await #expect(throws: RTCEngineError.self) { try await host.setSimulcast(layers: 4) }
        // The server counted the switches.
        let counters = try await server.app.sfu.counterSnapshot.get()
        #expect(counters.layerSwitchesDown >= 1 && counters.layerSwitchesUp >= 1)
        await other.leave()
        await viewer.leave()
        await host.leave()
        await server.shutdown()
    }

    @Test("a publisher that stops a layer mid-stream: its viewers move to another and back when it returns; dynacast pauses layers nobody wants")
    func layerStops() async throws {
        let server = try await TestServer()
        let host = server.engine(), viewer = server.engine()
        try host.setVideoEncoderConfiguration(Self.hd)
        try await host.enableDualStreamMode(true)
        try await host.enableVideo()
        let frames = FrameLog(viewer)
        try await host.join(token: testToken(uid: "1001", channel: "stops"), channel: "stops", uid: "1001")
        try await viewer.join(token: testToken(uid: "2001", channel: "stops"), channel: "stops", uid: "2001")
        let video = pushPattern(host, size: VideoSize(width: 1280, height: 720), fps: 15)
        defer { video.cancel() }
        #expect(await frames.first(after: 0) { width, _ in width == 1280 } != nil)
        let layers = host.localVideoLayers
        #expect(layers.map(\.rid) == ["f", "q"])
        // The full layer stops on the publisher's side (as an encoder giving it up would): the viewer
        // moves to q (asking the publisher for it again if dynacast had paused it).
        let stop = MediaClock.monotonicUs()
        layers[0].hold(true)
        let movedAt = try #require(await frames.first(after: stop) { $0 == 320 && $1 == 180 })
        let lastFull = frames.all.filter { $0.width == 1280 }.last?.us ?? stop
        print("simulcast: the full layer stopped → 320x180 after \((movedAt - stop) / 1000) ms; the longest gap \((movedAt - lastFull) / 1000) ms")
        #expect(movedAt - stop < 3_000_000)
        #expect(await eventually(3) { viewer.remoteVideoLayer(uid: "1001")?.reason == .unavailable })
        // The viewer still wants the full layer, so dynacast keeps it wanted: once the publisher
        // sends it again, the viewer is back on it.
        try await Task.sleep(for: .milliseconds(2500))
        #expect(layers[0].isWanted)
        let back = MediaClock.monotonicUs()
        layers[0].hold(false)
        #expect(await frames.first(after: back) { $0 == 1280 && $1 == 720 } != nil)
        await viewer.leave()
        // Nobody subscribes: only the smallest layer stays wanted after the grace period, and the
        // publisher's stats say so.
        let hostEvents = EventLog(host)
        #expect(await eventually(8) { !layers[0].isWanted && layers[1].isWanted })
        let sent = await hostEvents.wait(5) { event -> [String]? in
            if case .rtcStats(let stats) = event, let video = stats.local.first(where: { $0.kind == .video }), video.layers == ["q"] {
                return video.layers
            }
            return nil
        }
        #expect(sent == ["q"])
        await host.leave()
        await server.shutdown()
    }

    @Test("a screen (two temporal layers by default): a viewer asking for .low gets the base layer alone (half the frames, one continuous stream that decodes), the other all of them; back to .high, all again")
    func temporalLayers() async throws {
        let server = try await TestServer()
        let host = server.engine(), viewer = server.engine(), other = server.engine()
        let screen = VideoEncoderConfiguration(dimensions: VideoSize(width: 1280, height: 720), frameRate: 15, bitrateKbps: 1200,
                                               degradationPreference: .maintainResolution, contentHint: .detail)
        #expect(screen.temporalLayers == 2, "screen content's default")
        try host.setVideoEncoderConfiguration(screen)
        try await host.enableVideo()
        let frames = FrameLog(viewer), otherFrames = FrameLog(other), hostEvents = EventLog(host)
        try await host.join(token: testToken(uid: "1001", channel: "temporal"), channel: "temporal", uid: "1001",
                            options: JoinOptions(videoSource: .screen))
        try await viewer.join(token: testToken(uid: "2001", channel: "temporal"), channel: "temporal", uid: "2001")
        try await other.join(token: testToken(uid: "2002", channel: "temporal"), channel: "temporal", uid: "2002")
        let video = pushPattern(host, kind: .screen, size: VideoSize(width: 1280, height: 720), fps: 15)
        defer { video.cancel() }
        #expect(await frames.first(after: 0) { width, _ in width == 1280 } != nil)
        // 1200 kbps is headroom enough at 720p15: both layers are encoded, and the stats say so.
        let encoded = await hostEvents.wait(5) { event -> Int? in
            guard case .rtcStats(let stats) = event else { return nil }
            return stats.local.first { $0.kind == .video && $0.framesEncoded > 0 }?.temporalLayers
        }
        #expect(encoded == 2)
        try await viewer.setRemoteVideoStreamType(uid: "1001", .low)
        #expect(await eventually { viewer.remoteVideoLayer(uid: "1001")?.layer == "T0" })
        let from = MediaClock.monotonicUs()
        try await Task.sleep(for: .seconds(3))
        let to = MediaClock.monotonicUs()
        let low = frames.all.filter { $0.us > from && $0.us < to }, all = otherFrames.all.filter { $0.us > from && $0.us < to }
        let lowFPS = Double(low.count) / 3, allFPS = Double(all.count) / 3
        let gaps = zip(low, low.dropFirst()).map { $1.us - $0.us }
        print("temporal layers: the .low viewer decodes \(lowFPS) fps (longest gap \((gaps.max() ?? 0) / 1000) ms), the other \(allFPS) fps")
        #expect(allFPS >= 12 && lowFPS >= 5 && lowFPS <= 0.7 * allFPS, "\(lowFPS) against \(allFPS) fps")
        // No stall: a base frame is 133 ms; the longest gap measured 269-400 ms idle (the same
        // before and after the send path changed) and 406 ms under the suite's load, as the source
        // loses a frame now and then (the other viewer's rate too: 14.3-15 fps). 400 ms was too tight,
        // and 500 left 94 ms for the suite's load. A stall (a gap given up, then a keyframe asked for
        // and awaited) costs over a second; 700 ms still catches it.
        #expect((gaps.max() ?? 0) < 700_000, "longest gap \((gaps.max() ?? 0) / 1000) ms")
        #expect(low.allSatisfy { $0.width == 1280 && $0.height == 720 }, "the base layer keeps the full size")
        // Back to all of it.
        try await viewer.setRemoteVideoStreamType(uid: "1001", .high)
        #expect(await eventually { viewer.remoteVideoLayer(uid: "1001")?.layer == "T1" })
        try await Task.sleep(for: .seconds(2))
        let again = MediaClock.monotonicUs()
        try await Task.sleep(for: .seconds(2))
        let restored = Double(frames.all.filter { $0.us > again }.count) / 2
        #expect(restored >= 12, "\(restored) fps after .high")
        await other.leave()
        await viewer.leave()
        await host.leave()
        await server.shutdown()
    }
}
