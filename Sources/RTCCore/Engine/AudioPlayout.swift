import NIOCore
import RTCMedia
import RTCTransport

/// The playout of one remote Opus track after its jitter buffer: its decoder and its concealment,
/// one 20 ms frame (48 kHz stereo) per decision of the buffer (``play(_:)``).
///
/// Per frame the jitter buffer (made by ``jitterBuffer()``) decides; a packet decodes; a lost one is recovered from the next
/// packet's in-band FEC when that carries any (``OpusPacketInfo/firstFrameHasFEC``), else the
/// ``LossConcealer`` continues the audio before it. The decoder is not told of a loss it did not
/// recover: libopus's own concealment (and the state it leaves) fades a tone to a tenth within
/// 10 ms and the next decoded frame to a quarter, where the continuation keeps the level.
///
/// Not thread-safe: the engine's playout thread owns it (the jitter buffer, which the network
/// loop fills, sits under the receiver's lock; decoding happens outside it). `RemoteAudioReceiver` and the tests and bench that measure
/// playout under loss use this one type.
public struct AudioPlayout {
    public static let sampleRate = 48000
    public static let channels = 2
    public static let samplesPerFrame = 960

    private var decoder: OpusDecoder?
    private var concealer = LossConcealer(sampleRate: AudioPlayout.sampleRate, channels: AudioPlayout.channels)
    /// Frames played from concealment, and lost ones recovered from FEC.
    public private(set) var framesConcealed = 0
    public private(set) var framesRecovered = 0
    public private(set) var framesDecoded = 0

    public init() {}

    /// A jitter buffer that recovers a lost packet from the next one only when that carries FEC.
    public static func jitterBuffer(targetPackets: Int = 3, maxPackets: Int = 25, maxConcealed: Int = 15) -> AudioJitterBuffer {
        var jitter = AudioJitterBuffer(targetPackets: targetPackets, maxPackets: maxPackets, maxConcealed: maxConcealed)
        jitter.canRecover = { packet in (try? OpusPacketInfo(parsing: ByteBuffer(bytes: packet)))?.firstFrameHasFEC ?? false }
        return jitter
    }

    /// The 20 ms the jitter buffer's `decision` calls for, or nil while nothing plays (before the
    /// first packets, or rebuffering).
    public mutating func play(_ decision: AudioPlayoutDecision) -> AudioFrame? {
        if decoder == nil { decoder = try? OpusDecoder(sampleRate: Self.sampleRate, channels: Self.channels) }
        guard let decoder else { return nil }
        var samples: [Int16]
        switch decision {
        case .silence:
            concealer.reset()
            return nil
        case .decode(let packet):
            guard let decoded = try? decoder.decode(packet).int16Samples, decoded.count == Self.samplesPerFrame * Self.channels else {
                // A packet libopus refuses (or not 20 ms): a loss to the listener.
                return conceal()
            }
            samples = decoded
            framesDecoded += 1
        case .recover(let next):
            guard let recovered = try? decoder.decodeFEC(from: next, samplesPerChannel: Self.samplesPerFrame).int16Samples,
                  recovered.count == Self.samplesPerFrame * Self.channels else { return conceal() }
            samples = recovered
            framesRecovered += 1
        case .conceal:
            return conceal()
        }
        concealer.played(&samples)
        return AudioFrame(samples: .int16(samples), sampleRate: Self.sampleRate, channels: Self.channels)
    }

    private mutating func conceal() -> AudioFrame {
        framesConcealed += 1
        return AudioFrame(samples: .int16(concealer.conceal(samplesPerChannel: Self.samplesPerFrame)), sampleRate: Self.sampleRate,
                          channels: Self.channels)
    }
}
