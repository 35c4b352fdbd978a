import Foundation
import Testing
@testable import RTCCore

/// Interleaved 16-bit samples of a sine at `frequency`, `samples` per channel, starting at sample `offset`.
func tone(frequency: Double, sampleRate: Int, channels: Int, samples: Int, offset: Int = 0, amplitude: Double = 10000) -> [Int16] {
    var out: [Int16] = []
    out.reserveCapacity(samples * channels)
    for index in 0..<samples {
        let value = Int16(amplitude * sin(2 * Double.pi * frequency * Double(offset + index) / Double(sampleRate)))
        for _ in 0..<channels { out.append(value) }
    }
    return out
}

/// Power of `frequency` relative to total power, by correlating with a sine and cosine (mono view of channel 0).
func toneShare(_ samples: [Int16], channels: Int, frequency: Double, sampleRate: Int) -> Double {
    var sinSum = 0.0, cosSum = 0.0, energy = 0.0
    let count = samples.count / channels
    for index in 0..<count {
        let x = Double(samples[index * channels])
        let phase = 2 * Double.pi * frequency * Double(index) / Double(sampleRate)
        sinSum += x * sin(phase)
        cosSum += x * cos(phase)
        energy += x * x
    }
    guard energy > 0 else { return 0 }
    return 2 * (sinSum * sinSum + cosSum * cosSum) / Double(count) / energy
}

/// A voiced, speech-like signal: harmonics of a wandering 140 Hz pitch with a 4 Hz syllable
/// envelope and a little noise, so that Opus's voice activity detector treats it as speech.
func speechLike(sampleRate: Int, samples: Int, offset: Int) -> [Int16] {
    var noise = UInt64(0x2545_F491_4F6C_DD1D) &+ UInt64(offset)
    return (0..<samples).map { index in
        let t = Double(offset + index) / Double(sampleRate)
        let pitch = 140 + 30 * sin(2 * Double.pi * 0.7 * t)
        let envelope = 0.55 + 0.45 * sin(2 * Double.pi * 4 * t)
        var value = 0.0
        for harmonic in 1...11 { value += sin(2 * Double.pi * pitch * Double(harmonic) * t) / Double(harmonic) }
        noise = noise &* 6364136223846793005 &+ 1442695040888963407
        let jitter = Double(Int64(bitPattern: noise >> 11) % 400)
        return Int16(clamping: Int(6000 * envelope * value + jitter))
    }
}

func rms(_ samples: some Collection<Int16>) -> Double {
    guard !samples.isEmpty else { return 0 }
    return (samples.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(samples.count)).squareRoot()
}

@Suite("Opus")
struct OpusTests {
    @Test("a tone survives the round trip", arguments: [(48000, 2, OpusApplication.audio), (48000, 1, .voip), (16000, 1, .voip)])
    func toneRoundTrip(sampleRate: Int, channels: Int, application: OpusApplication) throws {
        let config = OpusEncoderConfiguration(sampleRate: sampleRate, channels: channels, application: application,
                                              bitrate: 32000, inbandFEC: false, packetLossPercent: 0)
        let encoder = try OpusEncoder(configuration: config)
        let decoder = try OpusDecoder(sampleRate: sampleRate, channels: channels)
        let frame = config.samplesPerFrame
        var decoded: [Int16] = []
        for index in 0..<50 {
            let pcm = tone(frequency: 440, sampleRate: sampleRate, channels: channels, samples: frame, offset: index * frame)
            let packet = try encoder.encode(AudioFrame(samples: .int16(pcm), sampleRate: sampleRate, channels: channels))
            #expect(packet.count < 200)
            let out = try decoder.decode(packet)
            #expect(out.samplesPerChannel == frame)
            decoded += out.int16Samples
        }
        // Skip the first 100 ms (encoder lookahead and onset), then the 440 Hz tone must dominate.
        let settled = Array(decoded[(sampleRate / 10 * channels)...])
        #expect(toneShare(settled, channels: channels, frequency: 440, sampleRate: sampleRate) > 0.9)
        #expect(rms(settled) > 10000 / 2.squareRoot() * 0.7)
    }

