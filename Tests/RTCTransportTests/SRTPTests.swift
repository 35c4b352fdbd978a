import CSRTP
import NetSim
import NIOCore
import Testing
@testable import RTCTransport

/// Debian's libsrtp2 (on NSS), linked by this test target alone: an implementation we did not
/// write, that every packet of ours must satisfy and whose packets ours must accept.
final class LibSRTPOracle {
    static let initialized: Bool = srtp_init() == srtp_err_status_ok
    private let session: srtp_t

    init(profile: SRTPProfile, keyAndSalt: [UInt8], inbound: Bool, window: Int = 1024) throws {
        precondition(Self.initialized, "srtp_init failed")
        var created: srtp_t?
        let status = keyAndSalt.withUnsafeBufferPointer {
            rtc_srtp_oracle_create(&created, Int32(profile.rawValue), $0.baseAddress, inbound ? 1 : 0, UInt(window))
        }
        guard status == srtp_err_status_ok, let created else { throw SRTPError(.setup, "libsrtp2 srtp_create: \(status.rawValue)") }
        session = created
    }

    deinit { srtp_dealloc(session) }

    /// The protected bytes, or nil with libsrtp's status.
    func protect(_ bytes: [UInt8], rtcp: Bool) -> [UInt8]? {
        var buffer = bytes + [UInt8](repeating: 0, count: 64)
        var length = Int32(bytes.count)
        let status = buffer.withUnsafeMutableBytes {
            rtcp ? srtp_protect_rtcp(session, $0.baseAddress, &length) : srtp_protect(session, $0.baseAddress, &length)
        }
        return status == srtp_err_status_ok ? Array(buffer.prefix(Int(length))) : nil
    }

    func unprotect(_ bytes: [UInt8], rtcp: Bool) -> [UInt8]? {
        var buffer = bytes
        var length = Int32(bytes.count)
        guard !bytes.isEmpty else { return nil }
        let status = buffer.withUnsafeMutableBytes {
            rtcp ? srtp_unprotect_rtcp(session, $0.baseAddress, &length) : srtp_unprotect(session, $0.baseAddress, &length)
        }
        return status == srtp_err_status_ok ? Array(buffer.prefix(Int(length))) : nil
    }
}

@Suite("SRTP/SRTCP over OpenSSL (RFC 3711, RFC 7714)")
struct SRTPTests {
    typealias V = SRTPVectors
    static func hex(_ text: String) -> [UInt8] { SRTPVectors.bytes(text) }
    static func bytes(_ buffer: ByteBuffer) -> [UInt8] { Array(buffer.readableBytesView) }

    // MARK: Key derivation and keystreams

    @Test("key derivation matches RFC 3711 B.3 (AES-128) and RFC 6188 §7.2 (AES-256)")
    func keyDerivation() throws {
        let b3 = (key: Self.hex(V.RFC3711KeyDerivation.masterKey), salt: Self.hex(V.RFC3711KeyDerivation.masterSalt))
        #expect(try SRTPSessionKeys.derive(masterKey: b3.key, masterSalt: b3.salt, label: 0, length: 16) == Self.hex(V.RFC3711KeyDerivation.cipherKey))
        #expect(try SRTPSessionKeys.derive(masterKey: b3.key, masterSalt: b3.salt, label: 2, length: 14) == Self.hex(V.RFC3711KeyDerivation.cipherSalt))
        #expect(try SRTPSessionKeys.derive(masterKey: b3.key, masterSalt: b3.salt, label: 1, length: 94) == Self.hex(V.RFC3711KeyDerivation.authKeyStream94))
        let keys = try SRTPSessionKeys(profile: .aes128CmSha1_80, masterKey: b3.key, masterSalt: b3.salt)
        #expect(keys.rtpKey == Self.hex(V.RFC3711KeyDerivation.cipherKey))
        #expect(keys.rtpSalt == Self.hex(V.RFC3711KeyDerivation.cipherSalt))
        #expect(keys.rtpAuth == Self.hex(V.RFC3711KeyDerivation.authKey))
        let r6188 = (key: Self.hex(V.RFC6188KeyDerivation.masterKey), salt: Self.hex(V.RFC6188KeyDerivation.masterSalt))
        #expect(try SRTPSessionKeys.derive(masterKey: r6188.key, masterSalt: r6188.salt, label: 0, length: 32) == Self.hex(V.RFC6188KeyDerivation.cipherKey))
        #expect(try SRTPSessionKeys.derive(masterKey: r6188.key, masterSalt: r6188.salt, label: 2, length: 14) == Self.hex(V.RFC6188KeyDerivation.cipherSalt))
        #expect(try SRTPSessionKeys.derive(masterKey: r6188.key, masterSalt: r6188.salt, label: 1, length: 20) == Self.hex(V.RFC6188KeyDerivation.authKey))
        #expect(throws: SRTPError.self) { try SRTPSessionKeys(profile: .aeadAes256Gcm, masterKey: b3.key, masterSalt: b3.salt) }
    }

