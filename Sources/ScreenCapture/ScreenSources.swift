internal import CX11Capture
import RTCMedia
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Where screen frames come from. `nextFrame` is called on the capturer's thread, one at a time.
public protocol ScreenSource: AnyObject {
    /// The next picture, or nil when there is none now (an idle screen, a source at its end).
    func nextFrame() throws(ScreenSourceError) -> VideoFrame?
    var size: VideoSize { get }
}

public struct ScreenSourceError: Error, Sendable, Hashable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// A synthetic screen (text lines, a moving cursor): deterministic, so tests can compare.
public final class PatternScreenSource: ScreenSource {
    private let generator: PatternGenerator
    private var index = 0
    public let size: VideoSize

    public init(size: VideoSize = VideoSize(width: 1920, height: 1080), kind: PatternKind = .screen) throws(ScreenSourceError) {
        do {
            generator = try PatternGenerator(kind: kind, size: size)
        } catch {
            throw ScreenSourceError("pattern \(size): \(error)")
        }
        self.size = size
    }

    public func nextFrame() -> VideoFrame? {
        defer { index += 1 }
        return generator.frame(at: index)
    }
}

/// A Y4M file, looping at its end.
public final class Y4MScreenSource: ScreenSource {
    private let path: String
    private var reader: Y4MReader
    public let size: VideoSize

    public init(path: String) throws(ScreenSourceError) {
        self.path = path
        do {
            reader = try Y4MReader(path: path)
        } catch {
            throw ScreenSourceError("\(error)")
        }
        size = VideoSize(width: reader.header.width, height: reader.header.height)
    }

    public func nextFrame() throws(ScreenSourceError) -> VideoFrame? {
        do {
            if let frame = try reader.readFrame() { return frame }
            reader = try Y4MReader(path: path)
            return try reader.readFrame()
        } catch {
            throw ScreenSourceError("\(error)")
        }
    }
}

/// Raw frames on a file descriptor (stdin by default), as `ffmpeg ... -f rawvideo -pix_fmt bgra -`
/// writes them: BGRA or I420, tightly packed, of a size given up front.
public final class RawFrameSource: ScreenSource {
    public let size: VideoSize
    public let format: PixelFormat
    private let descriptor: Int32
    private let pool: VideoFramePool
    public private(set) var ended = false

    public init(format: PixelFormat, size: VideoSize, descriptor: Int32 = 0) throws(ScreenSourceError) {
        guard format == .bgra || format == .i420 else { throw ScreenSourceError("raw input is bgra or i420, not \(format)") }
        guard let pool = VideoFramePool(format: format, width: size.width, height: size.height, capacity: 2) else {
            throw ScreenSourceError("raw frame size \(size) is not valid (even sides for i420, at most 16383)")
        }
        self.size = size
        self.format = format
        self.descriptor = descriptor
        self.pool = pool
    }

    /// Blocks until a whole frame is read; nil at the end of the input (a short last frame is an error).
    /// Rows are read straight into a pooled buffer: no second copy of the frame.
    public func nextFrame() throws(ScreenSourceError) -> VideoFrame? {
        guard !ended else { return nil }
        let buffer = pool.makeBuffer()
        let total = buffer.layout.packedByteCount
        var filled = 0
        var failure: ScreenSourceError?
        for plane in 0..<buffer.layout.planes.count where failure == nil && !ended {
            buffer.forEachRow(ofPlane: plane) { _, row in
                var done = 0
                while failure == nil, !ended, done < row.count {
                    let count = read(descriptor, row.baseAddress! + done, row.count - done)
                    if count == 0 {
                        ended = true
                    } else if count < 0 {
                        if errno != EINTR { failure = ScreenSourceError("reading raw frames failed: errno \(errno)") }
                    } else {
                        done += count
                        filled += count
                    }
                }
            }
        }
        if let failure { throw failure }
        if ended {
            if filled == 0 { return nil }
            throw ScreenSourceError("raw input ended inside a frame (\(filled) of \(total) bytes)")
        }
        return VideoFrame(buffer: buffer, timestampUs: MediaClock.monotonicUs())
    }
}

