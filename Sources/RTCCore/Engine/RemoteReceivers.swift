import NIOCore
import RTCTransport
import Signaling
import Synchronization

/// A decoded video frame from a remote track. `frame.rotation` carries the sender's CVO rotation:
/// rotate by it for display.
public struct RemoteVideoFrame: Sendable {
    public var uid: String
    public var trackSid: String
    public var source: TrackSource
    public var frame: VideoFrame
    /// The RTP timestamp (90 kHz) the frame arrived with.
    public var rtpTimestamp: UInt32
}

/// Where a remote stream's RTP clock stands on its sender's wall clock, from the latest RTCP sender
/// report (RFC 3550 §6.4.1; the server passes them on, with the RTP time on the clock it rewrote).
/// The audio and video of one sender share that wall clock, so times from their mappings line up:
/// what a player uses for lip sync and a recorder to place both on one timeline.
public struct SenderClock: Sendable, Hashable {
    /// The sender's wall clock at the report, microseconds since 1970.
    public var wallUs: Int64
    /// The same instant on the stream's RTP clock.
    public var rtpTimestamp: UInt32
    /// The RTP clock rate (90000 video, 48000 Opus).
    public var clockRate: Int

    public init(wallUs: Int64, rtpTimestamp: UInt32, clockRate: Int) {
        self.wallUs = wallUs
        self.rtpTimestamp = rtpTimestamp
        self.clockRate = clockRate
    }

    /// The sender's wall-clock time of `rtp`, microseconds since 1970 (within about 6 hours of
    /// the report at 90 kHz: the difference is taken as a signed 32-bit count).
    public func wallUs(of rtp: UInt32) -> Int64 {
        wallUs + Int64(Int32(bitPattern: rtp &- rtpTimestamp)) * 1_000_000 / Int64(max(clockRate, 1))
    }
}

/// An encoded frame from a remote track, whole, in decode order (for recording without re-encoding).
public struct RemoteEncodedVideoFrame: Sendable {
    public var uid: String
    public var trackSid: String
    public var source: TrackSource
    public var data: [UInt8]
    public var isKeyframe: Bool
    public var rtpTimestamp: UInt32
    public var width: Int?
    public var height: Int?
    /// The stream's latest sender-report mapping when the frame was handed on; nil before the first.
    public var senderClock: SenderClock? = nil
}

/// One Opus packet from a remote track as it arrived (for recording without decoding): in arrival
/// order, which may differ from RTP order; losses are gaps in `rtpTimestamp` (48 kHz).
public struct RemoteEncodedAudioFrame: Sendable {
    public var uid: String
    public var trackSid: String
    public var source: TrackSource
    public var data: [UInt8]
    public var rtpTimestamp: UInt32
    /// The stream's latest sender-report mapping when the packet arrived; nil before the first.
    public var senderClock: SenderClock? = nil
}

/// 20 ms of played-out audio from one remote track (48 kHz stereo).
public struct RemoteAudioFrame: Sendable {
    public var uid: String
    public var trackSid: String
    public var source: TrackSource
    public var frame: AudioFrame
}

/// Reception counters of one remote stream, written on the network loop, read by stats and RTCP.
final class ReceiverState: Sendable {
    struct Counters {
        var statistics: ReceptionStatistics
        var bytesReceived = 0
        var framesDecoded = 0
        /// Video: frames the jitter buffer gave up on (a gap not repaired in time, or waiting for a
        /// keyframe), frames the decoder refused, keyframe requests and NACKed sequence numbers sent.
        var framesDropped = 0
        var decodeFailures = 0
        var keyframeRequests = 0
        var nacksSent = 0
        var decryptionFailures = 0
        /// Audio: 20 ms frames played from concealment, and lost ones recovered from in-band FEC.
        var framesConcealed = 0
        var framesRecovered = 0
        var width = 0
        var height = 0
        var senderClock: SenderClock?
    }

    let ssrc: UInt32
    let clockRate: Int
    let counters: Mutex<Counters>

    init(ssrc: UInt32, clockRate: Int) {
        self.ssrc = ssrc
        self.clockRate = clockRate
        counters = Mutex(Counters(statistics: ReceptionStatistics(ssrc: ssrc, clockRate: clockRate)))
    }

    /// A sender report about this stream: its clock mapping, and LSR/DLSR for our receiver reports.
    func received(_ report: SenderReport, arrivalUs: Int64) {
        let clock = SenderClock(wallUs: NTPTime.unixMicroseconds(report.ntpTimestamp), rtpTimestamp: report.rtpTimestamp, clockRate: clockRate)
        counters.withLock { counters in
            counters.senderClock = clock
            counters.statistics.recordSenderReport(compactNTP: report.compactNTP, arrivalUs: arrivalUs)
        }
    }

