#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SwiftProtobuf

/// LiveKit's DataPacket as the server's data relay reads and writes it. The relay learns the
/// destinations and stamps the sender; the rest of a packet (RPC, streams, chat, fields this
/// file does not declare) is carried through as it came.
public enum LiveKitData {
    /// A packet parsed from a data channel message; nil when the bytes are not one.
    public static func packet(_ bytes: [UInt8]) -> LKDataPacket? {
        try? LKDataPacket(serializedBytes: bytes)
    }

    public static func serialized(_ packet: LKDataPacket) -> [UInt8] {
        (try? packet.serializedBytes()) ?? []
    }

    /// The identities the packet is for (empty: everyone), from the packet or, as older SDKs
    /// send it, from its user packet.
    public static func destinations(of packet: LKDataPacket) -> [String] {
        if !packet.destinationIdentities.isEmpty { return packet.destinationIdentities }
        if case .user(let user) = packet.value { return user.destinationIdentities }
        return []
    }

    /// The packet with the sender the server vouches for (what the client wrote there is replaced).
    public static func stamped(_ packet: LKDataPacket, sender: String, senderSid: String) -> LKDataPacket {
        var packet = packet
        packet.participantIdentity = sender
        packet.participantSid = senderSid
        if case .user(var user) = packet.value {
            user.participantIdentity = sender
            user.participantSid = senderSid
            packet.value = .user(user)
        }
        return packet
    }

    /// A user packet (what our SDK's stream messages and plain peers' messages become for LiveKit's clients).
    public static func user(payload: [UInt8], topic: String, sender: String, senderSid: String, reliable: Bool) -> LKDataPacket {
        var user = LKUserPacket()
        user.payload = Data(payload)
        if !topic.isEmpty { user.topic = topic }
        user.participantIdentity = sender
        user.participantSid = senderSid
        var packet = LKDataPacket()
        packet.kind = reliable ? .reliable : .lossy
        packet.participantIdentity = sender
        packet.participantSid = senderSid
        packet.value = .user(user)
        return packet
    }

    /// The payload and topic of a user packet; nil for every other kind.
    public static func userPayload(of packet: LKDataPacket) -> (payload: [UInt8], topic: String)? {
        guard case .user(let user) = packet.value else { return nil }
        return (Array(user.payload), user.topic)
    }

    /// A client's user packet as it goes out on `_reliable` or `_lossy` (the server stamps the
    /// sender): what our SDK's data messages are in LiveKit's dialect.
    public static func outgoing(payload: [UInt8], topic: String, destinations: [String], reliable: Bool) -> [UInt8] {
        var packet = user(payload: payload, topic: topic, sender: "", senderSid: "", reliable: reliable)
        packet.destinationIdentities = destinations
        if case .user(var user) = packet.value {
            user.destinationIdentities = destinations
            packet.value = .user(user)
        }
        return serialized(packet)
    }

    /// A user packet a client received: who sent it (the identity the server stamped), its
    /// payload and topic. Nil for every other kind (RPC, streams, transcriptions) and for bytes
    /// that are not a packet.
    public static func incoming(_ bytes: [UInt8]) -> (sender: String, payload: [UInt8], topic: String)? {
        guard let packet = packet(bytes), case .user(let user) = packet.value else { return nil }
        let sender = packet.participantIdentity.isEmpty ? user.participantIdentity : packet.participantIdentity
        return (sender, Array(user.payload), user.topic)
    }
}
