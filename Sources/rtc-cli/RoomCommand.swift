import ArgumentParser
import Foundation
import LiveKitProtocol
import NIOCore
import NIOPosix
import TLSStream
import RTCServer
import ServerCommandLine
import SwiftProtobuf

/// `rtc-cli room …`: a server's RoomService (docs/server-api.md), as LiveKit's `lk room …` calls it.
struct RoomCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "room", abstract: "List and steer a server's rooms through its RoomService API (docs/server-api.md).",
        subcommands: [List.self, Participants.self, Create.self, Delete.self, Remove.self, Mute.self, Update.self, Send.self, Metadata.self])

    struct Connection: ParsableArguments {
        @Option(name: [.customLong("url"), .customLong("server")],
                help: "The server (http://, https://, ws:// or wss://HOST:PORT; default $LIVEKIT_URL, else http://127.0.0.1:7880).")
        var url = LiveKitEnvironment.url ?? "http://127.0.0.1:7880"
        @Option(name: .customLong("api-key"), help: "One of the server's --api-key (default $LIVEKIT_API_KEY).") var apiKeyOption: String?
        @Option(name: .customLong("api-secret"), help: "Its secret (default $LIVEKIT_API_SECRET).") var apiSecretOption: String?

        var apiKey: String { apiKeyOption ?? LiveKitEnvironment.apiKey ?? "" }
        var apiSecret: String { apiSecretOption ?? LiveKitEnvironment.apiSecret ?? "" }

        func validate() throws {
            guard !apiKey.isEmpty, !apiSecret.isEmpty else {
                throw ValidationError("give --api-key and --api-secret, or set LIVEKIT_API_KEY and LIVEKIT_API_SECRET")
            }
            _ = try target("ListRooms")
        }

        func target(_ method: String) throws -> HTTPPost.Target {
            do { return try HTTPPost.target(server: url, path: "/twirp/livekit.RoomService/" + method) } catch {
                throw ValidationError("--url: \(error.description)")
            }
        }

        /// Calls `method` with `request` (protobuf JSON both ways); a Twirp error is thrown with its code and message.
        func call<Answer: SwiftProtobuf.Message>(_ method: String, _ request: some SwiftProtobuf.Message, room: String?,
                                                 as _: Answer.Type) throws -> Answer {
            let now = Int64(Date().timeIntervalSince1970)
            let grant = switch method {
            case "ListRooms": LiveKitVideoGrant(roomList: true)
            case "CreateRoom", "DeleteRoom": LiveKitVideoGrant(roomCreate: true)
            default: LiveKitVideoGrant(room: room, roomAdmin: true)
            }
            let token = LiveKitClaims(apiKey: apiKey, identity: "rtc-cli", video: grant, now: now, ttl: 600).signed(secret: apiSecret)
            let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
            defer { try? group.syncShutdownGracefully() }
            let tls = try TLSContext.client()
            let response: HTTPPost.Response
            do {
                response = try HTTPPost.send(try target(method), headers: [("Content-Type", "application/json"), ("Authorization", "Bearer " + token)],
                                             body: try request.jsonUTF8Bytes() as [UInt8], on: group.next(), tls: tls, timeout: .seconds(10)).wait()
            } catch let error as HTTPPost.Failure {
                throw CLIError("\(method): \(error.description)")
            }
            guard response.status == 200 else {
                let fields = (try? JSONSerialization.jsonObject(with: Data(response.body))) as? [String: Any]
                throw CLIError("\(method): HTTP \(response.status) \(fields?["code"] as? String ?? "?"): \(fields?["msg"] as? String ?? String(decoding: response.body.prefix(200), as: UTF8.self))")
            }
            var options = JSONDecodingOptions()
            options.ignoreUnknownFields = true
            return try Answer(jsonUTF8Bytes: response.body, options: options)
        }
    }

    static func describe(_ room: LKRoom) -> String {
        "\(room.name)\t\(room.sid)\t\(room.numParticipants) participants, \(room.numPublishers) publishing"
            + (room.metadata.isEmpty ? "" : "\tmetadata: \(room.metadata)")
    }

    static func describe(_ participant: LKParticipantInfo) -> String {
        let tracks = participant.tracks.map { "\($0.type == .video ? "video" : "audio") \($0.sid)\($0.muted ? " (muted)" : "")" }
        var line = "\(participant.identity)\t\(participant.sid)\t\(participant.state)\t[\(tracks.joined(separator: ", "))]"
        if participant.name != participant.identity && !participant.name.isEmpty { line += "\tname: \(participant.name)" }
        if !participant.metadata.isEmpty { line += "\tmetadata: \(participant.metadata)" }
        if !participant.attributes.isEmpty {
            line += "\tattributes: " + participant.attributes.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
        }
        return line
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The server's rooms, one per line.")
        @OptionGroup var connection: Connection
        func run() throws {
            let rooms = try connection.call("ListRooms", LKListRoomsRequest(), room: nil, as: LKListRoomsResponse.self).rooms
            for room in rooms { print(RoomCommand.describe(room)) }
            if rooms.isEmpty { print("no rooms") }
        }
    }

    struct Participants: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "A room's participants, one per line, with their tracks.")
        @OptionGroup var connection: Connection
        @Option(help: "The room.") var room: String
        func run() throws {
            let list = try connection.call("ListParticipants", LKListParticipantsRequest.with { $0.room = room }, room: room,
                                           as: LKListParticipantsResponse.self)
            for participant in list.participants { print(RoomCommand.describe(participant)) }
        }
    }

    struct Create: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Make a room that waits for its first participant.")
        @OptionGroup var connection: Connection
        @Option(help: "The room.") var room: String
        @Option(help: "Its metadata.") var metadata = ""
        @Option(name: .customLong("max-participants"), help: "At most this many participants (0: the server's limit).") var maxParticipants: UInt32 = 0
        func run() throws {
            let made = try connection.call("CreateRoom", LKCreateRoomRequest.with {
                $0.name = room
                $0.metadata = metadata
                $0.maxParticipants = maxParticipants
            }, room: nil, as: LKRoom.self)
            print(RoomCommand.describe(made))
        }
    }

    struct Delete: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "End a room: everyone in it leaves.")
        @OptionGroup var connection: Connection
        @Option(help: "The room.") var room: String
        func run() throws {
            _ = try connection.call("DeleteRoom", LKDeleteRoomRequest.with { $0.room = room }, room: nil, as: LKDeleteRoomResponse.self)
            print("deleted \(room)")
        }
    }

    struct Remove: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Make a participant leave.")
        @OptionGroup var connection: Connection
        @Option(help: "The room.") var room: String
        @Option(help: "The participant's identity (uid).") var identity: String
        func run() throws {
            _ = try connection.call("RemoveParticipant", LKRoomParticipantIdentity.with { $0.room = room; $0.identity = identity }, room: room,
                                    as: LKRemoveParticipantResponse.self)
            print("removed \(identity) from \(room)")
        }
    }

    struct Mute: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Mute (or unmute) a published track at the server.")
        @OptionGroup var connection: Connection
        @Option(help: "The room.") var room: String
        @Option(help: "The publisher's identity (uid).") var identity: String
        @Option(help: "The track's sid (rtc-cli room participants lists them).") var track: String
        @Flag(help: "Unmute instead.") var unmute = false
        func run() throws {
            let answer = try connection.call("MutePublishedTrack", LKMuteRoomTrackRequest.with {
                $0.room = room
                $0.identity = identity
                $0.trackSid = track
                $0.muted = !unmute
            }, room: room, as: LKMuteRoomTrackResponse.self)
            print("\(answer.track.sid) \(answer.track.muted ? "muted" : "unmuted")")
        }
    }

    struct Update: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Set a participant's name, metadata or attributes.")
        @OptionGroup var connection: Connection
        @Option(help: "The room.") var room: String
        @Option(help: "The participant's identity (uid).") var identity: String
        @Option(help: "Its new metadata.") var metadata: String?
        @Option(help: "Its new display name.") var name: String?
        @Option(name: .customLong("attribute"), parsing: .singleValue, help: "KEY=VALUE (repeatable; an empty VALUE removes KEY).")
        var attributes: [String] = []
        func validate() throws {
            guard metadata != nil || name != nil || !attributes.isEmpty else { throw ValidationError("give --metadata, --name or --attribute") }
            for attribute in attributes where !attribute.contains("=") || attribute.hasPrefix("=") {
                throw ValidationError("--attribute '\(attribute)' is not KEY=VALUE")
            }
        }
        func run() throws {
            let answer = try connection.call("UpdateParticipant", LKUpdateParticipantRequest.with {
                $0.room = room
                $0.identity = identity
                if let metadata { $0.metadata = metadata }
                if let name { $0.name = name }
                for attribute in attributes {
                    let parts = attribute.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                    $0.attributes[String(parts[0])] = parts.count > 1 ? String(parts[1]) : ""
                }
            }, room: room, as: LKParticipantInfo.self)
            print(RoomCommand.describe(answer))
        }
    }

    struct Send: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Send a data message from the server to a room (or some of its participants).")
        @OptionGroup var connection: Connection
        @Option(help: "The room.") var room: String
        @Option(help: "The message (UTF-8 text).") var data: String
        @Option(help: "Its topic.") var topic: String?
        @Option(name: .customLong("to"), parsing: .singleValue, help: "Only this identity (repeatable).") var destinations: [String] = []
        @Flag(help: "On the lossy channel.") var lossy = false
        func run() throws {
            _ = try connection.call("SendData", LKSendDataRequest.with {
                $0.room = room
                $0.data = Data(data.utf8)
                $0.kind = lossy ? .lossy : .reliable
                if let topic { $0.topic = topic }
                $0.destinationIdentities = destinations
            }, room: room, as: LKSendDataResponse.self)
            print("sent \(data.utf8.count) bytes to \(destinations.isEmpty ? room : destinations.joined(separator: ","))")
        }
    }

    struct Metadata: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "metadata", abstract: "Set a room's metadata.")
        @OptionGroup var connection: Connection
        @Option(help: "The room.") var room: String
        @Option(help: "Its new metadata.") var metadata: String
        func run() throws {
            let answer = try connection.call("UpdateRoomMetadata", LKUpdateRoomMetadataRequest.with { $0.room = room; $0.metadata = metadata },
                                             room: room, as: LKRoom.self)
            print(RoomCommand.describe(answer))
        }
    }
}
