internal import CVPX

/// A VP8 simulcast encoder over libvpx's multi-resolution mode (`vpx_codec_enc_init_multi`): one
/// captured frame in, up to three streams out (full, 1/2 and 1/4 size), each with its own constant
/// bitrate. libvpx encodes the smallest level first and every larger level starts its motion
/// search from the level below, which is what makes this cheaper than separate ``VP8Encoder``s
/// (`rtc-cli bench simulcast-encode`: on the 720p camera pattern at cpu-used -6, three layers cost
/// about 1.25x one 720p encode against 1.38x, for about 0.6 dB less PSNR on the full layer).
///
/// Each layer keeps the camera settings of a ``VP8Encoder`` (error resilient, no lag, CBR, no frame
/// dropping, one token partition). A layer can be paused: libvpx skips a level whose target bitrate
/// is 0, and its stream restarts with a keyframe when it resumes. Keyframes can be forced per layer;
/// a larger layer encoded as an inter frame while the one below is a keyframe just searches on its
/// own for that frame (libvpx turns the reuse off when the references differ).
///
/// Not thread-safe: own one per simulcast source and call it from that source's encode thread.
public final class VP8MultiResEncoder {
    /// One simulcast layer: its size and target bitrate.
    public struct Layer: Sendable, Hashable {
        public let width: Int
        public let height: Int
        /// Target bitrate in kbps; kept while the layer is paused, and used again when it resumes.
        public internal(set) var bitrateKbps: Int
        /// A paused layer is not encoded and gives no frames.
        public internal(set) var isPaused: Bool
    }

    /// At most three layers: full, 1/2 and 1/4 size.
    public static let maxLayers = 3
    /// The smallest side a layer may have: one macroblock.
    public static let minLayerDimension = 16

    /// The layers, index 0 the full size.
    public private(set) var layers: [Layer]
    public let frameRate: Double
    public let cpuUsed: Int

    private let count: Int
    /// libvpx wants the contexts, their configurations and the images of one frame each as one
    /// contiguous array, full size first: these never move.
    private let contexts: UnsafeMutablePointer<vpx_codec_ctx_t>
    private let configs: UnsafeMutablePointer<vpx_codec_enc_cfg_t>
    private let images: UnsafeMutablePointer<vpx_image_t>
    private var initialized = false
    private var keyframeRequested: [Bool]
    private var clock: VPXFrameClock
    private let converter = FrameConverter()

    /// Configures one layer per entry of `layerBitratesKbps` (1 to 3), index 0 at `width` x `height`
    /// and each next one at half the size of the one before (rounded up to even, as libvpx sizes it).
    /// Sizes must be even, and the smallest layer at least ``minLayerDimension`` on each side.
    public init(width: Int, height: Int, frameRate: Double = 30, layerBitratesKbps: [Int], cpuUsed: Int = -6)
        throws(CodecError)
    {
        let sizes = try Self.validate(width: width, height: height, frameRate: frameRate,
                                      bitrates: layerBitratesKbps, cpuUsed: cpuUsed)
        count = sizes.count
        layers = zip(sizes, layerBitratesKbps).map { size, kbps in
            Layer(width: size.width, height: size.height, bitrateKbps: kbps, isPaused: false)
        }
        self.frameRate = frameRate
        clock = VPXFrameClock(frameRate: frameRate)
        self.cpuUsed = cpuUsed
        keyframeRequested = Array(repeating: false, count: sizes.count)
        contexts = .allocate(capacity: sizes.count)
        contexts.initialize(repeating: vpx_codec_ctx_t(), count: sizes.count)
        configs = .allocate(capacity: sizes.count)
        configs.initialize(repeating: vpx_codec_enc_cfg_t(), count: sizes.count)
        images = .allocate(capacity: sizes.count)
        images.initialize(repeating: vpx_image_t(), count: sizes.count)
        // From here on `deinit` cleans up whatever a failure below leaves.
        for index in 0..<count {
            guard rtc_vpx_enc_config_default(configs + index) == VPX_CODEC_OK else {
                throw CodecError(.library, "VP8 multi-res encoder: no default configuration")
            }
            applySettings(to: &configs[index], layer: layers[index])
        }
        // 2:1 between neighbouring levels; the last factor is not used but must be valid.
        var factors = (0..<count).map { vpx_rational(num: $0 < count - 1 ? 2 : 1, den: 1) }
        let status = rtc_vpx_enc_init_multi(contexts, configs, Int32(count), &factors)
        guard status == VPX_CODEC_OK else {
            // libvpx has destroyed the contexts it made; their error detail pointed into them.
            var text = String(cString: vpx_codec_err_to_string(status))
            if status == VPX_CODEC_INCAPABLE { text += " (is libvpx built with --enable-multi-res-encoding?)" }
            throw CodecError(.library, "VP8 multi-res encoder init failed: \(text)")
        }
        initialized = true
        let controls: [(Int32, Int32)] = [
            (Int32(VP8E_SET_CPUUSED.rawValue), Int32(cpuUsed)),
            (Int32(VP8E_SET_NOISE_SENSITIVITY.rawValue), 0),
            (Int32(VP8E_SET_STATIC_THRESHOLD.rawValue), 1),
            (Int32(VP8E_SET_TOKEN_PARTITIONS.rawValue), Int32(VP8_ONE_TOKENPARTITION.rawValue)),
            (Int32(VP8E_SET_MAX_INTRA_BITRATE_PCT.rawValue), VP8Encoder.maxIntraBitratePercent(frameRate: frameRate)),
            (Int32(VP8E_SET_SCREEN_CONTENT_MODE.rawValue), 0),
        ]
        for index in 0..<count {
            for (control, value) in controls {
                let status = rtc_vpx_set_int(contexts + index, control, value)
                guard status == VPX_CODEC_OK else {
                    throw CodecError(.library, "VP8 multi-res encoder: layer \(index) control \(control)=\(value) failed: "
                                     + VP8Encoder.describe(contexts + index, status))
                }
            }
        }
    }

