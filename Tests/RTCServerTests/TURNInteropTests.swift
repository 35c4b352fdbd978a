import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RTCServer
import RTCTestSupport
import RTCTransport
import Signaling
import TestKit
import Testing

/// The TURN servers a server hands out in `joined`, checked against coturn: its credentials (TURN
/// REST API form) get a relay allocated; a forged or expired one does not.
@Suite("TURN credentials against coturn", .serialized)
struct TURNInteropTests {
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
    static let secret = "turn-shared-secret"

    /// coturn on loopback with `use-auth-secret`, on a free port (TLS on the next one when given a
    /// certificate and key); nil when it is not installed.
    func startCoturn(tls: (certificate: String, key: String)? = nil) throws -> (process: ChildProcess, port: Int)? {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/turnserver") else { return nil }
        let port = Int.random(in: 20000...29000)
        let secure = tls.map { ["--cert", $0.certificate, "--pkey", $0.key, "--tls-listening-port", "\(port + 1)"] } ?? ["--no-tls"]
        let arguments = ["/usr/bin/turnserver", "-n", "--listening-ip", "127.0.0.1", "--relay-ip", "127.0.0.1", "--listening-port", "\(port)",
                         "--min-port", "\(port + 1000)", "--max-port", "\(port + 1100)", "--use-auth-secret",
                         "--static-auth-secret", Self.secret, "--realm", "rtc.test", "--no-dtls", "--no-cli",
                         "--allow-loopback-peers", "--log-file", "stdout", "--pidfile", NSTemporaryDirectory() + "turn-\(port).pid"] + secure
        let process = try ChildProcess(arguments, output: .discarded, errors: .discarded)
        return (process, port)
    }

    @Test("joined carries the TURN URLs with REST credentials; coturn allocates with them and refuses forged or expired ones")
    func credentialsWork() async throws {
        guard let coturn = try startCoturn() else {
            withKnownIssue("coturn (turnserver) is not installed") { Issue.record("skipped") }
            return
        }
        defer { coturn.process.stop() }
        var configuration = ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: "test-secret")
        configuration.turnURLs = ["turn:127.0.0.1:\(coturn.port)?transport=udp"]
        configuration.turnSecret = Self.secret
        configuration.turnCredentialSeconds = 600
        let sfu = try await SFU.start(configuration: configuration, group: Self.group)
        let client = TestClient(uid: "1001", sfu: sfu, group: Self.group)
        guard case .joined(let joined)? = try await client.join(channel: "room", token: testToken(uid: "1001")) else {
            Issue.record("did not join")
            return
        }
        let server = try #require(joined.iceServers.first)
        #expect(server.urls == configuration.turnURLs)
        let username = try #require(server.username), credential = try #require(server.credential)
        let expiry = Int64(username.split(separator: ":").first ?? "") ?? 0
        #expect(username.hasSuffix(":1001") && abs(expiry - Int64(Date().timeIntervalSince1970) - 600) < 30, "\(username)")
        // The credential is what `openssl` computes: base64(HMAC-SHA1(secret, username)).
        let openssl = try runTool(["sh", "-c", "printf '%s' '\(username)' | openssl dgst -sha1 -hmac '\(Self.secret)' -binary | base64"])
        #expect(openssl.out.trimmingCharacters(in: .whitespacesAndNewlines) == credential)

        let url = try ICEServerURL(parsing: server.urls[0])
        let address = try SocketAddress(ipAddress: url.host, port: url.port)
        // coturn may take a moment to listen.
        var allocation: TURNAllocation?
        for _ in 0..<20 where allocation == nil {
            allocation = try? await TURNClient.allocate(server: address, username: username, password: credential, group: Self.group, timeout: 1)
            if allocation == nil { try await Task.sleep(for: .milliseconds(200)) }
        }
        let relay = try #require(allocation, "coturn did not allocate with the server's credentials")
        #expect(relay.relayed.port > 0 && relay.lifetimeSeconds > 0)
        print("TURN: coturn allocated \(relay.relayed) for \(username) (lifetime \(relay.lifetimeSeconds) s)")

