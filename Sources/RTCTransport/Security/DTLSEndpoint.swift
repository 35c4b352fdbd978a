internal import COpenSSL
#if canImport(Glibc)
import Glibc
#endif

/// Collects what OpenSSL writes, one datagram per write (a memory BIO would merge a flight into
/// one blob; see ../shared/CLIBS.md).
final class DatagramSink {
    var datagrams: [[UInt8]] = []
}

/// The BIO method that hands each write to a `DatagramSink`; made once, used by every endpoint.
nonisolated(unsafe) private let datagramBIOMethod: OpaquePointer? = {  // immutable after creation
    guard let method = BIO_meth_new(BIO_TYPE_SOURCE_SINK | BIO_get_new_index(), "rtc-datagram") else { return nil }
    BIO_meth_set_write(method) { bio, data, length in
        guard let bio, let data, length >= 0, let context = BIO_get_data(bio) else { return -1 }
        let sink = Unmanaged<DatagramSink>.fromOpaque(context).takeUnretainedValue()
        sink.datagrams.append(Array(UnsafeRawBufferPointer(start: data, count: Int(length))))
        return length
    }
    BIO_meth_set_ctrl(method) { _, command, _, _ in
        // Flush succeeds; nothing is ever pending; MTU comes from SSL_set_mtu (SSL_OP_NO_QUERY_MTU).
        command == BIO_CTRL_FLUSH ? 1 : 0
    }
    BIO_meth_set_create(method) { bio in
        BIO_set_init(bio, 1)
        return 1
    }
    return method
}()

/// One side of a DTLS 1.2 handshake for DTLS-SRTP ([RFC 5764](https://www.rfc-editor.org/rfc/rfc5764)),
/// over datagrams the caller carries: feed received records to ``receive(_:)``, send what comes back.
///
/// Certificates are self-signed and checked against the fingerprint from the peer's SDP. The
/// endpoint negotiates `use_srtp` and exports the SRTP keys. Not thread-safe: one event loop.
public final class DTLSEndpoint {
    public enum Role: Sendable, Hashable {
        /// `a=setup:active`: sends the ClientHello.
        case client
        /// `a=setup:passive`: waits for it.
        case server
    }

    public enum State: Sendable, Hashable {
        case new
        case handshaking
        case connected
        case failed(DTLSError)
        /// The peer sent close_notify, or ``close()`` was called.
        case closed
    }

    public let role: Role
    public private(set) var state: State = .new
    /// Set once connected.
    public private(set) var keyingMaterial: SRTPKeyingMaterial?
    /// The expected peer certificate fingerprint (from its SDP). Nil skips the check (tests only).
    public var remoteFingerprint: SDPFingerprint?

    private let context: OpaquePointer
    private let ssl: OpaquePointer
    private let readBIO: OpaquePointer
    private let sink = DatagramSink()
    private let certificate: DTLSCertificate

