import Foundation
import NIOCore
import RTCCore
import RTCTransport
import Testing

@Suite("Engine components")
struct EngineComponentTests {
    static func tone(_ frequency: Double, rate: Int, channels: Int, seconds: Double) -> [Int16] {
        let frames = Int(Double(rate) * seconds)
        var samples: [Int16] = []
        samples.reserveCapacity(frames * channels)
        for index in 0..<frames {
            let value = Int16(10000 * sin(2 * Double.pi * frequency * Double(index) / Double(rate)))
            for _ in 0..<channels { samples.append(value) }
        }
        return samples
    }

    static func frequency(_ samples: [Int16], channels: Int, rate: Int) -> Double {
        var crossings: [Int] = []
        var previous = samples[0]
        for index in 1..<(samples.count / channels) {
            let value = samples[index * channels]
            if previous < 0 && value >= 0 { crossings.append(index) }
            previous = value
        }
        return Double(crossings.count - 1) * Double(rate) / Double(crossings.last! - crossings.first!)
    }

    @Test("the resampler keeps a tone's frequency and the stream's length, for every common rate and layout",
          arguments: [(8000, 1), (16000, 1), (22050, 2), (32000, 2), (44100, 1), (44100, 2), (48000, 1), (96000, 2), (48000, 6)])
    func resampler(rate: Int, channels: Int) throws {
        var resampler = try AudioResampler(inputRate: rate, inputChannels: channels, outputRate: 48000, outputChannels: 2)
        let input = Self.tone(440, rate: rate, channels: channels, seconds: 1)
        var output: [Int16] = []
        // Odd block sizes: state must carry across calls.
        var offset = 0, block = 7 * channels
        while offset < input.count {
            let end = min(input.count, offset + block)
            output += resampler.process(Array(input[offset..<end]))
            offset = end
            block = (block / channels % 613 + 97) * channels
        }
        // The interpolator holds back two input samples (its look-ahead) until more arrive.
        #expect(abs(output.count / 2 - 48000) <= 3 * 48000 / rate + 1, "\(output.count / 2) frames out of 1 s")
        #expect(abs(Self.frequency(output, channels: 2, rate: 48000) - 440) < 1)
        let peak = output.map { abs(Int($0)) }.max() ?? 0
        #expect((9500...10100).contains(peak), "level kept (peak \(peak))")
    }

    @Test("the resampler refuses rates and layouts it cannot do")
    func resamplerBadInput() {
        #expect(throws: CodecError.self) { try AudioResampler(inputRate: 0, inputChannels: 1) }
        #expect(throws: CodecError.self) { try AudioResampler(inputRate: 48000, inputChannels: 9) }
        #expect(throws: CodecError.self) { try AudioResampler(inputRate: 48000, inputChannels: 2, outputChannels: 3) }
    }

    // MARK: Video jitter buffer

    /// RTP packets of `frames` VP8 frames (frame 0 a keyframe), `perFrame` packets each.
    static func packets(frames: Int, perFrame: Int = 3, keyframes: Set<Int> = [0]) -> [[RTPPacket]] {
        var packetizer = VP8Packetizer(maxPayloadSize: 100)
        var sequence: UInt16 = 65530  // wraps inside the run
        return (0..<frames).map { index in
            // A VP8 frame tag: keyframe bit clear (0) for keyframes, start code and size for keyframes.
            var data: [UInt8]
            if keyframes.contains(index) {
                data = [0x00, 0x00, 0x00, 0x9d, 0x01, 0x2a, 0x40, 0x01, 0xf0, 0x00]
            } else {
                data = [0x01, 0x00, 0x00]
            }
            data += [UInt8](repeating: UInt8(index), count: 90 * perFrame - data.count - 8)
            return packetizer.packetize(ByteBuffer(bytes: data)).enumerated().map { offset, payload in
                defer { sequence &+= 1 }
                let count = (90 * perFrame - 8 + 91) / 92
                return RTPPacket(header: RTPHeader(marker: offset == count - 1, payloadType: 96, sequenceNumber: sequence,
                                                   timestamp: UInt32(index) * 3000, ssrc: 1), payload: payload)
            }
        }
    }