        let forged = TURNCredentials.make(secret: "not-the-secret", uid: "1001", now: Int64(Date().timeIntervalSince1970), ttl: 600)
        let expired = TURNCredentials.make(secret: Self.secret, uid: "1001", now: Int64(Date().timeIntervalSince1970) - 7200, ttl: 600)
        for (name, bad) in [("forged", forged), ("expired", expired)] {
            do {
                _ = try await TURNClient.allocate(server: address, username: bad.username, password: bad.credential, group: Self.group, timeout: 2)
                Issue.record("coturn allocated with a \(name) credential")
            } catch let error as TURNError {
                #expect(error.description.contains("refused") && error.description.contains("401"), "\(name): \(error)")
            }
        }
        do {
            _ = try await TURNClient.allocate(server: try SocketAddress(ipAddress: "127.0.0.1", port: 9), username: username,
                                              password: credential, group: Self.group, timeout: 1)
            Issue.record("an allocation from a port nothing listens on")
        } catch let error as TURNError {
            #expect(error.description.contains("no answer"), "\(error)")
        }
        await client.close()
        await sfu.shutdown()
    }

    /// Waits until coturn answers an allocation (it takes a moment to listen).
    func ready(_ port: Int) async throws -> Bool {
        let made = TURNCredentials.make(secret: Self.secret, uid: "probe", now: Int64(Date().timeIntervalSince1970), ttl: 600)
        let address = try SocketAddress(ipAddress: "127.0.0.1", port: port)
        for _ in 0..<20 {
            if (try? await TURNClient.allocate(server: address, username: made.username, password: made.credential, group: Self.group,
                                               timeout: 1)) != nil { return true }
            try await Task.sleep(for: .milliseconds(200))
        }
        return false
    }

    /// Runs `body` with coturn's port while coturn runs (killed after); records a known issue when
    /// coturn is not installed.
    func withCoturn(tls: (certificate: String, key: String)? = nil, _ body: (Int) async throws -> Void) async throws {
        guard let coturn = try startCoturn(tls: tls) else {
            withKnownIssue("coturn (turnserver) is not installed") { Issue.record("skipped") }
            return
        }
        defer { coturn.process.stop() }
        #expect(try await ready(coturn.port), "coturn did not answer")
        try await body(coturn.port)
    }

    /// A relay-only client transport through `server`, started towards a new session of `port`.
    func relayClient(_ server: TURNServer, to port: SharedMediaPort) async throws -> (client: MediaTransport, session: MediaSession) {
        var configuration = MediaTransportConfiguration.client()
        configuration.turnServers = [server]
        configuration.relayOnly = true
        let client = try await MediaTransport.bind(configuration, group: Self.group)
        let session = try await port.makeSession(remote: TransportParameters(
            ice: client.localParameters.ice, fingerprint: client.localParameters.fingerprint, candidates: [], dtlsRole: .client)).get()
        return (client, session)
    }

    @Test("relay only, through coturn over UDP and over TCP: ICE, DTLS and SRTP run through the relay both ways, and the stats name it",
          arguments: [TURNServer.Transport.udp, .tcp])
    func relayOnly(transport: TURNServer.Transport) async throws {
        try await withCoturn { coturnPort in
            let port = try await SharedMediaPort.bind(.server(), group: Self.group)
            let made = TURNCredentials.make(secret: Self.secret, uid: "1001", now: Int64(Date().timeIntervalSince1970), ttl: 600)
            let (client, session) = try await relayClient(TURNServer(address: try SocketAddress(ipAddress: "127.0.0.1", port: coturnPort),
                                                                     transport: transport, username: made.username, password: made.credential),
                                                          to: port)
            let atServer = NIOLockedValueBox<[UInt16]>([]), atClient = NIOLockedValueBox<[UInt16]>([])
            session.onRTP = { packet in atServer.withLockedValue { $0.append(packet.getInteger(at: 2, as: UInt16.self) ?? 0) } }
            client.onRTP = { packet in atClient.withLockedValue { $0.append(packet.getInteger(at: 2, as: UInt16.self) ?? 0) } }
            client.start(remote: port.localParameters(credentials: session.localParameters.ice))
            let connected = await eventually(10) { try await client.state.get() == .connected }
            let state = try await client.state.get()
            #expect(connected, "\(state)")
            let stats = try await client.stats.get()
            #expect(stats.transport == "relay/\(transport.rawValue)", "\(stats)")
            // The server sees the relayed address (coturn's relay range), not the client's socket.
            let seen = try #require(try await session.selectedAddress.get())
            #expect(seen.port != client.localAddress?.port && (coturnPort + 1000...coturnPort + 1100).contains(seen.port ?? 0), "\(seen)")
            for sequence in UInt16(0)..<50 {
                client.sendRTP(Self.rtp(ssrc: 7, sequence: sequence))
                session.sendRTP(Self.rtp(ssrc: 8, sequence: sequence))
            }
            #expect(await eventually { atServer.withLockedValue { $0.count } == 50 })
            #expect(await eventually { atClient.withLockedValue { $0.count } == 50 })
            print("TURN relay over \(transport.rawValue): connected through \(seen), 50/50 packets each way")
            await client.close()
            await port.close()
        }
    }

    @Test("relay only over TLS (turns:) to coturn: connects when the certificate is trusted, fails with the TLS error when it is not")
    func relayOverTLS() async throws {
        let dir = temporaryDirectory("turn-tls"), certificate = "\(dir)/turn.pem", key = "\(dir)/turn.key"
        let made = try runTool(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                                "-keyout", key, "-out", certificate, "-days", "1", "-subj", "/CN=turn.test",
                                "-addext", "subjectAltName=IP:127.0.0.1"])
        #expect(made.status == 0, "\(made.err)")
        try await withCoturn(tls: (certificate, key)) { coturnPort in
            let port = try await SharedMediaPort.bind(.server(), group: Self.group)
            let credentials = TURNCredentials.make(secret: Self.secret, uid: "1001", now: Int64(Date().timeIntervalSince1970), ttl: 600)
            for trusted in [true, false] {
                let (client, session) = try await relayClient(
                    TURNServer(address: try SocketAddress(ipAddress: "127.0.0.1", port: coturnPort + 1), transport: .tls,
                               username: credentials.username, password: credentials.credential, hostname: "127.0.0.1",
                               trustedCertificates: trusted ? certificate : nil), to: port)
                client.start(remote: port.localParameters(credentials: session.localParameters.ice))
                if trusted {
                    #expect(await eventually(10) { try await client.state.get() == .connected })
                    let stats = try await client.stats.get()
                    #expect(stats.transport == "relay/tls", "\(stats)")
                    print("TURN relay over TLS: \(stats.transport ?? "?") \(stats.remoteAddress ?? "?")")
                } else {
                    #expect(await eventually(10) { if case .failed = try await client.state.get() { true } else { false } })
                    let state = try await client.state.get()
                    #expect("\(state)".contains("TLS"), "\(state)")
                }
                await client.close()
                await port.remove(session)
            }
            await port.close()
        }
    }

    @Test("relay only with a TURN server that refuses the credential, or does not answer: the transport fails with that reason, within the connect timeout")
    func relayRefused() async throws {
        try await withCoturn { coturnPort in
            let port = try await SharedMediaPort.bind(.server(), group: Self.group)
            for (name, server, reason) in [
                ("forged", TURNServer(address: try SocketAddress(ipAddress: "127.0.0.1", port: coturnPort), transport: .udp,
                                      username: "\(Int(Date().timeIntervalSince1970) + 600):1001", password: "forged"), "401"),
                ("silent", TURNServer(address: try SocketAddress(ipAddress: "127.0.0.1", port: 9), transport: .udp,
                                      username: "u", password: "p"), "no answer"),
                ("closed", TURNServer(address: try SocketAddress(ipAddress: "127.0.0.1", port: 9), transport: .tcp,
                                      username: "u", password: "p"), "TCP"),
            ] {
                let (client, session) = try await relayClient(server, to: port)
                let started = Date()
                client.start(remote: port.localParameters(credentials: session.localParameters.ice))
                #expect(await eventually(11) { if case .failed = try await client.state.get() { true } else { false } })
                let state = try await client.state.get()
                #expect("\(state)".contains(reason), "\(name): \(state)")
                #expect(Date().timeIntervalSince(started) <= 10.5, "\(name): failed after \(Date().timeIntervalSince(started)) s")
                await client.close()
                await port.remove(session)
            }
            await port.close()
        }
    }

    @Test("rtc-cli join --relay-only whose TURN server refuses the credentials the server hands out: it ends within the connect timeout, exits non-zero, and its one line names TURN and the 401")
    func cliRelayRefused() async throws {
        try await withCoturn { coturnPort in
            let server = try ChildProcess([cliPath, "server", "--port", "0", "--udp-port", "0", "--secret", "cli-turn-secret-0123",
                                           "--turn-url", "turn:127.0.0.1:\(coturnPort)?transport=udp", "--turn-secret", "not-coturns-secret",
                                           "--log-level", "error"])
            defer { server.stop() }
            var url: String?
            _ = await eventually(20) {
                url = server.output.lazy.compactMap { $0.split(separator: " ").first { $0.hasPrefix("ws://") }.map(String.init) }.first
                return url != nil
            }
            let signaling = try #require(url, "server: \(server.errorText)")
            func join(_ uid: String, _ extra: [String]) throws -> ChildProcess {
                try ChildProcess([cliPath, "join", "--server", signaling, "--channel", "turn", "--uid", uid, "--secret", "cli-turn-secret-0123",
                                  "--quiet"] + extra)
            }
            let publisher = try join("pub", ["--video", "pattern", "--duration", "20"])
            defer { publisher.stop() }
            try await Task.sleep(for: .seconds(1))
            let started = Date()
            let viewer = try join("viewer", ["--video", "none", "--audio", "none", "--relay-only", "--duration", "30"])
            defer { viewer.stop() }
            let status = await viewer.wait(20)
            let elapsed = Date().timeIntervalSince(started)
            let line = viewer.errorText.split(separator: "\n").first { $0.contains("media failed") }.map(String.init) ?? ""
            #expect(status != nil && status != 0, "still running after \(elapsed) s: \(viewer.output.suffix(3)) \(viewer.errorText)")
            #expect(line.contains("TURN") && line.contains("401"), "\(viewer.errorText)")
            #expect(elapsed < 12, "it took \(elapsed) s")
            print("relay-only, TURN refusing: rtc-cli join ended after \(String(format: "%.1f", elapsed)) s: \(line)")
        }
    }

    static func rtp(ssrc: UInt32, sequence: UInt16) -> ByteBuffer {
        RTPPacket(header: RTPHeader(payloadType: 96, sequenceNumber: sequence, timestamp: UInt32(sequence) * 3000, ssrc: ssrc),
                  payload: ByteBuffer(bytes: [1, 2, 3])).serialized
    }

    @Test("ICE server URLs: parsed with defaults, refused with a clear message", arguments: [
        ("turn:example.com", "turn:example.com:3478?transport=udp"),
        ("turn:10.0.0.1:3479?transport=tcp", "turn:10.0.0.1:3479?transport=tcp"),
        ("turns:turn.example.com", "turns:turn.example.com:5349?transport=tcp"),
        ("stun:[2001:db8::1]:19302", "stun:[2001:db8::1]:19302"),
        ("http://example.com", nil),
        ("turn:", nil),
        ("turn:host:99999", nil),
        ("turn:host?transport=sctp", nil),
    ] as [(String, String?)])
    func urls(text: String, expected: String?) {
        do {
            let url = try ICEServerURL(parsing: text)
            #expect(url.description == expected, "\(text)")
        } catch {
            #expect(expected == nil, "\(text): \(error)")
            #expect(!error.description.isEmpty)
        }
    }
}
