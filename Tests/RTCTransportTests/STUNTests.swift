import Testing
@testable import RTCTransport

@Suite("STUN (RFC 8489, RFC 5769 vectors)")
struct STUNTests {
    static let password = Array("VOkJxbRl1RmTxUk/WvJxBt".utf8)
    static let transactionID = hex("b7e7a701 bc34d686 fa87dfae")

    /// RFC 5769 §2.1: sample request (SOFTWARE, PRIORITY, ICE-CONTROLLED, USERNAME, MI, FINGERPRINT).
    static let request = hex("""
        0001 0058 2112a442 b7e7a701 bc34d686 fa87dfae
        8022 0010 5354554e 20746573 7420636c 69656e74   # SOFTWARE "STUN test client"
        0024 0004 6e0001ff                              # PRIORITY
        8029 0008 932ff9b1 51263b36                     # ICE-CONTROLLED
        0006 0009 6576746a 3a683676 59202020            # USERNAME "evtj:h6vY", padded with spaces
        0008 0014 9aeaa70c bfd8cb56 781ef2b5 b2d3f249 c1b571a2   # MESSAGE-INTEGRITY
        8028 0004 e57a3bcf                              # FINGERPRINT
        """)
    /// RFC 5769 §2.2: sample IPv4 response.
    static let responseIPv4 = hex("""
        0101 003c 2112a442 b7e7a701 bc34d686 fa87dfae
        8022 000b 74657374 20766563 746f7220            # SOFTWARE "test vector"
        0020 0008 0001a147 e112a643                     # XOR-MAPPED-ADDRESS 192.0.2.1:32853
        0008 0014 2b91f599 fd9e90c3 8c7489f9 2af9ba53 f06be7d7
        8028 0004 c07d4c96
        """)
    /// RFC 5769 §2.3: sample IPv6 response.
    static let responseIPv6 = hex("""
        0101 0048 2112a442 b7e7a701 bc34d686 fa87dfae
        8022 000b 74657374 20766563 746f7220
        0020 0014 0002a147 0113a9fa a5d3f179 bc25f4b5 bed2b9d9   # 2001:db8:1234:5678:11:2233:4455:6677
        0008 0014 a382954e 4be67bf1 1784c97c 8292c275 bfe3ed41
        8028 0004 c8fb0b4c
        """)

    @Test("RFC 5769 vectors: structure, integrity and fingerprint verify", arguments: [
        ("request", request), ("IPv4 response", responseIPv4), ("IPv6 response", responseIPv6),
    ])
    func vectorsVerify(name: String, wire: [UInt8]) throws {
        let message = try STUNMessage(parsing: wire)
        #expect(message.transactionID == Self.transactionID)
        #expect(STUNMessage.verifyIntegrity(wire, key: Self.password), "\(name) MESSAGE-INTEGRITY")
        #expect(STUNMessage.verifyFingerprint(wire), "\(name) FINGERPRINT")
        #expect(!STUNMessage.verifyIntegrity(wire, key: Array("wrong".utf8)))
        // Byte for byte: as parsed, and with integrity and fingerprint computed anew.
        #expect(message.serialized == wire)
        #expect(message.serialized(integrityKey: Self.password, fingerprint: true) == wire, "\(name) recomputed")
    }

    @Test("RFC 5769 request fields")
    func requestFields() throws {
        let message = try STUNMessage(parsing: Self.request)
        #expect(message.messageClass == .request && message.method == STUNMessage.bindingMethod)
        #expect(message.software == "STUN test client")
        #expect(message.username == "evtj:h6vY")
        #expect(message.priority == 0x6E00_01FF)
        #expect(message.iceControlled == 0x932F_F9B1_5126_3B36)
        #expect(message.iceControlling == nil && !message.hasUseCandidate)
    }

    @Test("RFC 5769 responses decode the mapped address")
    func responseAddresses() throws {
        let v4 = try STUNMessage(parsing: Self.responseIPv4)
        #expect(v4.messageClass == .successResponse && v4.software == "test vector")
        #expect(v4.xorMappedAddress == STUNAddress(ipv4: "192.0.2.1", port: 32853))
        let v6 = try STUNMessage(parsing: Self.responseIPv6)
        #expect(v6.xorMappedAddress?.description == "[2001:db8:1234:5678:11:2233:4455:6677]:32853")
        #expect(v6.xorMappedAddress?.port == 32853)
        // Encoding the address again gives the vector's attribute.
        let attribute = STUNAttribute.xorMappedAddress(try #require(v4.xorMappedAddress), transactionID: Self.transactionID)
        #expect(attribute.value == hex("0001a147 e112a643"))
    }

    @Test("an ICE binding request and an error response round trip with credentials")
    func buildAndVerify() throws {
        let id = STUNMessage.randomTransactionID()
        let request = STUNMessage(messageClass: .request, transactionID: id, attributes: [
            .username("remote:local"), .priority(1_853_824_767), .iceControlling(tieBreaker: 0x0102_0304_0506_0708),
            .useCandidateFlag,
        ])
        let key = Array("a-password-of-22-chars".utf8)
        let wire = request.serialized(integrityKey: key, fingerprint: true)
        #expect(STUNMessage.verifyIntegrity(wire, key: key) && STUNMessage.verifyFingerprint(wire))
        let parsed = try STUNMessage(parsing: wire)
        #expect(parsed.username == "remote:local" && parsed.hasUseCandidate && parsed.iceControlling == 0x0102_0304_0506_0708)
        #expect(parsed.messageType == 0x0001)

        let error = STUNMessage(messageClass: .errorResponse, transactionID: id, attributes: [.errorCode(487, reason: "Role Conflict")])
        let errorParsed = try STUNMessage(parsing: error.serialized(integrityKey: key, fingerprint: true))
        #expect(errorParsed.messageClass == .errorResponse && errorParsed.messageType == 0x0111)
        #expect(errorParsed.errorCode?.code == 487 && errorParsed.errorCode?.reason == "Role Conflict")
        // A flipped bit breaks both checks.
        var tampered = wire
        tampered[25] ^= 0x01
        #expect(!STUNMessage.verifyIntegrity(tampered, key: key) && !STUNMessage.verifyFingerprint(tampered))
    }

    @Test("every prefix of every vector is an error, never a trap", arguments: [request, responseIPv4, responseIPv6])
    func truncation(wire: [UInt8]) {
        expectEveryPrefixFails(wire, "STUN") { try _ = STUNMessage(parsing: $0) }
    }

    @Test("non-STUN and lying lengths are errors", arguments: [
        hex("8001 0000 2112a442 000000000000000000000000"),       // top bits set
        hex("0001 0000 deadbeef 000000000000000000000000"),       // wrong cookie
        hex("0001 0003 2112a442 000000000000000000000000 000000"), // length not a multiple of 4
        hex("0001 0008 2112a442 000000000000000000000000 0006 0010 41414141"), // attribute longer than message
    ])
    func invalid(wire: [UInt8]) {
        #expect(throws: ParseError.self) { try STUNMessage(parsing: wire) }
    }
}
