import Foundation
import NIOCore
import RTCMedia
import RTCTransport
import Testing

@testable import RTCCore

/// What a listener hears of a remote Opus track through loss (issue 53): the FEC probe, the
/// concealer, and the playout as a whole against libopus's own concealment, on seeded losses.
@Suite("Audio playout through loss")
struct AudioConcealmentTests {
    /// 20 ms (48 kHz stereo) of a test signal, frame `index` of it: a 440 Hz tone, or a voiced
    /// sound (a 140 Hz buzz with twelve harmonics whose pitch drifts by 5 %).
    static func source(_ index: Int, voiced: Bool, channels: Int = 2) -> [Int16] {
        var pcm = [Int16](repeating: 0, count: 960 * channels)
        for sample in 0..<960 {
            let t = Double(index * 960 + sample) / 48000
            let value: Double
            if voiced {
                // The fundamental 140 Hz × (1 + 0.05 sin πt): its phase is that frequency's integral.
                let phase = 2 * .pi * 140 * (t - 0.05 / .pi * cos(.pi * t))
                value = 5000 * (1...12).reduce(0.0) { $0 + sin(phase * Double($1)) / Double($1) }
            } else {
                value = 8000 * sin(2 * .pi * 440 * t)
            }
            for channel in 0..<channels { pcm[sample * channels + channel] = Int16(value) }
        }
        return pcm
    }

    /// `count` packets of the signal from our sender's encoder settings (a microphone: VoIP, 48 kbit/s,
    /// in-band FEC, 20 % expected loss as receiver reports would set), or with FEC off.
    static func packets(_ count: Int, voiced: Bool, fec: Bool = true, channels: Int = 2) throws -> [[UInt8]] {
        let encoder = try OpusEncoder(configuration: OpusEncoderConfiguration(sampleRate: 48000, channels: channels, application: .voip,
                                                                              bitrate: 48000, inbandFEC: fec, packetLossPercent: fec ? 20 : 0))
        return try (0..<count).map { index in
            try encoder.encode(AudioFrame(samples: .int16(source(index, voiced: voiced, channels: channels)), sampleRate: 48000, channels: channels))
        }
    }

    static func info(_ packet: [UInt8]) throws -> OpusPacketInfo { try OpusPacketInfo(parsing: ByteBuffer(bytes: packet)) }

    // MARK: The FEC probe

