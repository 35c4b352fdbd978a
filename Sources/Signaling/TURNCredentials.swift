#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
internal import COpenSSL

/// Short-lived TURN credentials in the "TURN REST API" form coturn implements (`use-auth-secret`,
/// `static-auth-secret`): the username is `<expiry>:<uid>` (expiry in Unix seconds) and the
/// password is base64(HMAC-SHA1(secret, username)). A TURN server holding the same secret checks
/// them without a database; they stop working at `expiry`.
public enum TURNCredentials {
    public static func make(secret: String, uid: String, now: Int64, ttl: Int64) -> (username: String, credential: String) {
        let username = "\(now + ttl):\(uid)"
        var out = [UInt8](repeating: 0, count: 20)
        var length: UInt32 = 20
        let key = Array(secret.utf8), data = Array(username.utf8)
        _ = HMAC(EVP_sha1(), key, Int32(key.count), data, data.count, &out, &length)
        return (username, Data(out.prefix(Int(length))).base64EncodedString())
    }
}

/// A `turn:`/`turns:`/`stun:` URL of an ICE server (RFC 7064/7065): scheme, host, port and, for
/// TURN, the transport to the server. Parsing never traps; a bad URL is a message.
public struct ICEServerURL: Sendable, Hashable, CustomStringConvertible {
    public enum Scheme: String, Sendable { case stun, stuns, turn, turns }
    /// Why a URL was refused, for a person.
    public struct ParseError: Error, Sendable, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }
    public enum Transport: String, Sendable { case udp, tcp }

    public var scheme: Scheme
    public var host: String
    public var port: Int
    public var transport: Transport

    public init(parsing text: String) throws(ICEServerURL.ParseError) {
        guard let colon = text.firstIndex(of: ":"), let scheme = Scheme(rawValue: String(text[..<colon]).lowercased()) else {
            throw ParseError("\(text): an ICE server URL starts with stun:, stuns:, turn: or turns:")
        }
        var rest = text[text.index(after: colon)...]
        var transport: Transport = scheme == .turns ? .tcp : .udp
        if let query = rest.firstIndex(of: "?") {
            let parameter = rest[rest.index(after: query)...]
            guard parameter.hasPrefix("transport="), let value = Transport(rawValue: String(parameter.dropFirst(10)).lowercased()) else {
                throw ParseError("\(text): the only parameter is transport=udp or transport=tcp")
            }
            transport = value
            rest = rest[..<query]
        }
        var host = Substring(rest), port = scheme == .stuns || scheme == .turns ? 5349 : 3478
        if rest.hasPrefix("["), let close = rest.firstIndex(of: "]") {
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") {
                guard let value = Int(after.dropFirst()), (1...65535).contains(value) else { throw ParseError("\(text): bad port") }
                port = value
            }
        } else if let portColon = rest.lastIndex(of: ":") {
            host = rest[..<portColon]
            guard let value = Int(rest[rest.index(after: portColon)...]), (1...65535).contains(value) else {
                throw ParseError("\(text): bad port")
            }
            port = value
        }
        guard !host.isEmpty, host.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "." || $0 == "-" || $0 == ":" }) else {
            throw ParseError("\(text): no host")
        }
        self.scheme = scheme
        self.host = String(host)
        self.port = port
        self.transport = transport
    }

    public var description: String {
        let shownHost = host.contains(":") ? "[\(host)]" : host
        let query = scheme == .turn || scheme == .turns ? "?transport=\(transport.rawValue)" : ""
        return "\(scheme.rawValue):\(shownHost):\(port)\(query)"
    }
}
