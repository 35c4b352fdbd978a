/// The sample format of a WAV file's `fmt ` chunk.
public struct WAVFormat: Sendable, Hashable {
    /// How samples are stored.
    public enum Encoding: Sendable, Hashable {
        /// Signed little-endian integers (unsigned for 8 bits), of `bitsPerSample` bits.
        case pcm
        /// IEEE float, 32 or 64 bits.
        case float
    }

    public var encoding: Encoding
    public var sampleRate: Int
    public var channels: Int
    public var bitsPerSample: Int

    public init(encoding: Encoding = .pcm, sampleRate: Int, channels: Int, bitsPerSample: Int = 16) {
        self.encoding = encoding
        self.sampleRate = sampleRate
        self.channels = channels
        self.bitsPerSample = bitsPerSample
    }

    /// Bytes per sample frame (one sample of every channel).
    public var blockAlign: Int { channels * bitsPerSample / 8 }

    static let pcmTag: UInt16 = 1
    static let floatTag: UInt16 = 3
    static let extensibleTag: UInt16 = 0xFFFE

    init(chunk: [UInt8], source: String) throws(MediaFileError) {
        var reader = ByteReader(chunk, what: "the WAV fmt chunk of \(source)")
        var tag = try reader.u16le()
        channels = Int(try reader.u16le())
        sampleRate = Int(try reader.u32le())
        try reader.skip(6)  // byte rate, block align: derived, not trusted
        bitsPerSample = Int(try reader.u16le())
        if tag == Self.extensibleTag {
            try reader.skip(2 + 2 + 4)  // cbSize, valid bits, channel mask
            tag = try reader.u16le()    // first two bytes of the sub-format GUID
        }
        switch (tag, bitsPerSample) {
        case (Self.pcmTag, 8), (Self.pcmTag, 16), (Self.pcmTag, 24), (Self.pcmTag, 32): encoding = .pcm
        case (Self.floatTag, 32), (Self.floatTag, 64): encoding = .float
        default:
            throw MediaFileError(.unsupported,
                                 "\(source): WAV format tag \(tag) with \(bitsPerSample) bits is not supported (use PCM or float)")
        }
        guard (1...8).contains(channels) else {
            throw MediaFileError(.unsupported, "\(source): WAV with \(channels) channels is not supported")
        }
        guard (1...384_000).contains(sampleRate) else {
            throw MediaFileError(.corrupt, "\(source): WAV sample rate \(sampleRate) is not valid")
        }
    }
}

/// Reads a WAV (RIFF/WAVE) file in blocks of sample frames.
///
/// 16-bit PCM comes back as `.int16` samples; every other encoding as `.float`.
public final class WAVReader {
    public let format: WAVFormat
    private let input: any ByteInput
    private let source: String
    /// Bytes of sample data left, or nil when the data chunk runs to the end of the file.
    private var remaining: Int?
    private var samplesRead = 0
    /// Set when the file ended before the data chunk's declared length; the next read throws.
    private var endedEarly = false

    public convenience init(path: String) throws(MediaFileError) {
        try self.init(input: FileInput(path: path), source: path)
    }