    @Test("in-band FEC recovers a dropped packet better than concealment")
    func fecRecoversLoss() throws {
        let rate = 48000
        let config = OpusEncoderConfiguration(sampleRate: rate, channels: 1, application: .voip, bitrate: 32000,
                                              inbandFEC: true, packetLossPercent: 20)
        let encoder = try OpusEncoder(configuration: config)
        let frame = config.samplesPerFrame
        var packets: [[UInt8]] = []
        var sources: [[Int16]] = []
        for index in 0..<40 {
            let pcm = speechLike(sampleRate: rate, samples: frame, offset: index * frame)
            sources.append(pcm)
            packets.append(try encoder.encode(AudioFrame(samples: .int16(pcm), sampleRate: rate, channels: 1)))
        }
        let lost = 25
        func decodeAll(recover: Bool) throws -> [Int16] {
            let decoder = try OpusDecoder(sampleRate: rate, channels: 1)
            var out: [Int16] = []
            for index in 0..<packets.count {
                if index == lost {
                    let frame = recover
                        ? try decoder.decodeFEC(from: packets[lost + 1], samplesPerChannel: frame)
                        : try decoder.concealLoss(samplesPerChannel: frame)
                    #expect(frame.samplesPerChannel == config.samplesPerFrame)
                    out += frame.int16Samples
                } else {
                    out += try decoder.decode(packets[index]).int16Samples
                }
            }
            return out
        }
        let recovered = try decodeAll(recover: true)
        let concealed = try decodeAll(recover: false)
        let lossless: [Int16] = try {
            let decoder = try OpusDecoder(sampleRate: rate, channels: 1)
            return try packets.flatMap { try decoder.decode($0).int16Samples }
        }()
        func error(_ signal: [Int16]) -> Double {
            let range = (lost * frame)..<((lost + 1) * frame)
            let diff = range.map { Int16(clamping: Int(signal[$0]) - Int(lossless[$0])) }
            return rms(diff)
        }
        // The recovered frame is close to what the lost packet itself decodes to, and much closer
        // than concealment gets.
        let lostFrame = Array(lossless[(lost * frame)..<((lost + 1) * frame)])
        #expect(recovered != concealed, "decodeFEC fell back to concealment: the packet carried no FEC data")
        #expect(error(recovered) < error(concealed), "FEC error \(error(recovered)), PLC error \(error(concealed))")
        #expect(error(recovered) < rms(lostFrame) * 0.6, "FEC error \(error(recovered)), signal \(rms(lostFrame))")
        #expect(sources.count == packets.count)
    }

    @Test("bad settings and packets are errors, not traps")
    func rejectsBadInput() throws {
        #expect(throws: CodecError.self) { try OpusEncoder(configuration: OpusEncoderConfiguration(sampleRate: 44100)) }
        #expect(throws: CodecError.self) { try OpusEncoder(configuration: OpusEncoderConfiguration(channels: 3)) }
        #expect(throws: CodecError.self) { try OpusEncoder(configuration: OpusEncoderConfiguration(frameDurationMs: 15)) }
        let encoder = try OpusEncoder(configuration: OpusEncoderConfiguration())
        #expect(throws: CodecError.self) {
            try encoder.encode(AudioFrame(samples: .int16([1, 2, 3]), sampleRate: 48000, channels: 2))
        }
        let decoder = try OpusDecoder()
        #expect(throws: CodecError.self) { try decoder.decode([]) }
        #expect(throws: CodecError.self) { try decoder.decode([UInt8](repeating: 0xFF, count: 5000)) }
        #expect(throws: CodecError.self) { try decoder.concealLoss(samplesPerChannel: 0) }
    }
}
