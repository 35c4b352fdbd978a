internal import CSRTP
import NIOConcurrencyHelpers
import NIOCore

/// The SRTP protection profiles this SDK negotiates in DTLS `use_srtp`
/// ([RFC 5764 §4.1.2](https://www.rfc-editor.org/rfc/rfc5764#section-4.1.2), [RFC 7714 §14.2](https://www.rfc-editor.org/rfc/rfc7714#section-14.2)).
public enum SRTPProfile: UInt16, Sendable, Hashable, CaseIterable {
    case aes128CmSha1_80 = 0x0001
    case aeadAes128Gcm = 0x0007

    /// The OpenSSL name, as `SSL_CTX_set_tlsext_use_srtp` takes it.
    public var openSSLName: String {
        switch self {
        case .aes128CmSha1_80: "SRTP_AES128_CM_SHA1_80"
        case .aeadAes128Gcm: "SRTP_AEAD_AES_128_GCM"
        }
    }

    public var keyLength: Int { 16 }
    public var saltLength: Int { self == .aeadAes128Gcm ? 12 : 14 }
    /// Bytes of keying material DTLS exports for both directions.
    public var keyingMaterialLength: Int { 2 * (keyLength + saltLength) }
}

/// Master keys and salts for both directions, from the DTLS exporter
/// (`client key | server key | client salt | server salt`, RFC 5764 §4.2).
public struct SRTPKeyingMaterial: Sendable, Hashable {
    public var profile: SRTPProfile
    /// Key followed by salt, for what this side sends.
    public var localKeyAndSalt: [UInt8]
    /// Key followed by salt, for what the peer sends.
    public var remoteKeyAndSalt: [UInt8]

    public init(profile: SRTPProfile, localKeyAndSalt: [UInt8], remoteKeyAndSalt: [UInt8]) {
        self.profile = profile
        self.localKeyAndSalt = localKeyAndSalt
        self.remoteKeyAndSalt = remoteKeyAndSalt
    }

    /// Splits exported material; `isClient` says which half is ours.
    public init?(profile: SRTPProfile, exported: [UInt8], isClient: Bool) {
        let k = profile.keyLength, s = profile.saltLength
        guard exported.count == profile.keyingMaterialLength else { return nil }
        let clientKey = exported[0..<k], serverKey = exported[k..<(2 * k)]
        let clientSalt = exported[(2 * k)..<(2 * k + s)], serverSalt = exported[(2 * k + s)..<(2 * k + 2 * s)]
        let client = Array(clientKey + clientSalt), server = Array(serverKey + serverSalt)
        self.init(profile: profile, localKeyAndSalt: isClient ? client : server, remoteKeyAndSalt: isClient ? server : client)
    }
}

/// Why SRTP refused a packet.
public struct SRTPError: Error, Sendable, Hashable, CustomStringConvertible {
    public struct Kind: Hashable, Sendable {
        let name: String
        /// The packet was seen before (or is older than the replay window): dropped.
        public static let replay = Kind(name: "replayed packet")
        /// The authentication tag did not match.
        public static let authentication = Kind(name: "authentication failed")
        /// Anything else libsrtp reports.
        public static let other = Kind(name: "srtp error")
    }

    public let kind: Kind
    public let code: Int

    public var description: String { "\(kind.name) (libsrtp status \(code))" }

    init(status: srtp_err_status_t) {
        code = Int(status.rawValue)
        switch status {
        case srtp_err_status_replay_fail, srtp_err_status_replay_old: kind = .replay
        case srtp_err_status_auth_fail: kind = .authentication
        default: kind = .other
        }
    }
}

/// SRTP and SRTCP protection for one transport: an outbound and an inbound libsrtp2 session,
/// keyed from DTLS, with replay protection. Not thread-safe: use it on the transport's event loop.
public final class SRTPContext {
    public let profile: SRTPProfile
    private var outbound: srtp_t?
    private var inbound: srtp_t?
    /// Packets dropped as replays, and as failing authentication.
    public private(set) var replaysDropped = 0
    public private(set) var authenticationFailures = 0

    /// Bytes the trailer can add (auth tag, SRTCP index).
    static let maxTrailer = Int(SRTP_MAX_TAG_LEN) + 4

    /// The libsrtp2 copy that made the sessions and runs them, and its entry points.
    public let library: SRTPLibrary
    private let api: UnsafeMutablePointer<rtc_srtp_api>

    public init(keys: SRTPKeyingMaterial, replayWindow: Int = 1024, library: SRTPLibrary = .linked) throws(SRTPError) {
        guard let api = library.api else { throw SRTPError(status: srtp_err_status_init_fail) }
        profile = keys.profile
        self.library = library
        self.api = api
        var out: srtp_t?, into: srtp_t?
        var status = keys.localKeyAndSalt.withUnsafeBufferPointer {
            rtc_srtp_api_create(api, &out, Int32(keys.profile.rawValue), $0.baseAddress, 0, UInt(replayWindow))
        }
        guard status == srtp_err_status_ok else { throw SRTPError(status: status) }
        status = keys.remoteKeyAndSalt.withUnsafeBufferPointer {
            rtc_srtp_api_create(api, &into, Int32(keys.profile.rawValue), $0.baseAddress, 1, UInt(replayWindow))
        }
        guard status == srtp_err_status_ok else {
            rtc_srtp_api_dealloc(api, out)
            throw SRTPError(status: status)
        }
        outbound = out
        inbound = into
    }

