import ArgumentParser
import RTCCore
import ServerCommandLine

/// What simulcast costs the sender per captured frame: one 720p encode, then 1, 2 and 3 layers
/// (full, 1/2, 1/4 size) as separate ``VP8Encoder``s fed by libyuv scaling, and as one
/// ``VP8MultiResEncoder`` (libvpx's multi-resolution mode), all on the same synthetic frames.
struct SimulcastEncodeBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulcast-encode",
        abstract: "VP8 encode time per captured frame for 1-3 simulcast layers, separate encoders against libvpx's multi-resolution encoder, next to one 720p encode.")

    @Option(help: "Captured frames; every row encodes each of them.") var frames: Int = 300
    @Option(help: "Width of the full-size layer (even).") var width: Int = 1280
    @Option(help: "Height of the full-size layer (even).") var height: Int = 720
    @Option(name: .customLong("cpu-used"), help: "libvpx speed of every encoder (VP8Encoder's default).") var cpuUsed: Int = -6

    /// Full, half and quarter size, constant bitrate.
    static let bitratesKbps = [1700, 500, 150]
    static let fps = 30

    func validate() throws {
        guard frames >= 10 else { throw ValidationError("--frames must be at least 10") }
        guard width % 2 == 0, height % 2 == 0, width >= 64, height >= 64, width <= 4096, height <= 4096 else {
            throw ValidationError("--width and --height must be even, 64...4096 (the quarter layer is a macroblock at least)")
        }
    }

    /// One way of turning a captured frame into `layers` streams, and what it measured.
    final class Row {
        let name: String
        let layers: Int
        /// Why the row could not run, when it could not.
        let unavailable: String?
        private let encode: (VideoFrame) throws -> [[EncodedVideoFrame]]
        private let decoders: [VP8Decoder]
        private(set) var milliseconds: [Double] = []
        private(set) var bytes: [Int]
        private(set) var frames: [Int]
        private(set) var quality: [PSNRAccumulator]

        init(_ name: String, layers: Int, make: () throws -> (VideoFrame) throws -> [[EncodedVideoFrame]]) throws {
            self.name = name
            self.layers = layers
            var encode: (VideoFrame) throws -> [[EncodedVideoFrame]] = { _ in [] }
            var unavailable: String?
            do { encode = try make() } catch { unavailable = "\(error)" }
            self.encode = encode
            self.unavailable = unavailable
            decoders = try reporting { try (0..<layers).map { _ in try VP8Decoder() } }
            bytes = Array(repeating: 0, count: layers)
            frames = bytes
            quality = Array(repeating: PSNRAccumulator(), count: layers)
        }

        /// Encodes one captured frame (timed), then decodes every layer against `references`, the
        /// captured frame scaled to each layer's size (not timed).
        func measure(_ frame: VideoFrame, references: [VideoFrame]) throws {
            guard unavailable == nil else { return }
            let start = ContinuousClock.now
            let output = try reporting { try encode(frame) }
            let elapsed = start.duration(to: .now)
            milliseconds.append(Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15)
            guard output.count == layers else { throw CLIError("\(name): \(output.count) layers out, \(layers) expected") }
            for (layer, packets) in output.enumerated() {
                for packet in packets {
                    bytes[layer] += packet.data.count
                    frames[layer] += 1
                    guard let picture = try reporting({ try decoders[layer].decode(packet.data) }) else { continue }
                    try reporting { try quality[layer].add(reference: references[layer], distorted: picture) }
                }
            }
        }
    }

    func run() throws {
        let sizes = VP8MultiResEncoder.layerSizes(width: width, height: height, count: 3)
        let bitrates = Self.bitratesKbps
        let cpuUsed = self.cpuUsed
        /// 1 to 3 VP8Encoders, each lower layer scaled from the one above with libyuv (as the
        /// multi-resolution encoder does it).
        func separate(_ layers: Int) -> () throws -> (VideoFrame) throws -> [[EncodedVideoFrame]] {
            {
                let encoders = try (0..<layers).map { index in
                    try VP8Encoder(configuration: VP8EncoderConfiguration(
                        width: sizes[index].width, height: sizes[index].height, bitrateKbps: bitrates[index],
                        frameRate: Double(Self.fps), cpuUsed: cpuUsed))
                }
                let converter = FrameConverter()
                return { frame in
                    var output: [[EncodedVideoFrame]] = []
                    var source = frame
                    for (index, encoder) in encoders.enumerated() {
                        if index > 0 { source = try converter.scale(source, to: sizes[index]) }
                        output.append(try encoder.encode(source))
                    }
                    return output
                }
            }
        }
        func multiRes(_ layers: Int) -> () throws -> (VideoFrame) throws -> [[EncodedVideoFrame]] {
            {
                let encoder = try VP8MultiResEncoder(width: sizes[0].width, height: sizes[0].height, frameRate: Double(Self.fps),
                                                     layerBitratesKbps: Array(bitrates.prefix(layers)), cpuUsed: cpuUsed)
                return { frame in try encoder.encode(frame) }
            }
        }
        let names = ["f", "f+h", "f+h+q"]
        var rows = [try Row("one \(sizes[0]) VP8Encoder", layers: 1, make: separate(1))]
        for layers in 1...3 { rows.append(try Row("separate VP8Encoders, \(names[layers - 1])", layers: layers, make: separate(layers))) }
        for layers in 1...3 { rows.append(try Row("VP8MultiResEncoder, \(names[layers - 1])", layers: layers, make: multiRes(layers))) }

        print("Simulcast VP8 encode: \(sizes[0]) moving camera pattern, \(frames) captured frames at \(Self.fps) fps; layers f \(sizes[0]), "
              + "h \(sizes[1]), q \(sizes[2]) at \(bitrates.map(String.init).joined(separator: "/")) kbps CBR; cpu-used \(cpuUsed), "
              + "1 thread per encoder; rows interleaved frame by frame")
        let generator = try reporting { try PatternGenerator(kind: .camera, size: sizes[0], frameRate: FrameRate(Self.fps)) }
        let referenceScaler = FrameConverter()
        for index in 0..<frames {
            let frame = generator.frame(at: index)
            var references = [frame]
            for layer in 1..<3 { references.append(try reporting { try referenceScaler.scale(references[layer - 1], to: sizes[layer]) }) }
            // Each frame starts with another row, so no row always runs on a cache the previous one left.
            for offset in rows.indices { try rows[(index + offset) % rows.count].measure(frame, references: references) }
        }

        let base = rows[0]
        let baseMean = mean(base.milliseconds), baseP95 = percentile(base.milliseconds, 0.95)
        print("row                                 mean ms   p95 ms   mean ratio   p95 ratio   kbps f/h/q        PSNR dB f/h/q")
        for row in rows {
            guard row.unavailable == nil else {
                print("\(row.name.padding(35)) unavailable: \(row.unavailable ?? "")")
                continue
            }
            let m = mean(row.milliseconds), p95 = percentile(row.milliseconds, 0.95)
            let seconds = Double(frames) / Double(Self.fps)
            let kbps = row.bytes.map { String(Int((Double($0 * 8) / seconds / 1000).rounded())) }.joined(separator: "/")
            let psnr = row.quality.map { String(format1: $0.psnr) }.joined(separator: "/")
            print("\(row.name.padding(35)) \(String(format2: m).padding(9)) \(String(format2: p95).padding(8)) "
                  + "\(String(format2: m / baseMean).padding(12)) \(String(format2: p95 / baseP95).padding(11)) "
                  + "\(kbps.padding(17)) \(psnr)")
            let short = row.frames.enumerated().filter { $0.element != frames }
            if !short.isEmpty {
                print("    frames out per layer: \(row.frames.map(String.init).joined(separator: "/")) of \(frames)")
            }
        }
        print("time = encode of one captured frame on one thread, the lower layers' libyuv scaling included (drawing, decoding and PSNR not); "
              + "ratio = row / one \(sizes[0]) encode; PSNR of each layer's decoded stream against the captured frame scaled to its size")
    }

    private func mean(_ values: [Double]) -> Double { values.isEmpty ? .nan : values.reduce(0, +) / Double(values.count) }
}
