/// A frame rate as a fraction, as Y4M and IVF store it (30000/1001 for 29.97).
public struct FrameRate: Sendable, Hashable, CustomStringConvertible {
    public let numerator: Int
    public let denominator: Int

    public init(_ numerator: Int, _ denominator: Int = 1) {
        self.numerator = numerator
        self.denominator = denominator
    }

    public var framesPerSecond: Double { Double(numerator) / Double(denominator) }

    /// The duration of one frame in microseconds.
    public var frameDurationUs: Int64 { Int64(denominator) * 1_000_000 / Int64(max(numerator, 1)) }

    public var description: String { denominator == 1 ? "\(numerator)" : "\(numerator)/\(denominator)" }
}

/// The stream header of a YUV4MPEG2 file.
///
/// Format: `YUV4MPEG2 W<w> H<h> F<n>:<d> [I<i>] [A<n>:<d>] [C<colorspace>] [X<ext>]...\n`, then per frame
/// `FRAME[ params]\n` followed by the planes, tightly packed.
public struct Y4MHeader: Sendable, Hashable {
    public var width: Int
    public var height: Int
    public var frameRate: FrameRate
    /// The colorspace tag; one of the 4:2:0 8-bit ones (`420jpeg`, `420mpeg2`, `420paldv`, `420`).
    public var colorspace: String

    public init(width: Int, height: Int, frameRate: FrameRate, colorspace: String = "420jpeg") {
        self.width = width
        self.height = height
        self.frameRate = frameRate
        self.colorspace = colorspace
    }

    static let supportedColorspaces: Set<String> = ["420jpeg", "420mpeg2", "420paldv", "420"]
    static let magic = "YUV4MPEG2"
    static let lineLimit = 1024

    /// Parses the header line (without its newline).
    init(line: [UInt8], source: String) throws(MediaFileError) {
        let text = String(decoding: line, as: UTF8.self)
        let tokens = text.split(separator: " ", omittingEmptySubsequences: true)
        guard tokens.first == Substring(Self.magic) else {
            throw MediaFileError(.wrongFormat, "\(source) is not a Y4M file (no YUV4MPEG2 signature)")
        }
        var width: Int?, height: Int?, rate = FrameRate(30), colorspace = "420jpeg"
        for token in tokens.dropFirst() {
            let value = token.dropFirst()
            switch token.first {
            case "W": width = Int(value)
            case "H": height = Int(value)
            case "F":
                let parts = value.split(separator: ":")
                guard parts.count == 2, let n = Int(parts[0]), let d = Int(parts[1]), n > 0, d > 0,
                      n <= 1_000_000, d <= 1_000_000
                else { throw MediaFileError(.corrupt, "\(source): bad frame rate '\(token)' in the Y4M header") }
                rate = FrameRate(n, d)
            case "C": colorspace = String(value)
            case "I":
                guard value == "p" || value == "?" else {
                    throw MediaFileError(.unsupported, "\(source): interlaced Y4M ('\(token)') is not supported")
                }
            default: continue  // A (aspect) and X (extensions) do not change the pixel layout
            }
        }
        guard let width, let height, width > 0, height > 0,
              width <= FrameLayout.maxDimension, height <= FrameLayout.maxDimension
        else {
            throw MediaFileError(.corrupt, "\(source): the Y4M header has no valid W and H (max \(FrameLayout.maxDimension))")
        }
        guard Self.supportedColorspaces.contains(colorspace) else {
            throw MediaFileError(.unsupported,
                                 "\(source): Y4M colorspace C\(colorspace) is not supported; use 8-bit 4:2:0 (C420jpeg)")
        }
        self.init(width: width, height: height, frameRate: rate, colorspace: colorspace)
    }

    var line: String {
        "\(Self.magic) W\(width) H\(height) F\(frameRate.numerator):\(frameRate.denominator) Ip A1:1 C\(colorspace)\n"
    }
}

