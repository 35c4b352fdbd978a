#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A source of bytes read front to back: a file, or memory in tests and fuzzing.
public protocol ByteInput: AnyObject {
    /// Reads up to `buffer.count` bytes; fewer only at the end of the input. Returns the count read.
    func read(into buffer: UnsafeMutableRawBufferPointer) throws(MediaFileError) -> Int
}

/// A sink of bytes that can go back to patch a header once the length is known.
public protocol ByteOutput: AnyObject {
    func write(_ bytes: UnsafeRawBufferPointer) throws(MediaFileError)
    /// The current write position.
    var position: Int { get }
    /// Moves the write position; throws when the sink cannot seek (a pipe).
    func seek(to offset: Int) throws(MediaFileError)
    /// Flushes and releases the sink. Further writes fail.
    func close() throws(MediaFileError)
}

extension ByteInput {
    /// Reads exactly `count` bytes. Returns nil when the input is already at its end and
    /// `endAllowed`; throws `.truncated` when it ends part-way. `what` names the item for the message.
    public func readExactly(_ count: Int, what: String, endAllowed: Bool = false) throws(MediaFileError) -> [UInt8]? {
        var bytes = [UInt8](repeating: 0, count: count)
        let got = try bytes.withUnsafeMutableBytes { buffer in
            Result { () throws(MediaFileError) in try readFully(into: buffer) }
        }.get()
        if got == count { return bytes }
        if got == 0 && endAllowed { return nil }
        throw MediaFileError(.truncated, "the file ends inside \(what) (\(got) of \(count) bytes)")
    }

    /// Reads exactly `buffer.count` bytes into `buffer`; returns false at a clean end of input.
    public func readExactly(into buffer: UnsafeMutableRawBufferPointer, what: String) throws(MediaFileError) -> Bool {
        let got = try readFully(into: buffer)
        if got == buffer.count { return true }
        if got == 0 { return false }
        throw MediaFileError(.truncated, "the file ends inside \(what) (\(got) of \(buffer.count) bytes)")
    }

    /// Reads until `buffer` is full or the input ends; returns the count read.
    public func readFully(into buffer: UnsafeMutableRawBufferPointer) throws(MediaFileError) -> Int {
        var total = 0
        while total < buffer.count {
            let got = try read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[total...]))
            if got == 0 { break }
            total += got
        }
        return total
    }

    /// Reads bytes up to and including `terminator`, at most `limit` bytes. Returns nil at a clean end.
    public func readLine(terminator: UInt8 = 0x0A, limit: Int, what: String) throws(MediaFileError) -> [UInt8]? {
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while true {
            let got = try withUnsafeMutableBytes(of: &byte) { buffer in Result { () throws(MediaFileError) in try read(into: buffer) } }.get()
            if got == 0 {
                if line.isEmpty { return nil }
                throw MediaFileError(.truncated, "the file ends inside \(what)")
            }
            if byte == terminator { return line }
            line.append(byte)
            if line.count >= limit {
                throw MediaFileError(.corrupt, "\(what) is longer than \(limit) bytes")
            }
        }
    }

    /// Skips `count` bytes; throws `.truncated` when the input ends first.
    public func skip(_ count: Int, what: String) throws(MediaFileError) {
        var remaining = count
        var scratch = [UInt8](repeating: 0, count: min(count, 64 * 1024))
        while remaining > 0 {
            let step = min(remaining, scratch.count)
            let got = try scratch.withUnsafeMutableBytes { buffer in
                Result { () throws(MediaFileError) in
                    try readFully(into: UnsafeMutableRawBufferPointer(rebasing: buffer[..<step]))
                }
            }.get()
            if got < step { throw MediaFileError(.truncated, "the file ends inside \(what)") }
            remaining -= step
        }
    }
}

extension ByteOutput {
    public func write(_ bytes: [UInt8]) throws(MediaFileError) {
        try bytes.withUnsafeBytes { buffer in Result { () throws(MediaFileError) in try write(buffer) } }.get()
    }
}

/// Reads a file through stdio's buffer.
public final class FileInput: ByteInput {
    private var file: UnsafeMutablePointer<FILE>?
    public let path: String

    /// Opens `path` for reading; throws `.io` with the system's reason when it cannot.
    public init(path: String) throws(MediaFileError) {
        self.path = path
        var info = stat()
        if stat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR {
            throw MediaFileError(.io, "cannot read \(path): it is a directory")
        }
        guard let file = fopen(path, "rb") else {
            throw MediaFileError(.io, "cannot open \(path): \(String(cString: strerror(errno)))")
        }
        self.file = file
    }

    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(MediaFileError) -> Int {
        guard let file, let base = buffer.baseAddress, buffer.count > 0 else { return 0 }
        let got = fread(base, 1, buffer.count, file)
        if got < buffer.count && ferror(file) != 0 {
            throw MediaFileError(.io, "cannot read \(path): \(String(cString: strerror(errno)))")
        }
        return got
    }

    deinit {
        if let file { fclose(file) }
    }
}

/// Writes a file through stdio's buffer.
public final class FileOutput: ByteOutput {
    private var file: UnsafeMutablePointer<FILE>?
    public let path: String
    public private(set) var position = 0

    /// Creates or truncates `path`; throws `.io` with the system's reason when it cannot.
    public init(path: String) throws(MediaFileError) {
        self.path = path
        guard let file = fopen(path, "wb") else {
            throw MediaFileError(.io, "cannot create \(path): \(String(cString: strerror(errno)))")
        }
        self.file = file
    }

    public func write(_ bytes: UnsafeRawBufferPointer) throws(MediaFileError) {
        guard let file else { throw MediaFileError(.io, "cannot write \(path): already closed") }
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        if fwrite(base, 1, bytes.count, file) != bytes.count {
            throw MediaFileError(.io, "cannot write \(path): \(String(cString: strerror(errno)))")
        }
        position += bytes.count
    }