    @Test("the FEC probe agrees with libopus: a FEC decode differs from plain concealment exactly when the probe finds LBRR", arguments: [
        (true, 2), (false, 2), (true, 1), (false, 1),
    ])
    func probeAgreesWithLibopus(voiced: Bool, channels: Int) throws {
        let packets = try Self.packets(120, voiced: voiced, channels: channels)
        var withFEC = 0
        for index in 2..<packets.count {
            // Two decoders with the same history; one recovers frame index-1 from packet index, the other conceals it.
            let recovering = try OpusDecoder(), concealing = try OpusDecoder()
            for earlier in max(0, index - 6)..<(index - 1) {
                _ = try recovering.decode(packets[earlier])
                _ = try concealing.decode(packets[earlier])
            }
            let recovered = try recovering.decodeFEC(from: packets[index], samplesPerChannel: 960).int16Samples
            let concealed = try concealing.concealLoss(samplesPerChannel: 960).int16Samples
            let hasFEC = try Self.info(packets[index]).firstFrameHasFEC
            #expect(hasFEC == (recovered != concealed), "packet \(index): probe \(hasFEC)")
            if hasFEC { withFEC += 1 }
        }
        // Speech carries FEC once the encoder runs; SILK's voice detector judges a steady tone inactive.
        if voiced { #expect(withFEC > 20, "\(withFEC) of 118 voiced packets with FEC") }
        print("FEC probe: \(voiced ? "voiced" : "tone"), \(channels) channel(s): \(withFEC) of \(packets.count - 2) packets carry LBRR")
    }

    @Test("no FEC where there can be none: the encoder's FEC off, a CELT packet, an empty (DTX) frame")
    func probeFindsNone() throws {
        #expect(try Self.packets(60, voiced: true, fec: false).allSatisfy { try !Self.info($0).firstFrameHasFEC })
        let celt = try OpusEncoder(configuration: OpusEncoderConfiguration(sampleRate: 48000, channels: 2, application: .lowDelay, bitrate: 64000))
        for index in 0..<30 {
            let packet = try celt.encode(AudioFrame(samples: .int16(Self.source(index, voiced: true)), sampleRate: 48000, channels: 2))
            let info = try Self.info(packet)
            #expect(info.mode == .celt && !info.firstFrameHasFEC)
        }
        // Code 2 with a first frame of 0 bytes (DTX), then a frame.
        #expect(try !Self.info([0x0A, 0x00, 0xFF, 0xFF]).firstFrameHasFEC)
    }

    @Test("the probe finds the first frame in every framing code: one frame, two equal, two sized, several (CBR, VBR, padded)")
    func probeReadsEveryFraming() throws {
        let packets = try Self.packets(40, voiced: true)
        let withFEC = try packets.filter { try Self.info($0).firstFrameHasFEC }.prefix(5)
        try #require(withFEC.count == 5)
        for packet in withFEC where packet.count < 250 {
            let toc = packet[0] & 0xFC, frame = Array(packet.dropFirst())
            let framings: [(String, [UInt8])] = [
                ("code 0", [toc] + frame),
                ("code 1", [toc | 1] + frame + frame),
                ("code 2", [toc | 2, UInt8(frame.count)] + frame + [0xAB, 0xCD]),
                ("code 3 CBR", [toc | 3, 2] + frame + frame),
                ("code 3 CBR padded", [toc | 3, 0x40 | 2, 3] + frame + frame + [0, 0, 0]),
                ("code 3 VBR", [toc | 3, 0x80 | 3, UInt8(frame.count), 2] + frame + [1, 2] + [9, 9, 9]),
            ]
            for (name, packet) in framings {
                #expect(try Self.info(packet).firstFrameHasFEC, "\(name) \(packet.prefix(4)) of \(packet.count)")
            }
        }
        // Lengths that run past the end: no FEC, never a trap.
        for packet: [UInt8] in [[0x4A], [0x4A, 200, 1, 2], [0x4B, 0x82, 252], [0x4B, 0xC2, 255, 255], [0x4B, 0x42, 10]] {
            #expect((try? Self.info(packet))?.firstFrameHasFEC != true, "\(packet)")
        }
    }

    @Test("random bytes through the probe: no trap, and FEC only ever claimed for SILK or hybrid")
    func probeRandomBytes() {
        var generator = SeededGenerator(seed: 53)
        for _ in 0..<20_000 {
            let bytes = (0..<Int.random(in: 0...40, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            guard let info = try? Self.info(bytes) else { continue }
            #expect(!(info.firstFrameHasFEC && info.mode == .celt))
        }
    }

    // MARK: Slots by timestamp

    @Test("packets take the slot their timestamp names: a sender's padding-only probes between them (sequence numbers, no audio) cost no playout time, across the timestamp's wrap")
    func paddingTakesNoSlot() {
        var buffer = AudioJitterBuffer(targetPackets: 3, maxPackets: 25, maxConcealed: 15)
        var sequence: UInt16 = 65530
        var timestamp: UInt32 = UInt32.max - 960 * 4 + 1
        var decisions: [AudioPlayoutDecision] = []
        for index in 0..<12 {
            buffer.insert(sequenceNumber: sequence, timestamp: timestamp, payload: [UInt8(index + 1)])
            sequence &+= 1
            if index % 3 == 1 {
                // A probe: the next sequence number, the same timestamp, no payload.
                buffer.insert(sequenceNumber: sequence, timestamp: timestamp, payload: [])
                sequence &+= 1
            }
            timestamp &+= 960
            decisions.append(buffer.pop())
        }
        for _ in 0..<2 { decisions.append(buffer.pop()) }
        let played = decisions.compactMap { if case .decode(let packet) = $0 { packet.first } else { nil } }
        #expect(played == (1...12).map { UInt8($0) }, "\(decisions)")
        #expect(buffer.packetsConcealed == 0 && buffer.packetsEmpty == 4)
        // A real loss (a timestamp skipped) is still one slot to conceal.
        var lossy = AudioJitterBuffer(targetPackets: 2)
        for (index, stamp) in [0, 960, 2880, 3840].enumerated() {
            lossy.insert(sequenceNumber: UInt16(index), timestamp: UInt32(stamp), payload: [UInt8(index + 1)])
        }
        let out = (0..<4).map { _ in lossy.pop() }
        #expect(out == [.decode([1]), .decode([2]), .recover(from: [3]), .decode([3])])
    }

    /// Plays `stream` (per packet: its timestamp and the tick it arrives on, 20 ms ticks) through a
    /// jitter buffer; returns the ids (payload bytes) decoded, in order, and the buffer.
    static func play(_ stream: [(timestamp: UInt32, arrives: Int)], ticks: Int, sequences: [UInt16]? = nil)
        -> (decoded: [Int], buffer: AudioJitterBuffer) {
        var buffer = AudioJitterBuffer()
        var decoded: [Int] = []
        for tick in 0..<ticks {
            for (index, packet) in stream.enumerated() where packet.arrives == tick {
                buffer.insert(sequenceNumber: sequences?[index] ?? UInt16(truncatingIfNeeded: index), timestamp: packet.timestamp,
                              payload: [UInt8(index >> 8), UInt8(index & 0xFF)], arrivalUs: Int64(tick) * 20_000)
            }
            if case .decode(let payload) = buffer.pop() { decoded.append(Int(payload[0]) << 8 | Int(payload[1])) }
        }
        return (decoded, buffer)
    }

    @Test("Opus DTX (one packet per 400 ms in silence) between talkspurts: every packet of the next talkspurt plays")
    func dtxGaps() {
        var stream: [(timestamp: UInt32, arrives: Int)] = []
        for slot in 0..<50 { stream.append((UInt32(slot * 960), slot)) }  // 1 s of speech
        for slot in stride(from: 70, to: 170, by: 20) { stream.append((UInt32(slot * 960), slot)) }  // 2 s of DTX
        let talk = stream.count
        for slot in 170..<270 { stream.append((UInt32(slot * 960), slot)) }  // 2 s of speech
        let (decoded, buffer) = Self.play(stream, ticks: 290)
        let played = decoded.filter { $0 >= talk }.count
        #expect(played == 100, "\(played) of 100 packets of the talkspurt after DTX played; \(buffer.resynchronizations) resynchronizations")
        #expect(decoded.filter { $0 < 50 }.count == 50)
    }

    @Test("a sender's timestamps jump forward 2 s or back 20 s mid-stream (its clock restarted): playout follows at once, nothing counted late")
    func timestampJumps() {
        for jump in [100, -1000] {
            var stream: [(timestamp: UInt32, arrives: Int)] = []
            for tick in 0..<100 { stream.append((UInt32(bitPattern: Int32(tick < 50 ? tick : tick + jump) * 960 + 5_000_000), tick)) }
            let (decoded, buffer) = Self.play(stream, ticks: 110)
            #expect(decoded.filter { $0 >= 50 }.count >= 48, "jump \(jump): \(decoded.filter { $0 >= 50 }.count) of 50 played after it")
            #expect(buffer.packetsLate == 0 && buffer.resynchronizations >= 1, "jump \(jump)")
        }
    }

    @Test("a burst past the buffer's cap while playing: what came too late is late, the oldest of the rest go, playout moves past them and plays on")
    func trimWhilePlaying() {
        var stream: [(timestamp: UInt32, arrives: Int)] = []
        for slot in 0..<10 { stream.append((UInt32(slot * 960), slot)) }
        for slot in 10..<50 { stream.append((UInt32(slot * 960), 20)) }  // 40 packets at once, after a 200 ms stall
        for slot in 50..<70 { stream.append((UInt32(slot * 960), slot - 29)) }
        let (decoded, buffer) = Self.play(stream, ticks: 80)
        // Slots 10-19 were due during the stall (concealed): late. Of 20-49, the cap keeps 25 and
        // the delay control drops a few; everything after plays.
        #expect(buffer.packetsLate <= 10)
        #expect(decoded.filter { $0 >= 50 }.count == 20, "\(decoded)")
        #expect(decoded.filter { (20..<50).contains($0) }.count >= 20, "\(decoded)")
        #expect(decoded == decoded.sorted())
    }

    // MARK: The concealer

    @Test("the concealer finds the period of a tone", arguments: [82.0, 110, 147, 220, 330, 440, 490])
    func pitch(frequency: Double) {
        let history = (0..<2880).flatMap { sample -> [Int16] in
            let value = Int16(6000 * sin(2 * .pi * frequency * Double(sample) / 48000))
            return [value, value]
        }
        let found = LossConcealer.pitch(history, channels: 2, sampleRate: 48000)
        let period = 48000 / frequency
        // The period itself or a multiple of it (a longer lag can match a fractional period better).
        let multiple = (Double(found.period) / period).rounded()
        #expect(multiple >= 1 && abs(Double(found.period) - multiple * period) <= 1.5, "\(frequency) Hz: \(found.period) samples")
        #expect(found.correlation > 0.95)
    }

    /// A concealer that has played the first 100 ms of the tone.
    static func concealerAfterTone() -> LossConcealer {
        var concealer = LossConcealer()
        for index in 0..<5 {
            var frame = source(index, voiced: false)
            concealer.played(&frame)
        }
        return concealer
    }

    @Test("a tone concealed for a lost 20 ms goes on at its level and phase; the next decoded frame comes in without a jump")
    func continuesTone() {
        var concealer = Self.concealerAfterTone()
        let concealed = concealer.conceal(samplesPerChannel: 960)
        let truth = Self.source(5, voiced: false)
        var signal = 0.0, error = 0.0
        for (a, b) in zip(concealed, truth) {
            signal += Double(b) * Double(b)
            error += (Double(a) - Double(b)) * (Double(a) - Double(b))
        }
        let snr = 10 * log10(signal / max(error, 1))
        #expect(snr > 20, "the continuation's SNR against the tone itself: \(snr) dB")
        var next = Self.source(6, voiced: false)
        concealer.played(&next)
        // The largest step between samples across the seam stays a tone's (8000 × 2π × 440 / 48000 ≈ 461).
        let seam = [concealed[concealed.count - 2]] + next.prefix(480).enumerated().filter { $0.offset % 2 == 0 }.map(\.element)
        let step = zip(seam.dropFirst(), seam).map { abs(Int($0) - Int($1)) }.max() ?? 0
        #expect(step < 700, "largest step at the seam: \(step)")
        #expect(concealer.framesConcealed == 1 && !concealer.concealing)
    }

    @Test("a long loss holds the level 40 ms, then fades; silence conceals as silence; a reset forgets")
    func fades() {
        var concealer = Self.concealerAfterTone()
        func rms(_ samples: [Int16]) -> Double { (samples.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(max(1, samples.count))).squareRoot() }
        let levels = (0..<10).map { _ in rms(concealer.conceal(samplesPerChannel: 960)) }
        #expect(levels[0] > 5000 && levels[1] > 5000, "\(levels)")
        #expect(zip(levels.dropFirst(2), levels.dropFirst()).allSatisfy { $0 < $1 }, "\(levels)")
        #expect(levels[9] < levels[0] / 4, "\(levels)")
        var quiet = LossConcealer()
        var silence = [Int16](repeating: 0, count: 1920)
        for _ in 0..<4 { quiet.played(&silence) }
        #expect(quiet.conceal(samplesPerChannel: 960).allSatisfy { $0 == 0 })
        concealer.reset()
        #expect(concealer.conceal(samplesPerChannel: 960).allSatisfy { $0 == 0 }, "nothing left to conceal from")
    }

    // MARK: The playout through loss

    /// A loss pattern over `count` packets: independent random loss, or Gilbert–Elliott bursts.
    enum Loss: CustomStringConvertible {
        case random(Double)
        case bursts(average: Double, meanBurst: Double)

        var description: String {
            switch self {
            case .random(let rate): "\(Int(rate * 100)) % random"
            case .bursts(let average, let burst): "\(Int(average * 100)) % in bursts of \(burst)"
            }
        }

        func lost(_ count: Int, seed: UInt64) -> [Bool] {
            var generator = SeededGenerator(seed: seed)
            switch self {
            case .random(let rate):
                return (0..<count).map { _ in Double.random(in: 0..<1, using: &generator) < rate }
            case .bursts(let average, let meanBurst):
                // Bad state: every packet lost, left with 1/meanBurst; entered so that the average holds.
                let leave = 1 / meanBurst, enter = average * leave / (1 - average)
                var bad = false
                return (0..<count).map { _ in
                    bad = Double.random(in: 0..<1, using: &generator) < (bad ? 1 - leave : enter)
                    return bad
                }
            }
        }
    }

    /// How a playout did: the share of 10 ms blocks that kept the signal (within 6 dB of the
    /// median level of the same packets played without loss: the sources are steady) and the
    /// share of frames concealed.
    struct Outcome {
        var kept: Double
        var concealed: Double
    }

    /// The level (mean square) of each 10 ms block of interleaved stereo.
    static func blockLevels(_ samples: [Int16]) -> [Double] {
        stride(from: 0, to: samples.count - 959, by: 960).map { start in
            samples[start..<(start + 960)].reduce(0.0) { $0 + Double($1) * Double($1) } / 960
        }
    }

    /// `packets` through `loss` (arrivals 20 ms apart, a fixed transit) into a jitter buffer and a
    /// playout: ours (``AudioPlayout``), or the control: every decision straight to libopus,
    /// losses to its own concealment, as this engine played before.
    static func run(_ packets: [[UInt8]], lost: [Bool], ours: Bool) throws -> (samples: [Int16], concealed: Int, played: Int) {
        var jitter = ours ? AudioPlayout.jitterBuffer() : AudioJitterBuffer()
        var playout = AudioPlayout()
        let control = try OpusDecoder()
        var out: [Int16] = [], concealed = 0, played = 0
        for tick in 0...(packets.count + 4) {
            if tick < packets.count, !lost[tick] {
                // Timestamps from near the wrap, as a sender's random start may be.
                jitter.insert(sequenceNumber: UInt16(truncatingIfNeeded: tick), timestamp: 0xFFFF_0000 &+ UInt32(tick) &* 960,
                              payload: packets[tick], arrivalUs: Int64(tick) * 20_000 + 30_000)
            }
            let decision = jitter.pop()
            var samples: [Int16]?
            if ours {
                let before = playout.framesConcealed
                samples = playout.play(decision)?.int16Samples
                concealed += playout.framesConcealed - before
            } else {
                switch decision {
                case .silence: samples = nil
                case .decode(let packet): samples = try control.decode(packet).int16Samples
                case .recover(let next): samples = try control.decodeFEC(from: next, samplesPerChannel: 960).int16Samples
                case .conceal:
                    concealed += 1
                    samples = try control.concealLoss(samplesPerChannel: 960).int16Samples
                }
            }
            if let samples { out += samples; played += 1 }
        }
        return (out, concealed, played)
    }

    static func outcome(_ packets: [[UInt8]], lost: [Bool], ours: Bool) throws -> Outcome {
        let clean = blockLevels(try run(packets, lost: lost.map { _ in false }, ours: ours).samples).sorted()
        let median = clean[clean.count / 2]
        let played = try run(packets, lost: lost, ours: ours)
        // From the second second: the encoder's start is not the playout's doing.
        let levels = blockLevels(played.samples).dropFirst(100)
        return Outcome(kept: Double(levels.filter { $0 >= median / 4 }.count) / Double(max(1, levels.count)),
                       concealed: Double(played.concealed) / Double(max(1, played.played)))
    }

    @Test("through loss the playout keeps the signal in at least 95 % of 10 ms blocks where libopus's own concealment kept far fewer", arguments: [
        (false, Loss.random(0.19)), (false, Loss.random(0.36)), (true, Loss.random(0.19)), (true, Loss.random(0.36)),
        (false, Loss.bursts(average: 0.05, meanBurst: 3)), (true, Loss.bursts(average: 0.05, meanBurst: 3)),
    ])
    func playoutKeepsTheSignal(voiced: Bool, loss: Loss) throws {
        let packets = try Self.packets(600, voiced: voiced)
        let lost = loss.lost(packets.count, seed: voiced ? 19 : 36)
        let ours = try Self.outcome(packets, lost: lost, ours: true)
        let control = try Self.outcome(packets, lost: lost, ours: false)
        print(String(format: "playout, %@ at %@ loss (%.1f %% lost): signal kept in %.1f %% of 10 ms blocks (libopus's concealment alone: %.1f %%), "
                     + "%.1f %% of frames concealed", voiced ? "voiced" : "tone", "\(loss)", Double(lost.filter { $0 }.count) * 100 / Double(lost.count),
                     ours.kept * 100, control.kept * 100, ours.concealed * 100))
        // A voiced sound's own level varies within a block more than a tone's, so its bar is lower.
        #expect(ours.kept >= (voiced ? 0.9 : 0.95))
        #expect(ours.kept >= control.kept)
    }
}

/// SplitMix64: the same losses on every run.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