    @Test("the AES-CM keystream matches RFC 3711 B.2")
    func counterModeKeystream() throws {
        let cipher = try SRTPCipher(profile: .aes128CmSha1_80, key: Self.hex(V.RFC3711AESCM.sessionKey), salt: Self.hex(V.RFC3711AESCM.sessionSalt),
                                    authKey: [UInt8](repeating: 0, count: 20), encrypt: true)
        var zeros = [UInt8](repeating: 0, count: 48)
        let ok = zeros.withUnsafeMutableBufferPointer { cipher.counterMode($0.baseAddress!, count: 48, ssrc: 0, index: 0) }
        #expect(ok)
        #expect(zeros == Self.hex(V.RFC3711AESCM.keystreamFirstBlocks))
    }

    // MARK: Published packets

    static func sessionContext(_ profile: SRTPProfile, key: [UInt8], salt: [UInt8]) throws -> SRTPContext {
        let keys = SRTPSessionKeys(rtpKey: key, rtpAuth: [], rtpSalt: salt, rtcpKey: key, rtcpAuth: [], rtcpSalt: salt)
        return try SRTPContext(profile: profile, local: keys, remote: keys)
    }

    @Test("AES-GCM SRTP and SRTCP packets match RFC 7714 §16-17 both ways", arguments: [
        (SRTPProfile.aeadAes128Gcm, V.RFC7714.key128, V.RFC7714.srtp128Protected, V.RFC7714.srtcp128Protected, V.RFC7714.srtcp128TagOnlyProtected),
        (.aeadAes256Gcm, V.RFC7714.key256, V.RFC7714.srtp256Protected, V.RFC7714.srtcp256Protected, V.RFC7714.srtcp256TagOnlyProtected),
    ])
    func rfc7714(profile: SRTPProfile, key: String, srtp: String, srtcp: String, srtcpTagOnly: String) throws {
        let salt = Self.hex(V.RFC7714.salt)
        let sender = try Self.sessionContext(profile, key: Self.hex(key), salt: salt)
        var packet = ByteBuffer(bytes: Self.hex(V.RFC7714.rtpPacket))
        try sender.protectRTP(&packet)
        #expect(Self.bytes(packet) == Self.hex(srtp))
        sender.sentRTCP[V.RFC7714.rtcpSSRC] = V.RFC7714.srtcpIndex
        var report = ByteBuffer(bytes: Self.hex(V.RFC7714.rtcpPacket))
        try sender.protectRTCP(&report)
        #expect(Self.bytes(report) == Self.hex(srtcp))

        let receiver = try Self.sessionContext(profile, key: Self.hex(key), salt: salt)
        var back = ByteBuffer(bytes: Self.hex(srtp))
        try receiver.unprotectRTP(&back)
        #expect(Self.bytes(back) == Self.hex(V.RFC7714.rtpPacket))
        var backReport = ByteBuffer(bytes: Self.hex(srtcp))
        try receiver.unprotectRTCP(&backReport)
        #expect(Self.bytes(backReport) == Self.hex(V.RFC7714.rtcpPacket))
        // E = 0: authenticated, not encrypted (a fresh receiver: the index was taken).
        let other = try Self.sessionContext(profile, key: Self.hex(key), salt: salt)
        var tagOnly = ByteBuffer(bytes: Self.hex(srtcpTagOnly))
        try other.unprotectRTCP(&tagOnly)
        #expect(Self.bytes(tagOnly) == Self.hex(V.RFC7714.rtcpPacket))
    }

