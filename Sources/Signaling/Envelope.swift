#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A protocol error: a stable numeric code (see docs/protocol.md) and a reason for people.
public struct SignalingError: Error, Codable, Sendable, Hashable, CustomStringConvertible {
    public struct Code: RawRepresentable, Codable, Sendable, Hashable {
        public var rawValue: Int
        public init(rawValue: Int) { self.rawValue = rawValue }

        // Messages
        public static let malformedMessage = Code(rawValue: 1001)
        public static let unknownMessageType = Code(rawValue: 1002)
        public static let messageTooLarge = Code(rawValue: 1003)
        public static let notJoined = Code(rawValue: 1004)
        public static let protocolVersionMismatch = Code(rawValue: 1005)
        public static let alreadyJoined = Code(rawValue: 1006)
        // Tokens
        public static let tokenMissing = Code(rawValue: 2001)
        public static let tokenInvalid = Code(rawValue: 2002)
        public static let tokenExpired = Code(rawValue: 2003)
        public static let tokenNotYetValid = Code(rawValue: 2004)
        public static let tokenWrongChannel = Code(rawValue: 2005)
        public static let tokenWrongUID = Code(rawValue: 2006)
        public static let permissionDenied = Code(rawValue: 2007)
        // Rooms and media
        public static let uidInUse = Code(rawValue: 3001)
        public static let invalidUID = Code(rawValue: 3002)
        /// A screen share (`<host>_sub`) joined while its owner `<host>` is not in the channel.
        public static let screenShareOwnerAbsent = Code(rawValue: 3003)
        public static let trackNotFound = Code(rawValue: 4001)
        public static let negotiationFailed = Code(rawValue: 4002)
        public static let resumeFailed = Code(rawValue: 4003)
        /// A server limit: tracks per participant, participants per room, pins (`ServerLimits`).
        public static let limitExceeded = Code(rawValue: 4004)
        public static let internalError = Code(rawValue: 5000)
        /// A `join` or `resume` reaching a server that is shutting down (its participants were
        /// told `leave{serverShutdown}`): join again, at another node or once it is back.
        public static let shuttingDown = Code(rawValue: 5001)
    }

    public var code: Code
    public var reason: String
    /// The request this answers, when there was one.
    public var requestID: UInt32?

    public init(_ code: Code, _ reason: String, requestID: UInt32? = nil) {
        self.code = code
        self.reason = reason
        self.requestID = requestID
    }

    public var description: String { "signaling error \(code.rawValue): \(reason)" }
}

/// A message on the wire: `{"v":"1.1","id":7,"type":"join","payload":{...}}`. `id` matches a reply to
/// its request. Unknown fields are ignored; an unknown `type` is reported, not fatal.
public struct Envelope<Message: SignalingMessage>: Sendable, Hashable {
    public var version: ProtocolVersion
    public var requestID: UInt32?
    public var message: Message

    public init(_ message: Message, requestID: UInt32? = nil, version: ProtocolVersion = .current) {
        self.version = version
        self.requestID = requestID
        self.message = message
    }

    /// Largest message accepted (JSON text), as a guard against hostile peers.
    public static var maxSize: Int { 64 * 1024 }

