import Signaling

/// What a LiveKit client says when it opens the signal WebSocket (`GET /rtc?access_token=…`): the
/// token (in the query, or as `Authorization: Bearer`), what to subscribe to, and whether it
/// resumes a session it had (`reconnect=1&sid=PA_…`).
public struct LiveKitConnectRequest: Sendable, Hashable {
    public var token: String
    public var autoSubscribe: Bool
    public var protocolVersion: Int
    public var sdk: String
    public var sdkVersion: String
    /// A resume of `participantSid` (`reconnect=1`), or a new join.
    public var reconnect: Bool
    public var participantSid: String?
    public var adaptiveStream: Bool

    public init(token: String, autoSubscribe: Bool = true, protocolVersion: Int = Int(LiveKitMapping.protocolVersion), sdk: String = "",
                sdkVersion: String = "", reconnect: Bool = false, participantSid: String? = nil, adaptiveStream: Bool = false) {
        self.token = token
        self.autoSubscribe = autoSubscribe
        self.protocolVersion = protocolVersion
        self.sdk = sdk
        self.sdkVersion = sdkVersion
        self.reconnect = reconnect
        self.participantSid = participantSid
        self.adaptiveStream = adaptiveStream
    }

    /// Why a request cannot be a LiveKit connect.
    public struct Problem: Error, Sendable, Hashable, CustomStringConvertible {
        public let reason: String
        public init(_ reason: String) { self.reason = reason }
        public var description: String { reason }
    }

    /// Whether a request to `/rtc` is LiveKit's rather than ours: it carries its token in the URL
    /// or an `Authorization` header (ours sends the token in its first message).
    public static func isLiveKit(uri: String, authorization: String?) -> Bool {
        if let authorization, authorization.lowercased().hasPrefix("bearer ") { return true }
        return query(of: uri).contains { $0.name == "access_token" || $0.name == "protocol" }
    }

    /// Parses the query of `uri` (and the bearer token of `authorization`, which the query's
    /// `access_token` overrides).
    public init(uri: String, authorization: String?) throws(Problem) {
        var values: [String: String] = [:]
        for (name, value) in Self.query(of: uri) where values[name] == nil { values[name] = value }
        var token = values["access_token"] ?? ""
        if token.isEmpty, let authorization, authorization.lowercased().hasPrefix("bearer ") {
            token = String(authorization.dropFirst("bearer ".count)).trimmingSpaces
        }
        guard !token.isEmpty else { throw Problem("no access_token (query) or Authorization: Bearer header") }
        func flag(_ name: String, default value: Bool) throws(Problem) -> Bool {
            guard let text = values[name] else { return value }
            switch text.lowercased() {
            case "1", "true": return true
            case "0", "false": return false
            default: throw Problem("\(name) must be 1, 0, true or false, not \(text.prefix(32))")
            }
        }
        var version = Int(LiveKitMapping.protocolVersion)
        if let text = values["protocol"] {
            guard let parsed = Int(text), (0...1000).contains(parsed) else { throw Problem("protocol must be a number, not \(text.prefix(32))") }
            version = parsed
        }
        self.init(token: token, autoSubscribe: try flag("auto_subscribe", default: true), protocolVersion: version,
                  sdk: String((values["sdk"] ?? "").prefix(32)), sdkVersion: String((values["version"] ?? "").prefix(32)),
                  reconnect: try flag("reconnect", default: false), participantSid: values["sid"].flatMap { $0.isEmpty ? nil : $0 },
                  adaptiveStream: try flag("adaptive_stream", default: false))
        if reconnect, participantSid == nil { throw Problem("reconnect=1 needs the session's sid") }
    }

    static func query(of uri: String) -> [(name: String, value: String)] { URLQuery.pairs(of: uri) }
}

extension String {
    var trimmingSpaces: String {
        String(drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
    }
}