/// Reads a Y4M file frame by frame into I420 frames from a pool.
public final class Y4MReader {
    public let header: Y4MHeader
    private let input: any ByteInput
    private let source: String
    private let pool: VideoFramePool
    private var frameIndex = 0

    /// Opens and reads the header of `path`.
    public convenience init(path: String) throws(MediaFileError) {
        try self.init(input: FileInput(path: path), source: path)
    }

    /// Reads the header from `input`; `source` names it in error messages.
    public init(input: any ByteInput, source: String = "input") throws(MediaFileError) {
        let magic = Array(Y4MHeader.magic.utf8)
        let start = try input.readExactly(magic.count, what: "the Y4M signature of \(source)", endAllowed: true) ?? []
        guard start.count == magic.count else { throw MediaFileError(.truncated, "\(source) is empty") }
        guard start == magic else {
            throw MediaFileError(.wrongFormat, "\(source) is not a Y4M file (no YUV4MPEG2 signature)")
        }
        let rest = try input.readLine(limit: Y4MHeader.lineLimit, what: "the Y4M header of \(source)") ?? []
        header = try Y4MHeader(line: start + rest, source: source)
        self.input = input
        self.source = source
        let layout = FrameLayout(format: .i420, width: header.width, height: header.height)!
        pool = VideoFramePool(layout: layout)
    }

    /// Reads the next frame; returns nil at the end of the file.
    public func readFrame() throws(MediaFileError) -> VideoFrame? {
        guard let marker = try input.readLine(limit: Y4MHeader.lineLimit, what: "a Y4M frame header in \(source)") else { return nil }
        guard marker.starts(with: Array("FRAME".utf8)), marker.count == 5 || marker[5] == 0x20 else {
            throw MediaFileError(.corrupt, "\(source): expected FRAME at frame \(frameIndex)")
        }
        let buffer = pool.makeBuffer()
        for plane in 0..<3 {
            try buffer.forEachRow(ofPlane: plane) { _, row throws(MediaFileError) in
                guard try input.readExactly(into: row, what: "frame \(frameIndex) of \(source)") else {
                    throw MediaFileError(.truncated, "\(source): the file ends inside frame \(frameIndex)")
                }
            }
        }
        let timestamp = Int64(frameIndex) * header.frameRate.frameDurationUs
        frameIndex += 1
        return VideoFrame(buffer: buffer, timestampUs: timestamp)
    }
}

/// Writes I420 frames to a Y4M file as they come.
public final class Y4MWriter {
    public let header: Y4MHeader
    private let output: any ByteOutput
    private var finished = false
    public private(set) var framesWritten = 0

    public convenience init(path: String, header: Y4MHeader) throws(MediaFileError) {
        try self.init(output: FileOutput(path: path), header: header)
    }

    public init(output: any ByteOutput, header: Y4MHeader) throws(MediaFileError) {
        guard FrameLayout(format: .i420, width: header.width, height: header.height) != nil else {
            throw MediaFileError(.invalidArgument, "Y4M size \(header.width)x\(header.height) is not valid")
        }
        self.header = header
        self.output = output
        try output.write(Array(header.line.utf8))
    }

    /// Appends one I420 frame of the header's size.
    public func write(_ frame: VideoFrame) throws(MediaFileError) {
        guard frame.format == .i420, frame.width == header.width, frame.height == header.height else {
            throw MediaFileError(.invalidArgument,
                                 "Y4M writer expects I420 \(header.width)x\(header.height), got \(frame.format) \(frame.width)x\(frame.height)")
        }
        try output.write(Array("FRAME\n".utf8))
        for plane in 0..<3 {
            try frame.buffer.forEachRow(ofPlane: plane) { _, row throws(MediaFileError) in
                try output.write(UnsafeRawBufferPointer(row))
            }
        }
        framesWritten += 1
    }

    /// Flushes and closes the file.
    public func finish() throws(MediaFileError) {
        guard !finished else { return }
        finished = true
        try output.close()
    }

    deinit { try? finish() }
}
