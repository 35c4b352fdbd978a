internal import CMemory
internal import CVPX
import Synchronization

/// What a video encoder is tuned for.
public enum VideoContentType: String, Sendable, Hashable, CaseIterable {
    /// Natural motion: keep the frame rate, let quality vary.
    case camera
    /// Text and UI: keep the resolution and sharpness, drop frames under pressure, spend little on
    /// static areas (libvpx screen-content mode).
    case screen
}

/// Settings of a ``VP8Encoder``. Defaults follow what WebRTC uses for real-time VP8.
public struct VP8EncoderConfiguration: Sendable, Hashable {
    public var width: Int
    public var height: Int
    /// Target bitrate in kbps (constant bitrate rate control).
    public var bitrateKbps: Int
    /// Nominal frame rate, used by rate control for frames without a usable timestamp gap.
    public var frameRate: Double
    /// libvpx speed: -16...16; negative values do not self-throttle to the frame interval.
    public var cpuUsed: Int
    /// Encoder threads.
    public var threads: Int
    public var contentType: VideoContentType
    /// Each frame decodable after a loss of earlier non-reference frames (VPX_ERROR_RESILIENT_DEFAULT).
    public var errorResilient: Bool
    /// 1 (none), 2 or 3 temporal layers (RFC 7741 TID); layer bitrates split 60/40 or 40/20/40.
    public var temporalLayers: Int
    /// Longest distance between automatic keyframes, in frames.
    public var keyframeInterval: Int
    /// Let rate control skip frames when the buffer is drained (on for screen content by default).
    public var allowFrameDropping: Bool
    public var minQuantizer: Int
    public var maxQuantizer: Int

    public init(width: Int, height: Int, bitrateKbps: Int = 1500, frameRate: Double = 30, cpuUsed: Int = -6,
                threads: Int = 1, contentType: VideoContentType = .camera, errorResilient: Bool = true,
                temporalLayers: Int = 1, keyframeInterval: Int = 3000, allowFrameDropping: Bool? = nil,
                minQuantizer: Int = 2, maxQuantizer: Int = 56) {
        self.width = width
        self.height = height
        self.bitrateKbps = bitrateKbps
        self.frameRate = frameRate
        self.cpuUsed = cpuUsed
        self.threads = threads
        self.contentType = contentType
        self.errorResilient = errorResilient
        self.temporalLayers = temporalLayers
        self.keyframeInterval = keyframeInterval
        self.allowFrameDropping = allowFrameDropping ?? (contentType == .screen)
        self.minQuantizer = minQuantizer
        self.maxQuantizer = maxQuantizer
    }

    func validate() throws(CodecError) {
        func check(_ ok: Bool, _ message: String) throws(CodecError) {
            if !ok { throw CodecError(.invalidConfiguration, "VP8 encoder: \(message)") }
        }
        try check((2...FrameLayout.maxDimension).contains(width) && (2...FrameLayout.maxDimension).contains(height),
                  "size \(width)x\(height) is out of range")
        try check((10...100_000).contains(bitrateKbps), "bitrate \(bitrateKbps) kbps is out of range 10...100000")
        try check(frameRate > 0 && frameRate <= 240, "frame rate \(frameRate) is out of range")
        try check((-16...16).contains(cpuUsed), "cpu-used \(cpuUsed) is out of range -16...16")
        try check((1...16).contains(threads), "threads \(threads) is out of range 1...16")
        try check((1...3).contains(temporalLayers), "temporal layers must be 1, 2 or 3")
        try check(keyframeInterval >= 1, "keyframe interval must be positive")
        try check(0 <= minQuantizer && minQuantizer <= maxQuantizer && maxQuantizer <= 63, "quantizer range is not valid")
    }
}

