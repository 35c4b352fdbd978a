import NIOCore
import RTCTransport
import Signaling
import Synchronization

/// A local video track: frames pushed from any thread are rate-limited, oriented, scaled and VP8
/// encoded on a thread of the track's own, then packetized into RTP with the video-orientation
/// (CVO) extension and handed to the transport's pacer (which adds the transport-wide sequence
/// and abs-send-time). NACKed packets go again as RFC 4588 retransmissions once the server's
/// answer accepts them (as the original packets before), and recent packets sent again that way
/// are what bandwidth probes are made of.
///
/// With simulcast the track is sent as up to three layers (``VideoLayer``): full, half and
/// quarter size (dual stream: full and quarter), each its own encoder, SSRC, RTX stream and
/// RFC 8852 stream id, all encoded from the same captured frame. The estimate is shared out
/// smallest layer first; a layer it cannot feed, or one the server says nobody wants (dynacast),
/// is not encoded until it can be.
final class LocalVideoSender: @unchecked Sendable {
    /// The layers, largest first; one layer without a stream id when the track is not simulcast.
    let layers: [VideoLayer]
    /// The full-size layer's state: the track's SSRC, counters and stats.
    var state: SenderState { layers[0].state }
    let source: TrackSource
    let mid: String
    /// The full-size layer's retransmission stream's SSRC (`a=ssrc-group:FID` without simulcast).
    var rtxSSRC: UInt32 { layers[0].rtxSSRC }
    /// The stream ids of the layers (`a=rid`), empty without simulcast.
    var simulcastRids: [String] { layers.compactMap(\.rid) }
    private let thread: MediaThread
    private let pacer: Pacer
    private let sequencer: TransportSequencer
    /// Mutable state below is confined to `thread`.
    private var configuration: VideoEncoderConfiguration
    /// The bounds are divided by this (1 or 2) while bandwidth estimation leaves too little for the
    /// full size; only when the degradation preference lets the resolution give.
    private var downscale = 1
    private var downscaleChangedUs: Int64 = 0
    /// Whether a single stream's configured temporal layers are all encoded now (encode thread).
    private var temporalPolicy: TemporalLayerPolicy?
    /// The temporal layers the single stream is encoded with now (stats).
    private let encodedTemporalLayers = Atomic<Int>(1)
    var temporalLayers: Int { encodedTemporalLayers.load(ordering: .relaxed) }
    private let converter = FrameConverter()
    /// Three layers (each half the one above) are encoded in one pass by libvpx's multi-resolution
    /// encoder: about 1.25 times one full-size encode against 1.38 for three encoders
    /// (`rtc-cli bench simulcast-encode`). Encode thread only.
    private var multiRes: VP8MultiResEncoder?
    private let rtpBase = UInt32.random(in: 0...UInt32.max)
    private var limiter: FrameRateLimiter
    /// The transport's capture clock (shared with the audio track), and the first frame's capture time.
    private let clock: CaptureClock
    private var firstCaptureUs: Int64?
    private let control = Mutex(Control())
    var onError: (@Sendable (RTCEngineError) -> Void)?
    /// End-to-end encryption of each encoded frame of every layer (encode thread); nil without E2EE.
    private var encryptor: OutgoingFrameEncryptor?

    /// When the current run of frames skipped for pushback began (encode thread).
    private var pushbackSinceUs: Int64?
    static let maxPushbackUs: Int64 = 300_000
    /// What retransmissions may still spend: half the estimate, up to 400 ms of it (never under
    /// 16 kB), so a burst of NACKs after a congestion loss does not send a second burst into the
    /// same queue.
    private let retransmitBudget = Mutex(RetransmissionBudget(share: 0.5, windowUs: 400_000, floorBytes: 16_000, startsFull: true))
    /// Test seam: runs on the encode thread before each admitted frame; what it throws is
    /// reported like an encode error.
    let beforeEncode = Mutex<(@Sendable () throws -> Void)?>(nil)

    private struct Control {
        var muted = false
        var pendingConfiguration: VideoEncoderConfiguration?
        /// The bandwidth estimate's target (never above the configured bitrate); nil before any.
        var targetBitrateKbps: Int?
    }

    /// `simulcastLayers` 1 (one stream), 2 (dual stream: full and quarter size) or 3 (full, half, quarter).
    init(ssrc: UInt32, mid: String, source: TrackSource, configuration: VideoEncoderConfiguration, simulcastLayers: Int = 1,
         sequencer: TransportSequencer, pacer: Pacer, clock: CaptureClock, encryption: FrameEncryption? = nil) {
        encryptor = OutgoingFrameEncryptor(encryption, codec: .vp8)
        layers = VideoLayer.make(count: simulcastLayers, firstSSRC: ssrc)
        self.clock = clock
        self.mid = mid
        self.source = source
        self.configuration = configuration
        self.sequencer = sequencer
        self.pacer = pacer
        limiter = FrameRateLimiter(maxFramesPerSecond: Double(configuration.frameRate))
        thread = MediaThread(name: "video-send-\(ssrc)")
    }

