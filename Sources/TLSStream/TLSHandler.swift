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

    init(context tls: TLSContext, serverName: String?) throws(TLSError) {
        guard let ssl = SSL_new(tls.context) else { throw TLSError.openSSL("SSL_new") }
        guard let inbound = BIO_new(BIO_s_mem()), let outbound = BIO_new(BIO_s_mem()) else {
            SSL_free(ssl)
            throw TLSError.openSSL("BIO_new")
        }
        _ = rtc_bio_set_mem_retry(inbound)  // empty means "more to come", not end of stream
        _ = rtc_bio_set_mem_retry(outbound)
        SSL_set_bio(ssl, inbound, outbound)
        (self.tls, self.ssl, self.inbound, self.outbound) = (tls, ssl, inbound, outbound)
        if tls.isServer {
            SSL_set_accept_state(ssl)
            return
        }
        SSL_set_connect_state(ssl)
        guard let serverName, !serverName.isEmpty else { return }
        if Self.isIPAddress(serverName) {
            guard X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), serverName) == 1 else {
                SSL_free(ssl)
                throw TLSError("not an IP address: \(serverName)")
            }
        } else {
            guard rtc_ssl_set_sni(ssl, serverName) == 1, SSL_set1_host(ssl, serverName) == 1 else {
                SSL_free(ssl)
                throw TLSError.openSSL("cannot check the server name \(serverName)")
            }
        }
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
        let result = SSL_do_handshake(ssl)
        writeCiphertext(context, promise: nil, flush: true)
        guard result == 1 else {
            let error = SSL_get_error(ssl, result)
            if error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE { return }
            return fail(context, handshakeError())
        }
        state = .open
        context.fireUserInboundEventTriggered(TLSHandshakeCompleted(version: String(cString: SSL_get_version(ssl))))
        let queued = waiting
        waiting = []
        for write in queued where state == .open { writePlaintext(context, write.bytes, promise: write.promise) }
        if state == .open, flushWaiting || !queued.isEmpty {
            flushWaiting = false
            context.flush()
        }
    }

    /// Why the handshake failed: the verification of the peer's certificate when that is it.
    private func handshakeError() -> TLSError {
        let verify = SSL_get_verify_result(ssl)
        if !tls.isServer, verify != X509_V_OK {
            ERR_clear_error()
            return TLSError("TLS handshake failed: the server's certificate was refused: \(String(cString: X509_verify_cert_error_string(verify)))")
        }
        return TLSError.openSSL("TLS handshake failed")
    }

    private func readPlaintext(_ context: ChannelHandlerContext) {
        while state == .open {
            let count = scratch.withUnsafeMutableBytes { SSL_read(ssl, $0.baseAddress, Int32($0.count)) }
            if count > 0 {
                var plaintext = context.channel.allocator.buffer(capacity: Int(count))
                _ = scratch.withUnsafeBytes { plaintext.writeBytes(UnsafeRawBufferPointer(rebasing: $0.prefix(Int(count)))) }
                context.fireChannelRead(wrapInboundOut(plaintext))
                continue
            }
            switch SSL_get_error(ssl, count) {
            case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
                // Post-handshake messages (TLS 1.3 tickets, key updates) may have been answered.
                writeCiphertext(context, promise: nil, flush: true)
            case SSL_ERROR_ZERO_RETURN:
                // The peer's close_notify: answer it and close.
                state = .closed
                SSL_shutdown(ssl)
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
        case .open: writePlaintext(context, bytes, promise: promise)
        case .idle, .handshaking: waiting.append((bytes, promise))
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
            SSL_shutdown(ssl)  // close_notify
            writeCiphertext(context, promise: nil, flush: true)
        }
        if mode == .all {
            state = .closed
            failWaiting(ChannelError.ioOnClosedChannel)
        }
        context.close(mode: mode, promise: promise)
    }

    private func writePlaintext(_ context: ChannelHandlerContext, _ bytes: ByteBuffer, promise: EventLoopPromise<Void>?) {
        var rest = bytes
        while rest.readableBytes > 0 {
            let written = rest.withUnsafeReadableBytes { SSL_write(ssl, $0.baseAddress, Int32(clamping: $0.count)) }
            guard written > 0 else {
                let error = TLSError.openSSL("TLS write failed")
                promise?.fail(error)
                return fail(context, error)
            }
            rest.moveReaderIndex(forwardBy: Int(written))
        }
        writeCiphertext(context, promise: promise, flush: false)
    }

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