    var senderClock: SenderClock? { counters.withLock { $0.senderClock } }

    /// Counts a packet; returns the stream's sender-report mapping, read under the same lock.
    @discardableResult
    func record(_ packet: RTPPacket, bytes: Int, arrivalUs: Int64) -> SenderClock? {
        counters.withLock { counters in
            counters.statistics.record(sequenceNumber: packet.header.sequenceNumber, rtpTimestamp: packet.header.timestamp,
                                       arrivalUs: arrivalUs)
            counters.bytesReceived += bytes
            return counters.senderClock
        }
    }

    func report(nowUs: Int64) -> ReceptionReport? {
        counters.withLock { counters in
            guard counters.statistics.packetsReceived > 0 else { return nil }
            return counters.statistics.makeReport(nowUs: nowUs)
        }
    }
}

/// Callbacks a receiver reports through; set once by the engine before packets flow.
struct ReceiverOutputs: Sendable {
    var video: @Sendable (RemoteVideoFrame) -> Void = { _ in }
    var encodedVideo: @Sendable (RemoteEncodedVideoFrame) -> Void = { _ in }
    var encodedAudio: @Sendable (RemoteEncodedAudioFrame) -> Void = { _ in }
    var firstFrame: @Sendable (RemoteTrackInfo, VideoSize) -> Void = { _, _ in }
    var requestKeyframe: @Sendable (UInt32) -> Void = { _ in }
    /// Ask the sender again for these sequence numbers (generic NACK).
    var sendNack: @Sendable (UInt32, [UInt16]) -> Void = { _, _ in }
    /// The keys remote tracks declared encrypted are opened with (nil: no E2EE here).
    var keys: E2EEKeyProvider? = nil
    /// A remote track's decryption changed state.
    var encryptionState: @Sendable (RemoteTrackInfo, FrameCryptor.State, E2EEError?) -> Void = { _, _, _ in }
}

/// Opens the frames of one remote track declared encrypted (docs/e2ee.md), on the thread that
/// owns it: counts what fails and tells the engine when the track's state changes, not per frame.
struct RemoteFrameDecryptor {
    let info: RemoteTrackInfo
    private let cryptor: FrameCryptor?
    private let state: ReceiverState
    private let report: @Sendable (RemoteTrackInfo, FrameCryptor.State, E2EEError?) -> Void
    private var told: FrameCryptor.State = .new

    /// Nil for a track in the clear.
    init?(info: RemoteTrackInfo, codec: E2EECodec, state: ReceiverState, outputs: ReceiverOutputs) {
        guard info.encryption != .none else { return nil }
        self.info = info
        self.state = state
        report = outputs.encryptionState
        // A scheme we do not know (`custom`) is never opened: its frames are as undecryptable as
        // without a key.
        cryptor = info.encryption == .gcm ? outputs.keys.flatMap { try? FrameCryptor(codec: codec, participant: info.uid, provider: $0) } : nil
    }

    /// The plain frame, or nil (counted, and said once per change of state).
    mutating func open(_ frame: [UInt8]) -> [UInt8]? {
        guard let cryptor else {
            fail(.missingKey, E2EEError(.missingKey, info.encryption == .gcm ? "this client has no end-to-end keys" : "an encryption scheme this client does not know"))
            return nil
        }
        do {
            let plain = try cryptor.decrypt(frame)
            if cryptor.state != told {
                told = cryptor.state
                report(info, cryptor.state, nil)
            }
            return plain
        } catch {
            fail(cryptor.state, error)
            return nil
        }
    }

    private mutating func fail(_ now: FrameCryptor.State, _ error: E2EEError) {
        state.counters.withLock { $0.decryptionFailures += 1 }
        guard now != told else { return }
        told = now
        report(info, now, error)
    }
}

/// One remote video track: packets from the network loop go to a thread of the track's own,
/// through the ``VideoJitterBuffer`` into the VP8 decoder.
final class RemoteVideoReceiver: @unchecked Sendable {
    let info: RemoteTrackInfo
    let state: ReceiverState
    private let outputs: ReceiverOutputs
    private var thread: MediaThread!
    // Confined to `thread`:
    private var jitter = VideoJitterBuffer(maxGapWaitUs: 350_000)
    private var nack = NackGenerator()
    private var decoder: VP8Decoder?
    private var rotation: VideoRotation = .none
    private var decodedAny = false
    private var framesDropped = 0
    /// End-to-end decryption (a track declared encrypted): frames that fail are dropped, and the
    /// decoder waits for a keyframe that opens before it takes frames again.
    private var decryptor: RemoteFrameDecryptor?
    private var awaitingKeyframe = false
    private var keyframeAskedUs: Int64 = .min