    public init(input: any ByteInput, source: String = "input") throws(MediaFileError) {
        guard let riff = try input.readExactly(12, what: "the RIFF header of \(source)", endAllowed: true) else {
            throw MediaFileError(.truncated, "\(source) is empty")
        }
        guard riff[0..<4].elementsEqual("RIFF".utf8), riff[8..<12].elementsEqual("WAVE".utf8) else {
            throw MediaFileError(.wrongFormat, "\(source) is not a WAV file (no RIFF/WAVE signature)")
        }
        var format: WAVFormat?
        while true {
            guard let head = try input.readExactly(8, what: "a WAV chunk header in \(source)", endAllowed: true) else {
                throw MediaFileError(.truncated, "\(source): no data chunk in the WAV file")
            }
            var reader = ByteReader(head, what: "a WAV chunk header")
            let id = try reader.bytes(4)
            let size = Int(try reader.u32le())
            if id.elementsEqual("data".utf8) {
                guard let format else { throw MediaFileError(.corrupt, "\(source): the WAV data chunk comes before fmt") }
                self.format = format
                // 0 and 0xFFFFFFFF are written by streaming writers that could not seek back.
                remaining = (size == 0 || size == 0xFFFF_FFFF) ? nil : size
                break
            }
            if id.elementsEqual("fmt ".utf8) {
                guard (16...1024).contains(size) else {
                    throw MediaFileError(.corrupt, "\(source): WAV fmt chunk size \(size) is not valid")
                }
                guard let chunk = try input.readExactly(size, what: "the WAV fmt chunk of \(source)") else {
                    throw MediaFileError(.truncated, "\(source): the file ends inside the fmt chunk")
                }
                format = try WAVFormat(chunk: chunk, source: source)
                if size % 2 == 1 { try input.skip(1, what: "a WAV chunk pad byte in \(source)") }
            } else {
                try input.skip(size + size % 2, what: "a WAV chunk in \(source)")
            }
        }
        self.input = input
        self.source = source
    }

    /// Reads up to `samplesPerChannel` sample frames; nil at the end of the data.
    ///
    /// A final block may be shorter. Throws `.truncated` when the file ends before the length the
    /// data chunk declared, after every whole sample frame before that point has been returned.
    public func read(samplesPerChannel: Int) throws(MediaFileError) -> AudioFrame? {
        if endedEarly {
            throw MediaFileError(.truncated, "\(source): the WAV data ends early, after \(samplesRead) sample frames")
        }
        let block = format.blockAlign
        var wanted = max(samplesPerChannel, 1) * block
        if let remaining { wanted = min(wanted, remaining - remaining % block) }
        guard wanted > 0 else { return nil }
        var bytes = [UInt8](repeating: 0, count: wanted)
        let got = try bytes.withUnsafeMutableBytes { buffer in Result { () throws(MediaFileError) in try input.readFully(into: buffer) } }.get()
        if let remaining {
            self.remaining = remaining - got
            endedEarly = got < wanted
        }
        let whole = got - got % block
        guard whole > 0 else {
            if endedEarly {
                throw MediaFileError(.truncated, "\(source): the WAV data ends early, after \(samplesRead) sample frames")
            }
            return nil  // the end of a data chunk that runs to the end of the file
        }
        let timestamp = Int64(samplesRead) * 1_000_000 / Int64(format.sampleRate)
        samplesRead += whole / block
        return AudioFrame(samples: decode(bytes[..<whole]), sampleRate: format.sampleRate,
                          channels: format.channels, timestampUs: timestamp)
    }

    private func decode(_ bytes: ArraySlice<UInt8>) -> AudioFrame.Samples {
        let width = format.bitsPerSample / 8
        let count = bytes.count / width
        return bytes.withUnsafeBytes { raw -> AudioFrame.Samples in
            func sample<T: FixedWidthInteger>(_ index: Int, as: T.Type) -> T {
                T(littleEndian: raw.loadUnaligned(fromByteOffset: index * width, as: T.self))
            }
            switch (format.encoding, format.bitsPerSample) {
            case (.pcm, 16):
                return .int16((0..<count).map { sample($0, as: Int16.self) })
            case (.pcm, 8):
                return .float((0..<count).map { (Float(raw[$0]) - 128) / 128 })
            case (.pcm, 24):
                return .float((0..<count).map { index in
                    let b = index * 3
                    let value = Int32(bitPattern: UInt32(raw[b]) << 8 | UInt32(raw[b + 1]) << 16 | UInt32(raw[b + 2]) << 24)
                    return Float(value) / 2_147_483_648
                })
            case (.pcm, _):
                return .float((0..<count).map { Float(sample($0, as: Int32.self)) / 2_147_483_648 })
            case (.float, 32):
                return .float((0..<count).map { Float(bitPattern: sample($0, as: UInt32.self)) })
            case (.float, _):
                return .float((0..<count).map { Float(Double(bitPattern: sample($0, as: UInt64.self))) })
            }
        }
    }
}

