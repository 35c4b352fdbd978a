import Signaling

/// How the channel is used: everyone talks (`communication`), or broadcasters talk to an audience
/// (`liveBroadcasting`, where audience members are invisible to others).
public enum ChannelProfile: String, Sendable, Hashable, CaseIterable {
    case communication, liveBroadcasting
}

/// What a client does in the channel.
public enum ClientRole: String, Sendable, Hashable, CaseIterable {
    case broadcaster, audience

    var participantRole: ParticipantRole { self == .broadcaster ? .broadcaster : .audience }
}

/// How the encoded picture follows the rotation of pushed frames.
public enum VideoOrientationMode: String, Sendable, Hashable, CaseIterable {
    /// Frames are encoded as pushed; their rotation travels in the video-orientation (CVO) extension
    /// and the receiver rotates for display.
    case adaptive
    /// Frames are rotated upright before encoding and fit a landscape (or portrait) size; CVO says 0.
    case fixedLandscape, fixedPortrait
}

/// What gives first when the network or the CPU cannot carry the configured video.
public enum DegradationPreference: String, Sendable, Hashable, CaseIterable {
    /// Keep the frame rate, lower quality (and resolution) first.
    case maintainFramerate
    /// Keep the resolution, drop frames first: the screen-content choice.
    case maintainResolution
    case balanced
}

/// What the video shows, which tunes the encoder.
public enum VideoContentHint: String, Sendable, Hashable, CaseIterable {
    /// Camera-like motion.
    case motion
    /// Text and fine detail (screen content).
    case detail
}

/// The video a local track is encoded as.
public struct VideoEncoderConfiguration: Sendable, Hashable {
    /// The largest picture: frames are fit inside it keeping their aspect ratio (never stretched).
    public var dimensions: VideoSize
    public var frameRate: Int
    public var bitrateKbps: Int
    public var orientationMode: VideoOrientationMode
    public var degradationPreference: DegradationPreference
    public var contentHint: VideoContentHint
    /// VP8 temporal layers of a single stream (1 or 2): with 2, every other frame is one the SFU may
    /// drop for a viewer whose path cannot carry them all (half the frame rate, same size), the
    /// lever for a screen, which keeps its full size. By default 2 for screen content
    /// (`contentHint == .detail`), 1 otherwise. Two layers are encoded only while the uplink's
    /// estimate has headroom (``TemporalLayerPolicy``): base frames refer two frames back and are
    /// larger, which on a narrow uplink costs every viewer frames. Simulcast layers are sent with
    /// one temporal layer.
    public var temporalLayers: Int {
        get { temporalLayersSetting ?? (contentHint == .detail ? 2 : 1) }
        set { temporalLayersSetting = newValue }
    }
    private var temporalLayersSetting: Int?

    public init(dimensions: VideoSize = VideoSize(width: 640, height: 360), frameRate: Int = 15, bitrateKbps: Int = 800,
                orientationMode: VideoOrientationMode = .adaptive, degradationPreference: DegradationPreference = .balanced,
                contentHint: VideoContentHint = .motion, temporalLayers: Int? = nil) {
        temporalLayersSetting = temporalLayers
        self.dimensions = dimensions
        self.frameRate = frameRate
        self.bitrateKbps = bitrateKbps
        self.orientationMode = orientationMode
        self.degradationPreference = degradationPreference
        self.contentHint = contentHint
    }

    /// Checks ranges; the error says which setting is wrong.
    public func validate() throws(RTCEngineError) {
        guard (16...3840).contains(dimensions.width), (16...3840).contains(dimensions.height) else {
            throw RTCEngineError(.invalidArgument, "video dimensions \(dimensions) are out of range 16...3840")
        }
        guard (1...60).contains(frameRate) else { throw RTCEngineError(.invalidArgument, "frame rate \(frameRate) is out of range 1...60") }
        guard (30...20_000).contains(bitrateKbps) else {
            throw RTCEngineError(.invalidArgument, "bitrate \(bitrateKbps) kbps is out of range 30...20000")
        }
        guard (1...2).contains(temporalLayers) else {
            throw RTCEngineError(.invalidArgument, "temporal layers must be 1 or 2 (got \(temporalLayers))")
        }
    }
}

