/// An error reading or writing a media file (Y4M, IVF, WAV, Ogg Opus).
///
/// `kind` says what went wrong in a way code can test; `message` says it for a person, with the
/// file and the value that was wrong. New kinds can be added without breaking callers.
public struct MediaFileError: Error, Sendable, CustomStringConvertible {
    /// A category of media file error.
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        let name: String
        /// The file could not be opened, created or written by the operating system.
        public static let io = Kind(name: "I/O error")
        /// A write failed because the file system is full (ENOSPC, or EDQUOT over a quota).
        public static let noSpace = Kind(name: "no space left")
        /// A file that must be new already exists (an exclusive create).
        public static let exists = Kind(name: "file exists")
        /// The bytes are not this format at all (wrong magic).
        public static let wrongFormat = Kind(name: "wrong format")
        /// The file is this format but uses a feature this SDK does not read or write.
        public static let unsupported = Kind(name: "unsupported")
        /// The file ends in the middle of a header, frame or page.
        public static let truncated = Kind(name: "truncated")
        /// A header or length field holds an impossible value, or a checksum does not match.
        public static let corrupt = Kind(name: "corrupt")
        /// The caller passed a frame or setting that does not fit the file.
        public static let invalidArgument = Kind(name: "invalid argument")
        public var description: String { name }
    }

    public let kind: Kind
    public let message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }
}

/// An error from a codec, converter or audio processor wrapper, carrying the C library's own
/// error text where there is one.
public struct CodecError: Error, Sendable, CustomStringConvertible {
    /// A category of codec error.
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        let name: String
        /// A setting is out of the range the codec accepts.
        public static let invalidConfiguration = Kind(name: "invalid configuration")
        /// A frame does not match what the codec was configured for.
        public static let invalidInput = Kind(name: "invalid input")
        /// The C library reported a failure.
        public static let library = Kind(name: "library error")
        /// Compressed input that the decoder could not decode.
        public static let corruptBitstream = Kind(name: "corrupt bitstream")
        public var description: String { name }
    }

    public let kind: Kind
    public let message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }
}