    deinit {
        // Full size first, as libvpx's example does: that context frees the memory the levels share.
        if initialized {
            for index in 0..<count { vpx_codec_destroy(contexts + index) }
        }
        contexts.deinitialize(count: count)
        contexts.deallocate()
        configs.deinitialize(count: count)
        configs.deallocate()
        images.deinitialize(count: count)
        images.deallocate()
    }

    /// The sizes of `count` layers from a full size: each half the one before, rounded up to even
    /// (libvpx derives a level's macroblock grid from the level above the same way).
    public static func layerSizes(width: Int, height: Int, count: Int) -> [VideoSize] {
        var sizes = [VideoSize(width: width, height: height)]
        while sizes.count < count {
            let above = sizes[sizes.count - 1]
            func half(_ side: Int) -> Int { let value = (side + 1) / 2; return value + value % 2 }
            sizes.append(VideoSize(width: half(above.width), height: half(above.height)))
        }
        return sizes
    }

    private static func validate(width: Int, height: Int, frameRate: Double, bitrates: [Int], cpuUsed: Int)
        throws(CodecError) -> [VideoSize]
    {
        func check(_ ok: Bool, _ message: String) throws(CodecError) {
            if !ok { throw CodecError(.invalidConfiguration, "VP8 multi-res encoder: \(message)") }
        }
        try check((1...maxLayers).contains(bitrates.count),
                  "\(bitrates.count) layers requested; 1 to \(maxLayers) are supported")
        try check((2...FrameLayout.maxDimension).contains(width) && (2...FrameLayout.maxDimension).contains(height),
                  "size \(width)x\(height) is out of range")
        try check(width % 2 == 0 && height % 2 == 0, "size \(width)x\(height) must be even (4:2:0 chroma)")
        let sizes = layerSizes(width: width, height: height, count: bitrates.count)
        let smallest = sizes[sizes.count - 1]
        try check(smallest.width >= minLayerDimension && smallest.height >= minLayerDimension,
                  "the smallest of \(bitrates.count) layers of \(width)x\(height) would be \(smallest), "
                  + "under \(minLayerDimension)x\(minLayerDimension)")
        for (index, kbps) in bitrates.enumerated() {
            try check((10...100_000).contains(kbps), "layer \(index) bitrate \(kbps) kbps is out of range 10...100000")
        }
        try check(frameRate > 0 && frameRate <= 240, "frame rate \(frameRate) is out of range")
        try check((-16...16).contains(cpuUsed), "cpu-used \(cpuUsed) is out of range -16...16")
        return sizes
    }

