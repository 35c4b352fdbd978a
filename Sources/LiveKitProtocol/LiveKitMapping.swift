import Signaling

/// Our model in LiveKit's terms and back: sources, kinds, participants, tracks, leave reasons,
/// simulcast qualities. Pure functions, shared by the signal front end and its tests.
public enum LiveKitMapping {
    /// The protocol version this server speaks, as LiveKit numbers it (the SDKs send 16 to 18).
    public static let protocolVersion: Int32 = 16
    /// The LiveKit server release whose behaviour this front end follows.
    public static let serverVersion = "1.9.0"

    public static func source(_ source: Signaling.TrackSource) -> LKTrackSource {
        switch source {
        case .camera: .camera
        case .microphone: .microphone
        case .screen: .screenShare
        case .screenAudio: .screenShareAudio
        }
    }

    /// Our source for a LiveKit one; `unknown` by the kind (camera or microphone), and a screen
    /// share participant's camera or microphone is its screen.
    public static func source(_ source: LKTrackSource, kind: TrackKind, screenShare: Bool) -> Signaling.TrackSource {
        switch source {
        case .screenShare: return .screen
        case .screenShareAudio: return .screenAudio
        case .camera where !screenShare: return .camera
        case .microphone where !screenShare: return .microphone
        default: return kind == .video ? (screenShare ? .screen : .camera) : (screenShare ? .screenAudio : .microphone)
        }
    }

    public static func kind(_ type: LKTrackType) -> TrackKind? {
        switch type {
        case .audio: .audio
        case .video: .video
        default: nil
        }
    }

    /// A simulcast stream id as LiveKit's clients name layers: `q`, `h`, `f` (quarter, half, full).
    public static func quality(rid: String) -> LKVideoQuality? {
        switch rid {
        case "q": .low
        case "h": .medium
        case "f": .high
        default: nil
        }
    }

    public static func rid(_ quality: LKVideoQuality) -> String? {
        switch quality {
        case .low: "q"
        case .medium: "h"
        case .high: "f"
        default: nil
        }
    }

    public static func reason(_ reason: LeaveReason) -> LKDisconnectReason {
        switch reason {
        case .clientRequest: .clientInitiated
        case .ownerLeft: .participantRemoved
        case .serverShutdown: .serverShutdown
        case .duplicateIdentity: .duplicateIdentity
        case .tokenExpired: .participantRemoved
        case .timeout: .connectionTimeout
        case .kicked: .participantRemoved
        case .roomDeleted: .roomDeleted
        }
    }

    /// Ours for LiveKit's (a client reading why someone left); what we do not name is a client's own leave.
    public static func leaveReason(_ reason: LKDisconnectReason) -> LeaveReason {
        switch reason {
        case .serverShutdown: .serverShutdown
        case .duplicateIdentity: .duplicateIdentity
        case .participantRemoved: .kicked
        case .roomDeleted: .roomDeleted
        case .connectionTimeout: .timeout
        default: .clientRequest
        }
    }

    /// Why a join was refused, as a LiveKit `LeaveRequest` says it, and back (our client's side):
    /// a screen share whose owner is absent is USER_UNAVAILABLE; everything else JOIN_FAILURE.
    public static func joinRefusal(_ code: SignalingError.Code) -> LKDisconnectReason {
        code == .screenShareOwnerAbsent ? .userUnavailable : .joinFailure
    }

    public static func joinRefusal(_ leave: LKLeaveRequest) -> SignalingError {
        if leave.action == .reconnect || leave.reason == .serverShutdown {
            return SignalingError(.shuttingDown, "the LiveKit server is shutting down: join again")
        }
        if leave.reason == .userUnavailable {
            return SignalingError(.screenShareOwnerAbsent, "the LiveKit server refused the join: the screen share's owner is not in the room")
        }
        return SignalingError(.permissionDenied, "the LiveKit server refused the join (\(leave.reason))")
    }

    /// What a client told to leave should do next. A server going down (a drain, a restart) asks
    /// for a full reconnect: LiveKit's SDKs treat `DISCONNECT` as final and never come back, while
    /// `RECONNECT` makes them join again with the same token (to this address, where the next
    /// server or another node of the cluster answers). Every other reason is final.
    public static func leave(_ reason: LeaveReason) -> LKLeaveRequest {
        var leave = LKLeaveRequest()
        leave.reason = Self.reason(reason)
        leave.action = reason == .serverShutdown ? .reconnect : .disconnect
        // The field SDKs before `action` read (protocol < 13): the same decision.
        leave.canReconnect = leave.action == .reconnect
        return leave
    }