    public func encoded() -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return Array((try? encoder.encode(Wire(self))) ?? Data())
    }

    /// Decodes one message; every failure is a `SignalingError` the other side can be told.
    public static func decode(_ bytes: [UInt8]) throws(SignalingError) -> Envelope {
        guard bytes.count <= maxSize else {
            throw SignalingError(.messageTooLarge, "message of \(bytes.count) bytes is over the \(maxSize)-byte limit")
        }
        let data = Data(bytes)
        // A good message is parsed once (a ping, above all, is most of what a busy server reads);
        // anything else is parsed again field by field for the error that says what is wrong.
        if let wire = try? JSONDecoder().decode(Wire.self, from: data), let version = ProtocolVersion(wire.v),
           version.isCompatible(with: .current), Message.types.contains(wire.message.type) {
            return Envelope(wire.message, requestID: wire.id, version: version)
        }
        let head: Head
        do {
            head = try JSONDecoder().decode(Head.self, from: data)
        } catch {
            throw SignalingError(.malformedMessage, "not a signaling envelope: \(Self.describe(error))")
        }
        guard let version = ProtocolVersion(head.v), version.isCompatible(with: .current) else {
            throw SignalingError(.protocolVersionMismatch, "protocol \(head.v) is not compatible with \(ProtocolVersion.current)",
                                 requestID: head.id)
        }
        guard Message.types.contains(head.type) else {
            throw SignalingError(.unknownMessageType, "unknown message type '\(head.type.prefix(64))'", requestID: head.id)
        }
        do {
            let wire = try JSONDecoder().decode(Wire.self, from: data)
            return Envelope(wire.message, requestID: head.id, version: version)
        } catch {
            throw SignalingError(.malformedMessage, "bad '\(head.type)' message: \(Self.describe(error))", requestID: head.id)
        }
    }

    static func describe(_ error: any Error) -> String {
        guard let decoding = error as? DecodingError else { return "invalid JSON" }
        switch decoding {
        case .keyNotFound(let key, _): return "missing field '\(key.stringValue)'"
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
            let path = context.codingPath.map(\.stringValue).joined(separator: ".")
            return path.isEmpty ? "invalid JSON" : "bad field '\(path)'"
        @unknown default: return "invalid JSON"
        }
    }

    struct Head: Decodable {
        var v: String
        var id: UInt32?
        var type: String
    }

    struct Wire: Codable {
        var v: String
        var id: UInt32?
        var message: Message

        init(_ envelope: Envelope) {
            v = envelope.version.description
            id = envelope.requestID
            message = envelope.message
        }

        enum Keys: String, CodingKey { case v, id, type, payload }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: Keys.self)
            v = try container.decode(String.self, forKey: .v)
            id = try container.decodeIfPresent(UInt32.self, forKey: .id)
            let type = try container.decode(String.self, forKey: .type)
            message = try Message(type: type, payload: container.superDecoder(forKey: .payload))
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Keys.self)
            try container.encode(v, forKey: .v)
            try container.encodeIfPresent(id, forKey: .id)
            try container.encode(message.type, forKey: .type)
            try message.encodePayload(to: container.superEncoder(forKey: .payload))
        }
    }
}

/// A message enum that travels in an ``Envelope``: a type name plus a payload.
public protocol SignalingMessage: Sendable, Hashable {
    static var types: Set<String> { get }
    var type: String { get }
    init(type: String, payload: any Decoder) throws
    func encodePayload(to encoder: any Encoder) throws
}

private struct Reason: Codable { var reason: LeaveReason }
private struct Timestamp: Codable { var timestamp: Int64 }
private struct TrackSid: Codable { var trackSid: String }
private struct Role: Codable { var role: ParticipantRole }
private struct Token: Codable { var token: String }
private struct Expiry: Codable { var expiresAt: Int64 }
private struct Participants: Codable { var participants: [ParticipantInfo] }
private struct TransportName: Codable { var transport: SessionDescriptionMessage.Transport }
private struct Departure: Codable { var uid: String; var reason: LeaveReason }

extension ClientMessage: SignalingMessage {
    public static let types: Set<String> = ["join", "offer", "answer", "publishTrack", "unpublishTrack", "mute",
                                            "updateSubscription", "setRole", "leave", "ping", "refreshToken", "resume", "restartICE", "setVideoPreference",
                                            "updateMetadata", "setSubscriptionPermission"]

