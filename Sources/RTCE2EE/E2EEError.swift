/// Why a frame could not be encrypted or decrypted. Frames from the network that fail are counted
/// and dropped by their owner; nothing here traps on short, lying or hostile bytes.
public struct E2EEError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A category of failure.
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        let name: String
        /// The frame is shorter than its clear bytes, tag, IV and trailer together.
        public static let tooShort = Kind(name: "too short for an encrypted frame")
        /// The trailer names an IV length other than the 12 bytes AES-GCM uses here.
        public static let badIVLength = Kind(name: "wrong IV length")
        /// The trailer names a key index outside the 16-key ring.
        public static let keyIndexOutOfRange = Kind(name: "key index out of range")
        /// No key is set at the index the frame (or the sender) uses.
        public static let missingKey = Kind(name: "no key at that index")
        /// The tag did not match with the key at that index, nor with any ratchet of it.
        public static let authenticationFailed = Kind(name: "authentication failed")
        /// A key or passphrase that cannot be used (empty, or an index outside the ring).
        public static let invalidKey = Kind(name: "invalid key")
        /// OpenSSL refused an operation.
        public static let cipher = Kind(name: "cipher failure")
        public var description: String { name }
    }

    public let kind: Kind
    /// What was being done, and the detail.
    public let context: String

    public init(_ kind: Kind, _ context: String) {
        self.kind = kind
        self.context = context
    }

    public var description: String { "\(context): \(kind)" }
}