    /// A ``VP8Encoder``'s camera settings for one level (its bitrate 0 when paused).
    private func applySettings(to config: inout vpx_codec_enc_cfg_t, layer: Layer) {
        config.g_w = UInt32(layer.width)
        config.g_h = UInt32(layer.height)
        config.g_timebase = vpx_rational(num: 1, den: 1_000_000)
        config.g_threads = 1
        config.g_lag_in_frames = 0
        config.g_pass = VPX_RC_ONE_PASS
        config.g_error_resilient = rtc_vpx_error_resilient_default()
        config.rc_end_usage = VPX_CBR
        config.rc_resize_allowed = 0
        config.rc_dropframe_thresh = 0
        config.rc_min_quantizer = 2
        config.rc_max_quantizer = 56
        config.rc_undershoot_pct = 100
        config.rc_overshoot_pct = 15
        config.rc_buf_initial_sz = 500
        config.rc_buf_optimal_sz = 600
        config.rc_buf_sz = 1000
        config.kf_mode = VPX_KF_AUTO
        config.kf_min_dist = 0
        config.kf_max_dist = 3000
        config.ts_number_layers = 1
        config.rc_target_bitrate = layer.isPaused ? 0 : UInt32(layer.bitrateKbps)
    }

    private func checkLayer(_ layer: Int) throws(CodecError) {
        guard layers.indices.contains(layer) else {
            throw CodecError(.invalidInput, "VP8 multi-res encoder: no layer \(layer) (it has \(count))")
        }
    }

    /// Hands layer `index`'s settings to libvpx; takes effect from the next frame.
    private func reconfigure(_ index: Int) throws(CodecError) {
        applySettings(to: &configs[index], layer: layers[index])
        let status = vpx_codec_enc_config_set(contexts + index, configs + index)
        guard status == VPX_CODEC_OK else {
            throw CodecError(.library, "VP8 multi-res encoder: layer \(index) reconfiguration failed: "
                             + VP8Encoder.describe(contexts + index, status))
        }
    }

    /// The next frame of layer `layer` will be a keyframe (for a paused layer: its first frame after
    /// it resumes, which is one anyway).
    public func requestKeyframe(layer: Int) throws(CodecError) {
        try checkLayer(layer)
        keyframeRequested[layer] = true
    }

    /// Changes the target bitrates, one per layer; takes effect from the next frame. Nothing changes
    /// unless all are valid.
    public func setBitrates(kbps: [Int]) throws(CodecError) {
        guard kbps.count == count else {
            throw CodecError(.invalidConfiguration, "VP8 multi-res encoder: \(kbps.count) bitrates for \(count) layers")
        }
        for (index, value) in kbps.enumerated() where !(10...100_000).contains(value) {
            throw CodecError(.invalidConfiguration,
                             "VP8 multi-res encoder: layer \(index) bitrate \(value) kbps is out of range 10...100000")
        }
        for index in 0..<count where layers[index].bitrateKbps != kbps[index] {
            layers[index].bitrateKbps = kbps[index]
            if !layers[index].isPaused { try reconfigure(index) }
        }
    }

    /// Pauses or resumes a layer. A paused layer is skipped (libvpx encodes no level whose target
    /// bitrate is 0), so it costs nothing; a resumed layer starts again with a keyframe.
    public func setPaused(_ paused: Bool, layer: Int) throws(CodecError) {
        try checkLayer(layer)
        guard layers[layer].isPaused != paused else { return }
        layers[layer].isPaused = paused
        try reconfigure(layer)
        // libvpx restarts a level's stream only at a keyframe.
        if !paused { keyframeRequested[layer] = true }
    }

    /// libvpx's text for a failed multi-level encode, with the detail of whichever level has one
    /// (the status lands on one context, the detail on the level that failed).
    private func describeEncodeFailure(_ status: vpx_codec_err_t) -> String {
        var text = String(cString: vpx_codec_err_to_string(status))
        for index in 0..<count {
            if let detail = vpx_codec_error_detail(contexts + index) { text += " (layer \(index): \(String(cString: detail)))" }
        }
        return text
    }