    @Test("full packets from master keys match libsrtp's reference packets", arguments: [
        (SRTPProfile.aes128CmSha1_80, V.LibSRTPAESCM128HMACSHA180.masterKey + V.LibSRTPAESCM128HMACSHA180.masterSalt,
         V.LibSRTPAESCM128HMACSHA180.srtpProtected, V.LibSRTPAESCM128HMACSHA180.srtcpProtected),
        (.aeadAes128Gcm, V.LibSRTPAEADAES128GCM.masterKey + V.LibSRTPAEADAES128GCM.masterSalt,
         V.LibSRTPAEADAES128GCM.srtpProtected, V.LibSRTPAEADAES128GCM.srtcpProtected),
    ])
    func referencePackets(profile: SRTPProfile, keyAndSalt: String, srtp: String, srtcp: String) throws {
        let key = Self.hex(keyAndSalt)
        let context = try SRTPContext(keys: SRTPKeyingMaterial(profile: profile, localKeyAndSalt: key, remoteKeyAndSalt: key))
        let rtp = Self.hex(V.LibSRTPAESCM128HMACSHA180.rtpPacket), rtcp = Self.hex(V.LibSRTPAESCM128HMACSHA180.rtcpPacket)
        var packet = ByteBuffer(bytes: rtp)
        try context.protectRTP(&packet)
        #expect(Self.bytes(packet) == Self.hex(srtp))
        var report = ByteBuffer(bytes: rtcp)
        try context.protectRTCP(&report)
        #expect(Self.bytes(report) == Self.hex(srtcp), "the first SRTCP index is 1, as libsrtp's")
        try context.unprotectRTP(&packet)
        try context.unprotectRTCP(&report)
        #expect(Self.bytes(packet) == rtp && Self.bytes(report) == rtcp)
    }

    // MARK: Against libsrtp2, packet by packet

    /// An RTP stream of `count` packets from sequence number `first` (wrapping through 0),
    /// payloads 0-1200 bytes, some with CSRCs and a header extension.
    static func stream(count: Int, first: UInt16, ssrc: UInt32, seed: UInt64) -> [[UInt8]] {
        var random = SeededRandom(seed: seed)
        return (0..<count).map { index in
            let sequence = first &+ UInt16(truncatingIfNeeded: index)
            var header = RTPHeader(payloadType: 96, sequenceNumber: sequence, timestamp: UInt32(index) &* 3000, ssrc: ssrc)
            if index % 5 == 1 { header.csrcs = [0x1111, UInt32(index)] }
            var packet = RTPPacket(header: header, payload: ByteBuffer(bytes: (0..<random.next(upTo: 1200)).map { _ in UInt8(random.next(upTo: 256)) }))
            if index % 3 == 0 { packet.header.setExtension(id: 3, data: ByteBuffer(bytes: [UInt8(index & 0xFF), 2, 3])) }
            return Array(packet.serialized.readableBytesView)
        }
    }

    /// `a` with one packet of `b` after every fourth (the rest of `b` at the end).
    static func interleave(_ a: [[UInt8]], _ b: [[UInt8]]) -> [[UInt8]] {
        var out: [[UInt8]] = [], rest = b[...]
        for (index, packet) in a.enumerated() {
            out.append(packet)
            if index % 4 == 3, let next = rest.popFirst() { out.append(next) }
        }
        return out + rest
    }

