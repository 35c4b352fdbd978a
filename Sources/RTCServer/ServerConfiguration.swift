import RTCConventions
import RTCTransport
import Signaling

/// What one client may use of the server, each refused past its bound with its own error (and
/// counted in `rtc_limit_refusals_total`).
public struct ServerLimits: Sendable, Hashable {
    /// Seconds a connection may take to upgrade to a WebSocket and join (or resume) before it is closed.
    public var joinDeadlineSeconds = 10
    /// Longest a token may live (`exp` minus the later of `iat` and `nbf`), seconds.
    public var maxTokenLifetimeSeconds: Int64 = 7 * 24 * 3600
    /// Tracks one participant may publish at once.
    public var maxTracksPerParticipant = 8
    /// Participants in one room, and on the whole server.
    public var maxParticipantsPerRoom = 500
    public var maxParticipants = 5000
    /// Open signaling connections (TCP, joined or not) from one IP address.
    public var maxConnectionsPerIP = 256
    /// Users one participant may pin, and may have revealed through pins over its session.
    public var maxPinned = 64
    public var maxRevealed = 256
    /// Signaling messages one connection may send: a steady rate and a burst (token bucket).
    /// Past it the connection gets 4004 and is closed (1008).
    public var messagesPerSecond = 50.0
    public var messageBurst = 200.0
    /// Signaling bytes one connection may send, likewise.
    public var inboundBytesPerSecond = 256.0 * 1024
    public var inboundByteBurst = 1024.0 * 1024
    /// Bytes queued towards one connection that is not reading: past it the connection is closed
    /// (and reading from it stops as soon as its socket stops taking writes).
    public var maxOutboundBytes = 1 << 20
    /// Longest error reason sent back (a reason quoting the client's input is cut there).
    public var maxReasonLength = 256
    /// Participant and room metadata (the token's or the API's), display names and attributes:
    /// larger ones are refused (the API says why; a token's is left out).
    public var maxMetadataBytes = 16 * 1024
    public var maxNameBytes = 256
    public var maxAttributes = 64
    public var maxAttributeBytes = 4096
    /// Server API (`/twirp/livekit.RoomService/…`) calls per second and per API key, with a burst.
    public var apiCallsPerSecond = 50.0
    public var apiCallBurst = 200.0
    /// Data channels: the largest message relayed (LiveKit's is about 15 KiB; we take 64 KiB, the
    /// size browsers offer), and the messages and bytes per second one participant may send, past
    /// which its messages are dropped and counted. The bursts are ten seconds' worth: after a stall
    /// on a lossy path a sender's SCTP delivers what it held back at once, and that is not a flood.
    public var maxDataMessageBytes = 65_536
    public var dataMessagesPerSecond = 500.0
    public var dataBytesPerSecond = 2_000_000.0
    public static let dataBurstSeconds = 10.0

    public init() {}
}