/// Settings of one engine.
public struct RTCEngineConfiguration: Sendable {
    /// `ws://host:port/rtc` or `wss://...`.
    public var serverURL: String
    /// Other nodes of the same cluster: a rejoin after the server was lost tries `serverURL`, then
    /// these in turn (a node that died leaves its clients a way back in).
    public var alternateServerURLs: [String] = []
    public var appID: String
    public var logLevel: LogLevel
    public var channelProfile: ChannelProfile
    public var clientRole: ClientRole
    /// Keep screen-share users (`*_sub`) out of auto-subscription and of `userJoined`. Nil: the
    /// server's default, which is on for the owner of a share and off for everyone else.
    public var ignoreScreenShareUsers: Bool?
    /// Seconds between `rtcStats` events.
    public var statsIntervalSeconds: Int = 2
    /// How long the engine keeps joining again (with backoff) after the server was lost for good.
    public var rejoinTimeoutSeconds: Int = 60
    /// How long a media transport may go without an answer to its liveness checks (STUN consent,
    /// RFC 7675) before the engine calls its path lost and restarts ICE, signaling staying up.
    /// Checks go out every `min(2.5, timeout / 2)` seconds; at least 0.5 s.
    public var mediaTimeoutSeconds: Double = 5
    /// Open data channels at every join, to receive data stream messages without sending any
    /// (creating a stream or publishing data opens them too).
    public var dataChannels = false
    /// The address the media sockets bind to: `::` (the default) listens on every interface, IPv6
    /// and IPv4 (a dual-stack socket; `0.0.0.0` where the kernel has no IPv6), and offers a host
    /// candidate per interface address (IPv6 link-local ones left out, loopback only when the
    /// server is on this machine); `0.0.0.0` IPv4 only; one address binds and offers just that one.
    public var bindAddress: String = "::"
    /// TURN servers to relay through when no direct path answers (or always, with the `.relay`
    /// policy); nil: those the server hands out in `joined` (its `--turn-url`, with short-lived
    /// credentials). `turn:` URLs over UDP or TCP and `turns:` (TLS) are relays; `stun:` ones are
    /// asked for server-reflexive candidates when a media transport is bound (at most 300 ms; the
    /// ICE-lite server learns a client's mapped address from its checks anyway, so they change which
    /// candidates are offered, not which path is taken).
    public var iceServers: [ICEServer]?
    /// `.all`: every path from the start: UDP, ICE-TCP to the server's passive candidates at a
    /// lower priority (UDP kept when both answer), and TURN relays that carry the checks once no
    /// direct path has answered for 150 ms; `.relay`: only through a TURN server.
    public var iceTransportPolicy: ICETransportPolicy = .all
    /// Whether the server's ICE-TCP candidates are checked (with `.all`); false leaves a network
    /// that blocks UDP to the TURN servers.
    public var iceTCP = true
    /// A PEM file of certificates to trust for `turns:` servers instead of the system's roots.
    public var turnTrustedCertificates: String?
    /// End-to-end encryption (docs/e2ee.md): every published frame is encrypted with this
    /// provider's keys in LiveKit's frame format and its tracks declared encrypted; remote tracks
    /// declared encrypted are decrypted with them. Nil: no E2EE (encrypted remote tracks are then
    /// undecryptable: dropped, counted and reported, never decoded).
    public var encryption: E2EEKeyProvider?
    /// The signaling protocol the server speaks: ours, or LiveKit's (a LiveKit server, or ours
    /// through its LiveKit front end; docs/livekit.md, "Our SDK in a LiveKit room"). With LiveKit's
    /// the token is a LiveKit JWT whose room and identity are the channel and uid.
    public var signalingProtocol: SignalingProtocol = .native

    /// Which signaling protocol a connection speaks.
    public enum SignalingProtocol: String, Sendable, Hashable, CaseIterable {
        /// Ours: JSON envelopes over `/rtc` (docs/protocol.md).
        case native
        /// LiveKit's: protobuf over `/rtc?access_token=…`, data as LiveKit's `DataPacket`s.
        case livekit
    }

    public enum LogLevel: Int, Sendable, Hashable, Comparable, CaseIterable {
        case none = 0, error, warning, info, debug
        public static func < (a: LogLevel, b: LogLevel) -> Bool { a.rawValue < b.rawValue }
    }

    public init(serverURL: String, appID: String = "", logLevel: LogLevel = .warning, channelProfile: ChannelProfile = .communication,
                clientRole: ClientRole = .broadcaster, ignoreScreenShareUsers: Bool? = nil, protocol signalingProtocol: SignalingProtocol = .native) {
        self.signalingProtocol = signalingProtocol
        self.serverURL = serverURL
        self.appID = appID
        self.logLevel = logLevel
        self.channelProfile = channelProfile
        self.clientRole = clientRole
        self.ignoreScreenShareUsers = ignoreScreenShareUsers
    }
}

