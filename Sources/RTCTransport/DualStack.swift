import CDatagram
import NIOCore
#if canImport(Glibc)
import Glibc
#endif

/// Addresses on a dual-stack socket: one bound to `::` with IPV6_V6ONLY off sends and receives
/// IPv4 too, as IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`, RFC 4291 §2.5.5.2). Everything above
/// the socket (candidates, ICE, routing, stats) speaks plain IPv4 for those: datagrams coming in are
/// unmapped, and IPv4 destinations are mapped on the way out.
public enum DualStack {
    /// The IPv4 address `address` stands for when it is IPv4-mapped; `address` itself otherwise.
    /// Cheap for everything but a v4-mapped address (on the packet path of a `::` socket).
    public static func unmapped(_ address: SocketAddress) -> SocketAddress {
        guard case .v6(let v6) = address else { return address }
        let ip = v6.address.sin6_addr
        let mapped = withUnsafeBytes(of: ip) { bytes in
            bytes[0..<10].allSatisfy { $0 == 0 } && bytes[10] == 0xFF && bytes[11] == 0xFF
        }
        guard mapped else { return address }
        var v4 = sockaddr_in()
        v4.sin_family = sa_family_t(AF_INET)
        v4.sin_port = v6.address.sin6_port
        withUnsafeBytes(of: ip) { bytes in
            withUnsafeMutableBytes(of: &v4.sin_addr) { out in out.copyBytes(from: bytes[12..<16]) }
        }
        return SocketAddress(v4, host: "")
    }

    /// `address` as a dual-stack IPv6 socket sends to it: an IPv4 address mapped, others unchanged.
    public static func mapped(_ address: SocketAddress) -> SocketAddress {
        guard case .v4(let v4) = address else { return address }
        var v6 = sockaddr_in6()
        var source = v4.address
        rtc_datagram_map_v4(&source, &v6)  // the mapping the send batches use
        return SocketAddress(v6, host: "")
    }
}
