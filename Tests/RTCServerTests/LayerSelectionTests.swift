import NIOCore
import NetSim
@testable import RTCServer
import RTCTransport
import Signaling
import Testing

@Suite("Simulcast layer selection and stream splicing")
struct LayerSelectionTests {
    typealias Layer = LayerSelector.Layer
    /// Full, half and quarter of 720p at typical rates, in offer order f, h, q (index 0, 1, 2).
    static let layers: [Layer] = [
        Layer(index: 0, width: 1280, height: 720, bitrateBps: 1_700_000, selectable: true),
        Layer(index: 1, width: 640, height: 360, bitrateBps: 500_000, selectable: true),
        Layer(index: 2, width: 320, height: 180, bitrateBps: 150_000, selectable: true),
    ]

    static func with(_ changes: (inout [Layer]) -> Void) -> [Layer] {
        var layers = Self.layers
        changes(&layers)
        return layers
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var layers: [Layer]
        var request = LayerSelector.Request()
        var budget: Double?
        var upBudget: Double?
        var current: Int?
        var expected: (index: Int, reason: LayerReason)?
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(name: "no estimate, no request: the full layer", layers: layers, expected: (0, .request)),
        Case(name: "low: the smallest", layers: layers, request: .init(streamType: .low), expected: (2, .request)),
        Case(name: "high: the full one", layers: layers, request: .init(streamType: .high), budget: 5_000_000, expected: (0, .request)),
        Case(name: "a 400 kbit/s path: the quarter layer", layers: layers, budget: 350_000, expected: (2, .estimate)),
        Case(name: "a path for half but not full", layers: layers, budget: 1_000_000, expected: (1, .estimate)),
        Case(name: "going up needs 15 % headroom", layers: layers, budget: 1_800_000, current: 1, expected: (1, .estimate)),
        Case(name: "staying needs none", layers: layers, budget: 1_750_000, current: 0, expected: (0, .request)),
        Case(name: "nothing fits: the smallest", layers: layers, budget: 50_000, expected: (2, .estimate)),
        Case(name: "render 640x360: the half layer covers it", layers: layers, request: .init(renderWidth: 640, renderHeight: 360),
             expected: (1, .request)),
        Case(name: "render 700x400: only full covers it", layers: layers, request: .init(renderWidth: 700, renderHeight: 400),
             expected: (0, .request)),
        Case(name: "render portrait 180x320 is covered by the quarter layer", layers: layers,
             request: .init(renderWidth: 180, renderHeight: 320), expected: (2, .request)),
        Case(name: "render larger than any layer: the largest", layers: layers, request: .init(renderWidth: 3840, renderHeight: 2160),
             expected: (0, .request)),
        Case(name: "the full layer stopped: the nearest below", layers: with { $0[0].selectable = false }, expected: (1, .unavailable)),
        Case(name: "low asked, the quarter layer not sent: the nearest above", layers: with { $0[2].selectable = false },
             request: .init(streamType: .low), expected: (1, .unavailable)),
        Case(name: "only the full layer is sent, low asked: the full one", layers: with { $0[1].selectable = false; $0[2].selectable = false },
             request: .init(streamType: .low), expected: (0, .unavailable)),
        Case(name: "nothing sent: no layer", layers: with { for index in $0.indices { $0[index].selectable = false } }, expected: nil),
        Case(name: "sizes unknown yet: ranked by bitrate", layers: with { for index in $0.indices { $0[index].width = nil; $0[index].height = nil } },
             request: .init(streamType: .low), expected: (2, .request)),
        Case(name: "an estimate no probe vouched for moves nobody up", layers: layers, budget: 5_000_000, upBudget: 0, current: 2,
             expected: (2, .estimate)),
        Case(name: "a probe that measured enough for half moves it one layer up", layers: layers, budget: 5_000_000, upBudget: 700_000,
             current: 2, expected: (1, .estimate)),
        Case(name: "going down needs no probe", layers: layers, budget: 600_000, upBudget: 0, current: 0, expected: (1, .estimate)),
        Case(name: "a first layer needs no probe", layers: layers, budget: 5_000_000, upBudget: 0, expected: (0, .request)),
        Case(name: "two layers (dual stream)", layers: [layers[0], layers[2]], budget: 600_000, expected: (2, .estimate)),
    ]