/// Per-join choices.
public struct JoinOptions: Sendable, Hashable {
    public var autoSubscribeAudio: Bool
    public var autoSubscribeVideo: Bool
    public var publishAudio: Bool
    public var publishVideo: Bool
    /// The source local tracks are announced as.
    public var videoSource: TrackSource
    public var audioSource: TrackSource

    public init(autoSubscribeAudio: Bool = true, autoSubscribeVideo: Bool = true, publishAudio: Bool = true, publishVideo: Bool = true,
                videoSource: TrackSource = .camera, audioSource: TrackSource = .microphone) {
        self.autoSubscribeAudio = autoSubscribeAudio
        self.autoSubscribeVideo = autoSubscribeVideo
        self.publishAudio = publishAudio
        self.publishVideo = publishVideo
        self.videoSource = videoSource
        self.audioSource = audioSource
    }
}

/// The engine's connection to the channel.
public enum ConnectionState: String, Sendable, Hashable {
    case disconnected, connecting, connected, reconnecting, failed
}

/// Why the connection state changed.
public enum ConnectionChangedReason: String, Sendable, Hashable {
    case joining, joinSuccess, joinFailed
    /// `reconnecting`: the signaling connection dropped (or, with `failed`, rejoining gave up).
    case interrupted
    /// `reconnecting`: a media transport stopped answering while signaling stayed up; ICE restarts.
    case mediaInterrupted
    /// `connected`: the same session again, with an ICE restart; the others saw nothing.
    case resumed
    /// `connected`: a new session after the old one could not be resumed.
    case rejoined
    case leaveChannel, invalidToken, tokenExpired, bannedByServer
    case serverShutdown, ownerLeft, duplicateIdentity, settingsChanged
    /// The room was deleted through the server's API.
    case roomDeleted
}

/// Why a remote user went away.
public enum UserOfflineReason: String, Sendable, Hashable {
    /// It left.
    case quit
    /// It stopped answering (killed, lost network) and did not come back within the keepalive window.
    case dropped
    /// It switched to audience in a live-broadcasting channel.
    case becameAudience
    /// A screen share whose owner left.
    case ownerLeft

    init(_ reason: LeaveReason) {
        switch reason {
        case .clientRequest: self = .quit
        case .ownerLeft: self = .ownerLeft
        case .timeout, .serverShutdown, .duplicateIdentity, .tokenExpired, .kicked, .roomDeleted: self = .dropped
        }
    }
}

/// A remote track as the engine reports it.
public struct RemoteTrackInfo: Sendable, Hashable {
    public var uid: String
    public var trackSid: String
    public var kind: TrackKind
    public var source: TrackSource
    /// End-to-end encryption as its publisher declared it (docs/e2ee.md).
    public var encryption: TrackEncryption = .none
}

/// Everything the engine tells the app.
public enum RTCEngineEvent: Sendable {
    case joinedChannel(channel: String, uid: String, elapsedMs: Int)
    case leftChannel
    case userJoined(uid: String)
    case userOffline(uid: String, reason: UserOfflineReason)
    case remoteTrackPublished(RemoteTrackInfo)
    case remoteTrackUnpublished(RemoteTrackInfo)
    case remoteTrackMuted(RemoteTrackInfo, muted: Bool)
    /// The server muted (or unmuted) one of this client's published tracks (its API's
    /// `MutePublishedTrack`): subscribers get nothing of it meanwhile.
    case localTrackMutedByServer(trackSid: String, muted: Bool)
    /// The room's metadata, at the join (when it has some) and whenever the server's API changes it.
    case roomMetadataChanged(String)
    /// A remote user's name, metadata or attributes, when first seen with any and at each change
    /// (its token's, its own updates, the server's API).
    case remoteUserInfoChanged(uid: String, name: String?, metadata: String?, attributes: [String: String])
    /// Who speaks now in the channel, loudest first, as the server hears it (its audio levels).
    case activeSpeakersChanged([ActiveSpeakers.Speaker])
    /// The loudest speaker changed (Agora's `onActiveSpeaker`); nil when nobody speaks.
    case activeSpeaker(uid: String?)
    /// Every interval `enableAudioVolumeIndication` asked for: this client's and each remote user's volume.
    case audioVolumeIndication(speakers: [AudioVolumeInfo], totalVolume: Int)
    case firstRemoteVideoFrameDecoded(uid: String, source: TrackSource, size: VideoSize, elapsedMs: Int)
    case connectionStateChanged(ConnectionState, reason: ConnectionChangedReason)
    case tokenPrivilegeWillExpire(expiresAt: Int64)
    case rtcStats(RTCStats)
    /// The server now sends another simulcast layer of a user's video (or the same for another reason).
    case remoteVideoLayerChanged(LayerChange)
    /// A data stream message from `uid` (its stream id, 0 for ``RTCEngine/publishData(_:reliable:topic:destinations:)``),
    /// with the topic it was sent under. A plain data channel peer's message has its channel's label
    /// as the topic.
    case streamMessage(uid: String, streamId: Int, data: [UInt8], topic: String)
    /// A remote track's end-to-end encryption changed state (docs/e2ee.md): `.ok` once frames
    /// decrypt, `.missingKey` while no key is set for them, `.decryptionFailed` while they fail
    /// (a wrong key), `.keyRatcheted` when the sender's ratchet was followed.
    case encryptionStateChanged(RemoteTrackInfo, state: FrameCryptor.State)
    /// Frames of `uid`'s track could not be decrypted (no key, or the wrong one): they are dropped,
    /// never decoded, and counted in its stats (`decryptionFailures`). Said when the track starts
    /// failing, not for every frame.
    case decryptionFailed(uid: String, trackSid: String, reason: String)
    /// A publisher's subscription permission (``RTCEngine/setSubscriptionPermission(allowAll:allowed:)``
    /// on its side, LiveKit's `setTrackSubscriptionPermissions`) gave this client `uid`'s track or
    /// took it away: the server unsubscribed it (`remoteTrackUnpublished` does not come; the
    /// track is still there for others) or subscribes it now.
    case subscriptionPermissionChanged(uid: String, trackSid: String, allowed: Bool)
    /// A user's connection as the server measures it, every 2 s (Agora's `onNetworkQuality`): `up`
    /// its path to the server, `down` the server's path to it, each 1 excellent … 5 very bad, 6
    /// down, 0 unknown (``NetworkQuality``). This client's own comes under its own uid, with the
    /// round trip it measures taken into account (the server sees none).
    case networkQuality(uid: String, up: Int, down: Int)
    case error(RTCEngineError)
}

