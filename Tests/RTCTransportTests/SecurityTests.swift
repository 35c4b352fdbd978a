import Foundation
import NIOCore
import Testing
@testable import RTCTransport

/// Runs a handshake between two endpoints in memory, optionally passing datagrams through `filter`.
@discardableResult
func handshake(_ client: DTLSEndpoint, _ server: DTLSEndpoint, rounds: Int = 20,
               filter: (_ toServer: Bool, _ datagram: [UInt8]) -> [UInt8]? = { _, d in d }) -> Int {
    var toServer = client.start()
    var toClient: [[UInt8]] = server.start()
    var count = 0
    for _ in 0..<rounds {
        var next: [[UInt8]] = []
        for datagram in toServer { if let d = filter(true, datagram) { next += server.receive(d); count += 1 } }
        toServer = []
        for datagram in toClient { if let d = filter(false, datagram) { toServer += client.receive(d); count += 1 } }
        toClient = next
        if toServer.isEmpty && toClient.isEmpty { break }
    }
    return count
}

@Suite("DTLS-SRTP (RFC 5764) over OpenSSL")
struct SecurityTests {
    static func pair(clientProfiles: [SRTPProfile] = [.aeadAes128Gcm, .aes128CmSha1_80],
                     serverProfiles: [SRTPProfile] = [.aeadAes128Gcm, .aes128CmSha1_80],
                     wrongFingerprint: Bool = false) throws -> (DTLSEndpoint, DTLSEndpoint) {
        let clientCertificate = try DTLSCertificate(), serverCertificate = try DTLSCertificate()
        let other = try DTLSCertificate()
        let client = try DTLSEndpoint(role: .client, certificate: clientCertificate,
                                      remoteFingerprint: wrongFingerprint ? other.fingerprint : serverCertificate.fingerprint,
                                      profiles: clientProfiles)
        let server = try DTLSEndpoint(role: .server, certificate: serverCertificate,
                                      remoteFingerprint: clientCertificate.fingerprint, profiles: serverProfiles)
        return (client, server)
    }

    @Test("certificates are P-256 with SHA-256 fingerprints, different per session")
    func certificates() throws {
        let a = try DTLSCertificate(), b = try DTLSCertificate()
        #expect(a.fingerprint.algorithm == "sha-256" && a.fingerprint.digest.count == 32)
        #expect(a.fingerprint != b.fingerprint)
        #expect(SDPFingerprint(parsing: a.fingerprint.value) == a.fingerprint)
    }

    @Test("both sides connect, agree on the profile and export mirrored keys", arguments: [
        ([SRTPProfile.aeadAes128Gcm, .aes128CmSha1_80], SRTPProfile.aeadAes128Gcm),
        ([.aes128CmSha1_80], .aes128CmSha1_80),
    ])
    func handshakeSucceeds(clientProfiles: [SRTPProfile], expected: SRTPProfile) throws {
        let (client, server) = try Self.pair(clientProfiles: clientProfiles)
        handshake(client, server)
        #expect(client.state == .connected && server.state == .connected)
        let clientKeys = try #require(client.keyingMaterial), serverKeys = try #require(server.keyingMaterial)
        #expect(clientKeys.profile == expected && serverKeys.profile == expected)
        #expect(clientKeys.localKeyAndSalt == serverKeys.remoteKeyAndSalt)
        #expect(clientKeys.remoteKeyAndSalt == serverKeys.localKeyAndSalt)
        #expect(clientKeys.localKeyAndSalt != clientKeys.remoteKeyAndSalt)
        #expect(clientKeys.localKeyAndSalt.count == expected.keyLength + expected.saltLength)
    }

    @Test("flights are separate datagrams no larger than the MTU")
    func datagramsRespectMTU() throws {
        let (client, server) = try Self.pair()
        var sizes: [Int] = []
        handshake(client, server) { _, datagram in sizes.append(datagram.count); return datagram }
        #expect(!sizes.isEmpty && sizes.allSatisfy { $0 <= 1200 })
        #expect(client.state == .connected)
    }

    @Test("a lost flight is retransmitted after the timer and the handshake completes")
    func retransmission() throws {
        let (client, server) = try Self.pair()
        var dropped = false
        handshake(client, server) { toServer, datagram in
            // Drop the server's first flight once.
            if !toServer && !dropped { dropped = true; return nil }
            return datagram
        }
        #expect(client.state == .handshaking)
        let delay = try #require(client.retransmitDelay)
        // The first timer is 150 ms, not OpenSSL's 1 s: a lost flight costs a fraction of a second.
        #expect(delay > 0 && delay <= 0.16, "first retransmission after \(delay) s")
        // Wait for OpenSSL's real-time timer, then resend and finish.
        Thread.sleep(forTimeInterval: delay + 0.05)
        var toServer = client.handleTimeout()
        #expect(!toServer.isEmpty)
        // The next timer doubles (RFC 6347 §4.2.4.1).
        let next = try #require(client.retransmitDelay)
        #expect(next > 0.2 && next <= 0.31, "second retransmission after \(next) s")
        for _ in 0..<10 {
            var toClient: [[UInt8]] = []
            for datagram in toServer { toClient += server.receive(datagram) }
            toServer = []
            for datagram in toClient { toServer += client.receive(datagram) }
            if toServer.isEmpty { break }
        }
        #expect(client.state == .connected && server.state == .connected)
    }

