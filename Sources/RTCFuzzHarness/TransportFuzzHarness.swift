import NIOCore
import RTCTransport

/// Splits fuzz input into datagrams: each is a 2-byte length and that many bytes (the last may be short).
func datagrams(_ bytes: [UInt8]) -> [[UInt8]] {
    var result: [[UInt8]] = []
    var offset = 0
    while offset + 2 <= bytes.count && result.count < 32 {
        let length = Int(bytes[offset]) << 8 | Int(bytes[offset + 1])
        offset += 2
        let end = min(bytes.count, offset + length)
        result.append(Array(bytes[offset..<end]))
        offset = end
    }
    return result
}

/// One certificate for every fuzz input: generating a key pair per input would dominate the run.
private let fuzzCertificate = try! DTLSCertificate()

extension FuzzHarness {
    /// DTLS records fed to a server endpoint and to a client endpoint that has sent its ClientHello.
    public static func dtls(_ bytes: [UInt8]) {
        let server = try! DTLSEndpoint(role: .server, certificate: fuzzCertificate, remoteFingerprint: fuzzCertificate.fingerprint)
        let client = try! DTLSEndpoint(role: .client, certificate: fuzzCertificate, remoteFingerprint: fuzzCertificate.fingerprint)
        _ = client.start()
        for datagram in datagrams(bytes) {
            for reply in server.receive(datagram) { precondition(reply.count <= 1500, "DTLS reply over the MTU") }
            _ = client.receive(datagram)
        }
        _ = server.handleTimeout()
        _ = server.close()
    }

    /// STUN fed to a lite and a controlling ICE agent. Inputs whose first byte is odd are re-signed
    /// with the agents' password first, so fuzzing also reaches the code behind the integrity check.
    public static func ice(_ bytes: [UInt8]) {
        let credentials = ICECredentials(ufrag: "fuzz", pwd: "fuzzfuzzfuzzfuzzfuzzfuzz")
        let peer = ICECredentials(ufrag: "peer", pwd: "peerpeerpeerpeerpeerpeer")
        let address = try! SocketAddress(ipAddress: "127.0.0.1", port: 5000)
        let lite = ICEAgent(role: .lite, local: credentials)
        let controlling = ICEAgent(role: .controlling, local: credentials)
        _ = lite.start(remote: peer, candidates: [], now: 0)
        let first = controlling.start(remote: peer, candidates: [address], now: 0)
        let resign = bytes.first.map { $0 & 1 == 1 } ?? false
        var now = 0.0
        for var datagram in datagrams(bytes) {
            if resign, var message = try? STUNMessage(parsing: datagram) {
                // Answer the controlling agent's own check so responses match a transaction.
                if message.messageClass != .request, let check = first.datagrams.first, let request = try? STUNMessage(parsing: check.bytes) {
                    message.transactionID = request.transactionID
                }
                datagram = message.serialized(integrityKey: Array(credentials.pwd.utf8), fingerprint: true)
                let peerSigned = message.serialized(integrityKey: Array(peer.pwd.utf8), fingerprint: true)
                _ = controlling.receive(peerSigned, from: address, now: now)
            }
            for reply in lite.receive(datagram, from: address, now: now).datagrams {
                precondition((try? STUNMessage(parsing: reply.bytes)) != nil, "the agent sent unparsable STUN")
            }
            _ = controlling.receive(datagram, from: address, now: now)
            now += 0.5
            _ = controlling.handleTimers(now: now)
            _ = lite.handleTimers(now: now)
        }
        // The same bytes as an ICE-TCP stream (RFC 4571): whole frames come off, never more bytes
        // than arrived, and each goes to the lite agent as a datagram would.
        var stream = ByteBuffer(bytes: bytes)
        var taken = 0
        while let frame = RFC4571.nextFrame(from: &stream) {
            taken += 2 + frame.readableBytes
            precondition(taken + stream.readableBytes <= bytes.count, "RFC 4571 framing took more than arrived")
            _ = lite.receive(Array(frame.readableBytesView), from: address, now: now)
        }
    }
}

/// One sender and receiver pair per SRTP profile for every fuzz input (same keys both ways).
private let fuzzSRTPKeys: [SRTPKeyingMaterial] = SRTPProfile.allCases.map { profile in
    let key = (0..<(profile.keyLength + profile.saltLength)).map { UInt8(truncatingIfNeeded: $0 &* 29 &+ 3) }
    return SRTPKeyingMaterial(profile: profile, localKeyAndSalt: key, remoteKeyAndSalt: key)
}

extension FuzzHarness {
    /// SRTP and SRTCP unprotect on untrusted datagrams. The first byte picks the profile (low two
    /// bits) and whether each datagram is first protected by a peer with the same keys (bit 2),
    /// so fuzzing also reaches the code behind the tag check: what the peer protected must come
    /// back unchanged, and a second time as a replay. Datagrams whose first byte is 200...204
    /// (RTCP packet types) are SRTCP.
    public static func srtp(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        let keys = fuzzSRTPKeys[Int(first & 3)]
        let peerProtects = first & 4 != 0
        let receiver = try! SRTPContext(keys: keys), sender = try! SRTPContext(keys: keys)
        for datagram in datagrams(Array(bytes.dropFirst())) {
            let rtcp = datagram.count > 1 && (200...204).contains(datagram[1])
            var packet = ByteBuffer(bytes: datagram)
            if peerProtects {
                let original = packet
                let protected = (try? rtcp ? sender.protectRTCP(&packet) : sender.protectRTP(&packet)) != nil
                guard protected else {
                    precondition(packet == original, "a refused protect changed the packet")
                    continue
                }
                var again = packet
                let sent = packet
                do {
                    if rtcp { try receiver.unprotectRTCP(&packet) } else { try receiver.unprotectRTP(&packet) }
                } catch {
                    // Only as a replay (an index this input sent before, or older than the window).
                    precondition(error.kind == .replay, "what the peer protected did not unprotect: \(error)")
                    precondition(packet == sent, "a refused unprotect changed the packet")
                    continue
                }
                precondition(packet == original, "SRTP round trip changed the packet")
                let replay = (try? rtcp ? receiver.unprotectRTCP(&again) : receiver.unprotectRTP(&again)) == nil
                precondition(replay, "a replay was accepted")
            } else {
                let original = packet
                if (try? rtcp ? receiver.unprotectRTCP(&packet) : receiver.unprotectRTP(&packet)) == nil {
                    precondition(packet == original, "a refused unprotect changed the packet")
                }
            }
        }
        precondition(receiver.malformedDropped + receiver.authenticationFailures + receiver.replaysDropped >= 0)
    }
}

extension FuzzHarness {
    /// DCEP messages (RFC 8832) and the SDK's data envelopes: what parses serializes back to the
    /// same value; and the same bytes as an SCTP packet into a throwaway usrsctp association (the
    /// shim's input path).
    public static func dcep(_ bytes: [UInt8]) {
        if let message = try? DCEPMessage(parsing: bytes) {
            precondition((try? DCEPMessage(parsing: message.serialized)) == message, "DCEP round trip changed the message")
        }
        if let envelope = try? DataEnvelope(parsing: bytes) {
            precondition((try? DataEnvelope(parsing: envelope.serialized)) == envelope, "envelope round trip changed it")
        }
        SCTPAssociation.fuzzInput(bytes)
    }
}