    public func seek(to offset: Int) throws(MediaFileError) {
        guard let file else { throw MediaFileError(.io, "cannot seek in \(path): already closed") }
        if fseeko(file, off_t(offset), SEEK_SET) != 0 {
            throw MediaFileError(.io, "cannot seek in \(path): \(String(cString: strerror(errno)))")
        }
        position = offset
    }

    public func close() throws(MediaFileError) {
        guard let file else { return }
        self.file = nil
        let flushed = fflush(file) == 0
        let closed = fclose(file) == 0
        if !flushed || !closed {
            throw MediaFileError(.io, "cannot finish writing \(path): \(String(cString: strerror(errno)))")
        }
    }

    deinit {
        if let file { fclose(file) }
    }
}

/// Bytes in memory, for tests and fuzzing.
public final class MemoryInput: ByteInput {
    private let bytes: [UInt8]
    private var offset = 0

    public init(_ bytes: [UInt8]) { self.bytes = bytes }

    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(MediaFileError) -> Int {
        let count = min(buffer.count, bytes.count - offset)
        guard count > 0 else { return 0 }
        bytes.withUnsafeBytes { source in
            buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: source[offset..<(offset + count)]))
        }
        offset += count
        return count
    }
}

/// A growable byte array that behaves like a seekable file, for tests.
public final class MemoryOutput: ByteOutput {
    public private(set) var bytes: [UInt8] = []
    public private(set) var position = 0
    public private(set) var isClosed = false

    public init() {}

    public func write(_ source: UnsafeRawBufferPointer) throws(MediaFileError) {
        guard !isClosed else { throw MediaFileError(.io, "cannot write: already closed") }
        let end = position + source.count
        if end > bytes.count { bytes.append(contentsOf: repeatElement(0, count: end - bytes.count)) }
        bytes.withUnsafeMutableBytes { target in
            UnsafeMutableRawBufferPointer(rebasing: target[position..<end]).copyMemory(from: source)
        }
        position = end
    }

    public func seek(to offset: Int) throws(MediaFileError) {
        guard offset >= 0, offset <= bytes.count else { throw MediaFileError(.io, "seek outside the data") }
        position = offset
    }

    public func close() throws(MediaFileError) { isClosed = true }
}

/// Writes a file with plain `pwrite` calls, no user-space buffer: every `write` is one system
/// call, so what a call wrote is in the file (the page cache) even if the process is killed right
/// after, and a frame handed over as one buffer is never split across a crash by a buffer flush.
///
/// A write that fails part-way (a full disk) is cut back: the file is truncated to where that
/// write started, so it never ends inside a unit the caller wrote in one call. `seek` only moves
/// the position the next write goes to (a header patch), and `end` is the file's length so far.
public final class DirectFileOutput: ByteOutput {
    private var descriptor: Int32
    public let path: String
    public private(set) var position = 0
    /// Bytes in the file (the furthest any write reached).
    public private(set) var end = 0

    /// Creates `path`. With `exclusive` the file must not exist yet (`O_EXCL`): throws `.exists`
    /// when it does, so nothing is ever overwritten; without, an existing file is truncated.
    public init(path: String, exclusive: Bool, mode: mode_t = 0o644) throws(MediaFileError) {
        self.path = path
        let flags = O_WRONLY | O_CREAT | O_CLOEXEC | (exclusive ? O_EXCL : O_TRUNC)
        let fd = open(path, flags, mode)
        guard fd >= 0 else {
            let code = errno
            if code == EEXIST { throw MediaFileError(.exists, "cannot create \(path): it already exists") }
            throw Self.error(code, "cannot create \(path)")
        }
        descriptor = fd
    }

    static func error(_ code: Int32, _ what: String) -> MediaFileError {
        let reason = String(cString: strerror(code))
        if code == ENOSPC || code == EDQUOT { return MediaFileError(.noSpace, "\(what): \(reason)") }
        return MediaFileError(.io, "\(what): \(reason)")
    }

    public func write(_ bytes: UnsafeRawBufferPointer) throws(MediaFileError) {
        guard descriptor >= 0 else { throw MediaFileError(.io, "cannot write \(path): already closed") }
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        let start = position
        var done = 0
        while done < bytes.count {
            let wrote = pwrite(descriptor, base + done, bytes.count - done, off_t(start + done))
            if wrote > 0 {
                done += wrote
                continue
            }
            let code = wrote == 0 ? ENOSPC : errno
            if code == EINTR { continue }
            // Cut back a partial append so the file ends at the last whole unit.
            if done > 0 && start + done > end { _ = ftruncate(descriptor, off_t(max(start, end))) }
            throw Self.error(code, "cannot write \(path)")
        }
        position = start + done
        end = max(end, position)
    }

    public func seek(to offset: Int) throws(MediaFileError) {
        guard descriptor >= 0 else { throw MediaFileError(.io, "cannot seek in \(path): already closed") }
        guard offset >= 0 else { throw MediaFileError(.io, "cannot seek in \(path) to \(offset)") }
        position = offset
    }

    public func close() throws(MediaFileError) {
        guard descriptor >= 0 else { return }
        let fd = descriptor
        descriptor = -1
        if closeDescriptor(fd) != 0 { throw Self.error(errno, "cannot finish writing \(path)") }
    }

    deinit {
        if descriptor >= 0 { _ = closeDescriptor(descriptor) }
    }
}

private func closeDescriptor(_ fd: Int32) -> Int32 {
    #if canImport(Glibc)
    Glibc.close(fd)
    #else
    Darwin.close(fd)
    #endif
}
