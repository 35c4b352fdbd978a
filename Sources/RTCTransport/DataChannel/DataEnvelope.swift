/// A message of this SDK's data streams, as it crosses the `_reliable` and `_lossy` data channels:
/// the topic, the uids it is for (none: everyone in the room), the sender (written by the server:
/// what a client puts there is replaced), and the payload. The server reads and rewrites it; the
/// engine writes and reads it. Integers are big-endian.
///
/// ```
/// +---------+-------+-------------+-----------+-----------------+------------------+--------+---------+
/// | version | stream| topic len   | topic     | destination cnt | (len u8, uid)*   | sender | payload |
/// | u8 = 1  | u8    | u16 (≤1024) | UTF-8     | u16 (≤ 256)     | uid 1...255 bytes| len u8 | rest    |
/// +---------+-------+-------------+-----------+-----------------+------------------+ + uid  +---------+
/// ```
public struct DataEnvelope: Sendable, Hashable {
    public var topic: String
    public var destinations: [String]
    /// Empty from a client; the server puts the sender's uid here.
    public var sender: String
    /// The sender's data stream (``createDataStream``'s id; 0 for a message without one).
    public var streamID: UInt8
    public var payload: [UInt8]

    /// The channel labels that carry envelopes: reliable (ordered, retransmitted) and lossy
    /// (unordered, never retransmitted).
    public static let reliableLabel = "_reliable"
    public static let lossyLabel = "_lossy"
    public static let maxTopicBytes = 1024

    /// The channels envelopes travel on, as the SDK opens them.
    public static let reliableChannel = DCEPMessage.DataChannelParameters(label: reliableLabel)
    public static let lossyChannel = DCEPMessage.DataChannelParameters(label: lossyLabel, ordered: false, reliability: .maxRetransmits(0))

    /// Whether a channel of this label carries envelopes.
    public static func isEnvelopeLabel(_ label: String) -> Bool { label == reliableLabel || label == lossyLabel }
    public static let maxDestinations = 256

    public init(topic: String = "", destinations: [String] = [], sender: String = "", streamID: UInt8 = 0, payload: [UInt8]) {
        self.streamID = streamID
        self.topic = topic
        self.destinations = destinations
        self.sender = sender
        self.payload = payload
    }

    public enum ParseError: Error, Sendable, Hashable, CustomStringConvertible {
        case truncated(at: Int)
        case unknownVersion(UInt8)
        case topicTooLong(Int)
        case tooManyDestinations(Int)
        case emptyUID
        case notUTF8

        public var description: String {
            switch self {
            case .truncated(let at): "the envelope ends at byte \(at), before its header does"
            case .unknownVersion(let version): "envelope version \(version) (1 is known)"
            case .topicTooLong(let length): "a topic of \(length) bytes (at most \(DataEnvelope.maxTopicBytes))"
            case .tooManyDestinations(let count): "\(count) destinations (at most \(DataEnvelope.maxDestinations))"
            case .emptyUID: "an empty destination uid"
            case .notUTF8: "a topic or uid that is not UTF-8"
            }
        }
    }

    public init(parsing bytes: [UInt8]) throws(ParseError) {
        var at = 0
        func take(_ count: Int) throws(ParseError) -> ArraySlice<UInt8> {
            guard count >= 0, bytes.count - at >= count else { throw .truncated(at: bytes.count) }
            defer { at += count }
            return bytes[at..<(at + count)]
        }
        func text(_ slice: ArraySlice<UInt8>) throws(ParseError) -> String {
            guard let value = String(validating: slice, as: UTF8.self) else { throw .notUTF8 }
            return value
        }
        let head = try take(2)
        guard head[head.startIndex] == 1 else { throw .unknownVersion(head[head.startIndex]) }
        streamID = head[head.startIndex + 1]
        let topicBytes = try take(2)
        let topicLength = Int(topicBytes[topicBytes.startIndex]) << 8 | Int(topicBytes[topicBytes.startIndex + 1])
        guard topicLength <= Self.maxTopicBytes else { throw .topicTooLong(topicLength) }
        topic = try text(try take(topicLength))
        let countBytes = try take(2)
        let count = Int(countBytes[countBytes.startIndex]) << 8 | Int(countBytes[countBytes.startIndex + 1])
        guard count <= Self.maxDestinations else { throw .tooManyDestinations(count) }
        var destinations: [String] = []
        for _ in 0..<count {
            let length = Int(try take(1).first!)
            guard length > 0 else { throw .emptyUID }
            destinations.append(try text(try take(length)))
        }
        self.destinations = destinations
        sender = try text(try take(Int(try take(1).first!)))
        payload = Array(bytes[at...])
    }

    public var serialized: [UInt8] {
        let topicBytes = Array(topic.utf8.prefix(Self.maxTopicBytes))
        var bytes: [UInt8] = [1, streamID, UInt8(topicBytes.count >> 8), UInt8(topicBytes.count & 0xFF)]
        bytes += topicBytes
        let uids = destinations.prefix(Self.maxDestinations).map { Array($0.utf8.prefix(255)) }.filter { !$0.isEmpty }
        bytes += [UInt8(uids.count >> 8), UInt8(uids.count & 0xFF)]
        for uid in uids { bytes += [UInt8(uid.count)] + uid }
        let from = Array(sender.utf8.prefix(255))
        bytes += [UInt8(from.count)] + from
        return bytes + payload
    }
}
