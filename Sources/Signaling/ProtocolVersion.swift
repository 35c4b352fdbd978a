/// The version of the JSON-over-WebSocket signaling protocol (DESIGN.md §3), sent at join so that
/// the server and older clients can tell what the other understands.
public struct ProtocolVersion: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    public var major: Int
    public var minor: Int

    /// The version this build speaks.
    public static let current = ProtocolVersion(major: 1, minor: 8)

    /// Subscription permissions and connection quality (`setSubscriptionPermission`,
    /// `subscriptionPermission`, `connectionQuality`): sent only to clients that speak it.
    public static let permissionsAndQuality = ProtocolVersion(major: 1, minor: 8)

    public init(major: Int, minor: Int) {
        self.major = major
        self.minor = minor
    }

    /// Parses `"MAJOR.MINOR"`; returns nil for anything else.
    public init?(_ text: String) {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let major = Int(parts[0]), let minor = Int(parts[1]), major >= 0, minor >= 0
        else { return nil }
        self.init(major: major, minor: minor)
    }

    /// Peers with the same major version can talk; minor versions only add optional fields.
    public func isCompatible(with other: ProtocolVersion) -> Bool { major == other.major }

    public static func < (lhs: ProtocolVersion, rhs: ProtocolVersion) -> Bool {
        (lhs.major, lhs.minor) < (rhs.major, rhs.minor)
    }

    public var description: String { "\(major).\(minor)" }
}
