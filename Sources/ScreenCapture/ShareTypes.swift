import RTCMedia

/// Why a share ended.
public enum ScreenShareFinishReason: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The host asked (`stop`, or a force-stop over the link).
    case requestedByHost
    /// The host left the channel (the server removed the `_sub` with it) or its process went away.
    case hostLeft
    /// The connection to the server was lost for good.
    case disconnected
    /// The host and the sharer speak different link protocol versions.
    case versionMismatch
    case error(String)

    public var description: String {
        switch self {
        case .requestedByHost: "requestedByHost"
        case .hostLeft: "hostLeft"
        case .disconnected: "disconnected"
        case .versionMismatch: "versionMismatch"
        case .error(let message): "error(\(message))"
        }
    }
}

/// What a share reports every 2 s.
public struct ScreenShareStats: Sendable, Hashable, Codable {
    public var framesPerSecond: Double
    public var bitrateKbps: Double
    public var width: Int
    public var height: Int
    public var framesPushed: Int
    /// Frames re-sent because the screen was idle.
    public var framesResent: Int

    public init(framesPerSecond: Double = 0, bitrateKbps: Double = 0, width: Int = 0, height: Int = 0, framesPushed: Int = 0, framesResent: Int = 0) {
        self.framesPerSecond = framesPerSecond
        self.bitrateKbps = bitrateKbps
        self.width = width
        self.height = height
        self.framesPushed = framesPushed
        self.framesResent = framesResent
    }
}

/// Where and how to share.
public struct ScreenShareConfiguration: Sendable, Hashable, Codable {
    public var serverURL: String
    public var channel: String
    public var hostUID: String
    /// A token for the `_sub` uid (it needs its own grant).
    public var token: String
    public var uidSuffix: String
    public var policy: ScreenSharePolicy
    /// Publish a screen-audio track (app audio and microphone mixed).
    public var shareAudio: Bool
    /// How long `start()` waits for the host to be in the channel (the server refuses a share
    /// whose owner is absent, 3003), asking again with backoff; nil: ``defaultOwnerWaitSeconds``.
    public var ownerWaitSeconds: Double?
    public static let defaultOwnerWaitSeconds = 10.0
    /// The share's own TURN servers (`turn:`/`turns:` URLs and their credential; nil: those the
    /// server hands out), whether media may only be relayed, and PEM certificates to trust for TLS.
    public var turnURLs: [String]?
    public var turnUsername: String?
    public var turnCredential: String?
    public var relayOnly: Bool?
    public var turnTrustedCertificates: String?
    /// Whether the server speaks LiveKit's signaling protocol (the token is then a LiveKit JWT);
    /// nil or false: ours.
    public var liveKit: Bool?

    public init(serverURL: String, channel: String, hostUID: String, token: String, uidSuffix: String = ScreenShareUID.suffix,
                policy: ScreenSharePolicy = ScreenSharePolicy(), shareAudio: Bool = false, ownerWaitSeconds: Double? = nil) {
        self.ownerWaitSeconds = ownerWaitSeconds
        self.serverURL = serverURL
        self.channel = channel
        self.hostUID = hostUID
        self.token = token
        self.uidSuffix = uidSuffix
        self.policy = policy
        self.shareAudio = shareAudio
    }

    /// The uid the share joins as.
    public var uid: String { hostUID + uidSuffix }
}

