internal import CYUV

/// A width and height.
public struct VideoSize: Sendable, Hashable, CustomStringConvertible {
    public var width: Int
    public var height: Int

    public init(width: Int, height: Int) {
        self.width = width
        self.height = height
    }

    /// Parses `WIDTHxHEIGHT`, e.g. `1280x720`; nil for anything else.
    public init?(parsing text: String) {
        let parts = text.lowercased().split(separator: "x", omittingEmptySubsequences: false)
        guard parts.count == 2, let width = Int(parts[0]), let height = Int(parts[1]) else { return nil }
        self.init(width: width, height: height)
    }

    /// Both sides divided by `divisor` (rounded down to even, at least 2): a step down in resolution.
    public func scaled(down divisor: Int) -> VideoSize {
        guard divisor > 1 else { return self }
        return VideoSize(width: max(2, width / divisor & ~1), height: max(2, height / divisor & ~1))
    }

    /// The largest size with this size's aspect ratio that fits inside `bounds`, with even
    /// dimensions (4:2:0 chroma) and never larger than this size: frames are shrunk, never stretched.
    public func fitted(into bounds: VideoSize) -> VideoSize {
        guard width > 0, height > 0, bounds.width >= 2, bounds.height >= 2 else { return self }
        let scale = min(Double(bounds.width) / Double(width), Double(bounds.height) / Double(height), 1)
        func even(_ value: Double) -> Int { max(2, Int(value.rounded(.down)) & ~1) }
        if scale >= 1 { return VideoSize(width: max(2, width & ~1), height: max(2, height & ~1)) }
        return VideoSize(width: even(Double(width) * scale), height: even(Double(height) * scale))
    }

    public var description: String { "\(width)x\(height)" }
}

/// Pixel format conversion, scaling and rotation over libyuv, into frames from pools it keeps
/// (one pool per output format and size, so steady-state work allocates nothing).
///
/// Not thread-safe: own one per stream.
public final class FrameConverter {
    private var pools: [FrameLayout: VideoFramePool] = [:]

    public init() {}

    private func buffer(_ format: PixelFormat, _ width: Int, _ height: Int) throws(CodecError) -> VideoBuffer {
        guard let layout = FrameLayout(format: format, width: width, height: height) else {
            throw CodecError(.invalidInput, "frame size \(width)x\(height) is not valid")
        }
        if let pool = pools[layout] { return pool.makeBuffer() }
        if pools.count > 8 { pools.removeAll() }  // sizes changed many times: drop stale pools
        let pool = VideoFramePool(layout: layout, capacity: 2)
        pools[layout] = pool
        return pool.makeBuffer()
    }

    /// Converts an NV12 or BGRA frame to I420 of the same size (I420 is returned as is).
    public func toI420(_ frame: VideoFrame) throws(CodecError) -> VideoFrame {
        let source = frame.buffer
        let width = Int32(frame.width), height = Int32(frame.height)
        let out: VideoBuffer
        let status: Int32
        switch frame.format {
        case .i420:
            return frame
        case .nv12:
            out = try buffer(.i420, frame.width, frame.height)
            status = NV12ToI420(source.planeBase(0), Int32(source.stride(0)), source.planeBase(1), Int32(source.stride(1)),
                                out.planeBase(0), Int32(out.stride(0)), out.planeBase(1), Int32(out.stride(1)),
                                out.planeBase(2), Int32(out.stride(2)), width, height)
        case .bgra:
            out = try buffer(.i420, frame.width, frame.height)
            status = ARGBToI420(source.planeBase(0), Int32(source.stride(0)),
                                out.planeBase(0), Int32(out.stride(0)), out.planeBase(1), Int32(out.stride(1)),
                                out.planeBase(2), Int32(out.stride(2)), width, height)
        }
        guard status == 0 else { throw CodecError(.library, "libyuv conversion from \(frame.format) failed (\(status))") }
        return VideoFrame(buffer: out, rotation: frame.rotation, timestampUs: frame.timestampUs)
    }

    /// Scales a frame to `size` (box filter), keeping its format. BGRA is scaled as BGRA: scale
    /// first and convert after, which is cheaper than the other way round when shrinking.
    public func scale(_ frame: VideoFrame, to size: VideoSize) throws(CodecError) -> VideoFrame {
        if size.width == frame.width && size.height == frame.height { return frame }
        let source = frame.buffer
        let out = try buffer(frame.format, size.width, size.height)
        let sw = Int32(frame.width), sh = Int32(frame.height), dw = Int32(size.width), dh = Int32(size.height)
        let status: Int32
        switch frame.format {
        case .i420:
            status = I420Scale(source.planeBase(0), Int32(source.stride(0)), source.planeBase(1), Int32(source.stride(1)),
                               source.planeBase(2), Int32(source.stride(2)), sw, sh,
                               out.planeBase(0), Int32(out.stride(0)), out.planeBase(1), Int32(out.stride(1)),
                               out.planeBase(2), Int32(out.stride(2)), dw, dh, kFilterBox)
        case .nv12:
            status = NV12Scale(source.planeBase(0), Int32(source.stride(0)), source.planeBase(1), Int32(source.stride(1)),
                               sw, sh, out.planeBase(0), Int32(out.stride(0)), out.planeBase(1), Int32(out.stride(1)),
                               dw, dh, kFilterBox)
        case .bgra:
            status = ARGBScale(source.planeBase(0), Int32(source.stride(0)), sw, sh,
                               out.planeBase(0), Int32(out.stride(0)), dw, dh, kFilterBox)
        }
        guard status == 0 else { throw CodecError(.library, "libyuv scaling failed (\(status))") }
        return VideoFrame(buffer: out, rotation: frame.rotation, timestampUs: frame.timestampUs)
    }

    /// Shrinks a frame of any format to fit inside `bounds` keeping its aspect ratio, and returns
    /// it as I420: the path a screen capture takes before the encoder.
    public func fitI420(_ frame: VideoFrame, into bounds: VideoSize) throws(CodecError) -> VideoFrame {
        let target = VideoSize(width: frame.width, height: frame.height).fitted(into: bounds)
        return try toI420(scale(frame, to: target))
    }

    /// Rotates an I420 frame clockwise; the result carries no rotation.
    public func rotate(_ frame: VideoFrame, by rotation: VideoRotation) throws(CodecError) -> VideoFrame {
        guard frame.format == .i420 else { throw CodecError(.invalidInput, "rotation takes I420 frames, got \(frame.format)") }
        if rotation == .none { return frame }
        let size = rotation.swapsDimensions ? (frame.height, frame.width) : (frame.width, frame.height)
        let out = try buffer(.i420, size.0, size.1)
        let source = frame.buffer
        let mode: RotationMode = switch rotation {
        case .none: kRotate0
        case .clockwise90: kRotate90
        case .clockwise180: kRotate180
        case .clockwise270: kRotate270
        }
        let status = I420Rotate(source.planeBase(0), Int32(source.stride(0)), source.planeBase(1), Int32(source.stride(1)),
                                source.planeBase(2), Int32(source.stride(2)),
                                out.planeBase(0), Int32(out.stride(0)), out.planeBase(1), Int32(out.stride(1)),
                                out.planeBase(2), Int32(out.stride(2)), Int32(frame.width), Int32(frame.height), mode)
        guard status == 0 else { throw CodecError(.library, "libyuv rotation failed (\(status))") }
        return VideoFrame(buffer: out, rotation: .none, timestampUs: frame.timestampUs)
    }
}
