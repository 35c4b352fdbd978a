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
final class LocalVideoSender: @unchecked Sendable {
    let state: SenderState
    let source: TrackSource
    let mid: String
    /// The retransmission stream's SSRC (`a=ssrc-group:FID`).
    let rtxSSRC: UInt32
    private let thread: MediaThread
    private let pacer: Pacer
    private let sequencer: TransportSequencer
    /// Mutable state below is confined to `thread`.
    private var configuration: VideoEncoderConfiguration
    private var encoder: VP8Encoder?
    /// The bounds are divided by this (1 or 2) while bandwidth estimation leaves too little for the
    /// full size; only when the degradation preference lets the resolution give.
    private var downscale = 1
    private var downscaleChangedUs: Int64 = 0
    private let converter = FrameConverter()
    private var packetizer = VP8Packetizer(initialPictureID: UInt16.random(in: 0...0x7FFF))
    private var sequenceNumber = UInt16.random(in: 0...UInt16.max)
    private let rtpBase = UInt32.random(in: 0...UInt32.max)
    private var limiter: FrameRateLimiter
    /// The transport's capture clock (shared with the audio track), and the first frame's capture time.
    private let clock: CaptureClock
    private var firstCaptureUs: Int64?
    private let control = Mutex(Control())
    /// The last packets sent, to answer NACKs (RFC 4585) and to probe with, and the RTX stream.
    private let history = Mutex(SentVideo())
    var onError: (@Sendable (RTCEngineError) -> Void)?

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
        var keyframeRequested = false
        var pendingConfiguration: VideoEncoderConfiguration?
        /// The bandwidth estimate's target (never above the configured bitrate); nil before any.
        var targetBitrateKbps: Int?
    }

    /// What was sent, by sequence number: 512 packets are 2-3 s of 720p at 1.5-2.5 Mbps, several
    /// times the NACK horizon, at ~0.7 MB. With the RTX stream's state.
    private struct SentVideo {
        var packets = PacketHistory<RTPPacket>(capacity: 512)
        var newest: UInt16?
        /// Set once the server's answer accepts RFC 4588 retransmissions.
        var rtxPayloadType: UInt8?
        var rtxSequence = UInt16.random(in: 0...UInt16.max)
        /// How far back from the newest packet the next padding packet is taken.
        var paddingOffset: UInt16 = 0

        mutating func rtx(of packet: RTPPacket, ssrc: UInt32) -> RTPPacket? {
            guard let payloadType = rtxPayloadType else { return nil }
            defer { rtxSequence &+= 1 }
            return RTXPacket.wrap(packet, ssrc: ssrc, payloadType: payloadType, sequenceNumber: rtxSequence)
        }
    }

    init(ssrc: UInt32, mid: String, source: TrackSource, configuration: VideoEncoderConfiguration, sequencer: TransportSequencer,
         pacer: Pacer, clock: CaptureClock) {
        state = SenderState(ssrc: ssrc, clockRate: 90000)
        self.clock = clock
        rtxSSRC = UInt32.random(in: 1...UInt32.max)
        self.mid = mid
        self.source = source
        self.configuration = configuration
        self.sequencer = sequencer
        self.pacer = pacer
        limiter = FrameRateLimiter(maxFramesPerSecond: Double(configuration.frameRate))
        thread = MediaThread(name: "video-send-\(ssrc)")
    }

    var muted: Bool {
        get { control.withLock { $0.muted } }
        set { control.withLock { $0.muted = newValue } }
    }

    /// The next encoded frame is a keyframe (PLI, FIR, a new subscriber).
    func requestKeyframe() { control.withLock { $0.keyframeRequested = true } }

    func reconfigure(_ configuration: VideoEncoderConfiguration) { control.withLock { $0.pendingConfiguration = configuration } }

    /// A new target from bandwidth estimation.
    func setTargetBitrate(kbps: Int) { control.withLock { $0.targetBitrateKbps = kbps } }

    /// The server accepted RFC 4588 retransmissions with this payload type.
    func enableRTX(payloadType: UInt8) { history.withLock { $0.rtxPayloadType = payloadType } }

    /// A recent packet sent again on the RTX stream, to fill a bandwidth probe: the newest first,
    /// then further back (up to 32 packets), so the receiver either drops it as a duplicate or
    /// gains a packet it lost. Nil without RTX or before anything was sent.
    func paddingPacket() -> RTPPacket? {
        history.withLock { sent in
            guard sent.rtxPayloadType != nil, let newest = sent.newest else { return nil }
            for _ in 0..<32 {
                let sequence = newest &- sent.paddingOffset
                sent.paddingOffset = (sent.paddingOffset + 1) % 32
                if let packet = sent.packets.packet(sequence) { return sent.rtx(of: packet, ssrc: rtxSSRC) }
            }
            return nil
        }
    }

    /// Queues a frame; a frame that would wait behind two others is dropped (counted).
    func push(_ frame: VideoFrame) {
        guard !muted else { return }
        let queued = thread.execute(ifBacklogBelow: 2) { [self] in encode(frame) }
        if !queued { state.counters.withLock { $0.framesDropped += 1 } }
    }

    func stop() {
        thread.stop()
        history.withLock { $0.rtxPayloadType = nil }  // nothing more to probe with
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
            encoder = nil
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
        let control = self.control.withLock { control -> Control in
            defer { control.keyframeRequested = false }
            return control
        }
        do {
            try beforeEncode.withLock { $0 }?()
            var rotation = pushed.rotation
            adaptResolution(targetKbps: control.targetBitrateKbps, nowUs: now)
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
            if encoder == nil || encoder!.configuration.width != fitted.width || encoder!.configuration.height != fitted.height {
                encoder = try VP8Encoder(configuration: encoderConfiguration(width: fitted.width, height: fitted.height))
                state.counters.withLock {
                    $0.width = fitted.width
                    $0.height = fitted.height
                }
            }
            guard let encoder else { return }
            let kbps = min(control.targetBitrateKbps ?? configuration.bitrateKbps, configuration.bitrateKbps)
            if kbps != encoder.configuration.bitrateKbps { try encoder.setBitrate(kbps: kbps) }
            if control.keyframeRequested { encoder.requestKeyframe() }
            let captureMono = monotonicCapture(of: pushed.timestampUs)
            // To the nearest 90 kHz tick: 66 667 µs is 6000, not 5999.
            let rtpTimestamp = rtpBase &+ UInt32(truncatingIfNeeded: ((pushed.timestampUs - firstCaptureUs!) * 90 + 500) / 1000)
            for encoded in try encoder.encode(fitted) {
                packetizeAndSend(encoded, rtpTimestamp: rtpTimestamp, rotation: rotation, captureMonoUs: captureMono)
            }
        } catch {
            onError?(RTCEngineError(.codec, "video track \(mid): \(error)"))
        }
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

    private func encoderConfiguration(width: Int, height: Int) -> VP8EncoderConfiguration {
        var settings = VP8EncoderConfiguration(width: width, height: height, bitrateKbps: configuration.bitrateKbps,
                                               frameRate: Double(configuration.frameRate))
        settings.contentType = configuration.contentHint == .detail ? .screen : .camera
        // Keeping the resolution means dropping frames when the rate cannot be met.
        settings.allowFrameDropping = configuration.degradationPreference != .maintainFramerate
        settings.keyframeInterval = max(configuration.frameRate * 10, 30)
        return settings
    }

    private func monotonicCapture(of timestampUs: Int64) -> Int64 {
        if firstCaptureUs == nil { firstCaptureUs = timestampUs }
        return clock.monotonicUs(ofCapture: timestampUs)
    }

    private func packetizeAndSend(_ encoded: EncodedVideoFrame, rtpTimestamp: UInt32, rotation: VideoRotation, captureMonoUs: Int64) {
        let payloads = packetizer.packetize(ByteBuffer(bytes: encoded.data))
        var packets: [RTPPacket] = []
        packets.reserveCapacity(payloads.count)
        var bytes = 0, payloadBytes = 0
        // The same for every packet of the frame: built once. The pacer fills in the placeholders.
        let paced = RTPHeader.pacedExtensions
        let orientation = RTPHeaderExtension(id: RTPExtensionID.videoOrientation, data: VideoOrientation(rotation: rotation.rawValue).data)
        for (index, payload) in payloads.enumerated() {
            let last = index == payloads.count - 1
            // CVO on the last packet of every frame (as libwebrtc does), so a receiver always has it.
            let header = RTPHeader(marker: last, payloadType: SDPCodecs.vp8PayloadType, sequenceNumber: sequenceNumber,
                                   timestamp: rtpTimestamp, ssrc: state.ssrc, extensions: last ? paced + [orientation] : paced)
            sequenceNumber &+= 1
            let packet = RTPPacket(header: header, payload: payload)
            bytes += packet.serializedSize
            payloadBytes += payload.readableBytes
            packets.append(packet)
        }
        state.counters.withLock { counters in
            counters.packetsSent += packets.count
            counters.bytesSent += bytes
            counters.payloadBytesSent += payloadBytes
            counters.framesEncoded += 1
            counters.lastRTPTimestamp = rtpTimestamp
            counters.lastCaptureMonoUs = captureMonoUs
        }
        history.withLock { sent in
            for packet in packets { sent.packets.insert(packet, sequence: packet.header.sequenceNumber) }
            sent.newest = packets.last?.header.sequenceNumber ?? sent.newest
            sent.paddingOffset = 0
        }
        pacer.enqueue(packets, priority: .video)
    }

    /// Sends again the packets a NACK asks for, those still in the history (as RFC 4588
    /// retransmissions once negotiated); returns how many.
    @discardableResult
    func retransmit(_ sequences: [UInt16]) -> Int {
        var packets = history.withLock { sent in sequences.compactMap { sent.packets.packet($0) } }
        guard !packets.isEmpty else { return 0 }
        let estimate = sequencer.congestion.targetBps, now = MediaClock.monotonicUs()
        packets = retransmitBudget.withLock { budget in
            Array(packets.prefix { budget.mayRetransmit(bytes: $0.serializedSize, estimateBps: estimate, nowUs: now) })
        }
        guard !packets.isEmpty else { return 0 }
        let (outgoing, onRTX) = history.withLock { sent -> ([RTPPacket], Bool) in
            guard sent.rtxPayloadType != nil else { return (packets, false) }
            return (packets.compactMap { sent.rtx(of: $0, ssrc: rtxSSRC) }, true)
        }
        state.counters.withLock {
            // Retransmissions on their own stream are not the media stream's packets (its sender report).
            if !onRTX { $0.packetsSent += outgoing.count }
            $0.retransmitted += outgoing.count
        }
        pacer.enqueue(outgoing, priority: .retransmission)
        return outgoing.count
    }
}
