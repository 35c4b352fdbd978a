internal import COpenSSL
import NIOCore

/// The handshake finished: sent down the pipeline as a user event, with the protocol version.
public struct TLSHandshakeCompleted: Sendable, Equatable {
    public let version: String
}

/// TLS on a NIO stream channel, over OpenSSL with two memory BIOs: ciphertext from the socket is
/// written into one, plaintext comes out of `SSL_read`; plaintext written to the channel goes
/// through `SSL_write`, and the other BIO's ciphertext is written to the socket. Writes made before
/// the handshake finishes wait for it (in order, with their promises). A failed handshake (the
/// peer's certificate refused, a plain-text peer) or record is sent down the pipeline as a
/// ``TLSError`` and closes the channel; a close sends close_notify first. On the channel's event loop.
public final class TLSHandler: ChannelDuplexHandler {
    public typealias InboundIn = ByteBuffer
    public typealias InboundOut = ByteBuffer
    public typealias OutboundIn = ByteBuffer
    public typealias OutboundOut = ByteBuffer

    private enum State { case idle, handshaking, open, closed }

    /// Kept for the `SSL_CTX` the connection uses.
    private let tls: TLSContext
    private let ssl: OpaquePointer
    /// Owned by `ssl` (`SSL_set_bio`): ciphertext in, ciphertext out.
    private let inbound: OpaquePointer
    private let outbound: OpaquePointer
    private var state = State.idle
    private var waiting: [(bytes: ByteBuffer, promise: EventLoopPromise<Void>?)] = []
    private var flushWaiting = false
    private var scratch = [UInt8](repeating: 0, count: 16 * 1024)

