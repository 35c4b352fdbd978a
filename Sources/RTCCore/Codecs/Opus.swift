internal import COpus

/// What an Opus encoder optimises for.
public enum OpusApplication: String, Sendable, Hashable, CaseIterable {
    /// Speech: favours intelligibility, enables SILK (needed for in-band FEC).
    case voip
    /// Music and mixed content.
    case audio
    /// Lowest delay, CELT only.
    case lowDelay
}

/// A hint about the content, which steers Opus between SILK (speech) and CELT (music).
public enum OpusSignal: String, Sendable, Hashable, CaseIterable {
    case auto
    case voice
    case music
}

/// Settings of an ``OpusEncoder``.
public struct OpusEncoderConfiguration: Sendable, Hashable {
    /// 8000, 12000, 16000, 24000 or 48000.
    public var sampleRate: Int
    /// 1 or 2.
    public var channels: Int
    public var application: OpusApplication
    /// Bits per second, 6000...510000.
    public var bitrate: Int
    /// Carry a low-bitrate copy of each frame in the next one (RFC 7587 §3.3, `useinbandfec=1`).
    public var inbandFEC: Bool
    /// Expected loss, 0...100; in-band FEC is only emitted when this is above zero.
    public var packetLossPercent: Int
    /// Discontinuous transmission: send almost nothing during silence.
    public var dtx: Bool
    /// 0...10.
    public var complexity: Int
    /// 10, 20, 40 or 60 ms.
    public var frameDurationMs: Int
    /// Content hint; `.voice` keeps the SILK layer that carries in-band FEC.
    public var signal: OpusSignal

    public init(sampleRate: Int = 48000, channels: Int = 2, application: OpusApplication = .voip,
                bitrate: Int = 32000, inbandFEC: Bool = true, packetLossPercent: Int = 10, dtx: Bool = false,
                complexity: Int = 9, frameDurationMs: Int = 20, signal: OpusSignal = .auto) {
        self.signal = signal
        self.sampleRate = sampleRate
        self.channels = channels
        self.application = application
        self.bitrate = bitrate
        self.inbandFEC = inbandFEC
        self.packetLossPercent = packetLossPercent
        self.dtx = dtx
        self.complexity = complexity
        self.frameDurationMs = frameDurationMs
    }

    /// Samples per channel in one frame.
    public var samplesPerFrame: Int { sampleRate * frameDurationMs / 1000 }

    /// The sample rates libopus encodes and decodes at.
    public static let sampleRates: Set<Int> = [8000, 12000, 16000, 24000, 48000]
}

/// Maps libopus error codes to text.
func opusError(_ code: Int32) -> String { String(cString: opus_strerror(code)) }

/// An Opus encoder over libopus.
///
/// Not thread-safe: own one per stream and call it from that stream's thread.
public final class OpusEncoder {
    public let configuration: OpusEncoderConfiguration
    private let encoder: OpaquePointer
    private var packet = [UInt8](repeating: 0, count: 4000)

    public init(configuration: OpusEncoderConfiguration) throws(CodecError) {
        func check(_ ok: Bool, _ message: String) throws(CodecError) {
            if !ok { throw CodecError(.invalidConfiguration, "Opus encoder: \(message)") }
        }
        try check(OpusEncoderConfiguration.sampleRates.contains(configuration.sampleRate),
                  "sample rate \(configuration.sampleRate) Hz is not one of 8000, 12000, 16000, 24000, 48000")
        try check((1...2).contains(configuration.channels), "channels must be 1 or 2")
        try check((6000...510_000).contains(configuration.bitrate), "bitrate \(configuration.bitrate) is out of range 6000...510000")
        try check([10, 20, 40, 60].contains(configuration.frameDurationMs), "frame duration must be 10, 20, 40 or 60 ms")
        try check((0...100).contains(configuration.packetLossPercent), "packet loss must be 0...100 %")
        try check((0...10).contains(configuration.complexity), "complexity must be 0...10")
        let application: Int32 = switch configuration.application {
        case .voip: rtc_opus_app_voip()
        case .audio: rtc_opus_app_audio()
        case .lowDelay: rtc_opus_app_lowdelay()
        }
        let signal: Int32 = switch configuration.signal {
        case .auto: rtc_opus_signal_auto()
        case .voice: rtc_opus_signal_voice()
        case .music: rtc_opus_signal_music()
        }
        var error: Int32 = 0
        guard let encoder = opus_encoder_create(Int32(configuration.sampleRate), Int32(configuration.channels),
                                                application, &error), error == OPUS_OK
        else { throw CodecError(.library, "Opus encoder create failed: \(opusError(error))") }
        self.encoder = encoder
        self.configuration = configuration
        let results = [
            rtc_opus_set_bitrate(encoder, Int32(configuration.bitrate)),
            rtc_opus_set_inband_fec(encoder, configuration.inbandFEC ? 1 : 0),
            rtc_opus_set_packet_loss_perc(encoder, Int32(configuration.packetLossPercent)),
            rtc_opus_set_dtx(encoder, configuration.dtx ? 1 : 0),
            rtc_opus_set_complexity(encoder, Int32(configuration.complexity)),
            rtc_opus_set_signal(encoder, signal),
        ]
        if let failed = results.first(where: { $0 != OPUS_OK }) {
            opus_encoder_destroy(encoder)
            throw CodecError(.library, "Opus encoder setting failed: \(opusError(failed))")
        }
    }

    deinit { opus_encoder_destroy(encoder) }

    /// Samples per channel (at the encoder's rate) the encoder delays its output by; Ogg Opus
    /// files store it, scaled to 48 kHz, as pre-skip.
    public var lookahead: Int {
        var value: Int32 = 0
        _ = rtc_opus_get_lookahead(encoder, &value)
        return Int(value)
    }