    /// The id the subscriber offer gives the video-orientation extension (nil: not negotiated).
    private let orientationExtensionID: UInt8?

    init(info: RemoteTrackInfo, ssrc: UInt32, outputs: ReceiverOutputs, orientationExtensionID: UInt8?) {
        self.info = info
        self.orientationExtensionID = orientationExtensionID
        state = ReceiverState(ssrc: ssrc, clockRate: 90000)
        self.outputs = outputs
        decryptor = RemoteFrameDecryptor(info: info, codec: .vp8, state: state, outputs: outputs)
        thread = MediaThread(name: "video-recv-\(ssrc)", tickIntervalUs: 10_000) { [unowned self] in
            let now = MediaClock.monotonicUs()
            self.sendNacks(self.nack.due(nowUs: now))
            // A gap whose packet is still asked for waits longer than one given up on.
            let repairing = self.jitter.firstMissing.map { self.nack.isAsking(for: $0) } ?? false
            self.apply(self.jitter.tick(nowUs: now, repairing: repairing))
        }
    }

    /// On the network loop.
    func receive(_ packet: RTPPacket, bytes: Int, arrivalUs: Int64) {
        state.record(packet, bytes: bytes, arrivalUs: arrivalUs)
        thread.execute { [self] in
            if let id = orientationExtensionID, let data = packet.header.extensionData(id: id),
               let orientation = try? VideoOrientation(parsing: data) {
                rotation = VideoRotation(rawValue: orientation.rotation) ?? .none
            }
            let now = MediaClock.monotonicUs()
            nack.received(packet.header.sequenceNumber, nowUs: now)
            sendNacks(nack.due(nowUs: now))
            apply(jitter.insert(packet, nowUs: now))
        }
    }

    /// The round-trip time to the sender: NACK retries and the time a gap may stay open follow it.
    func setRoundTrip(microseconds: Int64) {
        thread.execute { [self] in
            nack.roundTripUs = microseconds
            // Long enough for a loss on either leg (this one, or the publisher's, which the server
            // repairs) to be asked for, retried and answered: a give-up costs a keyframe round trip.
            jitter.maxGapWaitUs = max(350_000, microseconds * 6 + 100_000)
        }
    }

    func stop() { thread.stop() }

    private func sendNacks(_ lost: [UInt16]) {
        guard !lost.isEmpty else { return }
        outputs.sendNack(state.ssrc, lost)
        state.counters.withLock { $0.nacksSent += lost.count }
    }

    private func apply(_ output: VideoJitterBuffer.Output) {
        // The jitter buffer's counts reach the stats when they change (rarely: not per packet).
        if jitter.framesDropped != framesDropped {
            framesDropped = jitter.framesDropped
            state.counters.withLock { $0.framesDropped = framesDropped }
        }
        if output.requestKeyframe {
            state.counters.withLock { $0.keyframeRequests += 1 }
            outputs.requestKeyframe(state.ssrc)
            // What the jitter buffer gave up on is not worth asking for any more.
            if let oldest = jitter.firstMissing { nack.drop(before: oldest) } else { nack = NackGenerator(roundTrip: nack.roundTripUs) }
        }
        for frame in output.frames { decode(frame) }
    }

    private func decode(_ assembled: AssembledVP8Frame) {
        var bytes = Array(assembled.data.readableBytesView)
        if decryptor != nil {
            guard let plain = decryptor!.open(bytes) else {
                awaitingKeyframe = true
                return
            }
            bytes = plain
            if awaitingKeyframe {
                guard assembled.isKeyframe else {
                    // Frames open again (a key came), but the decoder lost their references.
                    let now = MediaClock.monotonicUs()
                    if now - keyframeAskedUs >= 1_000_000 {
                        keyframeAskedUs = now
                        state.counters.withLock { $0.keyframeRequests += 1 }
                        outputs.requestKeyframe(state.ssrc)
                    }
                    return
                }
                awaitingKeyframe = false
            }
        }
        outputs.encodedVideo(RemoteEncodedVideoFrame(uid: info.uid, trackSid: info.trackSid, source: info.source, data: bytes,
                                                     isKeyframe: assembled.isKeyframe, rtpTimestamp: assembled.rtpTimestamp,
                                                     width: assembled.width, height: assembled.height, senderClock: state.senderClock))
        do {
            if decoder == nil { decoder = try VP8Decoder() }
            guard var frame = try decoder?.decode(bytes, timestampUs: Int64(assembled.rtpTimestamp)) else { return }
            frame.rotation = rotation
            state.counters.withLock {
                $0.framesDecoded += 1
                $0.width = frame.width
                $0.height = frame.height
            }
            if !decodedAny {
                decodedAny = true
                outputs.firstFrame(info, VideoSize(width: frame.width, height: frame.height))
            }
            outputs.video(RemoteVideoFrame(uid: info.uid, trackSid: info.trackSid, source: info.source, frame: frame,
                                           rtpTimestamp: assembled.rtpTimestamp))
        } catch {
            state.counters.withLock { $0.decodeFailures += 1 }
            apply(jitter.decoderFailed(nowUs: MediaClock.monotonicUs()))
        }
    }
}

