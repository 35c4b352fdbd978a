/// The 32-byte header of an IVF file (the container libvpx's tools and ffmpeg use for raw VP8/VP9).
///
/// ```
///  0 "DKIF"   4 version (0)   6 header size (32)   8 fourcc ("VP80")
/// 12 width   14 height   16 timebase denominator   20 timebase numerator   24 frame count   28 unused
/// ```
/// Each frame: 4-byte little-endian size, 8-byte little-endian timestamp (in the timebase), data.
public struct IVFHeader: Sendable, Hashable {
    public var fourcc: String
    public var width: Int
    public var height: Int
    /// Timestamps count in units of `timebaseNumerator / timebaseDenominator` seconds.
    public var timebaseNumerator: Int
    public var timebaseDenominator: Int
    public var frameCount: Int

    public init(fourcc: String = "VP80", width: Int, height: Int, timebaseNumerator: Int = 1,
                timebaseDenominator: Int = 30, frameCount: Int = 0) {
        self.fourcc = fourcc
        self.width = width
        self.height = height
        self.timebaseNumerator = timebaseNumerator
        self.timebaseDenominator = timebaseDenominator
        self.frameCount = frameCount
    }

    static let size = 32
    /// Largest frame the reader accepts; a larger length field is treated as corruption.
    public static let maxFrameSize = 16 << 20

    init(bytes: [UInt8], source: String) throws(MediaFileError) {
        var reader = ByteReader(bytes, what: "the IVF header of \(source)")
        guard try reader.bytes(4) == Array("DKIF".utf8) else {
            throw MediaFileError(.wrongFormat, "\(source) is not an IVF file (no DKIF signature)")
        }
        let version = try reader.u16le()
        let headerSize = Int(try reader.u16le())
        guard version == 0 else { throw MediaFileError(.unsupported, "\(source): IVF version \(version) is not supported") }
        guard headerSize >= Self.size, headerSize <= 1024 else {
            throw MediaFileError(.corrupt, "\(source): IVF header size \(headerSize) is not valid")
        }
        let fourccBytes = try reader.bytes(4)
        fourcc = String(decoding: fourccBytes, as: UTF8.self)
        width = Int(try reader.u16le())
        height = Int(try reader.u16le())
        timebaseDenominator = Int(try reader.u32le())
        timebaseNumerator = Int(try reader.u32le())
        frameCount = Int(try reader.u32le())
        guard timebaseDenominator > 0, timebaseNumerator > 0 else {
            throw MediaFileError(.corrupt, "\(source): IVF timebase \(timebaseNumerator)/\(timebaseDenominator) is not valid")
        }
    }

    var bytes: [UInt8] {
        var out: [UInt8] = []
        out.appendASCII("DKIF")
        out.appendLE(UInt16(0))
        out.appendLE(UInt16(Self.size))
        let code = Array(fourcc.utf8.prefix(4))
        out.append(contentsOf: code + repeatElement(0x20, count: 4 - code.count))
        out.appendLE(UInt16(clamping: width))
        out.appendLE(UInt16(clamping: height))
        out.appendLE(UInt32(clamping: timebaseDenominator))
        out.appendLE(UInt32(clamping: timebaseNumerator))
        out.appendLE(UInt32(clamping: frameCount))
        out.appendLE(UInt32(0))
        return out
    }
}

/// One compressed frame from an IVF file.
public struct IVFFrame: Sendable, Hashable {
    public var data: [UInt8]
    /// Presentation time in the file's timebase.
    public var timestamp: UInt64

    public init(data: [UInt8], timestamp: UInt64) {
        self.data = data
        self.timestamp = timestamp
    }
}

/// Reads an IVF file frame by frame.
public final class IVFReader {
    public let header: IVFHeader
    private let input: any ByteInput
    private let source: String
    private var frameIndex = 0

    public convenience init(path: String) throws(MediaFileError) {
        try self.init(input: FileInput(path: path), source: path)
    }

