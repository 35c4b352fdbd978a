import NIOCore
@testable import RTCCore
import RTCTransport
import Testing

@Suite("Publisher transport")
struct PublisherTransportTests {
    /// The connect failure reads the same whichever gives up first (the ICE agent's own timeout or
    /// the connect deadline), and names every candidate tried.
    @Test("a failed connect names its reason and the server's candidates", arguments: [
        ("no STUN answer within 10.0 s", ["192.0.2.1"], ["192.0.2.1"], "(no STUN answer within 10.0 s; the server's candidates: udp 192.0.2.1:7882, tcp 192.0.2.1:7881)"),
        ("no answer within 10 s", ["2001:db8::1"], [], "(no answer within 10 s; the server's candidates: udp [2001:db8::1]:7882)"),
        ("no answer within 10 s", [], [], "(no answer within 10 s; the server's candidates: none)"),
    ])
    func notConnected(reason: String, udp: [String], tcp: [String], tail: String) throws {
        let remote = TransportParameters(ice: ICECredentials(ufrag: "srvr", pwd: "serverpasswordserverpass"),
                                         fingerprint: SDPFingerprint(algorithm: "sha-256", digest: [UInt8](repeating: 1, count: 32)),
                                         candidates: try udp.map { try SocketAddress(ipAddress: $0, port: 7882) },
                                         tcpCandidates: try tcp.map { try SocketAddress(ipAddress: $0, port: 7881) },
                                         dtlsRole: .server)
        let message = PublisherTransport.notConnected(reason: reason, remote: remote)
        #expect(message == "the publisher transport did not connect " + tail)
    }
}