/// A compressed video frame.
public struct EncodedVideoFrame: Sendable, Hashable {
    public var data: [UInt8]
    public var isKeyframe: Bool
    /// Capture timestamp of the source frame, microseconds.
    public var timestampUs: Int64
    /// Temporal layer (0 when layers are off).
    public var temporalLayer: Int
    public var width: Int
    public var height: Int
}

/// A real-time VP8 encoder over libvpx: constant bitrate, no lag, keyframes on demand, bitrate
/// changes on the fly, screen-content tuning and optional temporal layers.
///
/// Not thread-safe: own one per stream and call it from that stream's encode thread.
public final class VP8Encoder {
    public private(set) var configuration: VP8EncoderConfiguration
    private var context = vpx_codec_ctx_t()
    private var config = vpx_codec_enc_cfg_t()
    private var image = vpx_image_t()
    private var keyframeRequested = false
    private var frameIndex: Int64 = 0
    /// The temporal layers being encoded: `configuration.temporalLayers` at the most, fewer after
    /// ``setActiveTemporalLayers(_:)``; the pattern starts again at the frame with this index.
    public private(set) var activeTemporalLayers: Int
    private var patternStart: Int64 = 0
    private var clock: VPXFrameClock
    private let converter = FrameConverter()
    /// libvpx's token buffer (a glibc mmapped chunk), when `initTrimmed` found it. In a budgeted
    /// process its pages go back to the kernel after every frame: the tokens are written and read
    /// within one `vpx_codec_encode`, so between frames the buffer is dead scratch space, and a
    /// sharp keyframe would otherwise leave megabytes of it resident for good.
    private(set) var tokenBuffer: (address: UInt, size: Int)?
    var releasesTokenPages = ProcessMemory.isBudgeted

    public init(configuration: VP8EncoderConfiguration) throws(CodecError) {
        try configuration.validate()
        self.configuration = configuration
        clock = VPXFrameClock(frameRate: configuration.frameRate)
        activeTemporalLayers = configuration.temporalLayers
        guard rtc_vpx_enc_config_default(&config) == VPX_CODEC_OK else {
            throw CodecError(.library, "VP8 encoder: no default configuration")
        }
        applyRateSettings(to: &config)
        config.g_w = UInt32(configuration.width)
        config.g_h = UInt32(configuration.height)
        config.g_timebase = vpx_rational(num: 1, den: 1_000_000)
        config.g_threads = UInt32(configuration.threads)
        config.g_lag_in_frames = 0
        config.g_pass = VPX_RC_ONE_PASS
        config.g_error_resilient = configuration.errorResilient ? rtc_vpx_error_resilient_default() : 0
        config.rc_end_usage = VPX_CBR
        config.rc_resize_allowed = 0
        config.rc_min_quantizer = UInt32(configuration.minQuantizer)
        config.rc_max_quantizer = UInt32(configuration.maxQuantizer)
        config.rc_undershoot_pct = 100
        config.rc_overshoot_pct = 15
        // Screen content may burst (a sharp first keyframe, a scroll) and catch up by dropping frames,
        // so it gets a deeper buffer; camera keeps WebRTC's tight one for steady latency.
        let screenContent = configuration.contentType == .screen
        config.rc_buf_initial_sz = screenContent ? 2000 : 500
        config.rc_buf_optimal_sz = screenContent ? 2000 : 600
        config.rc_buf_sz = screenContent ? 3000 : 1000
        config.rc_dropframe_thresh = configuration.allowFrameDropping ? 30 : 0
        config.kf_mode = VPX_KF_AUTO
        config.kf_min_dist = 0
        config.kf_max_dist = UInt32(configuration.keyframeInterval)
        let (status, tokens) = Self.initTrimmed(&context, &config, width: configuration.width, height: configuration.height)
        tokenBuffer = tokens
        guard status == VPX_CODEC_OK else {
            throw CodecError(.library, "VP8 encoder init failed: \(Self.describe(&context, status))")
        }
        let screen = configuration.contentType == .screen
        let controls: [(Int32, Int32)] = [
            (Int32(VP8E_SET_CPUUSED.rawValue), Int32(configuration.cpuUsed)),
            (Int32(VP8E_SET_NOISE_SENSITIVITY.rawValue), 0),
            (Int32(VP8E_SET_STATIC_THRESHOLD.rawValue), screen ? 100 : 1),
            (Int32(VP8E_SET_TOKEN_PARTITIONS.rawValue), Int32(VP8_ONE_TOKENPARTITION.rawValue)),
            (Int32(VP8E_SET_MAX_INTRA_BITRATE_PCT.rawValue), Self.maxIntraBitratePercent(frameRate: configuration.frameRate, screen: screen)),
            (Int32(VP8E_SET_SCREEN_CONTENT_MODE.rawValue), screen ? 1 : 0),
        ]
        for (control, value) in controls {
            let status = rtc_vpx_set_int(&context, control, value)
            guard status == VPX_CODEC_OK else {
                vpx_codec_destroy(&context)
                throw CodecError(.library, "VP8 encoder control \(control)=\(value) failed: \(Self.describe(&context, status))")
            }
        }
    }

