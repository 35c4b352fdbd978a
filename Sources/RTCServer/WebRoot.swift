import Foundation
import Signaling

/// The web client's files, served at `/` (`Web/` in the repository, or `--web-root DIR`): plain
/// files read when asked for (they are small; an edit shows on reload), under a root no request
/// path can leave.
public struct WebRoot: Sendable, Hashable {
    public let directory: String

    /// Largest file served.
    static let maxFileSize = 4 << 20

    public init(directory: String) {
        self.directory = directory.hasSuffix("/") ? String(directory.dropLast()) : directory
    }

    /// A directory with an `index.html`, or nil.
    public static func existing(_ directory: String) -> WebRoot? {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directory + "/index.html", isDirectory: &isDirectory), !isDirectory.boolValue
        else { return nil }
        return WebRoot(directory: directory)
    }

    /// One file's bytes and content type.
    public struct File: Sendable, Hashable {
        public let bytes: [UInt8]
        public let contentType: String
    }

    /// The file for a request path (`/` is `index.html`; the query is ignored), or nil when it is
    /// not there or the path is not a plain relative one (no `..`, no hidden names, no odd bytes).
    public func file(forPath requestPath: String) -> File? {
        var path = requestPath.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
        if path.hasSuffix("/") { path += "index.html" }
        let parts = path.split(separator: "/")
        guard !parts.isEmpty, parts.allSatisfy(Self.isPlainName) else { return nil }
        let full = directory + "/" + parts.joined(separator: "/")
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: full),
              attributes[.type] as? FileAttributeType == .typeRegular,
              let size = attributes[.size] as? Int, size <= Self.maxFileSize,
              let data = FileManager.default.contents(atPath: full)
        else { return nil }
        return File(bytes: [UInt8](data), contentType: Self.contentType(of: String(parts.last!)))
    }

    static func isPlainName(_ name: Substring) -> Bool {
        guard !name.isEmpty, !name.hasPrefix("."), name.utf8.count <= 128 else { return false }
        return name.utf8.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ".")
        }
    }

    static func contentType(of name: String) -> String {
        switch name.split(separator: ".").last.map({ $0.lowercased() }) {
        case "html": "text/html; charset=utf-8"
        case "js", "mjs": "text/javascript; charset=utf-8"
        case "css": "text/css; charset=utf-8"
        case "json": "application/json"
        case "svg": "image/svg+xml"
        case "png": "image/png"
        case "ico": "image/x-icon"
        default: "application/octet-stream"
        }
    }
}

/// Tokens for anyone who asks (`GET /dev-token?channel=C&uid=U`), in `--dev` mode only: the web
/// page's URL then needs no token. Every grant, one hour.
public struct DevTokenMinter: Sendable {
    let secret: String
    let clock: @Sendable () -> Int64

    public init(secret: String, clock: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }) {
        self.secret = secret
        self.clock = clock
    }

    /// The token for the query's channel and uid, or the reason there is none.
    func token(query: String) -> Result<String, DevTokenError> {
        var fields: [String: String] = [:]
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1).map { String($0).removingPercentEncoding ?? String($0) }
            if parts.count == 2 { fields[parts[0]] = parts[1] }
        }
        guard let channel = fields["channel"], !channel.isEmpty, channel.utf8.count <= 64,
              let uid = fields["uid"], !uid.isEmpty, uid.utf8.count <= 64
        else { return .failure(DevTokenError(reason: "give channel and uid (1 to 64 bytes each)")) }
        return .success(AccessToken(uid: uid, channel: channel, now: clock(), ttl: 3600).signed(secret: secret))
    }
}

struct DevTokenError: Error {
    let reason: String
}
