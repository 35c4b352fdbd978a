/// The header extension ids this SDK offers (`a=extmap:<id> <uri>`), by name: the one table of
/// them, which ``SDPCodecs/extensions`` and the senders that write extensions both use. A peer's
/// own ids come from the negotiated session instead (``SessionDescription/extensionID(for:)``).
public enum RTPExtensionID {
    public static let audioLevel: UInt8 = 1
    public static let absSendTime: UInt8 = 2
    public static let transportWideSequence: UInt8 = 3
    public static let mid: UInt8 = 4
    public static let videoOrientation: UInt8 = 5
    /// RFC 8852 stream ids: which simulcast layer a packet (or a repair of one) belongs to.
    public static let rtpStreamID: UInt8 = 10
    public static let repairedRTPStreamID: UInt8 = 11
}

extension SessionDescription {
    /// The id the session maps the header extension `uri` to (``RTPExtensionURI``): the first
    /// `a=extmap` for it in any media section; nil when no section maps it.
    public func extensionID(for uri: String) -> UInt8? {
        media.lazy.flatMap(\.extensionMaps).first { $0.uri == uri }?.id
    }
}