    /// What a network makes of a list of packets: adjacent pairs swapped every 7th, every 11th
    /// sent twice (the copy later), and before every 13th a truncated copy. Returns the bytes and
    /// which are the first good arrival of their packet.
    static func deliver(_ packets: [[UInt8]], tagLength: Int) -> [(bytes: [UInt8], original: Int?)] {
        var order = Array(packets.indices)
        for i in stride(from: 6, to: order.count - 1, by: 7) { order.swapAt(i, i + 1) }
        var out: [(bytes: [UInt8], original: Int?)] = []
        for (position, index) in order.enumerated() {
            if position % 13 == 12 { out.append((Array(packets[index].dropLast(1 + position % tagLength)), nil)) }
            out.append((packets[index], index))
            if position % 11 == 10 { out.append((packets[index], nil)) }
        }
        return out
    }

    @Test("packets ours protects unprotect with libsrtp2, and the reverse, across a sequence wrap with reordering, replays and truncation",
          arguments: SRTPProfile.allCases)
    func againstLibSRTP(profile: SRTPProfile) throws {
        let local = (0..<(profile.keyLength + profile.saltLength)).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 1) }
        let remote = (0..<(profile.keyLength + profile.saltLength)).map { UInt8(truncatingIfNeeded: $0 &* 17 &+ 5) }
        let ours = try SRTPContext(keys: SRTPKeyingMaterial(profile: profile, localKeyAndSalt: local, remoteKeyAndSalt: remote))
        let theirSender = try LibSRTPOracle(profile: profile, keyAndSalt: remote, inbound: false)
        let theirReceiver = try LibSRTPOracle(profile: profile, keyAndSalt: local, inbound: true)
        // Two streams sent by turns (each wraps): the sender's rollover counters are kept per SSRC.
        let clear = Self.interleave(Self.stream(count: 400, first: 65_400, ssrc: 0xCAFE, seed: 7),
                                    Self.stream(count: 100, first: 65_500, ssrc: 0xD00D, seed: 8))
        // Ours → libsrtp2.
        var protected: [[UInt8]] = []
        for packet in clear {
            var buffer = ByteBuffer(bytes: packet)
            try ours.protectRTP(&buffer)
            protected.append(Self.bytes(buffer))
        }
        var accepted = 0
        for arrival in Self.deliver(protected, tagLength: profile.rtpTagLength) {
            let result = theirReceiver.unprotect(arrival.bytes, rtcp: false)
            if let original = arrival.original {
                #expect(result == clear[original], "packet \(original) did not come through libsrtp2")
                accepted += 1
            } else {
                #expect(result == nil, "libsrtp2 accepted a replay or a truncated packet")
            }
        }
        #expect(accepted == clear.count)
        // libsrtp2 → ours.
        let reverse = Self.stream(count: 400, first: 65_300, ssrc: 0xBEEF, seed: 9)
        let theirs = reverse.map { theirSender.protect($0, rtcp: false)! }
        var refused = 0
        for arrival in Self.deliver(theirs, tagLength: profile.rtpTagLength) {
            var buffer = ByteBuffer(bytes: arrival.bytes)
            if let original = arrival.original {
                try ours.unprotectRTP(&buffer)
                #expect(Self.bytes(buffer) == reverse[original])
            } else {
                #expect(throws: SRTPError.self) { try ours.unprotectRTP(&buffer) }
                #expect(Self.bytes(buffer) == arrival.bytes, "a refused packet is left as it came")
                refused += 1
            }
        }
        #expect(ours.replaysDropped + ours.authenticationFailures + ours.malformedDropped == refused)
        #expect(ours.replaysDropped > 0 && ours.authenticationFailures + ours.malformedDropped > 0)

        // SRTCP both ways: compounds of reports for a few SSRCs.
        for round in 0..<40 {
            let ssrc = UInt32(0xCAFE + round % 3)
            let compound = Array(RTCPPacket.serializeCompound([
                .receiverReport(ReceiverReport(ssrc: ssrc)), .goodbye(Goodbye(sources: [ssrc, UInt32(round)])),
            ]).readableBytesView)
            var buffer = ByteBuffer(bytes: compound)
            try ours.protectRTCP(&buffer)
            #expect(theirReceiver.unprotect(Self.bytes(buffer), rtcp: true) == compound)
            #expect(theirReceiver.unprotect(Self.bytes(buffer), rtcp: true) == nil, "an SRTCP replay")
            let back = try #require(theirSender.protect(compound, rtcp: true))
            var theirBuffer = ByteBuffer(bytes: back)
            try ours.unprotectRTCP(&theirBuffer)
            #expect(Self.bytes(theirBuffer) == compound)
            var again = ByteBuffer(bytes: back)
            #expect { try ours.unprotectRTCP(&again) } throws: { ($0 as? SRTPError)?.kind == .replay }
        }
    }

    // MARK: In place

    @Test("a packet with room for its trailer is protected and unprotected in its own storage", arguments: SRTPProfile.allCases)
    func inPlace(profile: SRTPProfile) throws {
        let key = [UInt8](repeating: 9, count: profile.keyLength + profile.saltLength)
        let context = try SRTPContext(keys: SRTPKeyingMaterial(profile: profile, localKeyAndSalt: key, remoteKeyAndSalt: key))
        let clear = RTPPacket(header: RTPHeader(payloadType: 96, sequenceNumber: 4, timestamp: 4, ssrc: 4),
                              payload: ByteBuffer(bytes: [UInt8](repeating: 0x42, count: 1000)))
        var packet = clear.serialized
        let address = { (buffer: ByteBuffer) in buffer.withUnsafeReadableBytes { UInt(bitPattern: $0.baseAddress) } }
        let before = address(packet)
        try context.protectRTP(&packet)
        #expect(address(packet) == before, "protect moved the packet")
        try context.unprotectRTP(&packet)
        #expect(address(packet) == before, "unprotect moved the packet")
        #expect(packet == clear.serialized)
        // A buffer shared with another is copied first: the other keeps the clear packet.
        let shared = packet
        var third = packet
        third.setInteger(UInt16(5), at: 2)
        try context.protectRTP(&third)
        #expect(shared == clear.serialized)
    }

    // MARK: Bad input

    @Test("bad packets are refused with their reason and counted, never a crash", arguments: SRTPProfile.allCases)
    func badInput(profile: SRTPProfile) throws {
        let key = (0..<(profile.keyLength + profile.saltLength)).map { UInt8($0) }
        let keys = SRTPKeyingMaterial(profile: profile, localKeyAndSalt: key, remoteKeyAndSalt: key)
        let sender = try SRTPContext(keys: keys), receiver = try SRTPContext(keys: keys, replayWindow: 128)
        func protect(_ sequence: UInt16) throws -> ByteBuffer {
            try sender.protectRTP(RTPPacket(header: RTPHeader(payloadType: 96, sequenceNumber: sequence, timestamp: 1, ssrc: 0x99),
                                            payload: ByteBuffer(bytes: [1, 2, 3, 4, 5, 6, 7, 8])).serialized)
        }
        func refused(_ packet: ByteBuffer, rtcp: Bool = false) -> SRTPError.Kind? {
            var copy = packet
            do {
                if rtcp { try receiver.unprotectRTCP(&copy) } else { try receiver.unprotectRTP(&copy) }
                return nil
            } catch {
                return error.kind
            }
        }
        let first = try protect(1000)
        #expect(refused(first) == nil)
        #expect(refused(first) == .replay)
        var wrongTag = try protect(1001)
        wrongTag.setInteger(wrongTag.getInteger(at: wrongTag.writerIndex - 1, as: UInt8.self)! ^ 0x80, at: wrongTag.writerIndex - 1)
        #expect(refused(wrongTag) == .authentication)
        let truncated = try protect(1002).getSlice(at: 0, length: 12 + 8)!
        #expect(refused(truncated) == .authentication || refused(truncated) == .malformed)
        #expect(refused(ByteBuffer(bytes: [0x80, 96])) == .malformed)
        #expect(refused(ByteBuffer(bytes: [UInt8](repeating: 0x40, count: 40))) == .malformed, "version 1")
        // An extension whose length runs past the packet.
        #expect(refused(ByteBuffer(bytes: [0x90, 96, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0x99, 0xBE, 0xDE, 0xFF, 0xFF] + [UInt8](repeating: 0, count: 30))) == .malformed)
        // Far ahead, then far behind the window.
        #expect(refused(try protect(1500)) == nil)
        #expect(refused(try protect(1003)) == .replay, "older than the 128-packet window")
        let rtcp = try sender.protectRTCP(RTCPPacket.serializeCompound([.receiverReport(ReceiverReport(ssrc: 0x99))]))
        #expect(refused(rtcp, rtcp: true) == nil)
        #expect(refused(rtcp, rtcp: true) == .replay)
        #expect(refused(rtcp.getSlice(at: 0, length: rtcp.readableBytes - 3)!, rtcp: true) != nil)
        #expect(refused(ByteBuffer(bytes: [0x80, 200, 0, 1]), rtcp: true) == .malformed)
        #expect(receiver.replaysDropped == 3 && receiver.authenticationFailures >= 1 && receiver.malformedDropped >= 3)
        // Garbage of every length through both paths.
        var random = SeededRandom(seed: 3)
        for length in 0..<200 {
            let garbage = ByteBuffer(bytes: (0..<length).map { _ in UInt8(random.next(upTo: 256)) })
            _ = refused(garbage)
            _ = refused(garbage, rtcp: true)
        }
    }

    // MARK: Indices and the replay window

    @Test("the packet index follows RFC 3711 Appendix A", arguments: [
        (UInt16(5), UInt64?.none, UInt64(5)),
        (65_000, 10, 65_000),                  // no rollover counter below 0
        (2, 0x1_FFFE, 0x2_0002),              // wrapped forward
        (0xFFFE, 0x2_0003, 0x1_FFFE),          // a late packet from before the wrap
        (100, 0x3_0050, 0x3_0064),
        (0x8000, 0x3_0050, 0x3_8000),          // less than half a cycle ahead
        (0x8100, 0x3_0050, 0x2_8100),          // more than half a cycle ahead: nearer behind
    ])
    func estimate(sequence: UInt16, highest: UInt64?, expected: UInt64) {
        #expect(srtpEstimateIndex(sequence: sequence, highest: highest) == expected)
    }

    @Test("the replay window accepts each index once and forgets what falls out of it")
    func replayWindow() {
        var window = SRTPReplayWindow(size: 64)
        #expect(window.size == 64)
        #expect(window.check(10) == .fresh)
        window.accept(10)
        #expect(window.check(10) == .replay)
        #expect(window.check(9) == .fresh)
        window.accept(9)
        window.accept(100)
        #expect(window.check(36) == .tooOld)
        #expect(window.check(37) == .fresh)
        #expect(window.check(99) == .fresh && window.check(100) == .replay)
        window.accept(1_000_000)
        #expect(window.check(100) == .tooOld && window.check(999_990) == .fresh && window.highest == 1_000_000)
        var ring = SRTPReplayWindow(size: 128)
        for index in stride(from: UInt64(0), to: 1000, by: 2) { ring.accept(index) }
        for index in UInt64(872)..<1000 { #expect(ring.check(index) == (index % 2 == 0 ? .replay : .fresh)) }
        #expect(ring.check(870) == .tooOld)
    }
}

extension SeededRandom {
    mutating func next(upTo bound: Int) -> Int { Int.random(in: 0..<max(bound, 1), using: &self) }
}
