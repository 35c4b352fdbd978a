import NIOCore
import NIOPosix

/// The addresses a socket bound to a wildcard address (`0.0.0.0`, `::`) can be reached at: what
/// a transport offers as host candidates (RFC 8445 §5.1.1.1).
public enum LocalInterfaces {
    public static func isWildcard(_ host: String) -> Bool { host == "0.0.0.0" || host == "::" }

    /// Whether `host` (a name or an address) is this machine's loopback.
    public static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host.hasPrefix("127.") || host == "::1" || host == "[::1]"
    }

    /// The addresses of the interfaces now: IPv4, and IPv6 unless `ipv4Only`; loopback only when
    /// asked; IPv6 link-local addresses (fe80::/10, which need a scope) never. Each once, in the
    /// order the system lists them.
    public static func addresses(includeLoopback: Bool, ipv4Only: Bool) -> [String] {
        guard let devices = try? System.enumerateDevices() else { return includeLoopback ? ["127.0.0.1"] : [] }
        var seen = Set<String>(), out: [String] = []
        for device in devices {
            guard let address = device.address, let ip = address.ipAddress else { continue }
            switch address {
            case .v4:
                if !includeLoopback && ip.hasPrefix("127.") { continue }
            case .v6:
                if ipv4Only || ip == "::1" && !includeLoopback || ip.lowercased().hasPrefix("fe80") { continue }
            default:
                continue
            }
            if seen.insert(ip).inserted { out.append(ip) }
        }
        return out
    }

    /// The candidates of a socket bound to `host` at `port`: `announced` when given (addresses the
    /// socket is reached at from outside, such as a NAT's public address), else every interface
    /// address for a wildcard bind (`0.0.0.0`: IPv4 only), else the bound address itself.
    public static func candidates(boundTo host: String, port: Int, announced: [String], includeLoopback: Bool) -> [SocketAddress] {
        let hosts: [String]
        if !announced.isEmpty {
            hosts = announced
        } else if isWildcard(host) {
            hosts = addresses(includeLoopback: includeLoopback, ipv4Only: host == "0.0.0.0")
        } else {
            hosts = [host]
        }
        return hosts.compactMap { try? SocketAddress(ipAddress: $0, port: port) }
    }
}
