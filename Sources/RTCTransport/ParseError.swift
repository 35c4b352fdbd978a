/// Why bytes from the network could not be parsed. Parsers in this module throw only this, and
/// never trap on short, lying or hostile input.
public struct ParseError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A category of parse failure.
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        let name: String
        /// The bytes end before the structure does.
        public static let truncated = Kind(name: "truncated")
        /// A field holds a value the format does not allow (wrong version, bad length, ...).
        public static let invalid = Kind(name: "invalid")
        /// The structure is valid but of a kind this parser does not handle.
        public static let unsupported = Kind(name: "unsupported")
        /// A checksum or message integrity check does not match.
        public static let integrity = Kind(name: "integrity check failed")
        public var description: String { name }
    }

    public let kind: Kind
    /// What was being parsed and what was wrong.
    public let context: String

    public init(_ kind: Kind, _ context: String) {
        self.kind = kind
        self.context = context
    }

    public var description: String { "\(context): \(kind)" }
}