/// Where the server listens and how it treats sessions: one WebSocket port for signaling and one
/// UDP port for media (DESIGN.md §1.5).
public struct ServerConfiguration: Sendable, Hashable {
    /// The address signaling and media listen on; `0.0.0.0` (or `::`) for every interface.
    public var host: String
    /// Where signaling listens, when not on `host` (a media process: loopback, reached only by
    /// its front).
    public var signalingHost: String?
    /// Addresses offered to clients as the media port's candidates (`--announce-ip`): a cloud VM's
    /// public address is not on its interfaces. Empty: the listening address, or every interface
    /// address when listening on all.
    public var announceAddresses: [String] = []
    /// TURN servers handed to every client in `joined` (`turn:host:port?transport=udp|tcp`,
    /// `turns:` for TLS), with short-lived credentials made from `turnSecret` in the TURN REST API
    /// form coturn checks (`use-auth-secret`/`static-auth-secret`), valid for `turnCredentialSeconds`.
    public var turnURLs: [String] = []
    public var turnSecret: String?
    public var turnCredentialSeconds: Int = 24 * 3600
    /// A passive ICE-TCP port (RFC 6544) beside the UDP media port, for clients whose UDP is
    /// blocked: offered as `tcptype passive` candidates on the same addresses; 0 picks one; nil: none.
    public var tcpMediaPort: Int?
    /// WebSocket and HTTP port (`/rtc`, `/healthz`, `/metrics`); 0 picks one.
    public var signalingPort: Int
    /// The UDP media port; 0 picks one. With several media threads, thread `i` uses `mediaPort + i`.
    public var mediaPort: Int
    /// Event loops (shards) that rooms and their media are spread over (``ShardedSFU``): one
    /// room lives on one loop, each loop has its own UDP (and ICE-TCP) port. `rtc-cli server`
    /// starts one per core; embedded servers one unless set.
    public var mediaThreads = 1
    /// A cluster of nodes sharing rooms through Redis (``ClusterNode``): `redis://HOST:PORT[/DB]`,
    /// this node's id (unique in the cluster), and the signaling URL other nodes relay joins to
    /// (nil: `ws://<first announced address or host>:<signaling port>/rtc`). Nil URL: alone.
    public var redisURL: String?
    /// Where a drain leaves its rooms' state (``RoomStateFile``) and the next server, started with
    /// the same path, takes it up. Nil: the state goes only to the cluster's other nodes, if any.
    public var stateFilePath: String?
    public var nodeID: String?
    public var nodeSignalingURL: String?
    /// HS256 secret that tokens are signed with.
    public var secret: String
    /// LiveKit API keys and their secrets: LiveKit's clients and tokens are accepted when there is
    /// one (docs/livekit.md).
    public var liveKitKeys: [String: String] = [:]
    /// Where each LiveKit connection's signal messages are written as a conformance transcript
    /// (``LiveKitTranscriptEntry``, one JSONL file per connection); nil: none (docs/livekit.md).
    public var liveKitTranscriptDirectory: String?
    /// Where room events are POSTed as LiveKit's webhooks (docs/server-api.md), signed with the
    /// secret of `webhookAPIKey` (one of `liveKitKeys`).
    public var webhookURLs: [String] = []
    public var webhookAPIKey: String?
    /// Events that wait for one webhook receiver at most (later ones are dropped and counted).
    public var webhookQueueLimit = 1000
    /// The signaling protocol this server speaks.
    public var protocolVersion: ProtocolVersion
    /// Seconds between client pings, and of silence after which a participant is dropped.
    public var pingInterval: Int
    public var pingTimeout: Int
    /// Seconds a dropped participant may `resume` within.
    public var resumeWindow: Int
    /// Seconds before expiry that `tokenWillExpire` is sent.
    public var tokenWarning: Int
    /// Longest a PLI/FIR is held back after the previous one for the same track (ms).
    public var keyframeRequestInterval: Int
    /// A publisher's video is held to what its slowest subscriber's downstream estimate carries
    /// (REMB, once a second), but never asked below this (kbps): one subscriber on a poor path
    /// does not take everyone's quality below it. Nil: publishers are never limited for their
    /// subscribers (a leg that cannot carry the video then loses packets and repairs them itself).
    public var publisherLimitFloorKbps: Int?
    /// The uid suffix that marks a screen-share participant (`<host><suffix>`, `ScreenShareUID`):
    /// such a participant is reported with its owner, hidden from it and removed when it leaves.
    /// Clients learn it from `JoinResponse.screenShareSuffix`.
    public var screenShareSuffix: String
    /// A screen share may join only while its owner is in the channel (3003 otherwise), as the
    /// share of a host that is not there has nobody to speak for it. False: shares stand alone.
    public var screenShareNeedsOwner = true
    /// PEM certificate chain and private key files: when set, signaling is `wss://` and `https://`.
    public var tlsCertificatePath: String?
    public var tlsKeyPath: String?
    /// Bounds on what one client may use (``ServerLimits``).
    public var limits = ServerLimits()
    /// Every room requires end-to-end encryption (a room made by `CreateRoom` may require it alone).
    public var requireEncryption = false
    /// Whether a publisher's answer carries back the `x-google-*` parameters of its VP8 offer (its
    /// start bitrate: libwebrtc reads it from the remote description only). Off only to compare.
    public var answersSenderParameters = true
    /// The web client's directory, served at `/` (nil: no web client).
    public var webRoot: String?
    /// `GET /dev-token?channel=C&uid=U` hands anyone a token with every grant (`--dev` only).
    public var mintsDevTokens = false

    public init(host: String = "127.0.0.1", signalingPort: Int = 7880, mediaPort: Int = 7882, secret: String,
                protocolVersion: ProtocolVersion = .current, pingInterval: Int = 5, pingTimeout: Int = 15, resumeWindow: Int = 20,
                tokenWarning: Int = 30, keyframeRequestInterval: Int = 500, publisherLimitFloorKbps: Int? = 150,
                screenShareSuffix: String = ScreenShareUID.standard, tlsCertificatePath: String? = nil, tlsKeyPath: String? = nil) {
        self.screenShareSuffix = screenShareSuffix
        self.publisherLimitFloorKbps = publisherLimitFloorKbps
        self.tlsCertificatePath = tlsCertificatePath
        self.tlsKeyPath = tlsKeyPath
        self.host = host
        self.signalingPort = signalingPort
        self.mediaPort = mediaPort
        self.secret = secret
        self.protocolVersion = protocolVersion
        self.pingInterval = pingInterval
        self.pingTimeout = pingTimeout
        self.resumeWindow = resumeWindow
        self.tokenWarning = tokenWarning
        self.keyframeRequestInterval = keyframeRequestInterval
    }
}
