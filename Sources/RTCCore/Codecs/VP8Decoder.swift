internal import CVPX
internal import CYUV

/// A VP8 decoder over libvpx that returns I420 frames from a pool.
///
/// Not thread-safe: own one per received stream and call it from that stream's decode thread.
public final class VP8Decoder {
    private var context = vpx_codec_ctx_t()
    private var pool: VideoFramePool?
    /// Frames decoded so far.
    public private(set) var framesDecoded = 0

    public init(threads: Int = 1) throws(CodecError) {
        let status = rtc_vpx_dec_init(&context, UInt32(max(1, min(threads, 16))))
        guard status == VPX_CODEC_OK else {
            throw CodecError(.library, "VP8 decoder init failed: \(String(cString: vpx_codec_err_to_string(status)))")
        }
    }

    deinit { vpx_codec_destroy(&context) }

    /// Decodes one compressed frame. Returns nil when the data decodes to no picture (libvpx may
    /// hold none back in real-time VP8, so that means a corrupt or incomplete frame was skipped).
    public func decode(_ data: [UInt8], timestampUs: Int64 = 0) throws(CodecError) -> VideoFrame? {
        guard !data.isEmpty, data.count <= Int(UInt32.max) else {
            throw CodecError(.corruptBitstream, "VP8 decode: empty frame")
        }
        let status = data.withUnsafeBufferPointer { bytes in
            vpx_codec_decode(&context, bytes.baseAddress, UInt32(bytes.count), nil, 0)
        }
        guard status == VPX_CODEC_OK else {
            throw CodecError(.corruptBitstream, "VP8 decode failed: \(VP8Encoder.describe(&context, status))")
        }
        var iterator: vpx_codec_iter_t? = nil
        var result: VideoFrame?
        while let image = vpx_codec_get_frame(&context, &iterator) {
            let width = Int(image.pointee.d_w), height = Int(image.pointee.d_h)
            if pool?.layout.width != width || pool?.layout.height != height {
                guard let fresh = VideoFramePool(format: .i420, width: width, height: height) else {
                    throw CodecError(.corruptBitstream, "VP8 decode: picture size \(width)x\(height) is not valid")
                }
                pool = fresh
            }
            let buffer = pool!.makeBuffer()
            let planes = image.pointee.planes
            let strides = image.pointee.stride
            I420Copy(planes.0, strides.0, planes.1, strides.1, planes.2, strides.2,
                     buffer.planeBase(0), Int32(buffer.stride(0)), buffer.planeBase(1), Int32(buffer.stride(1)),
                     buffer.planeBase(2), Int32(buffer.stride(2)), Int32(width), Int32(height))
            framesDecoded += 1
            result = VideoFrame(buffer: buffer, timestampUs: timestampUs)
        }
        return result
    }
}
