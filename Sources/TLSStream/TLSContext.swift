internal import COpenSSL

/// A TLS failure: setup (a certificate or key file), the handshake (with the peer certificate's
/// verification result) or the record layer. The message says which, with OpenSSL's reasons.
public struct TLSError: Error, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }

    /// `what`, with the reasons OpenSSL queued on this thread (the queue is emptied).
    static func openSSL(_ what: String) -> TLSError {
        let reasons = OpenSSLErrors.drain()
        return TLSError(reasons.isEmpty ? what : "\(what): \(reasons.joined(separator: "; "))")
    }
}

/// OpenSSL's per-thread error queue, for the messages of TLS and DTLS failures.
public enum OpenSSLErrors {
    /// The reasons queued on this thread, oldest first; the queue is emptied.
    public static func drain() -> [String] {
        var reasons: [String] = []
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            var text = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &text, text.count)
            reasons.append(String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        return reasons
    }
}

/// What a TLS client trusts: the system's roots (Debian's `ca-certificates`), or the certificates
/// of PEM files (a self-signed server, a private CA). The peer's name or IP address is always
/// checked against its certificate.
public struct TLSClientOptions: Sendable, Equatable {
    /// PEM files whose certificates are the only roots trusted; nil: the system's.
    public var trustedCertificateFiles: [String]?

    public init(trustedCertificateFiles: [String]? = nil) {
        self.trustedCertificateFiles = trustedCertificateFiles
    }
}

/// One OpenSSL `SSL_CTX` (TLS 1.2 and up) for clients or for a server, shared by its connections:
/// each gets its own ``TLSHandler`` from ``handler(serverName:)``. OpenSSL's contexts are safe to
/// share across threads once configured.
public final class TLSContext: @unchecked Sendable {
    let context: OpaquePointer
    let isServer: Bool

    private init(server: Bool) throws(TLSError) {
        guard let context = SSL_CTX_new(TLS_method()) else { throw TLSError.openSSL("SSL_CTX_new") }
        self.context = context
        isServer = server
        guard rtc_ssl_ctx_set_min_tls12(context) == 1 else { throw TLSError.openSSL("cannot require TLS 1.2 or later") }
        rtc_ssl_ctx_harden(context)  // no renegotiation; idle connections give their buffers back
    }

    deinit { SSL_CTX_free(context) }

    /// A client context: peers are verified against `options`' roots.
    public static func client(_ options: TLSClientOptions = TLSClientOptions()) throws(TLSError) -> TLSContext {
        let tls = try TLSContext(server: false)
        SSL_CTX_set_verify(tls.context, SSL_VERIFY_PEER, nil)
        if let files = options.trustedCertificateFiles {
            guard !files.isEmpty else { throw TLSError("no trusted certificate file given") }
            for file in files where SSL_CTX_load_verify_locations(tls.context, file, nil) != 1 {
                throw TLSError.openSSL("cannot load trusted certificates from \(file)")
            }
        } else if SSL_CTX_set_default_verify_paths(tls.context) != 1 {
            throw TLSError.openSSL("cannot load the system's trusted certificates")
        }
        return tls
    }

    /// A server context presenting the PEM certificate chain (leaf first) with its PEM private key.
    public static func server(certificateChainFile: String, privateKeyFile: String) throws(TLSError) -> TLSContext {
        let tls = try TLSContext(server: true)
        guard SSL_CTX_use_certificate_chain_file(tls.context, certificateChainFile) == 1 else {
            throw TLSError.openSSL("cannot use the certificate chain \(certificateChainFile)")
        }
        guard SSL_CTX_use_PrivateKey_file(tls.context, privateKeyFile, SSL_FILETYPE_PEM) == 1 else {
            throw TLSError.openSSL("cannot use the private key \(privateKeyFile)")
        }
        guard SSL_CTX_check_private_key(tls.context) == 1 else {
            throw TLSError.openSSL("the private key \(privateKeyFile) does not match the certificate \(certificateChainFile)")
        }
        return tls
    }

    /// A handler for one connection. A client's `serverName` is what the certificate must name: a
    /// host name (also sent as SNI) or an IP address (checked against the certificate's IP entries);
    /// a client without one is refused (it would take any certificate its roots vouch for).
    public func handler(serverName: String? = nil) throws(TLSError) -> TLSHandler {
        guard isServer || !(serverName ?? "").isEmpty else { throw TLSError("a TLS client needs the server's name or address to verify") }
        return try TLSHandler(context: self, serverName: isServer ? nil : serverName)
    }
}