    /// The most the layers together send at `configuration` (the estimate's ceiling).
    static func maximumKbps(for configuration: VideoEncoderConfiguration, simulcastLayers: Int) -> Int {
        VideoLayer.make(count: simulcastLayers, firstSSRC: 1).reduce(0) { $0 + $1.maximumKbps(of: configuration) }
    }

    var muted: Bool {
        get { control.withLock { $0.muted } }
        set { control.withLock { $0.muted = newValue } }
    }

    /// The next encoded frame of every layer is a keyframe (unmute, a new subscriber).
    func requestKeyframe() { for layer in layers { layer.requestKeyframe() } }

    /// The layer sent as `ssrc` (a PLI, FIR or NACK names it).
    func layer(ssrc: UInt32) -> VideoLayer? { layers.first { $0.state.ssrc == ssrc } }

    /// Dynacast: encodes only the layers named (by stream id); a layer started again opens with a keyframe.
    func setActiveLayers(_ rids: [String]) {
        for layer in layers {
            guard let rid = layer.rid else { continue }
            layer.setWanted(rids.contains(rid))
        }
    }

    func reconfigure(_ configuration: VideoEncoderConfiguration) { control.withLock { $0.pendingConfiguration = configuration } }

    /// A new target from bandwidth estimation.
    func setTargetBitrate(kbps: Int) { control.withLock { $0.targetBitrateKbps = kbps } }

    /// The server accepted RFC 4588 retransmissions with this payload type.
    func enableRTX(payloadType: UInt8) { for layer in layers { layer.enableRTX(payloadType: payloadType) } }

    /// A recent packet of the largest layer being sent, again on its RTX stream, to fill a bandwidth
    /// probe (``VideoLayer/paddingPacket()``). Nil without RTX or before anything was sent.
    func paddingPacket() -> RTPPacket? {
        for layer in layers where layer.isSending {
            if let packet = layer.paddingPacket() { return packet }
        }
        return nil
    }

    /// Queues a frame; a frame that would wait behind two others is dropped (counted).
    func push(_ frame: VideoFrame) {
        guard !muted else { return }
        let queued = thread.execute(ifBacklogBelow: 2) { [self] in encode(frame) }
        if !queued { state.counters.withLock { $0.framesDropped += 1 } }
    }

    func stop() {
        thread.stop()
        for layer in layers { layer.disableRTX() }  // nothing more to probe with
    }

    // MARK: On the track's thread

