#if canImport(Glibc)
import Glibc
#endif
import NIOCore
import RTCTransport
import Signaling
import Synchronization

/// A local audio track: PCM pushed at any common rate and channel count is resampled to 48 kHz
/// stereo, cleaned by ``AudioProcessor`` (echo cancellation against the played-out mix, noise
/// suppression, gain control) when enabled, cut into 20 ms frames, Opus encoded and sent as RTP with
/// the audio-level extension, on a thread of the track's own.
final class LocalAudioSender: @unchecked Sendable {
    static let sampleRate = 48000
    static let channels = 2
    static let samplesPer10ms = 480
    static let samplesPerPacket = 960

    let state: SenderState
    let source: TrackSource
    let mid: String
    private let thread: MediaThread
    private let pacer: Pacer
    // Confined to `thread`:
    private var resampler: AudioResampler?
    private var encoder: OpusEncoder?
    private var processor: AudioProcessor?
    /// 48 kHz stereo waiting to fill a 20 ms packet.
    private var buffered: [Int16] = []
    /// Capture time of the first sample in `buffered`.
    private var bufferedCaptureUs: Int64 = 0
    private var firstCaptureUs: Int64?
    /// The transport's capture clock, shared with the video track.
    private let clock: CaptureClock
    private var sequenceNumber = UInt16.random(in: 0...UInt16.max)
    private let rtpBase = UInt32.random(in: 0...UInt32.max)
    private var lastRTPTimestamp: UInt32?
    private let control: Mutex<Control>
    /// The played-out mix (48 kHz stereo), drained into the echo canceller before each near-end frame.
    private let farEnd = Mutex<[Int16]>([])
    var onError: (@Sendable (RTCEngineError) -> Void)?
    /// End-to-end encryption of each Opus packet (`thread` only); nil without E2EE.
    private var encryptor: OutgoingFrameEncryptor?

    private struct Control {
        var muted = false
        var processingEnabled: Bool
        var packetLossPercent: Int?
    }

    init(ssrc: UInt32, mid: String, source: TrackSource, processing: Bool, pacer: Pacer, clock: CaptureClock,
         encryption: FrameEncryption? = nil) {
        encryptor = OutgoingFrameEncryptor(encryption, codec: .opus)
        state = SenderState(ssrc: ssrc, clockRate: Self.sampleRate)
        self.clock = clock
        self.mid = mid
        self.source = source
        self.pacer = pacer
        control = Mutex(Control(processingEnabled: processing))
        thread = MediaThread(name: "audio-send-\(ssrc)")
    }

    var muted: Bool {
        get { control.withLock { $0.muted } }
        set { control.withLock { $0.muted = newValue } }
    }

    var processingEnabled: Bool {
        get { control.withLock { $0.processingEnabled } }
        set { control.withLock { $0.processingEnabled = newValue } }
    }

    /// The loss the receivers report, which sets how much in-band FEC Opus spends.
    func setExpectedPacketLoss(percent: Int) { control.withLock { $0.packetLossPercent = percent } }

    /// The audio being played out, as the echo canceller's reference (48 kHz stereo, any length).
    func feedFarEnd(_ samples: [Int16]) {
        guard processingEnabled else { return }
        farEnd.withLock { queue in
            queue += samples
            let cap = Self.sampleRate * Self.channels / 2  // 500 ms
            if queue.count > cap { queue.removeFirst(queue.count - cap) }
        }
    }

    func push(_ frame: AudioFrame) {
        guard !muted else { return }
        thread.execute { [self] in process(frame) }
    }

    func stop() { thread.stop() }

    // MARK: On the track's thread

    private func process(_ frame: AudioFrame) {
        do {
            if resampler == nil || resampler!.inputRate != frame.sampleRate || resampler!.inputChannels != frame.channels {
                resampler = try AudioResampler(inputRate: frame.sampleRate, inputChannels: frame.channels,
                                               outputRate: Self.sampleRate, outputChannels: Self.channels)
            }
            if encoder == nil {
                encoder = try OpusEncoder(configuration: OpusEncoderConfiguration(
                    sampleRate: Self.sampleRate, channels: Self.channels, application: source == .microphone ? .voip : .audio,
                    bitrate: source == .microphone ? 48000 : 96000, inbandFEC: true, packetLossPercent: 5))
            }
            let control = self.control.withLock { control -> Control in
                defer { control.packetLossPercent = nil }
                return control
            }
            if let loss = control.packetLossPercent { try encoder?.setPacketLoss(percent: loss) }
            if firstCaptureUs == nil { firstCaptureUs = frame.timestampUs }
            let converted = resampler!.process(frame.int16Samples)
            let bufferedUs = Int64(buffered.count / Self.channels) * 1_000_000 / Int64(Self.sampleRate)
            // Capture time follows the pushed timestamps; a jump (a paused source) moves it.
            if buffered.isEmpty || abs(frame.timestampUs - (bufferedCaptureUs + bufferedUs)) > 40_000 {
                bufferedCaptureUs = frame.timestampUs - bufferedUs
            }
            buffered += converted
            let packetSamples = Self.samplesPerPacket * Self.channels
            while buffered.count >= packetSamples {
                var pcm = Array(buffered[..<packetSamples])
                buffered.removeFirst(packetSamples)
                let captureUs = bufferedCaptureUs
                bufferedCaptureUs += 20_000
                if control.processingEnabled { try clean(&pcm) }
                try encodeAndSend(pcm, captureUs: captureUs)
            }
        } catch {
            onError?(RTCEngineError(.codec, "audio track \(mid): \(error)"))
        }
    }