    deinit { vpx_codec_destroy(&context) }

    /// Encoder inits, one at a time, so that a token buffer that is new after an init is this init's.
    private static let initLock = Mutex(())

    /// Inits the encoder and gives back what libvpx zero-fills but does not use yet. VP8's encoder
    /// callocs a token buffer for the worst case (macroblocks x 24 blocks x 16 tokens x 16 bytes:
    /// 22 MB at 720p) and its calloc is a malloc plus memset, which makes every page resident,
    /// although a frame of screen content writes a small part of it. The buffer is found as the one
    /// glibc chunk of that size in memory mapped during the init (this lock keeps two inits apart, and
    /// no encode of the new encoder has run yet), and its zero pages are released: they read back as
    /// zero, so libvpx sees nothing change. Nothing is released unless exactly one such chunk is
    /// found (the buffer came from the heap, or another thread mapped one too); that chunk is
    /// returned. In a budgeted process, the clean file pages mapped so far are dropped first, so
    /// that the memset's brief peak does not stack on startup code that will not run again.
    private static func initTrimmed(_ context: inout vpx_codec_ctx_t, _ config: inout vpx_codec_enc_cfg_t,
                                    width: Int, height: Int) -> (vpx_codec_err_t, (address: UInt, size: Int)?) {
        let macroblocks = ((width + 15) / 16) * ((height + 15) / 16)
        let tokenBytes = macroblocks * 24 * 16 * 16
        let window = (min: tokenBytes, max: tokenBytes + 4 * 4096)
        if ProcessMemory.isBudgeted { ProcessMemory.dropCleanFilePages() }
        return initLock.withLock { _ in
            // The mappings before the init, in arrays sized to them.
            var room = 512
            var starts: [UInt] = [], ends: [UInt] = []
            var mapped = Int32(0)
            repeat {
                starts = [UInt](repeating: 0, count: room)
                ends = starts
                mapped = rtc_snapshot_mappings(&starts, &ends, Int32(room))
                if Int(mapped) > room { room = Int(mapped) + 64 }
            } while Int(mapped) > starts.count
            let status = rtc_vpx_enc_init(&context, &config, 0)
            guard status == VPX_CODEC_OK else { return (status, nil) }
            var addresses = [UInt](repeating: 0, count: 4), sizes = [Int](repeating: 0, count: 4)
            let found = rtc_find_new_mmapped_chunks(&starts, &ends, mapped, window.min, window.max, &addresses, &sizes, 4)
            // Exactly one new chunk of that size, or nothing is touched.
            guard found == 1 else { return (status, nil) }
            _ = rtc_release_zero_pages(addresses[0], sizes[0])
            return (status, (addresses[0], sizes[0]))
        }
    }

