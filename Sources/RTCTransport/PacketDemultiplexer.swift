/// What a datagram on a shared media port carries, decided by its first byte
/// ([RFC 7983 §7](https://www.rfc-editor.org/rfc/rfc7983#section-7)).
public enum DatagramKind: Sendable, Hashable {
    case stun
    case zrtp
    case dtls
    case turnChannel
    case rtp
    case rtcp
    case unknown
}

/// Classifies datagrams on one UDP port into STUN, DTLS, RTP and RTCP (RFC 7983, RFC 5761 §4).
public enum PacketDemultiplexer {
    /// Returns the kind of `datagram`; an empty datagram is `.unknown`. Never traps.
    public static func classify(_ datagram: some Collection<UInt8>) -> DatagramKind {
        guard let first = datagram.first else { return .unknown }
        switch first {
        case 0...3: return .stun
        case 16...19: return .zrtp
        case 20...63: return .dtls
        case 64...79: return .turnChannel
        case 128...191:
            // RFC 5761 §4: RTCP packet types 192..223 share the second byte's range with RTP
            // payload types (with the marker bit), so RTCP is told apart by that byte.
            let second = datagram.dropFirst().first ?? 0
            return (192...223).contains(second) ? .rtcp : .rtp
        default: return .unknown
        }
    }

    /// Whether `datagram` is RTP or RTCP (what a congested path may drop; STUN and DTLS it may not).
    public static func isMedia(_ datagram: some Collection<UInt8>) -> Bool {
        let kind = classify(datagram)
        return kind == .rtp || kind == .rtcp
    }
}