/// One remote audio track: packets from the network loop wait in an ``AudioJitterBuffer``; the
/// engine's playout thread pulls 20 ms at a time and plays it out here (``AudioPlayout``: FEC and
/// concealment).
final class RemoteAudioReceiver: @unchecked Sendable {
    let info: RemoteTrackInfo
    let state: ReceiverState
    private let encodedOutput: @Sendable (RemoteEncodedAudioFrame) -> Void
    private let jitter = Mutex(AudioPlayout.jitterBuffer())
    // Confined to the playout thread:
    private var playout = AudioPlayout()
    /// Confined to the network loop. Opening a packet there costs what its SRTP did (AES-GCM over
    /// some tens of bytes), and keeps arrival order for the recorder and FEC for the playout.
    private var decryptor: RemoteFrameDecryptor?

    init(info: RemoteTrackInfo, ssrc: UInt32, outputs: ReceiverOutputs) {
        self.info = info
        state = ReceiverState(ssrc: ssrc, clockRate: 48000)
        encodedOutput = outputs.encodedAudio
        decryptor = RemoteFrameDecryptor(info: info, codec: .opus, state: state, outputs: outputs)
    }

    /// The levels its packets said since ``takeLevels()`` (RFC 6464), for the volume indication.
    private let levels = Mutex(AudioLevelWindow())

    func takeLevels() -> AudioLevelWindow { levels.withLock { window in defer { window = AudioLevelWindow() }; return window } }

    /// On the network loop.
    func receive(_ packet: RTPPacket, bytes: Int, arrivalUs: Int64) {
        let clock = state.record(packet, bytes: bytes, arrivalUs: arrivalUs)
        // A padding-only probe (libwebrtc sends them on the audio SSRC): counted above for the
        // sequence numbers' sake, no audio for the playout, the recorder or the decryptor.
        guard packet.payload.readableBytes > 0 else { return }
        if let level = packet.header.extensionData(id: RTPExtensionID.audioLevel),
           let byte = level.getInteger(at: level.readerIndex, as: UInt8.self) {
            levels.withLock { $0.record(byte) }
        }
        var payload = Array(packet.payload.readableBytesView)
        if decryptor != nil {
            // Undecryptable packets are lost ones to the playout: concealment, never noise.
            guard let plain = decryptor!.open(payload) else { return }
            payload = plain
        }
        encodedOutput(RemoteEncodedAudioFrame(uid: info.uid, trackSid: info.trackSid, source: info.source, data: payload,
                                              rtpTimestamp: packet.header.timestamp, senderClock: clock))
        jitter.withLock { $0.insert(sequenceNumber: packet.header.sequenceNumber, timestamp: packet.header.timestamp, payload: payload,
                                    arrivalUs: arrivalUs) }
    }

    /// The next 20 ms (48 kHz stereo), on the playout thread; nil while nothing is playing.
    func pull() -> AudioFrame? {
        let decision = jitter.withLock { $0.pop() }
        let (decodedBefore, concealedBefore, recoveredBefore) = (playout.framesDecoded, playout.framesConcealed, playout.framesRecovered)
        let frame = playout.play(decision)
        if playout.framesDecoded != decodedBefore || playout.framesConcealed != concealedBefore || playout.framesRecovered != recoveredBefore {
            state.counters.withLock { counters in
                counters.framesDecoded += playout.framesDecoded - decodedBefore + playout.framesRecovered - recoveredBefore
                counters.framesConcealed += playout.framesConcealed - concealedBefore
                counters.framesRecovered += playout.framesRecovered - recoveredBefore
            }
        }
        return frame
    }
}