    /// Keyframes are capped to a multiple of the per-frame budget so they do not flood the network.
    /// A keyframe's cap, in percent of a frame's share of the bitrate. Camera: 0.5 s of the rate
    /// (as libwebrtc). Screen: 1 s of it, as sharp text needs a large keyframe; yet a bounded one,
    /// since an unbounded keyframe on a narrow path outlasts the bottleneck's queue, is lost, and
    /// the keyframe request that follows loses the next one too.
    static func maxIntraBitratePercent(frameRate: Double, screen: Bool = false) -> Int32 {
        Int32(max(300, (screen ? 1.0 : 0.5) * frameRate * 100).rounded())
    }

    private func applyRateSettings(to config: inout vpx_codec_enc_cfg_t) {
        let total = UInt32(configuration.bitrateKbps)
        config.rc_target_bitrate = total
        let layers = activeTemporalLayers
        config.ts_number_layers = UInt32(layers)
        var targets: [UInt32] = [total]
        var decimators: [UInt32] = [1]
        var ids: [UInt32] = [0]
        switch layers {
        case 2:
            targets = [total * 60 / 100, total]
            decimators = [2, 1]
            ids = [0, 1]
        case 3:
            targets = [total * 40 / 100, total * 60 / 100, total]
            decimators = [4, 2, 1]
            ids = [0, 2, 1, 2]
        default:
            break
        }
        withUnsafeMutableBytes(of: &config.ts_target_bitrate) { raw in
            let slots = raw.bindMemory(to: UInt32.self)
            for index in targets.indices { slots[index] = targets[index] }
        }
        withUnsafeMutableBytes(of: &config.ts_rate_decimator) { raw in
            let slots = raw.bindMemory(to: UInt32.self)
            for index in decimators.indices { slots[index] = decimators[index] }
        }
        config.ts_periodicity = UInt32(ids.count)
        withUnsafeMutableBytes(of: &config.ts_layer_id) { raw in
            let slots = raw.bindMemory(to: UInt32.self)
            for index in ids.indices { slots[index] = ids[index] }
        }
    }

    /// The next encoded frame will be a keyframe.
    public func requestKeyframe() { keyframeRequested = true }

    /// Changes the target bitrate; takes effect from the next frame.
    public func setBitrate(kbps: Int) throws(CodecError) {
        guard (10...100_000).contains(kbps) else {
            throw CodecError(.invalidConfiguration, "VP8 encoder: bitrate \(kbps) kbps is out of range 10...100000")
        }
        configuration.bitrateKbps = kbps
        // Rate settings only: the size stays, so libvpx keeps its buffers (and `tokenBuffer` stays valid).
        applyRateSettings(to: &config)
        let status = vpx_codec_enc_config_set(&context, &config)
        guard status == VPX_CODEC_OK else {
            throw CodecError(.library, "VP8 encoder: bitrate change failed: \(Self.describe(&context, status))")
        }
    }

    /// Encodes `count` temporal layers from the next frame on (1 up to the configured number),
    /// which is a base-layer frame; no keyframe. libvpx resets its per-layer rate control.
    public func setActiveTemporalLayers(_ count: Int) throws(CodecError) {
        guard (1...configuration.temporalLayers).contains(count) else {
            throw CodecError(.invalidConfiguration,
                             "VP8 encoder: \(count) temporal layers asked for, 1...\(configuration.temporalLayers) configured")
        }
        guard count != activeTemporalLayers else { return }
        activeTemporalLayers = count
        patternStart = frameIndex
        applyRateSettings(to: &config)
        let status = vpx_codec_enc_config_set(&context, &config)
        guard status == VPX_CODEC_OK else {
            throw CodecError(.library, "VP8 encoder: temporal layer change failed: \(Self.describe(&context, status))")
        }
    }

    /// The temporal layer the frame with index `frameIndex` belongs to.
    func temporalLayer(ofFrame index: Int64) -> Int {
        let index = index - patternStart
        switch activeTemporalLayers {
        case 2: return Int(index % 2)
        case 3: return [0, 2, 1, 2][Int(index % 4)]
        default: return 0
        }
    }

