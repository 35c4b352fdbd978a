import RTCMedia

#if canImport(Glibc)
import Glibc
#endif

/// Relay-mode frames in shared memory: a file in the shared directory, mapped by both processes,
/// with a few slots of packed I420 at most the policy's size. The sharer writes a slot and then
/// names it on the link; the host copies it out at once. Three slots leave the host two frame times.
public final class FrameRing: @unchecked Sendable {
    static let magic: UInt32 = 0x5254_4652  // "RTFR"
    static let headerSize = 64
    public let path: String
    public let slotCount: Int
    public let slotSize: Int
    private let base: UnsafeMutableRawPointer
    private let length: Int
    /// Buffers for frames read out, of the size last read (a new size replaces it).
    private var pool: VideoFramePool?

    /// The host makes the ring for frames of at most `maxWidth` x `maxHeight` (either orientation).
    public static func create(path: String, maxWidth: Int, maxHeight: Int, slots: Int = 3) throws(LinkError) -> FrameRing {
        let side = max(maxWidth, maxHeight)
        let slotSize = side * side * 3 / 2  // room for the long side both ways, rounded up generously
        let length = headerSize + slots * slotSize
        let fd = Glibc.open(path, O_RDWR | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { throw LinkError("cannot create the frame ring at \(path): errno \(errno)") }
        defer { close(fd) }
        guard ftruncate(fd, off_t(length)) == 0 else { throw LinkError("cannot size the frame ring: errno \(errno)") }
        return try FrameRing(path: path, fd: fd, length: length, writing: (slots, slotSize))
    }

    /// The sharer maps the ring the host made.
    public static func open(path: String) throws(LinkError) -> FrameRing {
        let fd = Glibc.open(path, O_RDWR)
        guard fd >= 0 else { throw LinkError("cannot open the frame ring at \(path): errno \(errno)") }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, Int(info.st_size) >= headerSize else { throw LinkError("the frame ring at \(path) is too small") }
        return try FrameRing(path: path, fd: fd, length: Int(info.st_size))
    }

    private init(path: String, fd: Int32, length: Int, writing header: (slots: Int, slotSize: Int)? = nil) throws(LinkError) {
        guard let mapped = mmap(nil, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), mapped != MAP_FAILED else {
            throw LinkError("cannot map the frame ring: errno \(errno)")
        }
        if let header {
            mapped.storeBytes(of: Self.magic, toByteOffset: 0, as: UInt32.self)
            mapped.storeBytes(of: UInt32(header.slots), toByteOffset: 4, as: UInt32.self)
            mapped.storeBytes(of: UInt32(header.slotSize), toByteOffset: 8, as: UInt32.self)
        }
        base = mapped
        self.path = path
        self.length = length
        let header = mapped.load(fromByteOffset: 0, as: UInt32.self)
        if header == Self.magic {
            slotCount = Int(mapped.load(fromByteOffset: 4, as: UInt32.self))
            slotSize = Int(mapped.load(fromByteOffset: 8, as: UInt32.self))
            guard Self.headerSize + slotCount * slotSize <= length else { throw LinkError("the frame ring's header does not fit its file") }
        } else {
            slotCount = 0
            slotSize = 0
        }
    }

    deinit { munmap(base, length) }

    /// Writes an I420 frame into `slot`, packed (rows without padding).
    public func write(_ frame: VideoFrame, slot: Int) throws(LinkError) {
        guard frame.format == .i420, (0..<slotCount).contains(slot) else { throw LinkError("frame ring: bad slot or format") }
        guard frame.buffer.layout.packedByteCount <= slotSize else { throw LinkError("frame ring: \(frame.width)x\(frame.height) is over a slot") }
        var offset = Self.headerSize + slot * slotSize
        for plane in 0..<3 {
            frame.buffer.forEachRow(ofPlane: plane) { _, row in
                (base + offset).copyMemory(from: row.baseAddress!, byteCount: row.count)
                offset += row.count
            }
        }
    }

    /// Copies the frame in `slot` out into a pooled buffer.
    public func read(slot: Int, width: Int, height: Int, timestampUs: Int64) throws(LinkError) -> VideoFrame {
        let size = VideoSize(width: width, height: height)
        guard (0..<slotCount).contains(slot) else { throw LinkError("frame ring: no slot \(slot)") }
        if pool.map({ $0.layout.width != width || $0.layout.height != height }) ?? true {
            guard let made = VideoFramePool(format: .i420, width: width, height: height, capacity: 2) else {
                throw LinkError("frame ring: bad frame size \(size)")
            }
            pool = made
        }
        guard let buffer = pool?.makeBuffer() else { throw LinkError("frame ring: bad frame size \(size)") }
        guard buffer.layout.packedByteCount <= slotSize else { throw LinkError("frame ring: \(size) is over a slot") }
        var offset = Self.headerSize + slot * slotSize
        for plane in 0..<3 {
            buffer.forEachRow(ofPlane: plane) { _, row in
                row.copyMemory(from: UnsafeRawBufferPointer(start: base + offset, count: row.count))
                offset += row.count
            }
        }
        return VideoFrame(buffer: buffer, timestampUs: timestampUs)
    }

    public func remove() { unlink(path) }
}