/// What went wrong, for the app.
public struct RTCEngineError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Code: String, Sendable, Hashable {
        case invalidArgument, invalidState, joinFailed, tokenRejected, notPublishing, transportFailed, codec
        /// The server answered a request with a message of another kind (a protocol mismatch).
        case unexpectedReply
        /// A component attached to the engine (a recorder) failed: a full disk, an unwritable folder.
        /// Media keeps flowing.
        case recording
        /// A data stream message over the size limit, or sent faster than a stream may.
        case messageTooLarge, messageRateExceeded
    }

    public let code: Code
    public let reason: String
    /// The server's error code (`SignalingError.Code`) when the server refused the request.
    public let serverCode: Int?

    public init(_ code: Code, _ reason: String, serverCode: Int? = nil) {
        self.code = code
        self.reason = reason
        self.serverCode = serverCode
    }

    public var description: String { "\(code.rawValue): \(reason)" }
}

/// An optional delegate; every method has an empty default, so implement only what you need.
/// Called from the engine's event task, in order.
public protocol RTCEngineDelegate: AnyObject, Sendable {
    func rtcEngine(_ engine: RTCEngine, didJoinChannel channel: String, uid: String, elapsedMs: Int)
    func rtcEngine(_ engine: RTCEngine, didJoinedOfUid uid: String)
    func rtcEngine(_ engine: RTCEngine, didOfflineOfUid uid: String, reason: UserOfflineReason)
    func rtcEngine(_ engine: RTCEngine, firstRemoteVideoFrameOfUid uid: String, size: VideoSize, elapsedMs: Int)
    func rtcEngine(_ engine: RTCEngine, connectionChangedTo state: ConnectionState, reason: ConnectionChangedReason)
    func rtcEngine(_ engine: RTCEngine, tokenPrivilegeWillExpire expiresAt: Int64)
    func rtcEngine(_ engine: RTCEngine, reportRtcStats stats: RTCStats)
    /// A data stream message (``RTCEngineEvent/streamMessage(uid:streamId:data:topic:)``).
    func rtcEngine(_ engine: RTCEngine, streamMessageFrom uid: String, streamId: Int, data: [UInt8], topic: String)
    /// Every event, including those above.
    func rtcEngine(_ engine: RTCEngine, didEmit event: RTCEngineEvent)
}