    /// Points `image` at the I420 planes of `buffer`, as a picture of `width` x `height`.
    private static func wrap(_ image: UnsafeMutablePointer<vpx_image_t>, _ buffer: VideoBuffer, width: Int, height: Int) {
        vpx_img_wrap(image, VPX_IMG_FMT_I420, UInt32(width), UInt32(height), 1, buffer.planeBase(0))
        image.pointee.planes = (buffer.planeBase(0), buffer.planeBase(1), buffer.planeBase(2), nil)
        image.pointee.stride = (Int32(buffer.stride(0)), Int32(buffer.stride(1)), Int32(buffer.stride(2)), 0)
    }

    /// Encodes one captured frame of the full size into every layer that is not paused: the lower
    /// layers are scaled down from it with libyuv (box filter, each from the layer above).
    /// `forceKeyframe` is empty or holds one entry per layer. Returns the frames of each layer,
    /// index 0 the full size; a paused layer's entry is empty.
    public func encode(_ frame: VideoFrame, forceKeyframe: [Bool] = []) throws(CodecError) -> [[EncodedVideoFrame]] {
        guard frame.width == layers[0].width, frame.height == layers[0].height else {
            throw CodecError(.invalidInput,
                             "VP8 multi-res encoder configured for \(layers[0].width)x\(layers[0].height) got \(frame.width)x\(frame.height)")
        }
        guard forceKeyframe.isEmpty || forceKeyframe.count == count else {
            throw CodecError(.invalidInput, "VP8 multi-res encoder: \(forceKeyframe.count) keyframe flags for \(count) layers")
        }
        let full = frame.format == .i420 ? frame : try converter.toI420(frame)
        // The pictures libvpx reads during this call, kept alive until it returns.
        var pictures = [full]
        Self.wrap(images, full.buffer, width: full.width, height: full.height)
        var above = full
        for index in 1..<count {
            let layer = layers[index]
            if layer.isPaused {
                // libvpx returns before it reads a skipped level's image; it still points inside
                // a live picture, so even a read would stay in bounds.
                Self.wrap(images + index, full.buffer, width: layer.width, height: layer.height)
                continue
            }
            above = try converter.scale(above, to: VideoSize(width: layer.width, height: layer.height))
            pictures.append(above)
            Self.wrap(images + index, above.buffer, width: layer.width, height: layer.height)
        }
        for index in 0..<count where !layers[index].isPaused {
            guard keyframeRequested[index] || (forceKeyframe.isEmpty ? false : forceKeyframe[index]) else { continue }
            // Per-level flags go through the control: flags given to vpx_codec_encode would apply to all.
            let status = rtc_vpx_set_int(contexts + index, Int32(VP8E_SET_FRAME_FLAGS.rawValue), Int32(rtc_vpx_flag_force_kf()))
            guard status == VPX_CODEC_OK else {
                throw CodecError(.library, "VP8 multi-res encoder: layer \(index) keyframe request failed: "
                                 + VP8Encoder.describe(contexts + index, status))
            }
            keyframeRequested[index] = false
        }
        let (presentation, duration) = clock.next(captureUs: frame.timestampUs)
        // One call encodes every level, smallest first; per-level flags come from the control above.
        let status = withExtendedLifetime(pictures) {
            vpx_codec_encode(contexts, images, presentation, UInt(duration), 0, rtc_vpx_deadline_realtime())
        }
        guard status == VPX_CODEC_OK else {
            throw CodecError(.library, "VP8 multi-res encode failed: \(describeEncodeFailure(status))")
        }
        var output: [[EncodedVideoFrame]] = Array(repeating: [], count: count)
        // Not from a paused layer: libvpx returns before it clears a skipped level's packet list, so
        // that still holds the level's last frame.
        for index in 0..<count where !layers[index].isPaused {
            var iterator: vpx_codec_iter_t? = nil
            while let packet = vpx_codec_get_cx_data(contexts + index, &iterator) {
                guard packet.pointee.kind == VPX_CODEC_CX_FRAME_PKT else { continue }
                let data = packet.pointee.data.frame
                output[index].append(EncodedVideoFrame(
                    data: [UInt8](UnsafeRawBufferPointer(start: data.buf, count: data.sz)),
                    isKeyframe: data.flags & rtc_vpx_frame_is_key() != 0, timestampUs: frame.timestampUs,
                    temporalLayer: 0, width: layers[index].width, height: layers[index].height))
            }
        }
        return output
    }
}