    /// Everything is set up on locals first: a throw leaves no stored property set, so `deinit`
    /// (which frees the `SSL`) does not run for a half-made handler.
    init(context tls: TLSContext, serverName: String?) throws(TLSError) {
        ERR_clear_error()
        guard let ssl = SSL_new(tls.context) else { throw TLSError.openSSL("SSL_new") }
        guard let inbound = BIO_new(BIO_s_mem()) else {
            SSL_free(ssl)
            throw TLSError.openSSL("BIO_new")
        }
        guard let outbound = BIO_new(BIO_s_mem()) else {
            BIO_free(inbound)
            SSL_free(ssl)
            throw TLSError.openSSL("BIO_new")
        }
        _ = rtc_bio_set_mem_retry(inbound)  // empty means "more to come", not end of stream
        _ = rtc_bio_set_mem_retry(outbound)
        SSL_set_bio(ssl, inbound, outbound)  // the SSL owns both from here on
        if tls.isServer {
            SSL_set_accept_state(ssl)
        } else {
            SSL_set_connect_state(ssl)
            let name = serverName ?? ""
            let checked = Self.isIPAddress(name)
                ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) == 1
                : rtc_ssl_set_sni(ssl, name) == 1 && SSL_set1_host(ssl, name) == 1
            guard !name.isEmpty, checked else {
                SSL_free(ssl)
                ERR_clear_error()
                throw TLSError("cannot verify a server by the name or address '\(name)'")
            }
        }
        (self.tls, self.ssl, self.inbound, self.outbound) = (tls, ssl, inbound, outbound)
    }

    deinit { SSL_free(ssl) }

    /// An IPv4 or IPv6 literal (no brackets), which a certificate names in its IP entries.
    static func isIPAddress(_ name: String) -> Bool {
        name.contains(":") || (!name.isEmpty && name.allSatisfy { $0.isASCII && ($0.isNumber || $0 == ".") })
    }

    // MARK: Inbound

    public func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { start(context) }
    }

    public func handlerRemoved(context: ChannelHandlerContext) {
        state = .closed
        failWaiting(ChannelError.ioOnClosedChannel)
    }

    public func channelActive(context: ChannelHandlerContext) {
        context.fireChannelActive()
        start(context)
    }

    private func start(_ context: ChannelHandlerContext) {
        guard state == .idle else { return }
        state = .handshaking
        if !tls.isServer { advanceHandshake(context) }
    }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard state != .closed else { return }
        let bytes = unwrapInboundIn(data)
        let taken = bytes.withUnsafeReadableBytes { BIO_write(inbound, $0.baseAddress, Int32($0.count)) }
        guard bytes.readableBytes == 0 || Int(taken) == bytes.readableBytes else {
            return fail(context, TLSError.openSSL("cannot buffer \(bytes.readableBytes) bytes of ciphertext"))
        }
        if state == .idle { state = .handshaking }
        if state == .handshaking { advanceHandshake(context) }
        if state == .open { readPlaintext(context) }
    }

    public func channelInactive(context: ChannelHandlerContext) {
        let handshaking = state == .handshaking
        state = .closed
        failWaiting(handshaking ? TLSError("the connection closed during the TLS handshake") : ChannelError.ioOnClosedChannel)
        context.fireChannelInactive()
    }

    private func advanceHandshake(_ context: ChannelHandlerContext) {
        ERR_clear_error()  // SSL_get_error reads the thread's queue: nothing stale may be on it
        let result = SSL_do_handshake(ssl)
        let error = result == 1 ? SSL_ERROR_NONE : SSL_get_error(ssl, result)
        if result != 1, error != SSL_ERROR_WANT_READ, error != SSL_ERROR_WANT_WRITE {
            return fail(context, handshakeError())
        }
        writeCiphertext(context, promise: nil, flush: true)
        // Writing may have run other handlers (a failed flush closes the channel at once).
        guard result == 1, state == .handshaking else { return }
        state = .open
        // What waited goes first, in order (a write made meanwhile queues behind it), then the event.
        while state == .open, !waiting.isEmpty {
            let write = waiting.removeFirst()
            writePlaintext(context, write.bytes, promise: write.promise)
        }
        if state == .open, flushWaiting {
            flushWaiting = false
            context.flush()
        }
        if state == .open { context.fireUserInboundEventTriggered(TLSHandshakeCompleted(version: String(cString: SSL_get_version(ssl)))) }
    }

    /// Why the handshake failed: the verification of the peer's certificate when that is it.
    private func handshakeError() -> TLSError {
        let verify = SSL_get_verify_result(ssl)
        if !tls.isServer, verify != X509_V_OK {
            ERR_clear_error()  // the verification result says it better than the queue
            return TLSError("TLS handshake failed: the server's certificate was refused: \(String(cString: X509_verify_cert_error_string(verify)))")
        }
        return TLSError.openSSL("TLS handshake failed")
    }

    private func readPlaintext(_ context: ChannelHandlerContext) {
        while state == .open {
            ERR_clear_error()
            let count = scratch.withUnsafeMutableBytes { SSL_read(ssl, $0.baseAddress, Int32($0.count)) }
            let error = count > 0 ? SSL_ERROR_NONE : SSL_get_error(ssl, count)
            if count > 0 {
                var plaintext = context.channel.allocator.buffer(capacity: Int(count))
                _ = scratch.withUnsafeBytes { plaintext.writeBytes(UnsafeRawBufferPointer(rebasing: $0.prefix(Int(count)))) }
                context.fireChannelRead(wrapInboundOut(plaintext))
                continue
            }
            switch error {
            case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
                // Post-handshake messages (TLS 1.3 tickets, key updates) may have been answered.
                writeCiphertext(context, promise: nil, flush: true)
            case SSL_ERROR_ZERO_RETURN:
                // The peer's close_notify: answer it and close.
                state = .closed
                SSL_shutdown(ssl)
                ERR_clear_error()
                writeCiphertext(context, promise: nil, flush: true)
                failWaiting(ChannelError.ioOnClosedChannel)
                context.close(promise: nil)
            default:
                fail(context, TLSError.openSSL("TLS record refused"))
            }
            return
        }
    }

    // MARK: Outbound

    public func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let bytes = unwrapOutboundIn(data)
        switch state {
        case .open where waiting.isEmpty: writePlaintext(context, bytes, promise: promise)
        case .open, .idle, .handshaking: waiting.append((bytes, promise))
        case .closed: promise?.fail(ChannelError.ioOnClosedChannel)
        }
    }

    public func flush(context: ChannelHandlerContext) {
        switch state {
        case .open: context.flush()
        case .idle, .handshaking: flushWaiting = true
        case .closed: break
        }
    }

    public func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        if mode == .all, state == .open {
            state = .closed
            ERR_clear_error()
            SSL_shutdown(ssl)  // close_notify
            ERR_clear_error()
            writeCiphertext(context, promise: nil, flush: true)
        }
        if mode == .all {
            state = .closed
            failWaiting(ChannelError.ioOnClosedChannel)
        }
        context.close(mode: mode, promise: promise)
    }

    /// Encrypts `bytes` a record's worth at a time, each record's ciphertext taken out of the BIO
    /// at once (a memory BIO never shrinks: a large write through it in one piece would keep its
    /// size for the connection's life); the promise goes with the last.
    private func writePlaintext(_ context: ChannelHandlerContext, _ bytes: ByteBuffer, promise: EventLoopPromise<Void>?) {
        var rest = bytes
        repeat {
            let slice = min(rest.readableBytes, Self.recordBytes)
            if slice > 0 {
                ERR_clear_error()
                let written = rest.withUnsafeReadableBytes { SSL_write(ssl, $0.baseAddress, Int32(slice)) }
                guard written > 0 else {
                    let error = TLSError.openSSL("TLS write failed")
                    fail(context, error)
                    promise?.fail(error)
                    return
                }
                rest.moveReaderIndex(forwardBy: Int(written))
            }
            writeCiphertext(context, promise: rest.readableBytes == 0 ? promise : nil, flush: false)
        } while rest.readableBytes > 0 && state == .open
        if rest.readableBytes > 0 { promise?.fail(ChannelError.ioOnClosedChannel) }
    }

    /// The most plaintext one TLS record carries.
    static let recordBytes = 16 * 1024

    /// Writes what OpenSSL produced to the socket (the promise goes with it; with nothing to
    /// write it succeeds at once).
    private func writeCiphertext(_ context: ChannelHandlerContext, promise: EventLoopPromise<Void>?, flush: Bool) {
        let pending = Int(rtc_bio_pending(outbound))
        guard pending > 0 else {
            promise?.succeed()
            return
        }
        var ciphertext = context.channel.allocator.buffer(capacity: pending)
        let read = ciphertext.writeWithUnsafeMutableBytes(minimumWritableBytes: pending) { buffer in
            Int(max(0, BIO_read(outbound, buffer.baseAddress, Int32(pending))))
        }
        guard read > 0 else {
            promise?.succeed()
            return
        }
        context.write(wrapOutboundOut(ciphertext), promise: promise)
        if flush { context.flush() }
    }

    private func fail(_ context: ChannelHandlerContext, _ error: TLSError) {
        guard state != .closed else { return }
        state = .closed
        writeCiphertext(context, promise: nil, flush: true)  // the alert, if any
        failWaiting(error)
        context.fireErrorCaught(error)
        context.close(promise: nil)
    }

    private func failWaiting(_ error: any Error) {
        let queued = waiting
        waiting = []
        flushWaiting = false
        for write in queued { write.promise?.fail(error) }
    }
}
