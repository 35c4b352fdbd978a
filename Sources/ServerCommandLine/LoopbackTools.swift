import Signaling

#if canImport(Glibc)
import Glibc
#endif

/// A TCP port nobody listens on now (bound to 0, then released), and whether one on loopback
/// takes connections.
public enum FreePort {
    /// Whether something listens on 127.0.0.1:`port` (a connect succeeds).
    public static func accepts(_ port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }

    public static func tcp() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw CLIError("no socket") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer -> Bool in
                Glibc.bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        guard bound else { throw CLIError("cannot find a free port") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

/// `GET` over plain HTTP/1.0 with the C socket API, for one Prometheus page: no HTTP client
/// library for one request a run.
public enum PlainHTTP {
    public static func get(_ url: String) throws -> String {
        guard url.hasPrefix("http://") else { throw CLIError("\(url): only http:// URLs") }
        let rest = url.dropFirst("http://".count)
        let authority = rest.split(separator: "/", maxSplits: 1).first.map(String.init) ?? String(rest)
        let path = rest.dropFirst(authority.count).isEmpty ? "/" : String(rest.dropFirst(authority.count))
        guard let (host, port) = SignalingClient.hostAndPort(Substring(authority)) else { throw CLIError("\(url): give HOST:PORT") }
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var found: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &found) == 0, let info = found else { throw CLIError("\(url): cannot resolve \(host)") }
        defer { freeaddrinfo(found) }
        let fd = socket(info.pointee.ai_family, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw CLIError("socket failed") }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 else { throw CLIError("\(url): cannot connect") }
        let request = Array("GET \(path) HTTP/1.0\r\nHost: \(authority)\r\n\r\n".utf8)
        guard send(fd, request, request.count, 0) == request.count else { throw CLIError("\(url): send failed") }
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let got = recv(fd, &buffer, buffer.count, 0)
            guard got > 0 else { break }
            response += buffer[0..<got]
        }
        let text = String(decoding: response, as: UTF8.self)
        guard text.hasPrefix("HTTP/1.") && text.contains(" 200 "), let split = text.range(of: "\r\n\r\n") else {
            throw CLIError("\(url): \(text.prefix(80))")
        }
        return String(text[split.upperBound...])
    }
}