    /// A participant's connection in LiveKit's four levels, from our six (Agora's: 1 excellent, 2
    /// good, 3 poor, 4 bad, 5 very bad, 6 down; 0 unknown), judged by the worse direction: 1
    /// EXCELLENT, 2-3 GOOD, 4-5 POOR, 6 LOST; unknown is not sent. The score is LiveKit's 1-5
    /// scale (its MOS-like figure) at the level's middle.
    public static func connectionQuality(up: Int, down: Int) -> (quality: LKConnectionQuality, score: Float)? {
        let known = [up, down].filter { (1...6).contains($0) }
        guard let worst = known.max() else { return nil }
        switch worst {
        case 1: return (.excellent, 4.5)
        case 2, 3: return (.good, 3.8)
        case 4, 5: return (.poor, 2.5)
        default: return (.lost, 1)
        }
    }

    /// LiveKit's level in our six (the middle of what ``connectionQuality(up:down:)`` maps to it):
    /// EXCELLENT 1, GOOD 2, POOR 4, LOST 6; anything else unknown (0).
    public static func level(_ quality: LKConnectionQuality) -> Int {
        switch quality {
        case .excellent: 1
        case .good: 2
        case .poor: 4
        case .lost: 6
        default: 0
        }
    }

    public static func mime(_ kind: TrackKind) -> String { kind == .video ? "video/VP8" : "audio/opus" }

    /// A track's end-to-end encryption as LiveKit's clients declare it, and back: the SDKs set up
    /// their frame cryptors from what the server's TrackInfo says, so it must be the publisher's own.
    public static func encryption(_ type: LKEncryption.TypeEnum) -> TrackEncryption? {
        switch type {
        case .none: nil
        case .gcm: .gcm
        case .custom: .custom
        case .UNRECOGNIZED: .custom  // something newer we cannot name: never shown as "none"
        }
    }

    public static func encryption(_ encryption: TrackEncryption?) -> LKEncryption.TypeEnum {
        switch encryption {
        case nil, .none?: .none
        case .gcm?: .gcm
        case .custom?: .custom
        }
    }

    /// A track as LiveKit's clients see it. `layers` are the sizes its publisher announced, when
    /// this front end saw them; otherwise only the qualities its stream ids name.
    public static func track(_ track: Signaling.TrackInfo, name: String? = nil, width: UInt32 = 0, height: UInt32 = 0,
                             layers: [LKVideoLayer] = []) -> LKTrackInfo {
        var info = LKTrackInfo()
        info.sid = track.sid
        info.type = track.kind == .video ? .video : .audio
        info.name = name ?? track.source.rawValue
        info.muted = track.muted
        info.source = source(track.source)
        info.mimeType = mime(track.kind)
        info.encryption = encryption(track.encryption)
        info.mid = track.mid ?? ""
        info.width = width > 0 ? width : UInt32(clamping: track.width ?? 0)
        info.height = height > 0 ? height : UInt32(clamping: track.height ?? 0)
        // Layers smallest first; each one up is twice the size, the top one the track's.
        let rids = (track.simulcastLayers ?? []).filter { quality(rid: $0) != nil }
            .sorted { quality(rid: $0)!.rawValue < quality(rid: $1)!.rawValue }
        info.simulcast = rids.count > 1
        if !layers.isEmpty {
            info.layers = layers
        } else if !rids.isEmpty {
            info.layers = rids.enumerated().map { index, rid in
                var layer = LKVideoLayer()
                layer.quality = quality(rid: rid) ?? .high
                layer.rid = rid
                let scale = UInt32(1) << UInt32(rids.count - 1 - index)
                layer.width = info.width / scale
                layer.height = info.height / scale
                return layer
            }
        }
        var codec = LKSimulcastCodecInfo()
        codec.mimeType = info.mimeType
        codec.mid = info.mid
        codec.layers = info.layers
        info.codecs = [codec]
        return info
    }

    /// A participant as LiveKit's clients see it: `name` is the uid, a screen share carries its
    /// owner in the `screenShareOwner` attribute (its tracks are SCREEN_SHARE).
    public static func participant(_ participant: Signaling.ParticipantInfo, state: LKParticipantInfo.State = .active,
                                   tracks: [LKTrackInfo]? = nil) -> LKParticipantInfo {
        var info = LKParticipantInfo()
        info.sid = participant.sid
        info.identity = participant.uid
        info.name = participant.name ?? participant.uid
        info.metadata = participant.metadata ?? ""
        info.state = state
        info.version = UInt32(clamping: max(participant.version, 0))
        info.tracks = tracks ?? participant.tracks.map { track($0) }
        info.kind = .standard
        info.isPublisher = !participant.tracks.isEmpty
        var permission = LKParticipantPermission()
        permission.canSubscribe = true
        permission.canPublish = participant.role == .broadcaster
        permission.canPublishData = true
        info.permission = permission
        info.attributes = participant.attributes ?? [:]
        if case .screenShare(let owner) = participant.kind { info.attributes["screenShareOwner"] = owner }
        return info
    }
}
