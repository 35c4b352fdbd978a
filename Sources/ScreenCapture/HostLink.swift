import RTCMedia
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The version of the host ↔ sharer link protocol. Both ends say theirs first; a mismatch ends
/// the share with `versionMismatch`.
public let screenShareLinkVersion = 1

/// How the sharer works for the host.
public enum ScreenShareMode: String, Sendable, Hashable, Codable, CaseIterable {
    /// The sharer captures, encodes and joins as `<host>_sub` by itself.
    case standalone
    /// The sharer only captures and hands scaled I420 frames to the host over shared memory; the
    /// host's process publishes them as `<host>_sub` (to keep the sharer under 20 MB).
    case relay
}

/// What the host hands the sharer.
public struct ScreenShareSetup: Sendable, Hashable, Codable {
    public var configuration: ScreenShareConfiguration
    public var mode: ScreenShareMode
    /// `pattern`, `x11[:DISPLAY]`, a `.y4m` path, or `-` (raw BGRA on stdin, with `rawSize`).
    public var source: String
    public var rawSize: VideoSize?
    /// The shared-memory file relay frames go through.
    public var frameRingPath: String?

    public init(configuration: ScreenShareConfiguration, mode: ScreenShareMode = .standalone, source: String = "pattern",
                rawSize: VideoSize? = nil, frameRingPath: String? = nil) {
        self.configuration = configuration
        self.mode = mode
        self.source = source
        self.rawSize = rawSize
        self.frameRingPath = frameRingPath
    }
}

extension VideoSize: Codable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        guard let size = VideoSize(parsing: text) else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a WIDTHxHEIGHT size: \(text)")
        }
        self = size
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

/// One message on the link, either way.
public enum LinkMessage: Sendable, Hashable, Codable {
    // Both ways, first.
    case hello(version: Int)
    // Host → sharer.
    case configure(ScreenShareSetup)
    case start
    case pause
    case resume
    case stop
    // Sharer → host.
    case started
    case paused
    case resumed
    case finished(reason: ScreenShareFinishReason)
    case stats(ScreenShareStats)
    /// Relay mode: a frame is in ring slot `slot`.
    case frame(slot: Int, sequence: Int, width: Int, height: Int, timestampUs: Int64)
}

public struct LinkError: Error, Sendable, Hashable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// A framed message connection over a Unix-domain socket: a 4-byte big-endian length, then that
/// many bytes of a ``LinkCodec`` message (at most 64 KiB). Reads happen on a thread of their own; sends may come from
/// any thread.
public final class LinkConnection: @unchecked Sendable {
    static let maxMessage = 64 * 1024
    private let descriptor: Int32
    private let writeLock = Mutex(())
    private var onMessage: ((LinkMessage) -> Void)?
    private var onClose: ((LinkError?) -> Void)?

    init(descriptor: Int32) { self.descriptor = descriptor }

    deinit { Glibc.close(descriptor) }

    /// Connects to a host listening at `path`.
    public static func connect(path: String) throws(LinkError) -> LinkConnection {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw LinkError("socket() failed: errno \(errno)") }
        var address = try unixAddress(path)
        let status = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard status == 0 else {
            let code = errno
            Glibc.close(fd)
            throw LinkError("cannot connect to the host at \(path): \(String(cString: strerror(code)))")
        }
        return LinkConnection(descriptor: fd)
    }

    static func unixAddress(_ path: String) throws(LinkError) -> sockaddr_un {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { throw LinkError("socket path too long: \(path)") }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return address
    }

    /// Starts reading: `onMessage` for each message, then `onClose` once (nil error: a clean end).
    public func start(onMessage: @escaping (LinkMessage) -> Void, onClose: @escaping (LinkError?) -> Void) {
        self.onMessage = onMessage
        self.onClose = onClose
        let box = Unmanaged.passRetained(self).toOpaque()
        var thread = pthread_t()
        pthread_create(&thread, nil, { argument in
            let connection = Unmanaged<LinkConnection>.fromOpaque(argument!).takeRetainedValue()
            connection.readLoop()
            return nil
        }, box)
        pthread_detach(thread)
    }

    public func send(_ message: LinkMessage) throws(LinkError) {
        let body = LinkCodec.encode(message)
        let length = UInt32(body.count)
        let frame = [UInt8(length >> 24), UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF)] + body
        let delivered = writeLock.withLock { _ in
            var sent = 0
            while sent < frame.count {
                let count = frame.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress! + sent, frame.count - sent, Int32(MSG_NOSIGNAL)) }
                if count < 0 {
                    if errno == EINTR { continue }
                    return false
                }
                sent += count
            }
            return true
        }
        guard delivered else { throw LinkError("the link is closed") }
    }

    /// Ends the connection; the reader sees the end and calls `onClose`.
    public func close() {
        shutdown(descriptor, Int32(SHUT_RDWR))
    }

    private func readExactly(_ count: Int) -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: count)
        var filled = 0
        while filled < count {
            let got = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress! + filled, count - filled, 0) }
            if got == 0 { return nil }
            if got < 0 {
                if errno == EINTR { continue }
                return nil
            }
            filled += got
        }
        return buffer
    }

    private func readLoop() {
        var failure: LinkError?
        while true {
            guard let head = readExactly(4) else { break }
            let length = Int(head[0]) << 24 | Int(head[1]) << 16 | Int(head[2]) << 8 | Int(head[3])
            guard length <= Self.maxMessage else {
                failure = LinkError("a link message of \(length) bytes is over the 64 KiB limit")
                break
            }
            guard let body = readExactly(length) else {
                failure = LinkError("the link ended inside a message")
                break
            }
            let message: LinkMessage
            do {
                message = try LinkCodec.decode(body)
            } catch {
                failure = LinkError("an unreadable link message (\(length) bytes): \(error.message)")
                break
            }
            onMessage?(message)
        }
        shutdown(descriptor, Int32(SHUT_RDWR))
        onClose?(failure)
        onMessage = nil
        onClose = nil
    }
}

/// A listening Unix-domain socket in a directory both processes see (the app-group container).
public final class LinkListener: @unchecked Sendable {
    let path: String
    private let descriptor: Int32

    public init(path: String) throws(LinkError) {
        unlink(path)
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw LinkError("socket() failed: errno \(errno)") }
        var address = try LinkConnection.unixAddress(path)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, listen(fd, 4) == 0 else {
            let code = errno
            Glibc.close(fd)
            throw LinkError("cannot listen at \(path): \(String(cString: strerror(code)))")
        }
        self.path = path
        descriptor = fd
    }

    /// Waits up to `timeoutMs` for the sharer to connect.
    public func accept(timeoutMs: Int32) throws(LinkError) -> LinkConnection {
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, timeoutMs) == 1 else { throw LinkError("no sharer connected within \(timeoutMs) ms") }
        let fd = Glibc.accept(descriptor, nil, nil)
        guard fd >= 0 else { throw LinkError("accept() failed: errno \(errno)") }
        return LinkConnection(descriptor: fd)
    }

    public func close() {
        Glibc.close(descriptor)
        unlink(path)
    }
}