    private func encode(_ pushed: VideoFrame) {
        let changed = control.withLock { control in
            defer { control.pendingConfiguration = nil }
            return control.pendingConfiguration
        }
        if let changed, changed != configuration {
            configuration = changed
            limiter.setMaxFramesPerSecond(Double(changed.frameRate))
            for layer in layers { layer.resetEncoder() }
            multiRes = nil
            temporalPolicy = nil
        }
        guard limiter.admit(timestampUs: pushed.timestampUs) else { return }
        // Congestion-window pushback: skip frames while the path is backed up, never for longer
        // than `maxPushbackUs` in a row (a bounded freeze, and a frame that tells feedback apart).
        let now = MediaClock.monotonicUs()
        if sequencer.congestion.shouldPushBack(nowUs: now) {
            let since = pushbackSinceUs ?? now
            pushbackSinceUs = since
            if now - since < Self.maxPushbackUs {
                state.counters.withLock { $0.framesDropped += 1 }
                return
            }
        }
        pushbackSinceUs = nil
        let control = self.control.withLock { $0 }
        do {
            try beforeEncode.withLock { $0 }?()
            var rotation = pushed.rotation
            // Simulcast keeps every layer's size: its small layers are how a narrow path is served.
            if layers.count == 1 { adaptResolution(targetKbps: control.targetBitrateKbps, nowUs: now) } else { downscale = 1 }
            var bounds = configuration.dimensions.scaled(down: downscale)
            let fitted: VideoFrame
            switch configuration.orientationMode {
            case .adaptive:
                // Bounds follow the frame's own orientation; its rotation travels in CVO.
                let portrait = pushed.height > pushed.width
                if portrait != (bounds.height > bounds.width) { bounds = VideoSize(width: bounds.height, height: bounds.width) }
                fitted = try converter.fitI420(pushed, into: bounds)
            case .fixedLandscape, .fixedPortrait:
                let portrait = configuration.orientationMode == .fixedPortrait
                let long = max(bounds.width, bounds.height), short = min(bounds.width, bounds.height)
                bounds = portrait ? VideoSize(width: short, height: long) : VideoSize(width: long, height: short)
                // Scale first (in the frame's own orientation), then turn the small I420 picture upright.
                let before = rotation.swapsDimensions ? VideoSize(width: bounds.height, height: bounds.width) : bounds
                fitted = try converter.rotate(converter.fitI420(pushed, into: before), by: rotation)
                rotation = .none
            }
            let captureMono = monotonicCapture(of: pushed.timestampUs)
            // To the nearest 90 kHz tick: 66 667 µs is 6000, not 5999.
            let rtpTimestamp = rtpBase &+ UInt32(truncatingIfNeeded: ((pushed.timestampUs - firstCaptureUs!) * 90 + 500) / 1000)
            let target = min(control.targetBitrateKbps ?? Int.max, layers.reduce(0) { $0 + $1.maximumKbps(of: configuration) })
            let allocation = VideoLayer.allocate(targetKbps: target, layers: layers, configuration: configuration)
            if layers.count == VP8MultiResEncoder.maxLayers {
                try encodeMultiRes(fitted, allocation: allocation, rtpTimestamp: rtpTimestamp, rotation: rotation, captureMonoUs: captureMono)
                return
            }
            let temporal = chooseTemporalLayers(targetKbps: control.targetBitrateKbps, nowUs: now)
            for (layer, kbps) in zip(layers, allocation) {
                layer.setAllocated(kbps != nil)
                guard let kbps, layer.isEncoded else { continue }
                let frame = layer.divisor == 1 ? fitted
                    : try converter.fitI420(fitted, into: VideoSize(width: fitted.width, height: fitted.height).scaled(down: layer.divisor))
                let encoded = try layer.encode(frame, kbps: kbps, temporalLayers: temporal, settings: { width, height in
                    encoderConfiguration(width: width, height: height, bitrateKbps: layer.maximumKbps(of: configuration))
                })
                for frame in encoded {
                    packetizeAndSend(frame, on: layer, rtpTimestamp: rtpTimestamp, rotation: rotation, captureMonoUs: captureMono)
                }
            }
        } catch {
            onError?(RTCEngineError(.codec, "video track \(mid): \(error)"))
        }
    }

    /// The three layers in one pass: a layer not fed or not wanted is paused (libvpx skips it, and
    /// it opens with a keyframe when it resumes).
    private func encodeMultiRes(_ fitted: VideoFrame, allocation: [Int?], rtpTimestamp: UInt32, rotation: VideoRotation,
                                captureMonoUs: Int64) throws {
        if multiRes == nil || multiRes!.layers[0].width != fitted.width || multiRes!.layers[0].height != fitted.height {
            multiRes = try VP8MultiResEncoder(width: fitted.width, height: fitted.height, frameRate: Double(configuration.frameRate),
                                              layerBitratesKbps: layers.map { $0.maximumKbps(of: configuration) })
        }
        guard let encoder = multiRes else { return }
        var bitrates: [Int] = []
        for (index, (layer, kbps)) in zip(layers, allocation).enumerated() {
            layer.setAllocated(kbps != nil)
            try encoder.setPaused(kbps == nil || !layer.isEncoded, layer: index)
            bitrates.append(max(10, kbps ?? encoder.layers[index].bitrateKbps))
        }
        try encoder.setBitrates(kbps: bitrates)
        let keyframes = layers.map { $0.takeKeyframeRequest() }
        let encoded = try encoder.encode(fitted, forceKeyframe: keyframes)
        for (layer, frames) in zip(layers, encoded) {
            for frame in frames { packetizeAndSend(frame, on: layer, rtpTimestamp: rtpTimestamp, rotation: rotation, captureMonoUs: captureMonoUs) }
        }
    }

    /// How many temporal layers a single stream encodes now (``TemporalLayerPolicy``); one for
    /// simulcast layers.
    private func chooseTemporalLayers(targetKbps: Int?, nowUs: Int64) -> Int {
        guard layers.count == 1, configuration.temporalLayers > 1 else {
            encodedTemporalLayers.store(1, ordering: .relaxed)
            return 1
        }
        if temporalPolicy == nil {
            let floor = SendSideCongestion.encoderFloorKbps(size: configuration.dimensions, frameRate: configuration.frameRate)
            temporalPolicy = TemporalLayerPolicy(maximum: configuration.temporalLayers, floorKbps: floor)
        }
        let count = temporalPolicy!.update(targetKbps: targetKbps, nowUs: nowUs)
        encodedTemporalLayers.store(count, ordering: .relaxed)
        return count
    }

