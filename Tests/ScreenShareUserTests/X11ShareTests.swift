import Foundation
import NIOConcurrencyHelpers
import RTCTestSupport
import ScreenShareUser
import Testing

/// A virtual X display for the duration of a test.
final class VirtualDisplay {
    let name: String
    private let process: ChildProcess

    init?(number: Int, size: VideoSize) {
        name = ":\(number)"
        guard let process = try? ChildProcess(["/usr/bin/Xvfb", name, "-screen", "0", "\(size.width)x\(size.height)x24", "-nolisten", "tcp"],
                                              output: .discarded, errors: .discarded)
        else { return nil }
        self.process = process
        // Up when its socket appears.
        let socket = "/tmp/.X11-unix/X\(number)"
        for _ in 0..<100 where !FileManager.default.fileExists(atPath: socket) { usleep(50_000) }
        usleep(200_000)
    }

    deinit {
        // Xvfb can sit on SIGTERM while clients linger: end it for sure, and wait a bounded time.
        process.signal(SIGKILL)
        _ = process.waitBlocking(2)
    }
}

@Suite("X11 screen capture under Xvfb", .serialized)
struct X11ShareTests {
    /// A known picture: bands of colour, fine stripes and a checkerboard (screen-like detail).
    static func knownImage(_ size: VideoSize) -> VideoFrame {
        let buffer = VideoBuffer(layout: FrameLayout(format: .bgra, width: size.width, height: size.height)!)
        buffer.forEachRow(ofPlane: 0) { y, row in
            for x in 0..<size.width {
                let band = x * 6 / size.width
                var (b, g, r): (UInt8, UInt8, UInt8) = [(200, 40, 40), (40, 200, 40), (40, 40, 200), (220, 220, 220), (30, 30, 30), (200, 200, 40)][band]
                if y > size.height / 2 && ((x / 16) + (y / 16)) % 2 == 0 { (b, g, r) = (255 &- b, 255 &- g, 255 &- r) }
                if y < 40 && x % 4 < 2 { (b, g, r) = (0, 0, 0) }
                row[x * 4] = b
                row[x * 4 + 1] = g
                row[x * 4 + 2] = r
                row[x * 4 + 3] = 255
            }
        }
        return VideoFrame(buffer: buffer, timestampUs: 0)
    }

    @Test("a known image drawn on an Xvfb screen reaches the viewer at ≥ 30 dB against ffmpeg's screenshot of the display")
    func knownImageArrives() async throws {
        let size = VideoSize(width: 1280, height: 720)
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/Xvfb") else {
            Issue.record("Xvfb is missing: `make test` installs it")
            return
        }
        let display = try #require(VirtualDisplay(number: 97, size: size))
        try X11ScreenSource.paintRoot(display: display.name, frame: Self.knownImage(size))

        let server = try await TestServer()
        let viewer = server.engine()
        let latest = NIOLockedValueBox<VideoFrame?>(nil)
        let count = NIOLockedValueBox(0)
        viewer.setRemoteVideoSink { frame in
            latest.withLockedValue { $0 = frame.frame }
            count.withLockedValue { $0 += 1 }
        }
        try await viewer.join(token: testToken(uid: "2001", channel: "x11"), channel: "x11", uid: "2001")
        let owner = try await server.presentHost(channel: "x11")
        let session = ScreenShareSession(configuration: ScreenShareConfiguration(
            serverURL: server.url, channel: "x11", hostUID: "1001", token: testToken(uid: "1001_sub", channel: "x11")))
        try await session.start()
        let source = try X11ScreenSource(display: display.name)
        #expect(source.size == size)
        let capturer = ScreenCapturer(source: source, framesPerSecond: 15, deliver: { session.pushVideoFrame($0) })
        #expect(await eventually { count.withLockedValue { $0 } >= 30 })
        capturer.stop()
        await session.stop()
        await owner.leave()
        await viewer.leave()
        await server.shutdown()

        // ffmpeg's own screenshot of the same display, as I420.
        let shot = NSTemporaryDirectory() + "x11-shot-\(UUID().uuidString).yuv"
        let grab = try runTool(["ffmpeg", "-hide_banner", "-loglevel", "error", "-f", "x11grab", "-video_size", "\(size.width)x\(size.height)",
                                "-i", display.name, "-frames:v", "1", "-pix_fmt", "yuv420p", "-f", "rawvideo", "-y", shot])
        #expect(grab.status == 0, "\(grab.err)")
        let bytes = try Data(contentsOf: URL(fileURLWithPath: shot))
        #expect(bytes.count == size.width * size.height * 3 / 2)
        let reference = VideoBuffer(layout: FrameLayout(format: .i420, width: size.width, height: size.height)!)
        var offset = 0
        for plane in 0..<3 {
            reference.forEachRow(ofPlane: plane) { _, row in
                bytes.withUnsafeBytes { row.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[offset..<offset + row.count])) }
                offset += row.count
            }
        }
        let decoded = try #require(latest.withLockedValue { $0 })
        #expect(decoded.width == size.width && decoded.height == size.height)
        var psnr = PSNRAccumulator()
        try psnr.add(reference: VideoFrame(buffer: reference, timestampUs: 0), distorted: decoded)
        #expect(psnr.psnr >= 30, "PSNR \(psnr.psnr) dB")
        _ = display
    }
}