    public init(role: Role, certificate: DTLSCertificate, remoteFingerprint: SDPFingerprint?,
                profiles: [SRTPProfile] = [.aeadAes128Gcm, .aes128CmSha1_80], mtu: Int = 1200) throws(DTLSError) {
        self.role = role
        self.certificate = certificate
        self.remoteFingerprint = remoteFingerprint
        guard let method = datagramBIOMethod, let context = SSL_CTX_new(DTLS_method()) else {
            throw DTLSError.fromOpenSSL("SSL_CTX_new")
        }
        var ok = rtc_ssl_ctx_set_min_dtls12(context) == 1
        ok = ok && SSL_CTX_use_certificate(context, certificate.certificate) == 1
        ok = ok && SSL_CTX_use_PrivateKey(context, certificate.key) == 1
        ok = ok && SSL_CTX_set_tlsext_use_srtp(context, profiles.map(\.openSSLName).joined(separator: ":")) == 0
        // Any certificate is accepted during the handshake; the fingerprint is checked after it.
        SSL_CTX_set_verify(context, rtc_verify_peer_flags()) { _, _ in 1 }
        _ = rtc_ssl_ctx_set_read_ahead(context, 1)
        guard ok, let ssl = SSL_new(context) else {
            SSL_CTX_free(context)
            throw DTLSError.fromOpenSSL("DTLS context setup")
        }
        guard let readBIO = BIO_new(BIO_s_mem()), let writeBIO = BIO_new(method) else {
            SSL_free(ssl)
            SSL_CTX_free(context)
            throw DTLSError.fromOpenSSL("BIO setup")
        }
        BIO_ctrl(readBIO, BIO_C_SET_BUF_MEM_EOF_RETURN, -1, nil)  // empty means "retry", not EOF
        BIO_set_data(writeBIO, Unmanaged.passUnretained(sink).toOpaque())
        BIO_up_ref(readBIO)  // kept for writing received datagrams; SSL_set_bio takes one reference
        SSL_set_bio(ssl, readBIO, writeBIO)
        // Flight retransmission (RFC 6347 §4.2.4.1): OpenSSL starts at 1 s, which turns one lost
        // flight into a second-long join. Start at 150 ms and double up to 4 s, as browsers do
        // (the RFC's 1 s is a SHOULD for a first guess; the RTT here is usually tens of ms).
        DTLS_set_timer_cb(ssl) { _, previousUs in previousUs == 0 ? DTLSEndpoint.initialRetransmitUs : min(previousUs * 2, 4_000_000) }
        _ = rtc_ssl_set_mtu(ssl, mtu)
        if role == .client { SSL_set_connect_state(ssl) } else { SSL_set_accept_state(ssl) }
        self.context = context
        self.ssl = ssl
        self.readBIO = readBIO
    }

    /// Application data records read and not yet taken (at most 256 between two takes).
    private var applicationData: [[UInt8]] = []
    /// Where records are read into: kept, not made per datagram (a record is at most 16 KiB).
    private var readScratch = [UInt8](repeating: 0, count: 16_384)

    deinit {
        SSL_free(ssl)  // frees both BIOs' SSL references
        BIO_free(readBIO)
        SSL_CTX_free(context)
    }

    private func drain() -> [[UInt8]] {
        defer { sink.datagrams.removeAll(keepingCapacity: true) }
        return sink.datagrams
    }

    /// Starts the handshake: the client's first flight, nothing for a server.
    public func start() -> [[UInt8]] {
        guard state == .new else { return [] }
        state = .handshaking
        if role == .client { advanceHandshake() }
        return drain()
    }

    /// Feeds one received DTLS datagram; returns the datagrams to send back.
    public func receive(_ datagram: [UInt8]) -> [[UInt8]] {
        switch state {
        case .failed, .closed: return []
        case .new: state = .handshaking
        default: break
        }
        _ = datagram.withUnsafeBytes { BIO_write(readBIO, $0.baseAddress, Int32($0.count)) }
        if state == .handshaking { advanceHandshake() }
        // Connected: application data (SCTP for data channels, RFC 8261), and alerts, close_notify
        // and a retransmitted final flight from the peer. Also right after the handshake: the
        // peer's first SCTP packet can follow its Finished in the same read.
        if state == .connected { readApplicationData() }
        return drain()
    }

    /// Application data the peer sent, one DTLS record each, since the last call (SCTP packets).
    public func takeApplicationData() -> [[UInt8]] {
        defer { applicationData.removeAll() }
        return applicationData
    }

    /// Encrypts one application-data record (an SCTP packet) and returns the datagrams to send;
    /// nothing before the handshake is done or after close.
    public func send(applicationData bytes: [UInt8]) -> [[UInt8]] {
        guard state == .connected, !bytes.isEmpty else { return [] }
        ERR_clear_error()  // SSL_get_error reads the thread's queue: nothing stale may be on it
        let written = bytes.withUnsafeBytes { SSL_write(ssl, $0.baseAddress, Int32($0.count)) }
        if written <= 0 { handleError(SSL_get_error(ssl, written)) }
        return drain()
    }

