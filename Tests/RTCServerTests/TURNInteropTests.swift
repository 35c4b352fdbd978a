import Foundation
import NIOCore
import NIOPosix
import RTCServer
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

    /// coturn on loopback with `use-auth-secret`, on a free port; nil when it is not installed.
    func startCoturn() throws -> (process: Process, port: Int)? {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/turnserver") else { return nil }
        let port = Int.random(in: 20000...29000)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/turnserver")
        process.arguments = ["-n", "--listening-ip", "127.0.0.1", "--relay-ip", "127.0.0.1", "--listening-port", "\(port)",
                             "--min-port", "\(port + 1000)", "--max-port", "\(port + 1100)", "--use-auth-secret",
                             "--static-auth-secret", Self.secret, "--realm", "rtc.test", "--no-tls", "--no-dtls", "--no-cli",
                             "--allow-loopback-peers", "--log-file", "stdout", "--pidfile", NSTemporaryDirectory() + "turn-\(port).pid"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        return (process, port)
    }

    @Test("joined carries the TURN URLs with REST credentials; coturn allocates with them and refuses forged or expired ones")
    func credentialsWork() async throws {
        guard let coturn = try startCoturn() else {
            withKnownIssue("coturn (turnserver) is not installed") { Issue.record("skipped") }
            return
        }
        defer {
            // SIGKILL: the test process's threads block SIGTERM, and a child spawned from one keeps
            // it blocked (coturn never sees a terminate()).
            kill(coturn.process.processIdentifier, SIGKILL)
            coturn.process.waitUntilExit()
        }
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