/// Writes 16-bit PCM WAV files as audio comes; ``finish()`` writes the chunk sizes.
public final class WAVWriter {
    public let format: WAVFormat
    private let output: any ByteOutput
    private var dataBytes = 0
    private var finished = false

    public convenience init(path: String, sampleRate: Int, channels: Int) throws(MediaFileError) {
        try self.init(output: FileOutput(path: path), sampleRate: sampleRate, channels: channels)
    }

    public init(output: any ByteOutput, sampleRate: Int, channels: Int) throws(MediaFileError) {
        guard (1...384_000).contains(sampleRate), (1...8).contains(channels) else {
            throw MediaFileError(.invalidArgument, "WAV with \(channels) channels at \(sampleRate) Hz is not valid")
        }
        format = WAVFormat(encoding: .pcm, sampleRate: sampleRate, channels: channels, bitsPerSample: 16)
        self.output = output
        try output.write(headerBytes(dataSize: 0))
    }

    private func headerBytes(dataSize: Int) -> [UInt8] {
        var out: [UInt8] = []
        out.appendASCII("RIFF")
        out.appendLE(UInt32(clamping: 36 + dataSize))
        out.appendASCII("WAVEfmt ")
        out.appendLE(UInt32(16))
        out.appendLE(WAVFormat.pcmTag)
        out.appendLE(UInt16(format.channels))
        out.appendLE(UInt32(format.sampleRate))
        out.appendLE(UInt32(format.sampleRate * format.blockAlign))
        out.appendLE(UInt16(format.blockAlign))
        out.appendLE(UInt16(16))
        out.appendASCII("data")
        out.appendLE(UInt32(clamping: dataSize))
        return out
    }

    /// Appends interleaved samples with the writer's channel count (float input is clipped to 16 bits).
    public func write(_ frame: AudioFrame) throws(MediaFileError) {
        guard frame.channels == format.channels, frame.sampleRate == format.sampleRate else {
            throw MediaFileError(.invalidArgument,
                                 "WAV writer expects \(format.channels) channels at \(format.sampleRate) Hz, got \(frame.channels) at \(frame.sampleRate)")
        }
        try write(int16: frame.int16Samples)
    }

    /// Appends interleaved 16-bit samples.
    public func write(int16 samples: [Int16]) throws(MediaFileError) {
        guard samples.count % format.channels == 0 else {
            throw MediaFileError(.invalidArgument, "\(samples.count) samples do not divide into \(format.channels) channels")
        }
        var little = samples
        for index in little.indices { little[index] = little[index].littleEndian }
        try little.withUnsafeBytes { buffer in Result { () throws(MediaFileError) in try output.write(buffer) } }.get()
        dataBytes += samples.count * 2
    }

    /// Bytes of sample data written so far.
    public var dataSize: Int { dataBytes }

    /// Writes the current RIFF and data sizes into the header and goes back to the end: a file cut
    /// off later (a killed process) then still declares nearly all of its samples. Call it about
    /// once a second while recording.
    public func updateHeader() throws(MediaFileError) {
        guard !finished else { return }
        try patchHeader()
    }

    private func patchHeader() throws(MediaFileError) {
        let end = output.position
        try output.seek(to: 0)
        try output.write(headerBytes(dataSize: dataBytes))
        try output.seek(to: end)
    }

    /// Writes the RIFF and data sizes and closes the file.
    public func finish() throws(MediaFileError) {
        guard !finished else { return }
        finished = true
        do throws(MediaFileError) {
            try patchHeader()
        } catch {
            try? output.close()
            throw error
        }
        try output.close()
    }

    deinit { try? finish() }
}