    private func readApplicationData() {
        while state == .connected {
            ERR_clear_error()
            let read = SSL_read(ssl, &readScratch, Int32(readScratch.count))
            if read <= 0 {
                handleError(SSL_get_error(ssl, read))
                return
            }
            if applicationData.count < 256 { applicationData.append(Array(readScratch[0..<Int(read)])) }
        }
    }

    private func advanceHandshake() {
        ERR_clear_error()
        let result = SSL_do_handshake(ssl)
        if result == 1 {
            finishHandshake()
            return
        }
        handleError(SSL_get_error(ssl, result))
    }

    private func handleError(_ error: Int32) {
        switch error {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
            return
        case SSL_ERROR_ZERO_RETURN:
            state = .closed
        default:
            // A fatal alert also marks the session shut down, but leaves its reason in the queue.
            let reason = DTLSError.openSSLQueue()
            if reason == DTLSError.noDetail && rtc_ssl_received_shutdown(ssl) != 0 {
                state = .closed
            } else {
                state = .failed(DTLSError(.handshake, reason))
            }
        }
    }

    private func finishHandshake() {
        guard let peer = SSL_get1_peer_certificate(ssl) else {
            state = .failed(DTLSError(.handshake, "the peer sent no certificate"))
            return
        }
        let digest = DTLSCertificate.sha256(of: peer)
        X509_free(peer)
        if let expected = remoteFingerprint {
            guard expected.algorithm == "sha-256" else {
                state = .failed(DTLSError(.fingerprintMismatch, "fingerprint algorithm \(expected.algorithm) is not supported"))
                return
            }
            guard digest == expected.digest else {
                let got = digest.map { SDPFingerprint(algorithm: "sha-256", digest: $0).value } ?? "none"
                state = .failed(DTLSError(.fingerprintMismatch, "peer certificate \(got), SDP says \(expected.value)"))
                return
            }
        }
        guard let selected = SSL_get_selected_srtp_profile(ssl),
              let profile = SRTPProfile(rawValue: UInt16(truncatingIfNeeded: selected.pointee.id))
        else {
            state = .failed(DTLSError(.srtp, "no SRTP protection profile in common"))
            return
        }
        var exported = [UInt8](repeating: 0, count: profile.keyingMaterialLength)
        let label = "EXTRACTOR-dtls_srtp"
        guard SSL_export_keying_material(ssl, &exported, exported.count, label, label.utf8.count, nil, 0, 0) == 1,
              let keys = SRTPKeyingMaterial(profile: profile, exported: exported, isClient: role == .client)
        else {
            state = .failed(DTLSError(.srtp, "keying material export failed: \(DTLSError.openSSLQueue())"))
            return
        }
        keyingMaterial = keys
        state = .connected
    }

    /// The first flight retransmission timer, microseconds: 150 ms, or `RTC_DTLS_INITIAL_RETRANSMIT_MS`
    /// (read once; for measuring against OpenSSL's 1 s in `rtc-cli bench join`).
    static let initialRetransmitUs: UInt32 = {
        guard let text = getenv("RTC_DTLS_INITIAL_RETRANSMIT_MS").map({ String(cString: $0) }), let ms = UInt32(text), (10...5000).contains(ms)
        else { return 150_000 }
        return ms * 1000
    }()

    /// Seconds until ``handleTimeout()`` must be called to retransmit, nil when no timer runs.
    public var retransmitDelay: Double? {
        var time = timeval()
        guard state == .handshaking, rtc_dtls_get_timeout(ssl, &time) == 1 else { return nil }
        return Double(time.tv_sec) + Double(time.tv_usec) / 1e6
    }

    /// Retransmits the last flight if its timer expired; fails when OpenSSL gives up.
    public func handleTimeout() -> [[UInt8]] {
        guard state == .handshaking else { return [] }
        if rtc_dtls_handle_timeout(ssl) < 0 {
            state = .failed(DTLSError(.timeout, "no answer after the retransmissions"))
        }
        return drain()
    }

    /// Sends close_notify and closes.
    public func close() -> [[UInt8]] {
        guard state == .connected || state == .handshaking else { return [] }
        _ = SSL_shutdown(ssl)
        state = .closed
        return drain()
    }
}
