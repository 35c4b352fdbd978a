import Glibc
import ScreenCapture
import Testing

/// Raw frames on a descriptor (`ffmpeg ... -f rawvideo - | rtc-cli join ... --source -`).
@Suite("Raw frame source")
struct RawFrameSourceTests {
    /// A source reading `bytes` from a pipe that is then closed.
    func source(_ format: PixelFormat, _ size: VideoSize, _ bytes: [UInt8]) throws -> RawFrameSource {
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        let written = bytes.withUnsafeBytes { write(fds[1], $0.baseAddress, $0.count) }
        #expect(written == bytes.count)
        close(fds[1])
        return try RawFrameSource(format: format, size: size, descriptor: fds[0])
    }

    @Test("whole frames come out as written, then nil at the end", arguments: [PixelFormat.bgra, .i420])
    func wholeFrames(format: PixelFormat) throws {
        let size = VideoSize(width: 8, height: 4)
        let frameBytes = format == .bgra ? 8 * 4 * 4 : 8 * 4 * 3 / 2
        let bytes = (0..<frameBytes * 2).map { UInt8(truncatingIfNeeded: $0 * 7) }
        let raw = try source(format, size, bytes)
        var read: [UInt8] = []
        while let frame = try raw.nextFrame() {
            #expect(frame.width == 8 && frame.height == 4 && frame.format == format)
            for plane in 0..<frame.buffer.layout.planes.count {
                frame.buffer.forEachRow(ofPlane: plane) { _, row in read += Array(UnsafeRawBufferPointer(row)) }
            }
        }
        #expect(read == bytes)
        #expect(raw.ended)
        #expect(try raw.nextFrame() == nil)
    }

    @Test("a short last frame is an error that says how much came")
    func shortFrame() throws {
        let raw = try source(.bgra, VideoSize(width: 4, height: 2), [UInt8](repeating: 9, count: 32 + 10))
        #expect(try raw.nextFrame() != nil)
        #expect(throws: ScreenSourceError("raw input ended inside a frame (10 of 32 bytes)")) { try raw.nextFrame() }
    }
}
