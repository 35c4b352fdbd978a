import Synchronization

/// Pixel memory for one frame, owned by this object and returned to its ``VideoFramePool`` (or freed)
/// when the last reference goes away.
///
/// A buffer is written once by whoever fills it (a capture source, a decoder, a converter) and read
/// afterwards; it is `Sendable` on that understanding, so a filled frame can cross to a codec thread.
public final class VideoBuffer: @unchecked Sendable {
    /// Format, size and plane layout.
    public let layout: FrameLayout
    let base: UnsafeMutableRawPointer
    private let home: VideoFramePool.Storage?

    init(layout: FrameLayout, base: UnsafeMutableRawPointer, home: VideoFramePool.Storage?) {
        self.layout = layout
        self.base = base
        self.home = home
    }

    /// Allocates a buffer that does not belong to a pool.
    public convenience init(layout: FrameLayout) {
        self.init(layout: layout, base: VideoFramePool.Storage.allocate(layout.byteCount), home: nil)
    }

    deinit {
        if let home {
            home.recycle(base)
        } else {
            base.deallocate()
        }
    }

    /// A pointer to the first byte of plane `index`.
    public func planeBase(_ index: Int) -> UnsafeMutablePointer<UInt8> {
        (base + layout.planes[index].offset).assumingMemoryBound(to: UInt8.self)
    }

    /// The stride of plane `index`, in bytes.
    public func stride(_ index: Int) -> Int { layout.planes[index].stride }

    /// Calls `body` with each row of plane `index` in turn, as a mutable buffer of `rowBytes` bytes.
    public func forEachRow<E: Error>(ofPlane index: Int, _ body: (Int, UnsafeMutableRawBufferPointer) throws(E) -> Void) throws(E) {
        let plane = layout.planes[index]
        for row in 0..<plane.rows {
            try body(row, UnsafeMutableRawBufferPointer(start: base + plane.offset + row * plane.stride,
                                                        count: plane.rowBytes))
        }
    }
}

/// One uncompressed video frame: pixels, rotation and a capture timestamp.
public struct VideoFrame: Sendable {
    /// The pixels.
    public let buffer: VideoBuffer
    /// How the frame must be rotated for display.
    public var rotation: VideoRotation
    /// Capture time in microseconds, on the clock of whoever made the frame.
    public var timestampUs: Int64

    public init(buffer: VideoBuffer, rotation: VideoRotation = .none, timestampUs: Int64) {
        self.buffer = buffer
        self.rotation = rotation
        self.timestampUs = timestampUs
    }

    public var format: PixelFormat { buffer.layout.format }
    public var width: Int { buffer.layout.width }
    public var height: Int { buffer.layout.height }
}

/// A pool of same-sized frame buffers, so steady-state capture and decode allocate nothing.
///
/// Thread-safe: buffers may be taken on one thread and released on another.
public final class VideoFramePool: Sendable {
    /// The layout every buffer of this pool has.
    public let layout: FrameLayout
    let storage: Storage

    /// Makes a pool that keeps at most `capacity` idle buffers for reuse.
    public init(layout: FrameLayout, capacity: Int = 4) {
        self.layout = layout
        self.storage = Storage(byteCount: layout.byteCount, capacity: capacity)
    }

    /// Makes a pool for frames of `format` and size; nil when the size is not valid.
    public convenience init?(format: PixelFormat, width: Int, height: Int, capacity: Int = 4) {
        guard let layout = FrameLayout(format: format, width: width, height: height) else { return nil }
        self.init(layout: layout, capacity: capacity)
    }

    /// Takes an idle buffer, or allocates one when none is idle. Contents are unspecified.
    public func makeBuffer() -> VideoBuffer {
        VideoBuffer(layout: layout, base: storage.take(), home: storage)
    }

    /// How many buffers this pool has allocated over its life (a measure of reuse).
    public var allocationCount: Int { storage.allocationCount }

    final class Storage: Sendable {
        private struct State: ~Copyable {
            /// Idle buffers' addresses (as integers, which are Sendable, unlike pointers).
            var idle: [UInt] = []
            var allocations = 0
        }
        private let state = Mutex(State())
        private let byteCount: Int
        private let capacity: Int

        init(byteCount: Int, capacity: Int) {
            self.byteCount = byteCount
            self.capacity = capacity
        }

        static func allocate(_ byteCount: Int) -> UnsafeMutableRawPointer {
            UnsafeMutableRawPointer.allocate(byteCount: max(byteCount, 1), alignment: FrameLayout.strideAlignment)
        }

        func take() -> UnsafeMutableRawPointer {
            let reused: UInt? = state.withLock { state in
                if let address = state.idle.popLast() { return address }
                state.allocations += 1
                return nil
            }
            if let reused, let pointer = UnsafeMutableRawPointer(bitPattern: reused) { return pointer }
            return Self.allocate(byteCount)
        }

        func recycle(_ pointer: UnsafeMutableRawPointer) {
            let address = UInt(bitPattern: pointer)
            let kept = state.withLock { state in
                guard state.idle.count < capacity else { return false }
                state.idle.append(address)
                return true
            }
            if !kept { pointer.deallocate() }
        }

        var allocationCount: Int { state.withLock { $0.allocations } }

        deinit {
            state.withLock { state in
                for address in state.idle { UnsafeMutableRawPointer(bitPattern: address)?.deallocate() }
                state.idle.removeAll()
            }
        }
    }
}
