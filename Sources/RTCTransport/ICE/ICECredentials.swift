internal import COpenSSL
import NIOCore

/// ICE username fragment and password ([RFC 8839 §5.4](https://www.rfc-editor.org/rfc/rfc8839#section-5.4)).
public struct ICECredentials: Sendable, Hashable {
    public var ufrag: String
    public var pwd: String

    public init(ufrag: String, pwd: String) {
        self.ufrag = ufrag
        self.pwd = pwd
    }

    static let characters = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/")

    /// Fresh random credentials (8-character ufrag, 24-character password), e.g. for an ICE restart.
    public static func random() -> ICECredentials {
        func text(_ count: Int) -> String {
            var bytes = [UInt8](repeating: 0, count: count)
            _ = RAND_bytes(&bytes, Int32(count))
            return String(bytes.map { characters[Int($0) % characters.count] })
        }
        return ICECredentials(ufrag: text(8), pwd: text(24))
    }
}

/// Candidate priorities ([RFC 8445 §5.1.2](https://www.rfc-editor.org/rfc/rfc8445#section-5.1.2)).
public enum ICEPriority {
    /// `2^24 · type preference + 2^8 · local preference + (256 − component)`.
    public static func candidate(typePreference: UInt32 = 126, localPreference: UInt32 = 65535, component: UInt32 = 1) -> UInt32 {
        (typePreference << 24) + (localPreference << 8) + (256 - component)
    }

    /// The PRIORITY a check carries: that of a peer-reflexive candidate (type preference 110).
    public static let peerReflexive = candidate(typePreference: 110)
}

extension STUNAddress {
    /// The STUN form of a NIO socket address; nil for Unix sockets.
    public init?(_ address: SocketAddress) {
        guard let port = address.port else { return nil }
        switch address {
        case .v4(let v4):
            let raw = UInt32(bigEndian: v4.address.sin_addr.s_addr)
            self.init(ip: [UInt8(raw >> 24), UInt8(raw >> 16 & 0xFF), UInt8(raw >> 8 & 0xFF), UInt8(raw & 0xFF)],
                      port: UInt16(port))
        case .v6(let v6):
            let bytes = withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) }
            self.init(ip: bytes, port: UInt16(port))
        default:
            return nil
        }
    }
}