    @Test("in-order and reordered packets give every frame once, in order")
    func jitterReorder() {
        let frames = Self.packets(frames: 6)
        var buffer = VideoJitterBuffer()
        var out: [UInt32] = []
        var now: Int64 = 0
        for frame in frames {
            for packet in frame.reversed() {  // each frame's packets arrive backwards
                now += 1000
                out += buffer.insert(packet, nowUs: now).frames.map(\.rtpTimestamp)
            }
        }
        #expect(out == (0..<6).map { UInt32($0) * 3000 })
        #expect(buffer.framesDiscarded == 0)
    }

    @Test("a gap waits for its packet up to the limit, then the frames behind it wait for a keyframe, with one throttled PLI")
    func jitterGap() {
        let frames = Self.packets(frames: 8, keyframes: [0, 6])
        var buffer = VideoJitterBuffer(maxGapWaitUs: 100_000, keyframeRequestIntervalUs: 300_000)
        var out: [UInt32] = []
        var requests = 0
        var now: Int64 = 0
        let lost = frames[2][1].header.sequenceNumber
        for frame in frames[0..<6] {
            for packet in frame where packet.header.sequenceNumber != lost {
                now += 5000
                let output = buffer.insert(packet, nowUs: now)
                out += output.frames.map(\.rtpTimestamp)
                requests += output.requestKeyframe ? 1 : 0
            }
        }
        #expect(out == [0, 3000], "frames after the gap wait")
        #expect(buffer.missing == [lost])
        // Within the wait nothing changes; past it, the gap is given up and a keyframe is asked for.
        let early = buffer.tick(nowUs: now + 50_000)
        #expect(early.frames.isEmpty && !early.requestKeyframe)
        let late = buffer.tick(nowUs: now + 200_000)
        #expect(late.requestKeyframe)
        #expect(late.frames.isEmpty, "delta frames after a lost reference are not decodable")
        #expect(buffer.waitingForKeyframe)
        let v7 = buffer.tick(nowUs: now + 250_000)
        #expect(!v7.requestKeyframe, "throttled")
        now += 260_000
        for packet in frames[6] + frames[7] {
            now += 1000
            let output = buffer.insert(packet, nowUs: now)
            out += output.frames.map(\.rtpTimestamp)
        }
        #expect(out == [0, 3000, 18000, 21000], "decoding resumes at the keyframe")
        #expect(!buffer.waitingForKeyframe)
        #expect(buffer.framesDropped == 4, "the frame with the loss and the three behind it")
    }

    @Test("a keyframe that completes behind a gap is handed out at once; the frames it jumps over count as dropped, each once")
    func jitterKeyframeJumpsGap() {
        let frames = Self.packets(frames: 6, keyframes: [0, 5])
        var buffer = VideoJitterBuffer(maxGapWaitUs: 1_000_000)
        let lost = frames[2][1].header.sequenceNumber
        var out: [UInt32] = []
        var now: Int64 = 0
        for packet in frames.joined() where packet.header.sequenceNumber != lost {
            now += 1000
            out += buffer.insert(packet, nowUs: now).frames.map(\.rtpTimestamp)
        }
        #expect(out == [0, 3000, 15000])
        #expect(buffer.framesDropped == 3, "frame 2 (incomplete), 3 and 4 (complete, behind it)")
        #expect(buffer.missing.isEmpty)
    }

    @Test("a gap whose packet is still asked for waits past the gap wait, up to the repair wait")
    func jitterRepairing() {
        let frames = Self.packets(frames: 4, keyframes: [0])
        var buffer = VideoJitterBuffer(maxGapWaitUs: 100_000)
        buffer.maxRepairWaitUs = 400_000
        let lost = frames[1][1].header.sequenceNumber
        for packet in frames.joined() where packet.header.sequenceNumber != lost { _ = buffer.insert(packet, nowUs: 0) }
        #expect(buffer.missing == [lost])
        #expect(!buffer.tick(nowUs: 200_000, repairing: true).requestKeyframe, "still asked for: waits")
        #expect(buffer.missing == [lost])
        let late = buffer.tick(nowUs: 410_000, repairing: true)
        #expect(late.requestKeyframe && buffer.missing.isEmpty, "past the repair wait: given up")
        // The same gap, no longer asked for: given up at the gap wait.
        var other = VideoJitterBuffer(maxGapWaitUs: 100_000)
        for packet in frames.joined() where packet.header.sequenceNumber != lost { _ = other.insert(packet, nowUs: 0) }
        #expect(other.tick(nowUs: 110_000, repairing: false).requestKeyframe)
    }