    /// Runs the echo canceller, noise suppression and gain control over 20 ms, in two 10 ms halves.
    private func clean(_ pcm: inout [Int16]) throws(CodecError) {
        if processor == nil {
            processor = try AudioProcessor(configuration: AudioProcessingConfiguration(sampleRate: Self.sampleRate, channels: Self.channels))
        }
        guard let processor else { return }
        let chunk = Self.samplesPer10ms * Self.channels
        let reference: [Int16] = farEnd.withLock { queue in
            let whole = queue.count / chunk * chunk
            defer { queue.removeFirst(whole) }
            return Array(queue[..<whole])
        }
        var offset = 0
        while offset < reference.count {
            try processor.processFarEnd(Array(reference[offset..<offset + chunk]))
            offset += chunk
        }
        for half in 0..<2 {
            var part = Array(pcm[half * chunk..<(half + 1) * chunk])
            try processor.processNearEnd(&part, delayMs: 60)
            pcm.replaceSubrange(half * chunk..<(half + 1) * chunk, with: part)
        }
    }

    private func encodeAndSend(_ pcm: [Int16], captureUs: Int64) throws(CodecError) {
        guard let encoder else { return }
        var payload = try encoder.encode(AudioFrame(samples: .int16(pcm), sampleRate: Self.sampleRate, channels: Self.channels))
        if encryptor != nil {
            guard let sealed = encryptor!.seal(payload, ssrc: state.ssrc, report: onError) else { return }
            payload = sealed
        }
        var rtpTimestamp = rtpBase &+ UInt32(truncatingIfNeeded: ((captureUs - firstCaptureUs!) * 48 + 500) / 1000)
        // Timestamps never repeat or go back, even if the app's clock does.
        if let last = lastRTPTimestamp, Int32(bitPattern: rtpTimestamp &- last) < Int32(Self.samplesPerPacket) {
            rtpTimestamp = last &+ UInt32(Self.samplesPerPacket)
        }
        lastRTPTimestamp = rtpTimestamp
        let captureMono = clock.monotonicUs(ofCapture: captureUs)
        let level = Self.audioLevel(pcm)
        levels.withLock { $0.record((level < 60 ? 0x80 : 0) | min(level, 127)) }
        // The pacer fills in the transport-wide sequence and abs-send-time as the packet leaves.
        let header = RTPHeader(
            marker: false, payloadType: SDPCodecs.opusPayloadType, sequenceNumber: sequenceNumber, timestamp: rtpTimestamp,
            ssrc: state.ssrc,
            extensions: [RTPHeaderExtension(id: RTPExtensionID.audioLevel, data: AudioLevel(voiceActivity: level < 60, level: level).data)]
                + RTPHeader.pacedExtensions)
        sequenceNumber &+= 1
        let packet = RTPPacket(header: header, payload: ByteBuffer(bytes: payload))
        state.counters.withLock { counters in
            counters.packetsSent += 1
            counters.bytesSent += packet.serializedSize
            counters.payloadBytesSent += payload.count
            counters.framesEncoded += 1
            counters.lastRTPTimestamp = rtpTimestamp
            counters.lastCaptureMonoUs = captureMono
        }
        pacer.enqueue([packet], priority: .audio)
    }

    /// The levels it sent since ``takeLevels()`` (the volume indication's local entry).
    private let levels = Mutex(AudioLevelWindow())

    func takeLevels() -> AudioLevelWindow { levels.withLock { window in defer { window = AudioLevelWindow() }; return window } }

    /// RFC 6464 level: -dBov of the frame's RMS, 0 (loudest) ... 127 (silence).
    static func audioLevel(_ pcm: [Int16]) -> UInt8 {
        guard !pcm.isEmpty else { return 127 }
        var sum = 0.0
        for sample in pcm { sum += Double(sample) * Double(sample) }
        let rms = (sum / Double(pcm.count)).squareRoot() / 32768
        guard rms > 0 else { return 127 }
        return UInt8(max(0, min(127, -20 * log10(rms))))
    }
}