    public init(input: any ByteInput, source: String = "input") throws(MediaFileError) {
        guard let bytes = try input.readExactly(IVFHeader.size, what: "the IVF header of \(source)", endAllowed: true) else {
            throw MediaFileError(.truncated, "\(source) is empty")
        }
        header = try IVFHeader(bytes: bytes, source: source)
        try input.skip(header.headerSizeExtra(bytes: bytes), what: "the IVF header of \(source)")
        self.input = input
        self.source = source
    }

    /// Reads the next frame; nil at the end of the file.
    public func readFrame() throws(MediaFileError) -> IVFFrame? {
        guard let head = try input.readExactly(12, what: "frame \(frameIndex)'s header in \(source)", endAllowed: true)
        else { return nil }
        var reader = ByteReader(head, what: "an IVF frame header")
        let size = Int(try reader.u32le())
        let timestamp = try reader.u64le()
        guard size <= IVFHeader.maxFrameSize else {
            throw MediaFileError(.corrupt, "\(source): frame \(frameIndex) claims \(size) bytes (limit \(IVFHeader.maxFrameSize))")
        }
        guard let data = try input.readExactly(size, what: "frame \(frameIndex) of \(source)") else {
            throw MediaFileError(.truncated, "\(source): the file ends inside frame \(frameIndex)")
        }
        frameIndex += 1
        return IVFFrame(data: data, timestamp: timestamp)
    }
}

extension IVFHeader {
    /// Bytes of a longer-than-32 header that the reader must skip.
    func headerSizeExtra(bytes: [UInt8]) -> Int {
        Int(UInt16(bytes[6]) | UInt16(bytes[7]) << 8) - Self.size
    }
}

/// Writes compressed frames to an IVF file as they come; ``finish()`` writes the frame count.
public final class IVFWriter {
    public private(set) var header: IVFHeader
    private let output: any ByteOutput
    private var finished = false

    public convenience init(path: String, header: IVFHeader) throws(MediaFileError) {
        try self.init(output: FileOutput(path: path), header: header)
    }

    public init(output: any ByteOutput, header: IVFHeader) throws(MediaFileError) {
        guard header.width > 0, header.height > 0, header.width <= 0xFFFF, header.height <= 0xFFFF,
              header.timebaseNumerator > 0, header.timebaseDenominator > 0
        else { throw MediaFileError(.invalidArgument, "IVF header \(header) is not valid") }
        var initial = header
        initial.frameCount = 0
        self.header = initial
        self.output = output
        try output.write(initial.bytes)
    }

    /// Appends one frame with a timestamp in the header's timebase.
    public func write(_ data: [UInt8], timestamp: UInt64) throws(MediaFileError) {
        guard data.count <= IVFHeader.maxFrameSize else {
            throw MediaFileError(.invalidArgument, "IVF frame of \(data.count) bytes is over the limit")
        }
        // Header and payload in one write: an unbuffered output (``DirectFileOutput``) then never
        // holds a frame header without its payload, whatever happens to the process.
        var bytes: [UInt8] = []
        bytes.reserveCapacity(12 + data.count)
        bytes.appendLE(UInt32(data.count))
        bytes.appendLE(timestamp)
        bytes.append(contentsOf: data)
        try output.write(bytes)
        header.frameCount += 1
    }

    /// Writes the current frame count into the header and goes back to the end: a file cut off
    /// later (a killed process) then still declares nearly all of its frames. Cheap (4 bytes);
    /// call it every second or so while recording.
    public func updateHeader() throws(MediaFileError) {
        guard !finished else { return }
        try patchFrameCount()
    }

    private func patchFrameCount() throws(MediaFileError) {
        let end = output.position
        try output.seek(to: 24)
        var count: [UInt8] = []
        count.appendLE(UInt32(clamping: header.frameCount))
        try output.write(count)
        try output.seek(to: end)
    }

    /// Writes the frame count into the header and closes the file.
    public func finish() throws(MediaFileError) {
        guard !finished else { return }
        finished = true
        do throws(MediaFileError) {
            try patchFrameCount()
        } catch {
            try? output.close()
            throw error
        }
        try output.close()
    }

    deinit { try? finish() }
}