    @Test("a layer from the request, the leg's budget and what is sent", arguments: cases)
    func select(_ test: Case) {
        let chosen = LayerSelector.select(test.layers, request: test.request, budgetBps: test.budget, upBudgetBps: test.upBudget,
                                          current: test.current)
        #expect(chosen?.index == test.expected?.index && chosen?.reason == test.expected?.reason,
                "got \(String(describing: chosen)), wanted \(String(describing: test.expected))")
    }

    @Test("a layer's rate is its last second, and a stopped layer remembers the rate it had")
    func rateWindow() {
        var window = RateWindow()
        // 125 kB/s for 2 s: 1 Mbps.
        for step in 0..<200 { window.add(bytes: 1250, nowUs: Int64(step) * 10_000) }
        let rate = window.bitsPerSecond(nowUs: 2_000_000)
        #expect(abs(rate - 1_000_000) < 100_000, "\(rate)")
        // Stopping (a layer paused): asked every 50 ms through the silence, before and after the
        // window would restart, the rate and the cost stay what the stream had, never the silence
        // averaged in (a paused 640x360 layer was taken for 238 kbit/s instead of ~550).
        let stopping = stride(from: Int64(1_990_000), through: 2_700_000, by: 50_000).map { window.bitsPerSecond(nowUs: $0) }
        #expect(stopping.allSatisfy { abs($0 - 1_000_000) < 100_000 }, "\(stopping.map { Int($0) })")
        #expect(abs(window.costBitsPerSecond(nowUs: 2_400_000) - 1_000_000) < 100_000)
        // Silent for 3 s: the window empties, the rate of its last full second stays.
        let remembered = window.bitsPerSecond(nowUs: 5_000_000)
        #expect(abs(remembered - 1_000_000) < 100_000, "\(remembered)")
    }

    @Test("a switch continues the output: one sequence number, one picture and TL0 index on, the timestamp by the time elapsed; NACKs find each segment's originals")
    func splice() {
        var rewriter = StreamRewriter(outputSSRC: 7)
        var outputs: [RTPHeader] = []
        // Layer 2 first (its keyframe starts the output, at the random offsets): sequences 100..<105, 33 ms apart.
        rewriter.switchSource(to: 2, header: RTPHeader(payloadType: 96, sequenceNumber: 100, timestamp: 9000, ssrc: 52),
                              pictureID: 0x7FFE, tl0: 250, nowUs: 0, clockRate: 90000)
        for index in 0..<5 {
            var header = RTPHeader(payloadType: 96, sequenceNumber: UInt16(100 + index), timestamp: UInt32(9000 + 2970 * index), ssrc: 52)
            rewriter.rewrite(&header, nowUs: Int64(index) * 33_000)
            _ = rewriter.rewriteVP8(pictureID: UInt16(0x7FFE &+ UInt16(index)) & 0x7FFF, tl0: UInt8(250 + index))
            outputs.append(header)
        }
        let lastPicture = rewriter.lastPictureID!, lastTL0 = rewriter.lastTL0!
        // Switch to layer 0 at its keyframe 40 ms later: sequence 60000, another clock, picture 5.
        let keyframe = RTPHeader(payloadType: 96, sequenceNumber: 60000, timestamp: 123_456, ssrc: 50)
        rewriter.switchSource(to: 0, header: keyframe, pictureID: 5, tl0: 9, nowUs: 4 * 33_000 + 40_000, clockRate: 90000)
        var next = keyframe
        rewriter.rewrite(&next, nowUs: 4 * 33_000 + 40_000)
        let vp8 = rewriter.rewriteVP8(pictureID: 5, tl0: 9)
        #expect(next.ssrc == 7 && next.sequenceNumber == outputs[4].sequenceNumber &+ 1)
        #expect(next.timestamp == outputs[4].timestamp &+ 3600, "40 ms at 90 kHz")
        #expect(vp8.pictureID == (lastPicture + 1) & 0x7FFF && vp8.tl0 == lastTL0 &+ 1)
        #expect(rewriter.layer == 0)
        // NACKs: an output from before the switch maps to layer 2's sequence, one after to layer 0's.
        #expect(rewriter.source(of: outputs[2].sequenceNumber) == (2, 102))
        #expect(rewriter.source(of: next.sequenceNumber) == (0, 60000))
        #expect(rewriter.source(of: next.sequenceNumber &+ 3) == (0, 60003))
        var repair = RTPHeader(payloadType: 96, sequenceNumber: 103, timestamp: UInt32(9000 + 2970 * 3), ssrc: 52)
        let segment = rewriter.rewriteRepair(&repair, output: outputs[3].sequenceNumber)
        #expect(repair == outputs[3] && segment.layer == 2)
    }

    @Test("upper temporal layers dropped for a subscriber leave no gap in its sequence numbers, and NACKs still find the originals")
    func drops() {
        var rewriter = StreamRewriter(outputSSRC: 9)
        var sent: [(input: UInt16, output: UInt16)] = []
        // Inputs 10...19: the odd ones (an upper temporal layer) are left out.
        for input in UInt16(10)...19 {
            if input % 2 == 1 {
                let hole = rewriter.drop(input: input)
                #expect(hole == nil, "in order: no number kept for it")
                continue
            }
            var header = RTPHeader(payloadType: 96, sequenceNumber: input, timestamp: UInt32(input) * 6000, ssrc: 1)
            rewriter.rewrite(&header)
            sent.append((input, header.sequenceNumber))
        }
        #expect(zip(sent, sent.dropFirst()).allSatisfy { $1.output == $0.output &+ 1 }, "one sequence number per packet sent")
        #expect(sent.allSatisfy { rewriter.source(of: $0.output) == (0, $0.input) }, "every output maps back to its input")
    }

    /// Packets of two temporal layers (odd inputs the upper one, left out), some of them late
    /// (repairs after later ones went out), over sequence wraps: 70 000 inputs go past the half
    /// range that 16-bit comparisons of a segment's start would get wrong.
    @Test("late packets are placed by their input: the base layer's at the number kept for them, the upper layer's leave a hole for padding; no number is given twice, none is skipped",
          arguments: [(seed: 1 as UInt64, lateShare: 0.1, count: 300), (2, 0.3, 300), (3, 0.5, 300), (4, 0.05, 70_000)])
    func latePlacement(seed: UInt64, lateShare: Double, count: Int) {
        var random = SeededRandom(seed: seed)
        // Arrival order: a late packet arrives 1-20 places after its turn (the first is never late).
        var arrivals = (0..<count).map { (order: Double($0), index: $0) }
        for index in 1..<count where Double.random(in: 0..<1, using: &random) < lateShare {
            arrivals[index].order += Double(Int.random(in: 1...20, using: &random)) + 0.5
        }
        arrivals.sort { $0.order < $1.order }
        var rewriter = StreamRewriter(outputSSRC: 5)
        // Each packet's output, unwrapped next to the previous one handled (they are never far apart).
        var placed: [(index: Int, output: Int64, hole: Bool)] = []
        var previous: Int64?
        var failures = 0
        for (_, index) in arrivals {
            let input = UInt16(65_400) &+ UInt16(truncatingIfNeeded: index)
            let late = rewriter.isLate(input)
            var number: UInt16?
            var hole = false
            if index % 2 == 1 {
                number = rewriter.drop(input: input)
                if (number != nil) != late { failures += 1 }
                hole = true
                if let number, !rewriter.isFiller(number) || rewriter.source(of: number).sequence != input { failures += 1 }
            } else {
                var header = RTPHeader(payloadType: 96, sequenceNumber: input, timestamp: UInt32(index) * 3000, ssrc: 1)
                if rewriter.rewrite(&header) { number = header.sequenceNumber } else { failures += 1 }
                if let number, rewriter.source(of: number).sequence != input || rewriter.isFiller(number) { failures += 1 }
            }
            guard let number else { continue }
            let output = previous.map { $0 + Int64(Int16(bitPattern: number &- UInt16(truncatingIfNeeded: $0))) } ?? Int64(number)
            previous = output
            placed.append((index, output, hole))
        }
        #expect(failures == 0, "a late packet not placed, a hole where none was due, or a NACK that misses its original")
        #expect(placed.filter { !$0.hole }.count == count / 2, "every base-layer packet went out")
        // The numbers used (sent and holes) are one run, in the inputs' order: none twice, none skipped.
        let outputs = placed.sorted { $0.index < $1.index }.map(\.output)
        #expect(zip(outputs, outputs.dropFirst()).allSatisfy { $1 == $0 + 1 }, "one run of numbers in input order")
    }

    @Test("a layer being shed, a late repair of it filled with padding, then a switch: the new layer starts after that number, never on it")
    func shedLateSwitch() {
        var rewriter = StreamRewriter(outputSSRC: 8)
        var last: UInt16 = 0
        for input in UInt16(100)...109 {
            var header = RTPHeader(payloadType: 96, sequenceNumber: input, timestamp: 0, ssrc: 1)
            rewriter.rewrite(&header)
            last = header.sequenceNumber
        }
        // 110 lost on the way in; 111-115 arrive while the layer is shed (left out in order).
        for input in UInt16(111)...115 { rewriter.drop(input: input) }
        let hole = rewriter.drop(input: 110)  // its repair, late: padding in its place
        #expect(hole == last &+ 1 && rewriter.isFiller(last &+ 1))
        rewriter.switchSource(to: 1, header: RTPHeader(payloadType: 96, sequenceNumber: 5000, timestamp: 0, ssrc: 2),
                              pictureID: nil, tl0: nil, nowUs: 0, clockRate: 90000)
        var keyframe = RTPHeader(payloadType: 96, sequenceNumber: 5000, timestamp: 0, ssrc: 2)
        rewriter.rewrite(&keyframe)
        #expect(keyframe.sequenceNumber == last &+ 2, "after the padding's number")
        #expect(!rewriter.isFiller(keyframe.sequenceNumber) && rewriter.source(of: keyframe.sequenceNumber) == (1, 5000))
    }

    @Test("a copy of a packet left out in order has no place (its number went to the next packet); a jump forward of more than half the numbers is ahead, not late")
    func duplicatesAndJumps() {
        var rewriter = StreamRewriter(outputSSRC: 4)
        var header = RTPHeader(payloadType: 96, sequenceNumber: 10, timestamp: 0, ssrc: 1)
        rewriter.rewrite(&header)
        let first = header.sequenceNumber
        rewriter.drop(input: 11)
        var next = RTPHeader(payloadType: 96, sequenceNumber: 12, timestamp: 0, ssrc: 1)
        rewriter.rewrite(&next)
        #expect(next.sequenceNumber == first &+ 1)
        let copy = rewriter.drop(input: 11)
        #expect(copy == nil && !rewriter.isFiller(next.sequenceNumber), "no padding over packet 12's number")
        // 40 000 inputs not forwarded (a transport down for minutes): the stream goes on, ahead.
        var later = RTPHeader(payloadType: 96, sequenceNumber: 12 &+ 40_000, timestamp: 0, ssrc: 1)
        #expect(!rewriter.isLate(later.sequenceNumber))
        let sent = rewriter.rewrite(&later)
        #expect(sent && later.sequenceNumber == next.sequenceNumber &+ 40_000)
    }

    @Test("two cap changes within a repair's reach: a late packet before both is judged by the cap before both")
    func temporalCapTwoChanges() {
        var cap = TemporalCap()
        _ = cap.set(0, from: 100)
        _ = cap.set(nil, from: 200)
        #expect(cap.cap(at: 50) == nil && cap.cap(at: 150) == 0 && cap.cap(at: 250) == nil)
    }

    @Test("a temporal cap judges a late packet by the cap in force at its place", arguments: [
        // (cap before, cap after, late packet's place relative to the change, its layer, left out?)
        (nil as UInt8?, 0 as UInt8?, -3 as Int64, 1 as UInt8, false),  // was forwarded whole: the repair goes too
        (nil, 0, 2, 1, true),
        (0, nil, -3, 1, true),  // was left out whole: the repair is left out
        (0, nil, 2, 1, false),
        (0, nil, -3, 0, false),  // the base layer always goes
    ] as [(UInt8?, UInt8?, Int64, UInt8, Bool)])
    func temporalCapHistory(before: UInt8?, after: UInt8?, place: Int64, layer: UInt8, leftOut: Bool) {
        var cap = TemporalCap()
        _ = cap.set(before, from: 0)
        let changed = cap.set(after, from: 100), again = cap.set(after, from: 120)
        #expect(changed && !again, "one change")
        let applied = cap.cap(at: 100 + place)
        #expect(applied.map { layer > $0 } ?? false == leftOut)
    }

    @Test("a late packet from before the source began is not sent; a switch's segment holds nothing of the old layer")
    func lateBeforeSource() {
        var rewriter = StreamRewriter(outputSSRC: 3)
        var header = RTPHeader(payloadType: 96, sequenceNumber: 500, timestamp: 0, ssrc: 1)
        let first = rewriter.rewrite(&header)
        var early = RTPHeader(payloadType: 96, sequenceNumber: 499, timestamp: 0, ssrc: 1)
        let earlySent = rewriter.rewrite(&early)
        let earlyHole = rewriter.drop(input: 498)
        #expect(first && !earlySent, "before the first packet forwarded")
        #expect(earlyHole == nil)
        // Switch to another layer at its keyframe (input 9000): a late 8999 of that layer is not sent.
        rewriter.switchSource(to: 1, header: RTPHeader(payloadType: 96, sequenceNumber: 9000, timestamp: 0, ssrc: 2),
                              pictureID: nil, tl0: nil, nowUs: 0, clockRate: 90000)
        var keyframe = RTPHeader(payloadType: 96, sequenceNumber: 9000, timestamp: 0, ssrc: 2)
        let keyframeSent = rewriter.rewrite(&keyframe)
        #expect(keyframeSent && keyframe.sequenceNumber == header.sequenceNumber &+ 1)
        var before = RTPHeader(payloadType: 96, sequenceNumber: 8999, timestamp: 0, ssrc: 2)
        let beforeSent = rewriter.rewrite(&before)
        #expect(!beforeSent)
        var next = RTPHeader(payloadType: 96, sequenceNumber: 9002, timestamp: 0, ssrc: 2)
        let nextSent = rewriter.rewrite(&next)
        #expect(nextSent && next.sequenceNumber == keyframe.sequenceNumber &+ 2)
        var late = RTPHeader(payloadType: 96, sequenceNumber: 9001, timestamp: 0, ssrc: 2)
        let lateSent = rewriter.rewrite(&late)
        #expect(lateSent && late.sequenceNumber == keyframe.sequenceNumber &+ 1)
    }

    @Test("VP8 descriptor layout: picture id and TL0PICIDX offsets, keyframe size; short or bad payloads give nil, never a trap",
          arguments: [
              ([0x90, 0xE0, 0x81, 0x23, 0x07, 0x40, 0x10, 0x02, 0x00, 0x9D, 0x01, 0x2A, 0x00, 0x05, 0xD0, 0x02],
               (2 as Int?, true, 4 as Int?, true, 1280 as Int?, 720 as Int?)),
              ([0x90, 0x80, 0x12, 0x11, 0x00, 0x00], (2, false, nil, false, nil, nil)),
              ([0x90, 0xE0, 0x81, 0x23, 0x07, 0x60, 0x11, 0x02, 0x00], (2, true, 4, false, nil, nil)),
              ([0x10, 0x10, 0x02, 0x00, 0x9D, 0x01, 0x2A, 0x40, 0x01, 0xB4, 0x00], (nil, false, nil, true, 320, 180)),
          ] as [([UInt8], (Int?, Bool, Int?, Bool, Int?, Int?))])
    func layout(bytes: [UInt8], expected: (Int?, Bool, Int?, Bool, Int?, Int?)) throws {
        let layout = try #require(VP8DescriptorLayout(payload: ByteBuffer(bytes: bytes)))
        #expect(layout.pictureIDOffset == expected.0 && layout.longPictureID == expected.1 && layout.tl0PictureIndexOffset == expected.2)
        #expect(layout.startsKeyframe == expected.3 && layout.keyframeWidth == expected.4 && layout.keyframeHeight == expected.5)
        // Writing a picture id and reading it back keeps the M bit and the width of the field.
        var buffer = ByteBuffer(bytes: bytes)
        layout.write(pictureID: 0x1234, tl0: 77, into: &buffer, payloadStart: buffer.readerIndex)
        if layout.pictureIDOffset != nil { #expect(layout.pictureID(inPayload: buffer) == (layout.longPictureID ? 0x1234 : 0x34)) }
        if layout.tl0PictureIndexOffset != nil { #expect(layout.tl0PictureIndex(inPayload: buffer) == 77) }
    }

    @Test("truncated VP8 descriptors parse to nil", arguments: [[], [0x80], [0x90, 0x80], [0x90, 0x80, 0x81], [0x90, 0x40], [0x90, 0x20]] as [[UInt8]])
    func truncated(bytes: [UInt8]) {
        #expect(VP8DescriptorLayout(payload: ByteBuffer(bytes: bytes)) == nil)
    }
}
