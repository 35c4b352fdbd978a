internal import CYUV

/// Accumulates squared error between reference and distorted I420 frames over a whole clip, and
/// reports PSNR from the total (all planes, weighted by sample count).
public struct PSNRAccumulator: Sendable {
    public private(set) var squaredError: UInt64 = 0
    public private(set) var samples: UInt64 = 0
    public private(set) var frames = 0

    public init() {}

    /// Adds one frame pair; both must be I420 of the same size.
    public mutating func add(reference: VideoFrame, distorted: VideoFrame) throws(CodecError) {
        guard reference.format == .i420, distorted.format == .i420, reference.width == distorted.width,
              reference.height == distorted.height
        else { throw CodecError(.invalidInput, "PSNR needs two I420 frames of the same size") }
        for plane in 0..<3 {
            let layout = reference.buffer.layout.planes[plane]
            squaredError += ComputeSumSquareErrorPlane(
                reference.buffer.planeBase(plane), Int32(reference.buffer.stride(plane)),
                distorted.buffer.planeBase(plane), Int32(distorted.buffer.stride(plane)),
                Int32(layout.rowBytes), Int32(layout.rows))
            samples += UInt64(layout.rowBytes * layout.rows)
        }
        frames += 1
    }

    /// PSNR in dB over everything added; `.infinity` for identical input.
    public var psnr: Double {
        guard samples > 0 else { return 0 }
        if squaredError == 0 { return .infinity }
        let mse = Double(squaredError) / Double(samples)
        return 10 * log10(255.0 * 255.0 / mse)
    }
}

#if canImport(Glibc)
import Glibc
#endif