    public var type: String {
        switch self {
        case .join: "join"
        case .offer: "offer"
        case .answer: "answer"
        case .publishTrack: "publishTrack"
        case .unpublishTrack: "unpublishTrack"
        case .mute: "mute"
        case .updateSubscription: "updateSubscription"
        case .setRole: "setRole"
        case .leave: "leave"
        case .ping: "ping"
        case .refreshToken: "refreshToken"
        case .resume: "resume"
        case .restartICE: "restartICE"
        case .setVideoPreference: "setVideoPreference"
        case .updateMetadata: "updateMetadata"
        case .setSubscriptionPermission: "setSubscriptionPermission"
        }
    }

    public init(type: String, payload decoder: any Decoder) throws {
        switch type {
        case "join": self = .join(try JoinRequest(from: decoder))
        case "offer": self = .offer(try SessionDescriptionMessage(from: decoder))
        case "answer": self = .answer(try SessionDescriptionMessage(from: decoder))
        case "publishTrack": self = .publishTrack(try PublishTrackRequest(from: decoder))
        case "unpublishTrack": self = .unpublishTrack(trackSid: try TrackSid(from: decoder).trackSid)
        case "mute": self = .mute(try MuteRequest(from: decoder))
        case "updateSubscription": self = .updateSubscription(try SubscriptionUpdate(from: decoder))
        case "setRole": self = .setRole(try Role(from: decoder).role)
        case "leave": self = .leave(reason: try Reason(from: decoder).reason)
        case "ping": self = .ping(timestamp: try Timestamp(from: decoder).timestamp)
        case "refreshToken": self = .refreshToken(token: try Token(from: decoder).token)
        case "resume": self = .resume(try ResumeRequest(from: decoder))
        case "restartICE": self = .restartICE(transport: try TransportName(from: decoder).transport)
        case "setVideoPreference": self = .setVideoPreference(try VideoPreference(from: decoder))
        case "updateMetadata": self = .updateMetadata(try MetadataUpdate(from: decoder))
        case "setSubscriptionPermission": self = .setSubscriptionPermission(try SubscriptionPermission(from: decoder))
        default: throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "unknown type \(type)"))
        }
    }

    public func encodePayload(to encoder: any Encoder) throws {
        switch self {
        case .join(let value): try value.encode(to: encoder)
        case .offer(let value), .answer(let value): try value.encode(to: encoder)
        case .publishTrack(let value): try value.encode(to: encoder)
        case .unpublishTrack(let sid): try TrackSid(trackSid: sid).encode(to: encoder)
        case .mute(let value): try value.encode(to: encoder)
        case .updateSubscription(let value): try value.encode(to: encoder)
        case .setRole(let role): try Role(role: role).encode(to: encoder)
        case .leave(let reason): try Reason(reason: reason).encode(to: encoder)
        case .ping(let timestamp): try Timestamp(timestamp: timestamp).encode(to: encoder)
        case .refreshToken(let token): try Token(token: token).encode(to: encoder)
        case .resume(let value): try value.encode(to: encoder)
        case .restartICE(let transport): try TransportName(transport: transport).encode(to: encoder)
        case .setVideoPreference(let value): try value.encode(to: encoder)
        case .updateMetadata(let value): try value.encode(to: encoder)
        case .setSubscriptionPermission(let value): try value.encode(to: encoder)
        }
    }
}

extension ServerMessage: SignalingMessage {
    public static let types: Set<String> = ["joined", "error", "offer", "answer", "trackPublished", "participantUpdate",
                                            "participantLeft", "pong", "tokenWillExpire", "tokenRefreshed", "leave", "resumed",
                                            "videoLayers", "layerChanged", "roomUpdate", "trackMuted", "activeSpeakers",
                                            "subscriptionPermission", "connectionQuality"]

