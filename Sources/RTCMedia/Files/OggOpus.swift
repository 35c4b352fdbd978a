/// The identification header of an Ogg Opus stream ([RFC 7845 §5.1](https://www.rfc-editor.org/rfc/rfc7845#section-5.1)).
public struct OpusHead: Sendable, Hashable {
    public var channels: Int
    /// Samples (at 48 kHz) to drop from the start of the decoded output.
    public var preSkip: Int
    /// The sample rate of the original input, for information only (Opus always decodes at 48 kHz here).
    public var inputSampleRate: Int
    /// Gain to apply on output, in Q7.8 dB.
    public var outputGain: Int16
    /// Channel mapping family; only family 0 (mono or stereo) is read and written.
    public var mappingFamily: UInt8

    public init(channels: Int, preSkip: Int, inputSampleRate: Int, outputGain: Int16 = 0, mappingFamily: UInt8 = 0) {
        self.channels = channels
        self.preSkip = preSkip
        self.inputSampleRate = inputSampleRate
        self.outputGain = outputGain
        self.mappingFamily = mappingFamily
    }

    static let magic = Array("OpusHead".utf8)

    init(packet: [UInt8], source: String) throws(MediaFileError) {
        var reader = ByteReader(packet, what: "the OpusHead packet of \(source)")
        guard (try? reader.bytes(8)) == Self.magic else {
            throw MediaFileError(.wrongFormat, "\(source) is an Ogg file but not Ogg Opus (no OpusHead)")
        }
        let version = try reader.u8()
        guard version >> 4 == 0 else {
            throw MediaFileError(.unsupported, "\(source): Ogg Opus version \(version) is not supported")
        }
        channels = Int(try reader.u8())
        preSkip = Int(try reader.u16le())
        inputSampleRate = Int(try reader.u32le())
        outputGain = Int16(bitPattern: try reader.u16le())
        mappingFamily = try reader.u8()
        guard mappingFamily == 0, (1...2).contains(channels) else {
            throw MediaFileError(.unsupported,
                                 "\(source): Opus channel mapping family \(mappingFamily) with \(channels) channels is not supported")
        }
    }

    var packet: [UInt8] {
        var out = Self.magic
        out.append(1)
        out.append(UInt8(channels))
        out.appendLE(UInt16(clamping: preSkip))
        out.appendLE(UInt32(clamping: inputSampleRate))
        out.appendLE(outputGain)
        out.append(mappingFamily)
        return out
    }
}

/// Reads an Ogg Opus file packet by packet, with the header facts needed to trim the decoded audio.
public final class OggOpusReader {
    public let head: OpusHead
    /// The encoder's vendor string from OpusTags.
    public let vendor: String
    private let packets: OggPacketReader
    private let source: String

    /// One audio packet. `granulePosition` is the end, in 48 kHz samples including pre-skip, of the
    /// last packet on its page; the final one tells how much of the last packet to keep.
    public struct Packet: Sendable, Hashable {
        public var data: [UInt8]
        public var granulePosition: Int64?
        public var isLast: Bool
    }

    public convenience init(path: String) throws(MediaFileError) {
        try self.init(input: FileInput(path: path), source: path)
    }

    public init(input: any ByteInput, source: String = "input") throws(MediaFileError) {
        let packets = OggPacketReader(input: input, source: source)
        guard let first = try packets.readPacket() else { throw MediaFileError(.truncated, "\(source) is empty") }
        head = try OpusHead(packet: first.data, source: source)
        guard let tags = try packets.readPacket() else {
            throw MediaFileError(.truncated, "\(source): no OpusTags packet")
        }
        var reader = ByteReader(tags.data, what: "the OpusTags packet of \(source)")
        guard (try? reader.bytes(8)) == Array("OpusTags".utf8) else {
            throw MediaFileError(.corrupt, "\(source): the second packet is not OpusTags")
        }
        let vendorLength = Int(try reader.u32le())
        vendor = String(decoding: try reader.bytes(vendorLength), as: UTF8.self)
        self.packets = packets
        self.source = source
    }

    /// The next audio packet; nil at the end of the stream.
    public func readPacket() throws(MediaFileError) -> Packet? {
        guard let packet = try packets.readPacket() else { return nil }
        return Packet(data: packet.data, granulePosition: packet.granulePosition, isLast: packet.isLastOfStream)
    }
}

/// Writes Opus packets to an Ogg Opus file as they come.
public final class OggOpusWriter {
    public let head: OpusHead
    private let packets: OggPacketWriter
    private var granule: Int64
    private var finished = false

    /// The vendor string written into OpusTags.
    public static let vendor = "swift-rtc"

    public convenience init(path: String, head: OpusHead) throws(MediaFileError) {
        try self.init(output: FileOutput(path: path), head: head)
    }

    public init(output: any ByteOutput, head: OpusHead, serial: UInt32 = 0x5254_4321) throws(MediaFileError) {
        guard (1...2).contains(head.channels), head.mappingFamily == 0 else {
            throw MediaFileError(.invalidArgument, "Ogg Opus writer supports 1 or 2 channels, family 0")
        }
        self.head = head
        packets = OggPacketWriter(output: output, serial: serial)
        granule = Int64(head.preSkip)
        try packets.write(head.packet, granulePosition: 0)
        var tags = Array("OpusTags".utf8)
        tags.appendLE(UInt32(Self.vendor.utf8.count))
        tags.append(contentsOf: Self.vendor.utf8)
        tags.appendLE(UInt32(0))
        try packets.write(tags, granulePosition: 0)
    }

    /// Appends a packet holding `samples` samples per channel at 48 kHz.
    public func write(_ packet: [UInt8], samples: Int) throws(MediaFileError) {
        granule += Int64(samples)
        try packets.write(packet, granulePosition: granule)
    }

    /// Closes the stream. `totalSamples` (48 kHz, per channel) trims padding in the last packet,
    /// so decoders return exactly the input's length.
    public func finish(totalSamples: Int64? = nil) throws(MediaFileError) {
        guard !finished else { return }
        finished = true
        let final = totalSamples.map { min(Int64(head.preSkip) + $0, granule) }
        try packets.finish(finalGranulePosition: final)
    }

    deinit { try? finish() }
}
