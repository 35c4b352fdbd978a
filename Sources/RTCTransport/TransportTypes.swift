import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// What one side tells the other about its transport, carried in SDP.
public struct TransportParameters: Sendable, Hashable {
    public var ice: ICECredentials
    public var fingerprint: SDPFingerprint
    /// Host candidates (where this side listens).
    public var candidates: [SocketAddress]
    /// Passive ICE-TCP host candidates (RFC 6544 `tcptype passive`): where this side accepts TCP.
    public var tcpCandidates: [SocketAddress]
    /// Server-reflexive candidates (what STUN servers saw this side's socket as), offered after the host ones.
    public var reflexiveCandidates: [ReflexiveCandidate] = []
    /// The DTLS role this side takes (`a=setup:active` is the client).
    public var dtlsRole: DTLSEndpoint.Role

    public init(ice: ICECredentials, fingerprint: SDPFingerprint, candidates: [SocketAddress], tcpCandidates: [SocketAddress] = [],
                dtlsRole: DTLSEndpoint.Role) {
        self.ice = ice
        self.fingerprint = fingerprint
        self.candidates = candidates
        self.tcpCandidates = tcpCandidates
        self.dtlsRole = dtlsRole
    }
}

/// A server-reflexive candidate (RFC 8445 §5.1.1.2): the address a STUN server saw a socket's
/// datagrams come from (a NAT's mapping), and the host candidate it stands in front of (`raddr`).
public struct ReflexiveCandidate: Sendable, Hashable {
    public var address: SocketAddress
    public var base: SocketAddress

    public init(address: SocketAddress, base: SocketAddress) {
        self.address = address
        self.base = base
    }
}

/// Settings of a ``MediaTransport``.
public struct MediaTransportConfiguration: Sendable {
    /// Controlling (a client) or ICE-lite (the server).
    public var iceRole: ICEAgent.Role
    public var dtlsRole: DTLSEndpoint.Role
    /// The address the socket binds to: one address, or `0.0.0.0`/`::` for every interface.
    public var host: String
    /// 0 picks a free port.
    public var port: Int
    /// Addresses offered as candidates instead of the socket's own (`--announce-ip`: a cloud VM's
    /// public address is not on its interfaces). Empty: the bound address, or every interface
    /// address for a wildcard bind.
    public var announcedHosts: [String] = []
    /// Whether a wildcard bind offers loopback candidates too (a client does when its server is on
    /// this machine, and only then).
    public var includeLoopbackCandidates = true
    public var iceTimers: ICETimers
    /// Seconds for the DTLS handshake once ICE has connected.
    public var dtlsTimeout: Double
    public var srtpProfiles: [SRTPProfile]
    /// Server: the port of a passive ICE-TCP listener (RFC 6544, framing of RFC 4571) beside the UDP
    /// port, for clients whose UDP is blocked; 0 picks one; nil: none.
    public var tcpPort: Int?
    /// Client: seconds after the start at which ICE-TCP connections to the peer's passive
    /// candidates are made and checked, at a lower priority than UDP (a UDP path that answers is
    /// kept, or taken over from TCP); 0: with the UDP checks, from the start; nil: never.
    public var iceTCPAfter: Double? = 0
    /// Client: the TURN servers' allocations start with the checks; relayed paths are checked
    /// beside the direct ones, at a lower priority (a direct path that answers is kept, or taken
    /// over from the relay), once a relay is permitted and no sooner than this many seconds after
    /// the start; 0: as soon as permitted; nil: never, unless `relayOnly`.
    public var relayAfter: Double? = 0
    /// Client: TURN servers to relay through when the direct paths stay silent, or always with
    /// `relayOnly`.
    public var turnServers: [TURNServer] = []
    /// STUN servers (`stun:` URLs) asked for this side's server-reflexive address when the
    /// transport is bound (``MediaTransport/bind(_:group:)``, waiting at most `stunTimeout`).
    public var stunServers: [SocketAddress] = []
    public var stunTimeout: TimeAmount = .milliseconds(300)
    /// Client: media only through a TURN relay (`iceTransportPolicy: .relay`): no direct checks.
    public var relayOnly = false

    public init(iceRole: ICEAgent.Role, dtlsRole: DTLSEndpoint.Role, host: String = "127.0.0.1", port: Int = 0,
                iceTimers: ICETimers = ICETimers(), dtlsTimeout: Double = 10,
                srtpProfiles: [SRTPProfile] = [.aeadAes128Gcm, .aes128CmSha1_80]) {
        self.iceRole = iceRole
        self.dtlsRole = dtlsRole
        self.host = host
        self.port = port
        self.iceTimers = iceTimers
        self.dtlsTimeout = dtlsTimeout
        self.srtpProfiles = srtpProfiles
    }

    /// A client: controlling ICE, DTLS client.
    public static func client(host: String = "127.0.0.1") -> MediaTransportConfiguration {
        MediaTransportConfiguration(iceRole: .controlling, dtlsRole: .client, host: host)
    }

    /// A server: ICE-lite, DTLS server.
    public static func server(host: String = "127.0.0.1", port: Int = 0) -> MediaTransportConfiguration {
        MediaTransportConfiguration(iceRole: .lite, dtlsRole: .server, host: host, port: port)
    }
}

/// The state of a transport as a whole.
public enum MediaTransportState: Sendable, Hashable {
    case new
    case connecting
    /// ICE and DTLS are up; SRTP flows.
    case connected
    /// Consent checks are going unanswered.
    case disconnected(reason: String)
    case failed(reason: String)
    case closed
}

/// Counters of a transport.
public struct MediaTransportStats: Sendable, Hashable {
    public var packetsSent = 0
    public var bytesSent = 0
    public var packetsReceived = 0
    public var bytesReceived = 0
    /// Datagrams that were not STUN, DTLS, RTP or RTCP, came from an unexpected address, or failed to parse.
    public var datagramsDropped = 0
    public var srtpReplaysDropped = 0
    public var srtpAuthenticationFailures = 0
    /// SRTP/SRTCP packets too short for their header and trailer, or of a stream too many.
    public var srtpMalformedDropped = 0
    /// From the latest answered STUN check, seconds.
    public var roundTripTime: Double?
    /// The selected candidate pair's transport ("udp", or "tcp" for ICE-TCP) and remote address.
    public var transport: String?
    public var remoteAddress: String?
    /// A client's side of the selected pair, from the answer to its check: "host" (the server saw
    /// our own address), "srflx" (a NAT's mapping that a STUN server reported too) or "prflx" (a
    /// mapping only the server saw); and that mapped address when it is not our own.
    public var localCandidateType: String?
    public var mappedAddress: SocketAddress?
}