    public var type: String {
        switch self {
        case .joined: "joined"
        case .error: "error"
        case .offer: "offer"
        case .answer: "answer"
        case .trackPublished: "trackPublished"
        case .participantUpdate: "participantUpdate"
        case .participantLeft: "participantLeft"
        case .pong: "pong"
        case .tokenWillExpire: "tokenWillExpire"
        case .tokenRefreshed: "tokenRefreshed"
        case .leave: "leave"
        case .resumed: "resumed"
        case .videoLayers: "videoLayers"
        case .layerChanged: "layerChanged"
        case .roomUpdate: "roomUpdate"
        case .trackMuted: "trackMuted"
        case .activeSpeakers: "activeSpeakers"
        case .subscriptionPermission: "subscriptionPermission"
        case .connectionQuality: "connectionQuality"
        }
    }

    public init(type: String, payload decoder: any Decoder) throws {
        switch type {
        case "joined": self = .joined(try JoinResponse(from: decoder))
        case "error": self = .error(try SignalingError(from: decoder))
        case "offer": self = .offer(try SessionDescriptionMessage(from: decoder))
        case "answer": self = .answer(try SessionDescriptionMessage(from: decoder))
        case "trackPublished": self = .trackPublished(try TrackInfo(from: decoder))
        case "participantUpdate": self = .participantUpdate(try Participants(from: decoder).participants)
        case "participantLeft":
            let departure = try Departure(from: decoder)
            self = .participantLeft(uid: departure.uid, reason: departure.reason)
        case "pong": self = .pong(timestamp: try Timestamp(from: decoder).timestamp)
        case "tokenWillExpire": self = .tokenWillExpire(expiresAt: try Expiry(from: decoder).expiresAt)
        case "tokenRefreshed": self = .tokenRefreshed(expiresAt: try Expiry(from: decoder).expiresAt)
        case "leave": self = .leave(reason: try Reason(from: decoder).reason)
        case "resumed": self = .resumed(try JoinResponse(from: decoder))
        case "videoLayers": self = .videoLayers(try VideoLayersRequest(from: decoder))
        case "layerChanged": self = .layerChanged(try LayerChange(from: decoder))
        case "roomUpdate": self = .roomUpdate(try RoomUpdate(from: decoder))
        case "trackMuted": self = .trackMuted(try MuteRequest(from: decoder))
        case "activeSpeakers": self = .activeSpeakers(try ActiveSpeakers(from: decoder))
        case "subscriptionPermission": self = .subscriptionPermission(try SubscriptionPermissionUpdate(from: decoder))
        case "connectionQuality": self = .connectionQuality(try ConnectionQuality(from: decoder))
        default: throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "unknown type \(type)"))
        }
    }

    public func encodePayload(to encoder: any Encoder) throws {
        switch self {
        case .joined(let value), .resumed(let value): try value.encode(to: encoder)
        case .error(let value): try value.encode(to: encoder)
        case .offer(let value), .answer(let value): try value.encode(to: encoder)
        case .trackPublished(let value): try value.encode(to: encoder)
        case .participantUpdate(let value): try Participants(participants: value).encode(to: encoder)
        case .participantLeft(let uid, let reason): try Departure(uid: uid, reason: reason).encode(to: encoder)
        case .pong(let timestamp): try Timestamp(timestamp: timestamp).encode(to: encoder)
        case .tokenWillExpire(let expiry), .tokenRefreshed(let expiry): try Expiry(expiresAt: expiry).encode(to: encoder)
        case .leave(let reason): try Reason(reason: reason).encode(to: encoder)
        case .videoLayers(let value): try value.encode(to: encoder)
        case .layerChanged(let value): try value.encode(to: encoder)
        case .roomUpdate(let value): try value.encode(to: encoder)
        case .trackMuted(let value): try value.encode(to: encoder)
        case .activeSpeakers(let value): try value.encode(to: encoder)
        case .subscriptionPermission(let value): try value.encode(to: encoder)
        case .connectionQuality(let value): try value.encode(to: encoder)
        }
    }
}

public typealias ClientEnvelope = Envelope<ClientMessage>
public typealias ServerEnvelope = Envelope<ServerMessage>