extension RTCEngineDelegate {
    public func rtcEngine(_ engine: RTCEngine, didJoinChannel channel: String, uid: String, elapsedMs: Int) {}
    public func rtcEngine(_ engine: RTCEngine, didJoinedOfUid uid: String) {}
    public func rtcEngine(_ engine: RTCEngine, didOfflineOfUid uid: String, reason: UserOfflineReason) {}
    public func rtcEngine(_ engine: RTCEngine, firstRemoteVideoFrameOfUid uid: String, size: VideoSize, elapsedMs: Int) {}
    public func rtcEngine(_ engine: RTCEngine, connectionChangedTo state: ConnectionState, reason: ConnectionChangedReason) {}
    public func rtcEngine(_ engine: RTCEngine, tokenPrivilegeWillExpire expiresAt: Int64) {}
    public func rtcEngine(_ engine: RTCEngine, reportRtcStats stats: RTCStats) {}
    public func rtcEngine(_ engine: RTCEngine, streamMessageFrom uid: String, streamId: Int, data: [UInt8], topic: String) {}
    public func rtcEngine(_ engine: RTCEngine, didEmit event: RTCEngineEvent) {}
}

/// Statistics of one local track over the last period.
public struct LocalTrackStats: Sendable, Hashable {
    public var kind: TrackKind
    public var source: TrackSource
    public var bitrateKbps: Double
    public var framesPerSecond: Double
    public var packetsSent: Int
    public var framesEncoded: Int
    public var framesDropped: Int
    /// Packets sent again because the server asked (NACK).
    public var packetsRetransmitted: Int
    /// Fraction lost on the way to the server, from its receiver reports (0...1).
    public var lossFraction: Double
    public var roundTripTimeMs: Double?
    public var width: Int
    public var height: Int
    /// Simulcast: the stream ids of the layers being sent now (the estimate feeds them and some
    /// subscriber wants them); nil for a single stream. The other fields are the full layer's.
    public var layers: [String]?
    /// Video: the VP8 temporal layers being encoded now (a screen's two drop to one while its
    /// uplink is narrow; see ``VideoEncoderConfiguration/temporalLayers``).
    public var temporalLayers: Int?
}

/// Statistics of one remote track over the last period.
public struct RemoteTrackStats: Sendable, Hashable {
    public var uid: String
    public var kind: TrackKind
    public var source: TrackSource
    public var bitrateKbps: Double
    public var framesPerSecond: Double
    public var packetsReceived: Int
    public var packetsLost: Int
    public var lossFraction: Double
    public var jitterMs: Double
    public var roundTripTimeMs: Double?
    public var framesDecoded: Int
    /// Video: frames given up on (a loss not repaired in time, or frames that could not be decoded
    /// until a keyframe came), frames the decoder refused, keyframe requests (PLI) and sequence
    /// numbers asked for again (NACK) sent to the server, since the track started.
    public var framesDropped: Int = 0
    public var decodeFailures: Int = 0
    public var keyframeRequests: Int = 0
    public var nacksSent: Int = 0
    /// Frames (video) or packets (audio) of an end-to-end encrypted track that could not be
    /// decrypted (no key, a wrong one, a damaged trailer), dropped before the decoder.
    public var decryptionFailures: Int = 0
    /// Audio: 20 ms frames played from concealment (nothing came in time for them: a loss, or
    /// the buffer growing), and lost ones recovered from the next packet's in-band FEC, since the
    /// track started. Their share of all frames played is what a listener hears patched.
    public var framesConcealed: Int = 0
    public var framesRecovered: Int = 0
    public var width: Int
    public var height: Int
    /// Layered video: the simulcast layer the server sends (its stream id) and why (request,
    /// estimate, unavailable); nil for a single stream.
    public var layer: String?
    public var layerReason: LayerReason?
}

/// The `rtcStats` report, every 2 s.
public struct RTCStats: Sendable, Hashable {
    public var durationMs: Int
    public var local: [LocalTrackStats]
    public var remote: [RemoteTrackStats]
    /// The send-side bandwidth estimate of the publisher transport (kbps), nil while not publishing.
    public var estimatedBandwidthKbps: Int?
    /// The candidate pair each transport's media goes over, as "udp ADDRESS:PORT" or "tcp ADDRESS:PORT"
    /// (ICE-TCP); nil before it connects or without that transport.
    public var publisherPath: String?
    public var subscriberPath: String?
}

extension VideoEncoderConfiguration {
    /// How far a sender may divide the bounds under congestion (once: half the size).
    static let maxDownscale = 2

    /// Whether the resolution may give under congestion: not for screen content, nor when the app
    /// asked to keep it. The sender scales by it and congestion control sets its floor by it.
    var mayScaleDown: Bool { degradationPreference != .maintainResolution && contentHint != .detail }
}

/// Which paths media may take (as `RTCConfiguration.iceTransportPolicy` in browsers).
public enum ICETransportPolicy: String, Sendable, Hashable, CaseIterable {
    case all, relay
}
