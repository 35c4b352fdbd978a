internal import CSRTP
import NIOConcurrencyHelpers

/// One copy of libsrtp2 that ``SRTPContext``s are created and run in: the process's linked copy,
/// or a copy of its own loaded in a separate link-map namespace (`dlmopen`).
///
/// Debian's libsrtp2 is built on NSS, whose AES-GCM opens a softoken session for every packet
/// under locks that the whole process shares: threads protecting packets at once wait for each
/// other (two threads do 1.05x one). Each copy brings its own NSS and locks, so a server gives each
/// media thread its own (``copy(_:)``) and they protect in parallel, as separate processes do.
///
/// A context must be used only through the copy that created it; ``SRTPContext`` keeps it.
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
            let api = rtc_srtp_api_open_copy(&message, message.count)
            let library = api.map { SRTPLibrary(index: number, api: $0, failure: nil) }
                ?? SRTPLibrary(index: 0, api: linked.api,
                               failure: String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
            copies[number] = library
            return library
        }
    }
}