    @Test("a padding-only packet fills its number: the frame after it goes out without waiting, and nothing is asked for it")
    func jitterFiller() {
        var frames = Self.packets(frames: 3)
        // An SFU left out a packet between frames 0 and 1 and fills its number with padding.
        let hole = frames[1][0].header.sequenceNumber
        for index in 1..<3 { for packet in frames[index].indices { frames[index][packet].header.sequenceNumber &+= 1 } }
        var buffer = VideoJitterBuffer(maxGapWaitUs: 100_000)
        var out: [UInt32] = []
        for packet in frames[0] + frames[1] { out += buffer.insert(packet, nowUs: 1000).frames.map(\.rtpTimestamp) }
        #expect(out == [0] && buffer.missing == [hole])
        var header = frames[0][0].header
        header.sequenceNumber = hole
        out += buffer.insert(RTPPacket.filler(header), nowUs: 2000).frames.map(\.rtpTimestamp)
        #expect(out == [0, 3000] && buffer.missing.isEmpty)
        for packet in frames[2] { out += buffer.insert(packet, nowUs: 3000).frames.map(\.rtpTimestamp) }
        #expect(out == [0, 3000, 6000] && buffer.framesDropped == 0)
        #expect(!buffer.tick(nowUs: 500_000).requestKeyframe)
    }

    @Test("frames held behind packets that form no frame, with nothing missing, are given up after the wait with a keyframe request: no stall without one")
    func jitterBlockedWithoutGap() {
        let frames = Self.packets(frames: 4)
        var buffer = VideoJitterBuffer(maxGapWaitUs: 100_000)
        var out: [UInt32] = []
        // Frame 1's first packet's number is filled with padding: its other packets start no frame.
        let header = frames[1][0].header
        for packet in frames[0] { out += buffer.insert(packet, nowUs: 1000).frames.map(\.rtpTimestamp) }
        out += buffer.insert(RTPPacket.filler(header), nowUs: 1000).frames.map(\.rtpTimestamp)
        for packet in (frames[1].dropFirst() + frames[2] + frames[3]) { out += buffer.insert(packet, nowUs: 2000).frames.map(\.rtpTimestamp) }
        #expect(out == [0] && buffer.missing.isEmpty, "held, with nothing to ask for")
        #expect(!buffer.tick(nowUs: 50_000).requestKeyframe)
        let late = buffer.tick(nowUs: 120_000)
        #expect(late.requestKeyframe, "blocked past the wait: given up")
        #expect(buffer.waitingForKeyframe && buffer.framesDropped == 3, "frame 1 skipped, 2 and 3 not decodable without a keyframe")
    }

    @Test("a stream that starts without a keyframe asks for one and hands nothing out until it comes")
    func jitterStartsMidStream() {
        let frames = Self.packets(frames: 5, keyframes: [4])
        var buffer = VideoJitterBuffer(keyframeRequestIntervalUs: 300_000)
        var out: [UInt32] = []
        var now: Int64 = 0
        for packet in frames[1..<4].joined() {
            now += 1000
            out += buffer.insert(packet, nowUs: now).frames.map(\.rtpTimestamp)
        }
        #expect(out.isEmpty)
        let v8 = buffer.tick(nowUs: 400_000)
        #expect(v8.requestKeyframe)
        for packet in frames[4] { out += buffer.insert(packet, nowUs: 401_000).frames.map(\.rtpTimestamp) }
        #expect(out == [12000])
    }

    // MARK: Audio jitter buffer

