import RTCMedia

/// One entry point per parser of untrusted bytes. libFuzzer targets (Fuzz/) and the corpus replay
/// tests call the same functions, so a crash found by fuzzing is a failing test once its input is
/// committed. Each entry parses everything it can, and writes back what it parsed where there is
/// a writer, then reads that again: a parser/writer mismatch traps here, on purpose.
public enum FuzzHarness {
    /// Upper bound on the frames/packets read from one input, so a fuzz run stays fast.
    static let itemLimit = 64

    public static func y4m(_ bytes: [UInt8]) {
        guard let reader = try? Y4MReader(input: MemoryInput(bytes)) else { return }
        let output = MemoryOutput()
        guard let writer = try? Y4MWriter(output: output, header: reader.header) else { return }
        var frames = 0
        while frames < itemLimit, let frame = try? reader.readFrame() {
            precondition(frame.width == reader.header.width && frame.height == reader.header.height)
            try! writer.write(frame)
            frames += 1
        }
        try! writer.finish()
        let again = try! Y4MReader(input: MemoryInput(output.bytes))
        var reread = 0
        while try! again.readFrame() != nil { reread += 1 }
        precondition(reread == frames, "Y4M round trip lost frames")
    }

    public static func ivf(_ bytes: [UInt8]) {
        guard let reader = try? IVFReader(input: MemoryInput(bytes)) else { return }
        var frames: [IVFFrame] = []
        while frames.count < itemLimit, let frame = try? reader.readFrame() { frames.append(frame) }
        guard reader.header.width > 0, reader.header.height > 0 else { return }
        let output = MemoryOutput()
        let writer = try! IVFWriter(output: output, header: reader.header)
        for frame in frames { try! writer.write(frame.data, timestamp: frame.timestamp) }
        try! writer.finish()
        let again = try! IVFReader(input: MemoryInput(output.bytes))
        precondition(again.header.frameCount == frames.count)
        for frame in frames { precondition(try! again.readFrame() == frame, "IVF round trip changed a frame") }
    }

    public static func wav(_ bytes: [UInt8]) {
        guard let reader = try? WAVReader(input: MemoryInput(bytes)) else { return }
        let output = MemoryOutput()
        let writer = try! WAVWriter(output: output, sampleRate: reader.format.sampleRate, channels: reader.format.channels)
        var written: [Int16] = []
        var blocks = 0
        while blocks < itemLimit, let frame = try? reader.read(samplesPerChannel: 480) {
            precondition(frame.samples.count % reader.format.channels == 0)
            try! writer.write(frame)
            written += frame.int16Samples
            blocks += 1
        }
        try! writer.finish()
        let again = try! WAVReader(input: MemoryInput(output.bytes))
        var reread: [Int16] = []
        while let frame = try! again.read(samplesPerChannel: 4096) { reread += frame.int16Samples }
        precondition(reread == written, "WAV round trip changed samples")
    }

    public static func ogg(_ bytes: [UInt8]) {
        guard let reader = try? OggOpusReader(input: MemoryInput(bytes)) else { return }
        let output = MemoryOutput()
        let writer = try! OggOpusWriter(output: output, head: reader.head)
        var packets: [[UInt8]] = []
        while packets.count < itemLimit, let packet = try? reader.readPacket() {
            packets.append(packet.data)
            try! writer.write(packet.data, samples: 960)
        }
        try! writer.finish()
        let again = try! OggOpusReader(input: MemoryInput(output.bytes))
        precondition(again.head == reader.head)
        for packet in packets { precondition(try! again.readPacket()?.data == packet, "Ogg round trip changed a packet") }
    }
}