    /// Encodes one frame. I420 frames of the configured size go straight in; NV12 and BGRA are
    /// converted first. Returns the frames libvpx produced (none when rate control dropped it).
    public func encode(_ frame: VideoFrame) throws(CodecError) -> [EncodedVideoFrame] {
        guard frame.width == configuration.width, frame.height == configuration.height else {
            throw CodecError(.invalidInput,
                             "VP8 encoder configured for \(configuration.width)x\(configuration.height) got \(frame.width)x\(frame.height)")
        }
        let source = frame.format == .i420 ? frame : try converter.toI420(frame)
        let buffer = source.buffer
        vpx_img_wrap(&image, VPX_IMG_FMT_I420, UInt32(configuration.width), UInt32(configuration.height), 1,
                     buffer.planeBase(0))
        image.planes = (buffer.planeBase(0), buffer.planeBase(1), buffer.planeBase(2), nil)
        image.stride = (Int32(buffer.stride(0)), Int32(buffer.stride(1)), Int32(buffer.stride(2)), 0)

        let layer = temporalLayer(ofFrame: frameIndex)
        var flags: vpx_enc_frame_flags_t = 0
        if activeTemporalLayers > 1 {
            flags = Self.layerFlags(layer: layer, layers: activeTemporalLayers)
            rtc_vpx_set_temporal_layer_id(&context, Int32(layer))
        }
        if keyframeRequested {
            flags |= rtc_vpx_flag_force_kf()
            keyframeRequested = false
        }
        let (presentation, duration) = clock.next(captureUs: frame.timestampUs)
        let status = vpx_codec_encode(&context, &image, presentation, UInt(duration), flags, rtc_vpx_deadline_realtime())
        frameIndex += 1
        guard status == VPX_CODEC_OK else {
            throw CodecError(.library, "VP8 encode failed: \(Self.describe(&context, status))")
        }
        var output: [EncodedVideoFrame] = []
        var iterator: vpx_codec_iter_t? = nil
        while let packet = vpx_codec_get_cx_data(&context, &iterator) {
            guard packet.pointee.kind == VPX_CODEC_CX_FRAME_PKT else { continue }
            let data = packet.pointee.data.frame
            let bytes = [UInt8](UnsafeRawBufferPointer(start: data.buf, count: data.sz))
            let key = data.flags & rtc_vpx_frame_is_key() != 0
            output.append(EncodedVideoFrame(data: bytes, isKeyframe: key, timestampUs: frame.timestampUs,
                                            temporalLayer: key ? 0 : layer,
                                            width: configuration.width, height: configuration.height))
        }
        if releasesTokenPages, let tokens = tokenBuffer { _ = rtc_release_chunk_pages(tokens.address, tokens.size) }
        return output
    }

    /// Reference and update flags per temporal layer (as in libvpx's temporal scalability example).
    static func layerFlags(layer: Int, layers: Int) -> vpx_enc_frame_flags_t {
        if layer == 0 { return rtc_vp8_base_layer_flags() }
        if layers == 2 || layer == 2 { return rtc_vp8_no_ref_golden_altref_upd() }
        // Middle layer of three: refers to the base layer and keeps its own frame in GOLDEN.
        return vpx_enc_frame_flags_t(VP8_EFLAG_NO_REF_ARF) | vpx_enc_frame_flags_t(VP8_EFLAG_NO_UPD_ARF)
            | vpx_enc_frame_flags_t(VP8_EFLAG_NO_UPD_LAST)
    }

    static func describe(_ context: UnsafeMutablePointer<vpx_codec_ctx_t>, _ status: vpx_codec_err_t) -> String {
        var text = String(cString: vpx_codec_err_to_string(status))
        if let detail = vpx_codec_error_detail(context) { text += " (\(String(cString: detail)))" }
        return text
    }
}