    @Test("audio playout: waits for the target, then decodes, recovers from FEC, conceals, and rebuffers after a long silence")
    func audioJitter() {
        var buffer = AudioJitterBuffer(targetPackets: 3, maxPackets: 10, maxConcealed: 2)
        let payload: (UInt16) -> [UInt8] = { [UInt8(truncatingIfNeeded: $0)] }
        buffer.insert(sequenceNumber: 65534, payload: payload(65534))
        let v9 = buffer.pop()
        #expect(v9 == .silence)
        buffer.insert(sequenceNumber: 65535, payload: payload(65535))
        // 0 is lost; 1 and 2 arrive.
        buffer.insert(sequenceNumber: 1, payload: payload(1))
        buffer.insert(sequenceNumber: 2, payload: payload(2))
        let v10 = buffer.pop()
        #expect(v10 == .decode(payload(65534)))
        let v11 = buffer.pop()
        #expect(v11 == .decode(payload(65535)))
        let v12 = buffer.pop()
        #expect(v12 == .recover(from: payload(1)))
        let v13 = buffer.pop()
        #expect(v13 == .decode(payload(1)))
        buffer.insert(sequenceNumber: 0, payload: payload(0))  // too late
        #expect(buffer.packetsLate == 1)
        let v14 = buffer.pop()
        #expect(v14 == .decode(payload(2)))
        // Nothing buffered: conceal twice, then rebuffer.
        let v15 = buffer.pop()
        #expect(v15 == .conceal)
        let v16 = buffer.pop()
        #expect(v16 == .conceal)
        let v17 = buffer.pop()
        #expect(v17 == .silence)
        for sequence: UInt16 in 10...12 { buffer.insert(sequenceNumber: sequence, payload: payload(sequence)) }
        let v18 = buffer.pop()
        #expect(v18 == .decode(payload(10)))
        #expect(buffer.packetsRecovered == 1)
        #expect(buffer.packetsConcealed == 2)
    }

    /// Plays packets 0..<count through `buffer` on a simulated clock: packet `n` is sent at
    /// n x 20 ms and arrives `delayMs(n)` later; playout pops every 20 ms, and `onTick` sees the
    /// buffer after each pop (with the tick's index).
    static func playAudio(_ buffer: inout AudioJitterBuffer, count: Int, delayMs: (Int) -> Int,
                          onTick: (Int, AudioJitterBuffer) -> Void) {
        let arrivals = (0..<count).map { (sequence: $0, atUs: Int64($0) * 20_000 + Int64(delayMs($0)) * 1000) }.sorted { $0.atUs < $1.atUs }
        var index = 0
        for tick in 0..<count {
            let tickUs = Int64(tick) * 20_000
            while index < arrivals.count, arrivals[index].atUs <= tickUs {
                let sequence = UInt16(truncatingIfNeeded: arrivals[index].sequence)
                buffer.insert(sequenceNumber: sequence, payload: [UInt8(truncatingIfNeeded: sequence)], arrivalUs: arrivals[index].atUs)
                index += 1
            }
            _ = buffer.pop()
            onTick(tick, buffer)
        }
    }

    @Test("adaptive playout delay: jitter raises the target and concealment stops; calm brings it back to the floor")
    func audioAdaptiveDelay() {
        var buffer = AudioJitterBuffer(targetPackets: 3)
        // 5 s steady, 10 s of 0-120 ms jitter (in order: a queue that fills and drains, a
        // deterministic pattern), then 7 s steady again.
        let jitter = { (n: Int) in (250..<750).contains(n) ? 10 + (n * 37 % 100) * 120 / 100 : 10 }
        var snapshots: [Int: AudioJitterBuffer] = [:]
        Self.playAudio(&buffer, count: 1100, delayMs: jitter) { tick, state in
            if [249, 500, 749, 1099].contains(tick) { snapshots[tick] = state }
        }
        let steady = snapshots[249]!, early = snapshots[500]!, adapted = snapshots[749]!, calm = snapshots[1099]!
        #expect(steady.targetPackets == 3 && steady.packetsConcealed == 0 && steady.packetsAccelerated == 0)
        #expect(early.targetPackets >= 6, "target \(early.targetPackets) under 120 ms of jitter")
        // Once adapted, the second 5 s of jitter lose (almost) nothing.
        let lost = { (state: AudioJitterBuffer) in state.packetsConcealed + state.packetsLate }
        #expect(lost(adapted) - lost(early) <= 3, "\(lost(adapted) - lost(early)) concealed or late after adapting, \(lost(early)) before")
        #expect(adapted.framesExpanded > 0)
        // Calm again: after the window the target and the buffer come back down.
        #expect(calm.targetPackets == 3)
        #expect(calm.packetsAccelerated > 0 && calm.bufferedPackets <= 5, "\(calm.bufferedPackets) buffered")
        #expect(lost(calm) == lost(adapted))
    }

    @Test("audio playout caps its delay by dropping the oldest packets")
    func audioJitterCap() {
        var buffer = AudioJitterBuffer(targetPackets: 2, maxPackets: 4)
        for sequence: UInt16 in 0..<10 { buffer.insert(sequenceNumber: sequence, payload: [UInt8(sequence)]) }
        #expect(buffer.bufferedPackets == 4)
        let v19 = buffer.pop()
        #expect(v19 == .decode([6]))
    }
}