/// An X11 screen (or a region of it) through XShm: works under Xvfb. Captures land in one shared
/// segment and are copied into a two-buffer pool, so a full-size capture costs two frames at most.
public final class X11ScreenSource: ScreenSource {
    private let capture: OpaquePointer
    public let size: VideoSize
    private let pool: VideoFramePool

    /// `display` like `:99` (nil: `$DISPLAY`); a region of zero size is the whole screen.
    public init(display: String? = nil, x: Int = 0, y: Int = 0, width: Int = 0, height: Int = 0) throws(ScreenSourceError) {
        var error = [CChar](repeating: 0, count: 256)
        let handle: OpaquePointer? = error.withUnsafeMutableBufferPointer { message in
            if let display {
                return display.withCString { rtc_x11_open($0, Int32(x), Int32(y), Int32(width), Int32(height), message.baseAddress, 256) }
            }
            return rtc_x11_open(nil, Int32(x), Int32(y), Int32(width), Int32(height), message.baseAddress, 256)
        }
        guard let handle else {
            throw ScreenSourceError("X11 capture: " + String(decoding: error.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        capture = handle
        size = VideoSize(width: Int(rtc_x11_width(handle)), height: Int(rtc_x11_height(handle)))
        guard let pool = VideoFramePool(format: .bgra, width: size.width, height: size.height, capacity: 2) else {
            rtc_x11_close(handle)
            throw ScreenSourceError("X11 capture: screen size \(size) is not valid")
        }
        self.pool = pool
    }

    deinit { rtc_x11_close(capture) }

    public func nextFrame() throws(ScreenSourceError) -> VideoFrame? {
        var stride: Int32 = 0
        guard let pixels = rtc_x11_grab(capture, &stride) else { throw ScreenSourceError("XShmGetImage failed") }
        let buffer = pool.makeBuffer()
        buffer.forEachRow(ofPlane: 0) { row, destination in
            destination.copyMemory(from: UnsafeRawBufferPointer(start: pixels + row * Int(stride), count: destination.count))
        }
        // X leaves the fourth byte undefined on depth 24: the encoder ignores alpha anyway.
        return VideoFrame(buffer: buffer, timestampUs: MediaClock.monotonicUs())
    }

    /// Paints BGRA pixels at the top-left of `display`'s root window (tests draw a known image).
    public static func paintRoot(display: String, frame: VideoFrame) throws(ScreenSourceError) {
        guard frame.format == .bgra else { throw ScreenSourceError("paintRoot takes BGRA") }
        let status = display.withCString {
            rtc_x11_paint_root($0, frame.buffer.planeBase(0), Int32(frame.width), Int32(frame.height), Int32(frame.buffer.stride(0)))
        }
        guard status == 0 else { throw ScreenSourceError("cannot paint on \(display) (\(status))") }
    }
}

/// Drives a ``ScreenSource`` at a frame rate on a thread of its own and hands each frame on.
public final class ScreenCapturer: @unchecked Sendable {
    private var thread: MediaThread?
    private let source: ScreenSource
    private let deliver: (VideoFrame) -> Void
    private let failed: (ScreenSourceError) -> Void
    private let captured = Mutex(0)
    /// Frames taken from the source so far.
    public var framesCaptured: Int { captured.withLock { $0 } }
    private var stopped = false

    public init(source: ScreenSource, framesPerSecond: Int, deliver: @escaping (VideoFrame) -> Void,
                failed: @escaping (ScreenSourceError) -> Void = { _ in }) {
        self.source = source
        self.deliver = deliver
        self.failed = failed
        thread = MediaThread(name: "screen-capture", tickIntervalUs: 1_000_000 / Int64(max(1, framesPerSecond))) { [unowned self] in
            self.tick()
        }
    }

    private func tick() {
        guard !stopped else { return }
        do {
            guard var frame = try source.nextFrame() else { return }
            // Capture time is now, whatever the source's own clock (a file's or a pattern's frame rate).
            frame.timestampUs = MediaClock.monotonicUs()
            captured.withLock { $0 += 1 }
            deliver(frame)
        } catch {
            stopped = true
            failed(error)
        }
    }

    public func stop() { thread?.stop() }
}
