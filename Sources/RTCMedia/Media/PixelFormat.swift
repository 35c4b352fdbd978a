/// The pixel layouts a ``VideoFrame`` can hold.
public enum PixelFormat: String, Sendable, Hashable, CaseIterable {
    /// Planar 4:2:0: Y, then U and V at half width and height (rounded up).
    case i420
    /// Semi-planar 4:2:0: Y, then one plane of interleaved U,V pairs (camera and hardware capture).
    case nv12
    /// Packed 8-bit B, G, R, A in memory order (screen capture); libyuv calls it "ARGB".
    case bgra

    /// Number of planes.
    public var planeCount: Int {
        switch self {
        case .i420: 3
        case .nv12: 2
        case .bgra: 1
        }
    }
}

/// Clockwise rotation to apply before display, carried on the wire by the RTP video-orientation
/// extension (3GPP TS 26.114 §7.4.5).
public enum VideoRotation: Int, Sendable, Hashable, CaseIterable {
    case none = 0
    case clockwise90 = 90
    case clockwise180 = 180
    case clockwise270 = 270

    /// True when width and height swap after applying this rotation.
    public var swapsDimensions: Bool { self == .clockwise90 || self == .clockwise270 }
}

/// The memory layout of one plane inside a frame buffer.
public struct PlaneLayout: Sendable, Hashable {
    /// Byte offset of the plane's first row from the start of the buffer.
    public let offset: Int
    /// Bytes from one row to the next (at least `rowBytes`, padded for SIMD).
    public let stride: Int
    /// Meaningful bytes per row.
    public let rowBytes: Int
    /// Number of rows.
    public let rows: Int
}

/// Plane layouts and total size of a frame of a given format and size.
public struct FrameLayout: Sendable, Hashable {
    public let format: PixelFormat
    public let width: Int
    public let height: Int
    public let planes: [PlaneLayout]
    public let byteCount: Int

    /// Row alignment, so that libyuv and libvpx can use aligned SIMD loads.
    public static let strideAlignment = 32

    /// Largest width or height a frame may have (the VP8 bitstream limit is 16383).
    public static let maxDimension = 16383

    /// Computes the layout; returns nil for sizes that are zero, negative or over ``maxDimension``.
    public init?(format: PixelFormat, width: Int, height: Int) {
        guard (1...Self.maxDimension).contains(width), (1...Self.maxDimension).contains(height) else {
            return nil
        }
        let chromaWidth = (width + 1) / 2
        let chromaHeight = (height + 1) / 2
        let shapes: [(rowBytes: Int, rows: Int)]
        switch format {
        case .i420: shapes = [(width, height), (chromaWidth, chromaHeight), (chromaWidth, chromaHeight)]
        case .nv12: shapes = [(width, height), (chromaWidth * 2, chromaHeight)]
        case .bgra: shapes = [(width * 4, height)]
        }
        var offset = 0
        var planes: [PlaneLayout] = []
        for shape in shapes {
            let stride = (shape.rowBytes + Self.strideAlignment - 1) / Self.strideAlignment * Self.strideAlignment
            planes.append(PlaneLayout(offset: offset, stride: stride, rowBytes: shape.rowBytes, rows: shape.rows))
            offset += stride * shape.rows
        }
        self.format = format
        self.width = width
        self.height = height
        self.planes = planes
        self.byteCount = offset
    }

    /// The number of bytes of a tightly packed frame (no row padding), as stored in Y4M files.
    public var packedByteCount: Int { planes.reduce(0) { $0 + $1.rowBytes * $1.rows } }
}
