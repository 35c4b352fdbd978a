import RTCTransport
import Signaling

/// Where the server listens: one WebSocket port for signaling and one UDP port for media (DESIGN.md §1.5).
public struct ServerConfiguration: Sendable, Hashable {
    public var host: String
    public var signalingPort: Int
    public var mediaPort: Int
    /// The signaling protocol this server speaks.
    public var protocolVersion: ProtocolVersion

    public init(host: String = "127.0.0.1", signalingPort: Int = 7880, mediaPort: Int = 7882,
                protocolVersion: ProtocolVersion = .current) {
        self.host = host
        self.signalingPort = signalingPort
        self.mediaPort = mediaPort
        self.protocolVersion = protocolVersion
    }
}
