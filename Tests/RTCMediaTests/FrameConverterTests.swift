import Testing
import RTCMedia

@Suite("Conversion and scaling (libyuv)")
struct FrameConverterTests {
    @Test("fitting keeps the aspect ratio and even sizes, and never enlarges", arguments: [
        (VideoSize(width: 1920, height: 1080), VideoSize(width: 1280, height: 720)),
        (VideoSize(width: 2560, height: 1600), VideoSize(width: 1152, height: 720)),
        (VideoSize(width: 1080, height: 1920), VideoSize(width: 404, height: 720)),  // portrait phone screen
        (VideoSize(width: 1179, height: 2556), VideoSize(width: 332, height: 720)),
        (VideoSize(width: 640, height: 480), VideoSize(width: 640, height: 480)),    // already fits
        (VideoSize(width: 641, height: 481), VideoSize(width: 640, height: 480)),    // odd: made even
    ])
    func fit(source: VideoSize, expected: VideoSize) throws {
        let bounds = VideoSize(width: 1280, height: 720)
        let fitted = source.fitted(into: bounds)
        #expect(fitted == expected)
        #expect(fitted.width % 2 == 0 && fitted.height % 2 == 0)
        #expect(fitted.width <= bounds.width && fitted.height <= bounds.height)
        let sourceAspect = Double(source.width) / Double(source.height)
        let fittedAspect = Double(fitted.width) / Double(fitted.height)
        // Rounding to even pixels moves the aspect by at most two pixels' worth.
        #expect(abs(fittedAspect - sourceAspect) <= 2.0 / Double(fitted.height) * sourceAspect + 2.0 / Double(fitted.height))
    }

    @Test("a 1920x1080 and a 2560x1600 BGRA capture become fitted I420 frames", arguments: [
        (VideoSize(width: 1920, height: 1080), VideoSize(width: 1280, height: 720)),
        (VideoSize(width: 2560, height: 1600), VideoSize(width: 1152, height: 720)),
    ])
    func scaleCapture(source: VideoSize, expected: VideoSize) throws {
        let pool = try #require(VideoFramePool(format: .bgra, width: source.width, height: source.height))
        let capture = pool.makeBuffer()
        // Left half pure red, right half pure blue (bytes B, G, R, A).
        capture.forEachRow(ofPlane: 0) { _, row in
            for x in 0..<source.width {
                let red = x < source.width / 2
                row[x * 4] = red ? 0 : 255
                row[x * 4 + 1] = 0
                row[x * 4 + 2] = red ? 255 : 0
                row[x * 4 + 3] = 255
            }
        }
        let converter = FrameConverter()
        let out = try converter.fitI420(VideoFrame(buffer: capture, rotation: .clockwise90, timestampUs: 42),
                                        into: VideoSize(width: 1280, height: 720))
        #expect(out.format == .i420)
        #expect(VideoSize(width: out.width, height: out.height) == expected)
        #expect(out.rotation == .clockwise90 && out.timestampUs == 42)
        // BT.601 limited range: red is Y 81, V 240; blue is Y 41, U 240.
        let y = out.buffer.planeBase(0), u = out.buffer.planeBase(1), v = out.buffer.planeBase(2)
        let row = out.height / 2
        #expect(abs(Int(y[row * out.buffer.stride(0) + 10]) - 81) <= 2)
        #expect(abs(Int(v[row / 2 * out.buffer.stride(2) + 5]) - 240) <= 2)
        #expect(abs(Int(y[row * out.buffer.stride(0) + out.width - 10]) - 41) <= 2)
        #expect(abs(Int(u[row / 2 * out.buffer.stride(1) + out.width / 2 - 5]) - 240) <= 2)
    }

    @Test("NV12 converts to I420 with the same pixels")
    func nv12() throws {
        let pool = try #require(VideoFramePool(format: .nv12, width: 8, height: 4))
        let buffer = pool.makeBuffer()
        buffer.forEachRow(ofPlane: 0) { index, row in for x in 0..<8 { row[x] = UInt8(index * 8 + x) } }
        buffer.forEachRow(ofPlane: 1) { _, row in for x in 0..<4 { row[2 * x] = 100; row[2 * x + 1] = 200 } }
        let out = try FrameConverter().toI420(VideoFrame(buffer: buffer, timestampUs: 0))
        #expect(out.buffer.planeBase(0)[out.buffer.stride(0) * 3 + 7] == 31)
        #expect(out.buffer.planeBase(1)[1] == 100)
        #expect(out.buffer.planeBase(2)[out.buffer.stride(2) + 3] == 200)
    }

    @Test("rotation turns the picture and swaps the size", arguments: VideoRotation.allCases)
    func rotate(rotation: VideoRotation) throws {
        let pool = try #require(VideoFramePool(format: .i420, width: 4, height: 2))
        let buffer = pool.makeBuffer()
        for plane in 0..<3 { buffer.forEachRow(ofPlane: plane) { _, row in row.initializeMemory(as: UInt8.self, repeating: 0) } }
        buffer.planeBase(0)[0] = 255  // top-left luma pixel
        let out = try FrameConverter().rotate(VideoFrame(buffer: buffer, rotation: rotation, timestampUs: 0), by: rotation)
        #expect(out.rotation == .none)
        #expect((out.width, out.height) == (rotation.swapsDimensions ? (2, 4) : (4, 2)))
        let (x, y): (Int, Int) = switch rotation {
        case .none: (0, 0)
        case .clockwise90: (out.width - 1, 0)
        case .clockwise180: (out.width - 1, out.height - 1)
        case .clockwise270: (0, out.height - 1)
        }
        #expect(out.buffer.planeBase(0)[y * out.buffer.stride(0) + x] == 255)
    }

    @Test("frame pools reuse their buffers")
    func poolReuse() throws {
        let pool = try #require(VideoFramePool(format: .i420, width: 64, height: 64, capacity: 2))
        for _ in 0..<100 { _ = pool.makeBuffer() }
        #expect(pool.allocationCount == 1)
        let held = (0..<3).map { _ in pool.makeBuffer() }
        #expect(pool.allocationCount == 3 && held.count == 3)
        #expect(FrameLayout(format: .i420, width: 0, height: 10) == nil)
        #expect(FrameLayout(format: .bgra, width: 20000, height: 10) == nil)
        let layout = try #require(FrameLayout(format: .i420, width: 5, height: 3))
        #expect(layout.planes.map(\.rowBytes) == [5, 3, 3] && layout.planes.map(\.rows) == [3, 2, 2])
        #expect(layout.planes.allSatisfy { $0.stride % FrameLayout.strideAlignment == 0 })
    }
}
