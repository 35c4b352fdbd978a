import SwiftProtobuf

/// One call of LiveKit's RoomService as it arrives over Twirp (`/twirp/livekit.RoomService/<Method>`):
/// the method's request message, read from protobuf or protobuf JSON (docs/server-api.md).
public enum RoomServiceRequest: Sendable {
    case createRoom(LKCreateRoomRequest)
    case listRooms(LKListRoomsRequest)
    case deleteRoom(LKDeleteRoomRequest)
    case listParticipants(LKListParticipantsRequest)
    case getParticipant(LKRoomParticipantIdentity)
    case removeParticipant(LKRoomParticipantIdentity)
    case mutePublishedTrack(LKMuteRoomTrackRequest)
    case updateParticipant(LKUpdateParticipantRequest)
    case updateSubscriptions(LKUpdateSubscriptionsRequest)
    case sendData(LKSendDataRequest)
    case updateRoomMetadata(LKUpdateRoomMetadataRequest)
    case performRpc(LKPerformRpcRequest)

    /// Why a request could not be read: Twirp's code (`bad_route`, `malformed`) and a message.
    public struct Refusal: Error, Equatable, Sendable {
        public var code: String
        public var message: String
    }

    /// What the caller's token must grant.
    public enum Grant: Equatable, Sendable {
        case list, create
        case admin(room: String)
    }

    public init(method: String, body: [UInt8], json: Bool) throws(Refusal) {
        func read<M: SwiftProtobuf.Message>(_: M.Type) throws(Refusal) -> M {
            do {
                if json {
                    var options = JSONDecodingOptions()
                    options.ignoreUnknownFields = true
                    return try M(jsonUTF8Bytes: body, options: options)
                }
                return try M(serializedBytes: body)
            } catch {
                throw Refusal(code: "malformed", message: "the \(method) request could not be read as \(json ? "JSON" : "protobuf"): \(error)")
            }
        }
        switch method {
        case "CreateRoom": self = .createRoom(try read(LKCreateRoomRequest.self))
        case "ListRooms": self = .listRooms(try read(LKListRoomsRequest.self))
        case "DeleteRoom": self = .deleteRoom(try read(LKDeleteRoomRequest.self))
        case "ListParticipants": self = .listParticipants(try read(LKListParticipantsRequest.self))
        case "GetParticipant": self = .getParticipant(try read(LKRoomParticipantIdentity.self))
        case "RemoveParticipant": self = .removeParticipant(try read(LKRoomParticipantIdentity.self))
        case "MutePublishedTrack": self = .mutePublishedTrack(try read(LKMuteRoomTrackRequest.self))
        case "UpdateParticipant": self = .updateParticipant(try read(LKUpdateParticipantRequest.self))
        case "UpdateSubscriptions": self = .updateSubscriptions(try read(LKUpdateSubscriptionsRequest.self))
        case "SendData": self = .sendData(try read(LKSendDataRequest.self))
        case "UpdateRoomMetadata": self = .updateRoomMetadata(try read(LKUpdateRoomMetadataRequest.self))
        case "PerformRpc": self = .performRpc(try read(LKPerformRpcRequest.self))
        default:
            throw Refusal(code: "bad_route", message: "no method \(method.prefix(64)) in livekit.RoomService here")
        }
    }

    public var grant: Grant {
        switch self {
        case .createRoom, .deleteRoom: .create
        case .listRooms: .list
        case .listParticipants(let request): .admin(room: request.room)
        case .getParticipant(let request), .removeParticipant(let request): .admin(room: request.room)
        case .mutePublishedTrack(let request): .admin(room: request.room)
        case .updateParticipant(let request): .admin(room: request.room)
        case .updateSubscriptions(let request): .admin(room: request.room)
        case .sendData(let request): .admin(room: request.room)
        case .updateRoomMetadata(let request): .admin(room: request.room)
        case .performRpc(let request): .admin(room: request.room)
        }
    }

    /// The methods answered here.
    public static let methods = ["CreateRoom", "ListRooms", "DeleteRoom", "ListParticipants", "GetParticipant", "RemoveParticipant",
                                 "MutePublishedTrack", "UpdateParticipant", "UpdateSubscriptions", "SendData", "UpdateRoomMetadata", "PerformRpc"]
}