    /// Changes the bitrate on the fly.
    public func setBitrate(_ bitsPerSecond: Int) throws(CodecError) {
        let status = rtc_opus_set_bitrate(encoder, Int32(clamping: bitsPerSecond))
        guard status == OPUS_OK else { throw CodecError(.invalidConfiguration, "Opus bitrate: \(opusError(status))") }
    }

    /// The loss rate to protect against with in-band FEC (0...100 %), as receivers report it.
    public func setPacketLoss(percent: Int) throws(CodecError) {
        let status = rtc_opus_set_packet_loss_perc(encoder, Int32(max(0, min(100, percent))))
        guard status == OPUS_OK else { throw CodecError(.invalidConfiguration, "Opus packet loss: \(opusError(status))") }
    }

    /// Encodes exactly one frame of interleaved samples (``OpusEncoderConfiguration/samplesPerFrame``
    /// per channel) into one packet.
    public func encode(_ frame: AudioFrame) throws(CodecError) -> [UInt8] {
        guard frame.sampleRate == configuration.sampleRate, frame.channels == configuration.channels,
              frame.samplesPerChannel == configuration.samplesPerFrame
        else {
            throw CodecError(.invalidInput,
                             "Opus encoder expects \(configuration.samplesPerFrame) samples x \(configuration.channels) channels at \(configuration.sampleRate) Hz, got \(frame.samplesPerChannel) x \(frame.channels) at \(frame.sampleRate)")
        }
        let frameSize = Int32(configuration.samplesPerFrame)
        let capacity = Int32(packet.count)
        let encoder = self.encoder
        let length: Int32 = packet.withUnsafeMutableBufferPointer { out in
            switch frame.samples {
            case .int16(let pcm):
                return pcm.withUnsafeBufferPointer { opus_encode(encoder, $0.baseAddress!, frameSize, out.baseAddress!, capacity) }
            case .float(let pcm):
                return pcm.withUnsafeBufferPointer { opus_encode_float(encoder, $0.baseAddress!, frameSize, out.baseAddress!, capacity) }
            }
        }
        guard length > 0 else { throw CodecError(.library, "Opus encode failed: \(opusError(length))") }
        return Array(packet[..<Int(length)])
    }
}

/// An Opus decoder over libopus, with packet loss concealment and in-band FEC recovery.
///
/// Not thread-safe: own one per received stream.
public final class OpusDecoder {
    public let sampleRate: Int
    public let channels: Int
    private let decoder: OpaquePointer
    /// 120 ms, the longest Opus packet.
    private var maxSamplesPerChannel: Int { sampleRate * 120 / 1000 }

    public init(sampleRate: Int = 48000, channels: Int = 2) throws(CodecError) {
        guard OpusEncoderConfiguration.sampleRates.contains(sampleRate), (1...2).contains(channels) else {
            throw CodecError(.invalidConfiguration, "Opus decoder: \(channels) channels at \(sampleRate) Hz is not supported")
        }
        var error: Int32 = 0
        guard let decoder = opus_decoder_create(Int32(sampleRate), Int32(channels), &error), error == OPUS_OK else {
            throw CodecError(.library, "Opus decoder create failed: \(opusError(error))")
        }
        self.decoder = decoder
        self.sampleRate = sampleRate
        self.channels = channels
    }

    deinit { opus_decoder_destroy(decoder) }

    /// Decodes one packet.
    public func decode(_ packet: [UInt8]) throws(CodecError) -> AudioFrame {
        try run(packet, samplesPerChannel: maxSamplesPerChannel, fec: false)
    }

    /// Recovers a lost packet from the in-band FEC data of the packet after it. `samplesPerChannel`
    /// is the lost packet's duration. Without FEC data in `nextPacket`, libopus conceals instead.
    public func decodeFEC(from nextPacket: [UInt8], samplesPerChannel: Int) throws(CodecError) -> AudioFrame {
        try run(nextPacket, samplesPerChannel: samplesPerChannel, fec: true)
    }

    /// Synthesises `samplesPerChannel` samples to cover a lost packet (packet loss concealment).
    public func concealLoss(samplesPerChannel: Int) throws(CodecError) -> AudioFrame {
        try run(nil, samplesPerChannel: samplesPerChannel, fec: false)
    }

    private func run(_ packet: [UInt8]?, samplesPerChannel: Int, fec: Bool) throws(CodecError) -> AudioFrame {
        guard samplesPerChannel > 0, samplesPerChannel <= maxSamplesPerChannel else {
            throw CodecError(.invalidInput, "Opus decode: \(samplesPerChannel) samples is not a valid frame size")
        }
        if let packet, packet.isEmpty || packet.count > 1275 * 3 + 7 {
            throw CodecError(.corruptBitstream, "Opus decode: packet of \(packet.count) bytes is not valid")
        }
        var pcm = [Int16](repeating: 0, count: samplesPerChannel * channels)
        let decoder = self.decoder
        let decoded: Int32 = pcm.withUnsafeMutableBufferPointer { out in
            if let packet {
                return packet.withUnsafeBufferPointer {
                    opus_decode(decoder, $0.baseAddress, Int32($0.count), out.baseAddress!, Int32(samplesPerChannel), fec ? 1 : 0)
                }
            }
            return opus_decode(decoder, nil, 0, out.baseAddress!, Int32(samplesPerChannel), 0)
        }
        guard decoded >= 0 else { throw CodecError(.corruptBitstream, "Opus decode failed: \(opusError(decoded))") }
        pcm.removeLast(pcm.count - Int(decoded) * channels)
        return AudioFrame(samples: .int16(pcm), sampleRate: sampleRate, channels: channels)
    }
}