    /// Halves the bounds when the estimate's target is under what the encoder needs at the current
    /// size (once: half the bounds at the least), and doubles them back when it is three times the
    /// full size's need; at most one step per 2 s. Each step costs a keyframe, which a narrow path
    /// has to queue, so the steps are few and far apart.
    private func adaptResolution(targetKbps: Int?, nowUs: Int64) {
        guard configuration.mayScaleDown, let target = targetKbps else {
            downscale = 1
            return
        }
        guard nowUs - downscaleChangedUs >= 2_000_000 else { return }
        let floor = { (divisor: Int) in
            SendSideCongestion.encoderFloorKbps(size: self.configuration.dimensions.scaled(down: divisor), frameRate: self.configuration.frameRate)
        }
        if downscale < VideoEncoderConfiguration.maxDownscale && target < floor(downscale) {
            downscale *= 2
            downscaleChangedUs = nowUs
        } else if downscale > 1 && target >= 3 * floor(downscale / 2) {
            downscale /= 2
            downscaleChangedUs = nowUs
        }
    }

    private func encoderConfiguration(width: Int, height: Int, bitrateKbps: Int) -> VP8EncoderConfiguration {
        var settings = VP8EncoderConfiguration(width: width, height: height, bitrateKbps: bitrateKbps,
                                               frameRate: Double(configuration.frameRate))
        settings.contentType = configuration.contentHint == .detail ? .screen : .camera
        // Keeping the resolution means dropping frames when the rate cannot be met.
        settings.allowFrameDropping = configuration.degradationPreference != .maintainFramerate
        settings.keyframeInterval = max(configuration.frameRate * 10, 30)
        settings.temporalLayers = layers.count == 1 ? configuration.temporalLayers : 1
        return settings
    }

    private func monotonicCapture(of timestampUs: Int64) -> Int64 {
        if firstCaptureUs == nil { firstCaptureUs = timestampUs }
        return clock.monotonicUs(ofCapture: timestampUs)
    }

    private func packetizeAndSend(_ frame: EncodedVideoFrame, on layer: VideoLayer, rtpTimestamp: UInt32, rotation: VideoRotation,
                                  captureMonoUs: Int64) {
        var encoded = frame
        if encryptor != nil {
            // Each layer's frames under its own SSRC (the IV's first word): a frame the keys cannot
            // take yet is not sent at all; the layer asks for a keyframe so the stream restarts cleanly.
            guard let sealed = encryptor!.seal(frame.data, ssrc: layer.state.ssrc, report: onError) else {
                layer.state.counters.withLock { $0.framesDropped += 1 }
                layer.requestKeyframe()
                return
            }
            encoded.data = sealed
        }
        let temporal = layers.count == 1 && configuration.temporalLayers > 1
        let packets = layer.packetize(encoded, rtpTimestamp: rtpTimestamp, rotation: rotation, temporal: temporal)
        layer.state.counters.withLock { counters in
            counters.packetsSent += packets.count
            counters.bytesSent += packets.reduce(0) { $0 + $1.serializedSize }
            counters.payloadBytesSent += packets.reduce(0) { $0 + $1.payload.readableBytes }
            counters.framesEncoded += 1
            counters.lastRTPTimestamp = rtpTimestamp
            counters.lastCaptureMonoUs = captureMonoUs
            counters.width = encoded.width
            counters.height = encoded.height
        }
        layer.remember(packets)
        pacer.enqueue(packets, priority: .video)
    }

    /// Sends again the packets a NACK for `ssrc` asks for, those still in its layer's history (as
    /// RFC 4588 retransmissions once negotiated); returns how many.
    @discardableResult
    func retransmit(_ sequences: [UInt16], ssrc: UInt32? = nil) -> Int {
        guard let layer = ssrc.map(layer(ssrc:)) ?? layers.first else { return 0 }
        var packets = layer.sentPackets(sequences)
        guard !packets.isEmpty else { return 0 }
        let estimate = sequencer.congestion.targetBps, now = MediaClock.monotonicUs()
        packets = retransmitBudget.withLock { budget in
            Array(packets.prefix { budget.mayRetransmit(bytes: $0.serializedSize, estimateBps: estimate, nowUs: now) })
        }
        guard !packets.isEmpty else { return 0 }
        let (outgoing, onRTX) = layer.repairs(of: packets)
        layer.state.counters.withLock {
            // Retransmissions on their own stream are not the media stream's packets (its sender report).
            if !onRTX { $0.packetsSent += outgoing.count }
            $0.retransmitted += outgoing.count
        }
        pacer.enqueue(outgoing, priority: .retransmission)
        return outgoing.count
    }
}