    deinit {
        if let outbound { rtc_srtp_api_dealloc(api, outbound) }
        if let inbound { rtc_srtp_api_dealloc(api, inbound) }
    }

    public func protectRTP(_ packet: ByteBuffer) throws(SRTPError) -> ByteBuffer {
        try run(packet, grow: true, operation: 0)
    }

    public func unprotectRTP(_ packet: ByteBuffer) throws(SRTPError) -> ByteBuffer {
        try run(packet, grow: false, operation: 1)
    }

    public func protectRTCP(_ packet: ByteBuffer) throws(SRTPError) -> ByteBuffer {
        try run(packet, grow: true, operation: 2)
    }

    public func unprotectRTCP(_ packet: ByteBuffer) throws(SRTPError) -> ByteBuffer {
        try run(packet, grow: false, operation: 3)
    }

    /// `operation` as `rtc_srtp_api_run` takes it: 0 protect RTP, 1 unprotect RTP, 2 protect
    /// RTCP, 3 unprotect RTCP.
    private func run(_ packet: ByteBuffer, grow: Bool, operation: Int32) throws(SRTPError) -> ByteBuffer {
        let session = grow ? outbound : inbound
        var output = ByteBufferAllocator().buffer(capacity: packet.readableBytes + Self.maxTrailer)
        output.writeImmutableBuffer(packet)
        var length = Int32(packet.readableBytes)
        let start = output.readerIndex  // 0: a fresh buffer with room for the trailer
        let result: srtp_err_status_t = output.withVeryUnsafeMutableBytes { raw in
            rtc_srtp_api_run(api, operation, session, raw.baseAddress! + start, &length)
        }
        guard result == srtp_err_status_ok else {
            let error = SRTPError(status: result)
            if error.kind == .replay { replaysDropped += 1 }
            if error.kind == .authentication { authenticationFailures += 1 }
            throw error
        }
        output.moveWriterIndex(to: output.readerIndex + Int(length))
        return output
    }
}

/// One copy of libsrtp2 that ``SRTPContext``s are created and run in: the process's linked copy,
/// or a copy of its own loaded in a separate link-map namespace (`dlmopen`).
///
/// Debian's libsrtp2 is built on NSS, whose AES-GCM opens a softoken session for every packet
/// under locks that the whole process shares: threads protecting packets at once wait for each
/// other (two threads did 0.7-1.2x one in `bench sfu`'s control). Each copy brings its own NSS and locks, so a server gives each
/// media thread its own (``copy(_:)``) and they protect in parallel, as separate processes do.
///
/// A context must be used only through the copy that created it; ``SRTPContext`` keeps it.
/// A copy is best used on one thread (a media thread's loop): each thread that calls into a copy
/// leaves it a small record (NSPR's) when it ends.
///
/// In this file with ``SRTPContext``: the shim's calls into a copy keep a per-thread mark in a
/// `static` of an inline C function, of which each Swift file that calls them gets its own.
public final class SRTPLibrary: Sendable {
    /// Copies after the linked one that a process opens at most: each holds a libc's static TLS
    /// in a reserve that glibc keeps small. Copy `i` past this is copy `1 + (i - 1) % maxCopies`.
    public static let maxCopies = 7

    /// The copy the process linked.
    public static let linked = SRTPLibrary(index: 0, api: {
        let api = UnsafeMutablePointer<rtc_srtp_api>.allocate(capacity: 1)
        api.initialize(to: rtc_srtp_api_linked())
        return srtp_init() == srtp_err_status_ok ? api : nil
    }(), failure: nil)

    private static let copies = NIOLockedValueBox<[Int: SRTPLibrary]>([:])

    /// 0 for the linked copy, else the copy's number.
    public let index: Int
    /// Why this copy could not be loaded (it then runs on the linked one), or nil.
    public let failure: String?
    /// Never freed: a copy lives as long as the process.
    nonisolated(unsafe) let api: UnsafeMutablePointer<rtc_srtp_api>?

    private init(index: Int, api: UnsafeMutablePointer<rtc_srtp_api>?, failure: String?) {
        self.index = index
        self.api = api
        self.failure = failure
    }

    /// Copy `index`: 0 is ``linked``; others are loaded once, on first use, and kept. A copy that
    /// cannot be loaded (no namespace or TLS room left, no `dlmopen`) falls back to the linked
    /// copy and says why in ``failure``.
    public static func copy(_ index: Int) -> SRTPLibrary {
        guard index > 0 else { return linked }
        let number = 1 + (index - 1) % maxCopies
        return copies.withLockedValue { copies in
            if let existing = copies[number] { return existing }
            var message = [CChar](repeating: 0, count: 512)
            let api = rtc_srtp_api_open_copy(Int32(number), &message, message.count)
            let library = api.map { SRTPLibrary(index: number, api: $0, failure: nil) }
                ?? SRTPLibrary(index: 0, api: linked.api,
                               failure: String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
            copies[number] = library
            return library
        }
    }
}
