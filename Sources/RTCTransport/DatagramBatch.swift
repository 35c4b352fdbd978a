import CDatagram
import NIOCore

#if canImport(Glibc)
import Glibc
#endif

/// The UDP datagrams written to one media socket, queued on its event loop and handed to the
/// kernel together, with one `sendmmsg`, at ``flush()`` (or when ``capacity`` are waiting).
///
/// The server fans one packet out to every subscriber leg of a port and flushes once: NIO's own
/// datagram path cost an envelope boxed in `NIOAny`, a trip through the pipeline and a pending
/// write per datagram (its retain and release were a tenth of a media thread's time). Here a
/// datagram costs a slot in a fixed C array (address and iovec) and a reference to its buffer,
/// held until the kernel has it.
///
/// It writes on a duplicate of the socket's descriptor, so a descriptor number NIO has closed and
/// the kernel handed out again is never written to; the duplicate is closed with the channel.
/// A datagram the kernel refuses (a firewall's EPERM, no route, too big) is skipped and counted and
/// the rest still go (NIO closes the whole socket on such an error); a full send buffer drops
/// what is left of the batch, as a congested link would. On the socket's event loop only.
final class DatagramBatch: @unchecked Sendable {
    static let capacity = Int(RTC_DATAGRAM_BATCH_CAPACITY)
    private let batch: OpaquePointer
    private var descriptor: CInt
    /// The buffers the queued datagrams point into, held until they are sent.
    private var held: [ByteBuffer] = []
    /// Buffers of datagrams sent, to be written again (``buffer(minimumCapacity:)``): the server's
    /// fan-out serializes each leg's packet into one of these instead of a new allocation.
    private var spare: [ByteBuffer] = []
    static let spareLimit = 2 * capacity
    /// Sent buffers are kept only once someone has asked for one (the server's fan-out): a client
    /// that serializes its own packets would only hold dead memory.
    private var recycling = false
    /// Datagrams the kernel took, refused one by one, and dropped on a full send buffer.
    private(set) var sent = 0
    private(set) var refused = 0
    private(set) var dropped = 0
    /// The errno of the last refusal.
    private(set) var lastError: CInt = 0

    /// A batch writing on a duplicate of `descriptor`, a UDP socket of `family` (AF_INET, or
    /// AF_INET6 dual-stack). Nil when the descriptor cannot be duplicated.
    init?(duplicating descriptor: CInt, family: CInt) {
        let copy = fcntl(descriptor, F_DUPFD_CLOEXEC, 0)
        guard copy >= 0 else { return nil }
        guard let batch = rtc_datagram_batch_create(family) else {
            Glibc.close(copy)
            return nil
        }
        self.batch = batch
        self.descriptor = copy
        held.reserveCapacity(Self.capacity)
        spare.reserveCapacity(Self.spareLimit)
    }

    deinit {
        if descriptor >= 0 { Glibc.close(descriptor) }
        rtc_datagram_batch_destroy(batch)
    }

    /// Whether the socket is still open here.
    var isOpen: Bool { descriptor >= 0 }

    /// Queues `bytes` for `address`. False (nothing queued) when the socket is closed or cannot
    /// reach the address's family.
    @discardableResult
    func enqueue(_ bytes: ByteBuffer, to address: SocketAddress) -> Bool {
        guard descriptor >= 0 else {
            dropped += 1
            return false
        }
        if held.count == Self.capacity { flush() }
        // The pointer outlives the closure: `held` keeps the storage alive and unchanged until the
        // send (a writer elsewhere gets a copy, as the storage is no longer uniquely referenced).
        let added = bytes.withUnsafeReadableBytes { payload in
            address.withSockAddr { pointer, size in
                rtc_datagram_batch_add(batch, payload.baseAddress, payload.count, pointer, socklen_t(size))
            }
        }
        guard added == 0 else {
            refused += 1
            lastError = EAFNOSUPPORT
            return false
        }
        held.append(bytes)
        return true
    }

    /// Sends what is queued.
    func flush() {
        guard !held.isEmpty else { return }
        let result = rtc_datagram_batch_send(batch, descriptor)
        sent += Int(result.sent)
        refused += Int(result.refused)
        dropped += Int(result.dropped)
        if result.last_error != 0 { lastError = result.last_error }
        if recycling {
            for buffer in held where spare.count < Self.spareLimit { spare.append(buffer) }
        }
        held.removeAll(keepingCapacity: true)
    }

    /// An empty buffer of at least `minimumCapacity` bytes: one of a datagram already sent when
    /// there is one (no allocation when nothing else holds it any more), else a new one.
    func buffer(minimumCapacity: Int) -> ByteBuffer {
        recycling = true
        guard var buffer = spare.popLast() else { return ByteBufferAllocator().buffer(capacity: minimumCapacity) }
        buffer.clear(minimumCapacity: minimumCapacity)
        return buffer
    }

    /// Closes the duplicate descriptor (the channel closed); what is queued is dropped.
    func close() {
        guard descriptor >= 0 else { return }
        dropped += held.count
        held.removeAll(keepingCapacity: true)
        rtc_datagram_batch_clear(batch)
        Glibc.close(descriptor)
        descriptor = -1
    }
}

/// A UDP socket that sends on the media sockets' own path (``DatagramBatch``: queued on its event
/// loop, one sendmmsg per flush) without ICE or SRTP: for tools and benchmarks that want the
/// floor the media path stands on. What it receives is discarded.
public final class UDPBatchSender: Sendable {
    public let channel: Channel
    private let batch: DatagramBatch

    private init(_ socket: MediaSocket) {
        channel = socket.channel
        batch = socket.batch
    }

    public static func bind(host: String, port: Int = 0, group: EventLoopGroup) async throws -> UDPBatchSender {
        try await UDPBatchSender(bindMediaSocket(host: host, port: port, group: group, handler: InboundHandler()))
    }

    /// Datagrams sent, and dropped on a full send buffer or device queue, so far. On the event loop.
    public var countsOnLoop: (sent: Int, dropped: Int) { (batch.sent, batch.dropped) }

    /// Queues `bytes` for `address`, and sends what is queued when `flush`. On the event loop.
    public func sendOnLoop(_ bytes: ByteBuffer, to address: SocketAddress, flush: Bool) {
        channel.eventLoop.preconditionInEventLoop()
        batch.enqueue(bytes, to: address)
        if flush { batch.flush() }
    }

    /// An empty buffer, one of a datagram already sent when there is one. On the event loop.
    public func bufferOnLoop(minimumCapacity: Int) -> ByteBuffer { batch.buffer(minimumCapacity: minimumCapacity) }

    public func close() async throws {
        try await channel.eventLoop.submit { self.batch.close() }.get()
        try await channel.close()
    }
}
