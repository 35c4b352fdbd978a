/// The Data Channel Establishment Protocol's messages
/// ([RFC 8832](https://www.rfc-editor.org/rfc/rfc8832)), carried on the channel's own SCTP stream
/// with payload protocol id 50.
///
/// ```
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |  Message Type |  Channel Type |            Priority           |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                    Reliability Parameter                      |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |         Label Length          |       Protocol Length         |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                  Label (then Protocol), UTF-8                 |
/// ```
public enum DCEPMessage: Sendable, Hashable {
    /// DATA_CHANNEL_OPEN (0x03).
    case open(DataChannelParameters)
    /// DATA_CHANNEL_ACK (0x02).
    case ack

    /// What a data channel is: its label and subprotocol, ordering and reliability, priority.
    public struct DataChannelParameters: Sendable, Hashable {
        public var label: String
        public var `protocol`: String
        public var ordered: Bool
        public var reliability: Reliability
        public var priority: UInt16

        public init(label: String, protocol: String = "", ordered: Bool = true, reliability: Reliability = .reliable, priority: UInt16 = 256) {
            self.label = label
            self.protocol = `protocol`
            self.ordered = ordered
            self.reliability = reliability
            self.priority = priority
        }
    }

    /// Partial reliability ([RFC 8831 §6.1](https://www.rfc-editor.org/rfc/rfc8831#section-6.1)).
    public enum Reliability: Sendable, Hashable {
        case reliable
        /// Given up after this many retransmissions.
        case maxRetransmits(UInt32)
        /// Given up after this many milliseconds.
        case maxPacketLifeTime(UInt32)
    }

    /// The SCTP payload protocol ids of WebRTC data channels (RFC 8831 §8).
    public enum PPID: UInt32, Sendable {
        case dcep = 50, string = 51, binary = 53, emptyString = 56, emptyBinary = 57
    }

    public enum ParseError: Error, Sendable, Hashable {
        case tooShort(Int)
        case unknownType(UInt8)
        case unknownChannelType(UInt8)
        case lengthsPastEnd
        case notUTF8
    }

    public init(parsing bytes: [UInt8]) throws(ParseError) {
        guard let type = bytes.first else { throw .tooShort(0) }
        switch type {
        case 0x02:
            self = .ack
        case 0x03:
            guard bytes.count >= 12 else { throw .tooShort(bytes.count) }
            let channelType = bytes[1]
            let priority = UInt16(bytes[2]) << 8 | UInt16(bytes[3])
            let value = UInt32(bytes[4]) << 24 | UInt32(bytes[5]) << 16 | UInt32(bytes[6]) << 8 | UInt32(bytes[7])
            let labelLength = Int(bytes[8]) << 8 | Int(bytes[9]), protocolLength = Int(bytes[10]) << 8 | Int(bytes[11])
            guard 12 + labelLength + protocolLength <= bytes.count else { throw .lengthsPastEnd }
            guard let label = String(validating: bytes[12..<(12 + labelLength)], as: UTF8.self),
                  let name = String(validating: bytes[(12 + labelLength)..<(12 + labelLength + protocolLength)], as: UTF8.self)
            else { throw .notUTF8 }
            let reliability: Reliability
            switch channelType & 0x7F {
            case 0x00: reliability = .reliable
            case 0x01: reliability = .maxRetransmits(value)
            case 0x02: reliability = .maxPacketLifeTime(value)
            default: throw .unknownChannelType(channelType)
            }
            self = .open(DataChannelParameters(label: label, protocol: name, ordered: channelType & 0x80 == 0,
                                               reliability: reliability, priority: priority))
        default:
            throw .unknownType(type)
        }
    }

    public var serialized: [UInt8] {
        switch self {
        case .ack:
            return [0x02]
        case .open(let parameters):
            var type: UInt8, value: UInt32
            switch parameters.reliability {
            case .reliable: (type, value) = (0x00, 0)
            case .maxRetransmits(let count): (type, value) = (0x01, count)
            case .maxPacketLifeTime(let ms): (type, value) = (0x02, ms)
            }
            if !parameters.ordered { type |= 0x80 }
            let label = Array(parameters.label.utf8.prefix(0xFFFF)), name = Array(parameters.protocol.utf8.prefix(0xFFFF))
            var bytes: [UInt8] = [0x03, type, UInt8(parameters.priority >> 8), UInt8(parameters.priority & 0xFF)]
            bytes += [UInt8(value >> 24), UInt8((value >> 16) & 0xFF), UInt8((value >> 8) & 0xFF), UInt8(value & 0xFF)]
            bytes += [UInt8(label.count >> 8), UInt8(label.count & 0xFF), UInt8(name.count >> 8), UInt8(name.count & 0xFF)]
            return bytes + label + name
        }
    }
}