    @Test("a certificate that does not match the SDP fingerprint fails with that reason")
    func wrongFingerprint() throws {
        let (client, server) = try Self.pair(wrongFingerprint: true)
        handshake(client, server)
        guard case .failed(let error) = client.state else {
            Issue.record("client state \(client.state)")
            return
        }
        #expect(error.kind == .fingerprintMismatch && error.reason.contains("SDP says"))
        #expect(client.keyingMaterial == nil)
    }

    @Test("no SRTP profile in common fails with that reason")
    func noCommonProfile() throws {
        let (client, server) = try Self.pair(clientProfiles: [.aes128CmSha1_80], serverProfiles: [.aeadAes128Gcm])
        handshake(client, server)
        guard case .failed(let error) = client.state else {
            Issue.record("client state \(client.state)")
            return
        }
        #expect(error.kind == .srtp)
    }

    @Test("a fatal alert from the peer ends the handshake with the alert as the reason")
    func fatalAlert() throws {
        let (client, _) = try Self.pair()
        _ = client.start()
        // DTLS 1.2 record: alert (21), version fe fd, epoch 0, sequence 7, length 2, fatal handshake_failure.
        _ = client.receive([21, 0xFE, 0xFD, 0, 0, 0, 0, 0, 0, 0, 7, 0, 2, 2, 40])
        guard case .failed(let error) = client.state else {
            Issue.record("client state \(client.state)")
            return
        }
        #expect(error.kind == .handshake && error.reason.contains("alert"), "\(error)")
    }

    @Test("close_notify closes the peer")
    func closeNotify() throws {
        let (client, server) = try Self.pair()
        handshake(client, server)
        for datagram in client.close() { _ = server.receive(datagram) }
        #expect(client.state == .closed && server.state == .closed)
    }

    @Test("garbage datagrams do not break a connected session")
    func garbage() throws {
        let (client, server) = try Self.pair()
        handshake(client, server)
        for length in [0, 1, 13, 100] {
            _ = server.receive([UInt8](repeating: 0x17, count: length))
            _ = server.receive((0..<length).map { UInt8(truncatingIfNeeded: $0 * 37) })
        }
        #expect(server.state == .connected)
    }

    @Test("SRTP and SRTCP keyed by the handshake protect and unprotect in both directions; replays and tampering are dropped and counted",
          arguments: SRTPProfile.allCases)
    func srtp(profile: SRTPProfile) throws {
        let (client, server) = try Self.pair(clientProfiles: [profile], serverProfiles: [profile])
        handshake(client, server)
        let a = try SRTPContext(keys: try #require(client.keyingMaterial))
        let b = try SRTPContext(keys: try #require(server.keyingMaterial))
        #expect(a.profile == profile)
        let secret = [UInt8]("a known payload pattern".utf8)
        for sequence: UInt16 in 1...5 {
            let rtp = RTPPacket(header: RTPHeader(payloadType: 96, sequenceNumber: sequence, timestamp: 9, ssrc: 0x55),
                                payload: ByteBuffer(bytes: secret)).serialized
            let protected = try a.protectRTP(rtp)
            #expect(protected.readableBytes == rtp.readableBytes + profile.rtpTagLength)
            #expect(!Array(protected.readableBytesView).contains(subsequence: secret), "payload in the clear")
            #expect(try b.unprotectRTP(protected) == rtp)
            // The same packet again is a replay.
            #expect(throws: SRTPError.self) { try b.unprotectRTP(protected) }
            let back = try b.protectRTP(rtp)
            #expect(try a.unprotectRTP(back) == rtp)
        }
        #expect(b.replaysDropped == 5)
        let rtcp = RTCPPacket.serializeCompound([.receiverReport(ReceiverReport(ssrc: 0x55)), .goodbye(Goodbye(sources: [0x55]))])
        #expect(try b.unprotectRTCP(try a.protectRTCP(rtcp)) == rtcp)
        // A flipped bit fails authentication.
        var tampered = try a.protectRTP(RTPPacket(header: RTPHeader(payloadType: 96, sequenceNumber: 99, timestamp: 1, ssrc: 0x55),
                                                  payload: ByteBuffer(bytes: secret)).serialized)
        tampered.setInteger(tampered.getInteger(at: 14, as: UInt8.self)! ^ 0x01, at: 14)
        #expect { try b.unprotectRTP(tampered) } throws: { ($0 as? SRTPError)?.kind == .authentication }
        #expect(b.authenticationFailures == 1)
        // A new SSRC gets a stream on the fly.
        let other = RTPPacket(header: RTPHeader(payloadType: 111, sequenceNumber: 1, timestamp: 1, ssrc: 0x77),
                              payload: ByteBuffer(bytes: [1, 2, 3])).serialized
        #expect(try b.unprotectRTP(try a.protectRTP(other)) == other)
    }
}

extension Array where Element: Equatable {
    func contains(subsequence: [Element]) -> Bool {
        guard !subsequence.isEmpty, count >= subsequence.count else { return false }
        return (0...(count - subsequence.count)).contains { Array(self[$0..<($0 + subsequence.count)]) == subsequence }
    }
}
