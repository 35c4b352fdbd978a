/// A failure reported as one line on stderr with a non-zero exit, never a trap.
public struct CLIError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
