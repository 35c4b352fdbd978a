import Foundation
import NIOConcurrencyHelpers
import NIOCore
import TestKit
import Testing
@testable import RTCTransport

/// Two SCTP associations (libusrsctp, AF_CONN) wired to each other in memory: what one sends goes
/// into the other's input, with an optional loss of every n-th packet each way.
final class SCTPPair: @unchecked Sendable {
    let a: SCTPAssociation, b: SCTPAssociation
    private let toA = NIOLockedValueBox<[[UInt8]]>([]), toB = NIOLockedValueBox<[[UInt8]]>([])
    let receivedA = NIOLockedValueBox<[(UInt16, UInt32, [UInt8])]>([]), receivedB = NIOLockedValueBox<[(UInt16, UInt32, [UInt8])]>([])
    let upA = NIOLockedValueBox(false), upB = NIOLockedValueBox(false)
    let resetAtB = NIOLockedValueBox<[UInt16]>([])
    private let counter = NIOLockedValueBox(0)

    init(dropEvery: Int = 0, maxMessageSize: Int = 262_144) throws {
        a = try SCTPAssociation(maxMessageSize: maxMessageSize)
        b = try SCTPAssociation(maxMessageSize: maxMessageSize)
        let (toA, toB, counter) = (self.toA, self.toB, self.counter)
        func lossy(_ box: NIOLockedValueBox<[[UInt8]]>) -> @Sendable ([UInt8]) -> Void {
            { packet in
                let n = counter.withLockedValue { $0 += 1; return $0 }
                if dropEvery > 0, n % dropEvery == 0 { return }
                box.withLockedValue { $0.append(packet) }
            }
        }
        a.onOutput = lossy(toB)
        b.onOutput = lossy(toA)
        let (receivedA, receivedB, upA, upB, resetAtB) = (self.receivedA, self.receivedB, self.upA, self.upB, self.resetAtB)
        a.onMessage = { stream, ppid, data in receivedA.withLockedValue { $0.append((stream, ppid, data)) } }
        b.onMessage = { stream, ppid, data in receivedB.withLockedValue { $0.append((stream, ppid, data)) } }
        a.onState = { up in upA.withLockedValue { $0 = up } }
        b.onState = { up in upB.withLockedValue { $0 = up } }
        b.onStreamReset = { stream in resetAtB.withLockedValue { $0.append(stream) } }
    }

    /// Moves packets both ways until `done` holds or `seconds` pass (usrsctp's timers run meanwhile).
    func pump(seconds: Double = 10, until done: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            let forB = toB.withLockedValue { queue in
                defer { queue.removeAll() }
                return queue
            }
            let forA = toA.withLockedValue { queue in
                defer { queue.removeAll() }
                return queue
            }
            for packet in forB { b.input(packet) }
            for packet in forA { a.input(packet) }
            if done() { return true }
            if forA.isEmpty && forB.isEmpty { usleep(1000) }
        }
        return done()
    }

    func connect() -> Bool {
        a.connect()
        b.connect()
        return pump { upA.withLockedValue { $0 } && upB.withLockedValue { $0 } }
    }
}

@Suite("SCTP over usrsctp (RFC 8261) and DCEP (RFC 8832)")
struct DataChannelTests {
    @Test("DCEP messages parse what they serialize, and refuse what they cannot parse", arguments: [
        DCEPMessage.ack,
        .open(.init(label: "chat")),
        .open(.init(label: "lossy", protocol: "lk", ordered: false, reliability: .maxRetransmits(0), priority: 512)),
        .open(.init(label: "timed ✓", protocol: "", ordered: true, reliability: .maxPacketLifeTime(3000))),
    ])
    func dcepRoundTrip(message: DCEPMessage) throws {
        #expect(try DCEPMessage(parsing: message.serialized) == message)
    }

    @Test("DCEP: truncated, unknown and lying inputs are typed errors")
    func dcepBadInput() {
        #expect(throws: DCEPMessage.ParseError.tooShort(0)) { try DCEPMessage(parsing: []) }
        #expect(throws: DCEPMessage.ParseError.unknownType(0x09)) { try DCEPMessage(parsing: [0x09]) }
        #expect(throws: DCEPMessage.ParseError.tooShort(5)) { try DCEPMessage(parsing: [0x03, 0, 0, 0, 0]) }
        #expect(throws: DCEPMessage.ParseError.lengthsPastEnd) { try DCEPMessage(parsing: [0x03, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 1]) }
        #expect(throws: DCEPMessage.ParseError.unknownChannelType(0x05)) { try DCEPMessage(parsing: [0x03, 0x05, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]) }
        #expect(throws: DCEPMessage.ParseError.notUTF8) { try DCEPMessage(parsing: [0x03, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0xFF]) }
        // Every prefix of a valid open: an error or a message, never a trap.
        let open = DCEPMessage.open(.init(label: "chat", protocol: "p")).serialized
        for length in 0...open.count { _ = try? DCEPMessage(parsing: Array(open.prefix(length))) }
    }

    @Test("two associations come up, and messages arrive whole and in order, small and large, both ways")
    func associationCarriesMessages() throws {
        let pair = try SCTPPair()
        #expect(pair.connect(), "the association did not come up")
        let messages = (0..<200).map { index in [UInt8]("message \(index)".utf8) }
        for message in messages { try pair.a.send(stream: 1, ppid: DCEPMessage.PPID.string.rawValue, message) }
        let large = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        try pair.b.send(stream: 2, ppid: DCEPMessage.PPID.binary.rawValue, large)
        #expect(pair.pump { pair.receivedB.withLockedValue { $0.count } == 200 && pair.receivedA.withLockedValue { $0.count } == 1 })
        let got = pair.receivedB.withLockedValue { $0 }
        #expect(got.map(\.2) == messages, "in order, each once")
        #expect(got.allSatisfy { $0.0 == 1 && $0.1 == 51 })
        let back = try #require(pair.receivedA.withLockedValue { $0.first })
        #expect(back.0 == 2 && back.1 == 53 && back.2 == large)
        // Over the maximum: refused at the sender with EMSGSIZE.
        #expect { try pair.a.send(stream: 1, ppid: 53, [UInt8](repeating: 0, count: 262_145)) } throws: {
            ($0 as? SCTPAssociation.Error)?.code == EMSGSIZE
        }
        // A reset stream is told to the peer.
        pair.a.resetStream(1)
        #expect(pair.pump { pair.resetAtB.withLockedValue { $0 } == [1] })
    }

    @Test("with every 10th packet lost each way, 1000 reliable messages of 1 KB all arrive, in order")
    func reliableUnderLoss() throws {
        let pair = try SCTPPair(dropEvery: 10)
        #expect(pair.connect(), "the association did not come up under loss")
        let messages: [[UInt8]] = (0..<1000).map { (index: Int) -> [UInt8] in
            var message = [UInt8](repeating: UInt8(index & 0xFF), count: 1020)
            message += [UInt8(index >> 8), UInt8(index & 0xFF), 0, 0]
            return message
        }
        var next = 0
        // Sent as the send buffer takes them.
        let arrived = pair.pump(seconds: 30) {
            while next < messages.count, (try? pair.a.send(stream: 3, ppid: 53, messages[next])) != nil { next += 1 }
            return pair.receivedB.withLockedValue { $0.count } == messages.count
        }
        let count = pair.receivedB.withLockedValue { $0.count }
        #expect(arrived, "\(count) of \(messages.count) arrived")
        #expect(pair.receivedB.withLockedValue { $0.map(\.2) } == messages)
    }

    @Test("unordered messages that may not be retransmitted arrive whole or not at all")
    func lossyMessages() throws {
        let pair = try SCTPPair(dropEvery: 7)
        #expect(pair.connect())
        let messages = (0..<300).map { index in [UInt8](repeating: UInt8(index & 0xFF), count: 600) }
        for message in messages { try pair.a.send(stream: 5, ppid: 53, message, ordered: false, reliability: .maxRetransmits(0)) }
        _ = pair.pump(seconds: 3) { false }
        let got = pair.receivedB.withLockedValue { $0.map(\.2) }
        #expect(!got.isEmpty && got.count <= messages.count)
        #expect(got.allSatisfy { message in message.count == 600 && message.allSatisfy { $0 == message[0] } }, "a message arrived in part")
    }

    @Test("garbage through the shim's input path never crashes")
    func garbage() {
        var seed: UInt64 = 1
        for length in [0, 1, 12, 13, 28, 100, 1200] {
            let bytes = (0..<length).map { _ in
                seed = seed &* 6364136223846793005 &+ 1442695040888963407
                return UInt8(truncatingIfNeeded: seed >> 33)
            }
            SCTPAssociation.fuzzInput(bytes)
            // An SCTP common header with a valid-looking INIT chunk type and nonsense after it.
            SCTPAssociation.fuzzInput([0x13, 0x88, 0x13, 0x88, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 4] + bytes)
        }
        #expect(Bool(true), "no crash")
    }
}

@Suite("Data channels over a real DTLS transport (SCTP in DTLS records, RFC 8261)", .serialized)
struct DataChannelTransportTests {
    @Test("a client and the server's shared port open channels both ways over DTLS and exchange messages in order")
    func overDTLS() async throws {
        let group = MediaTransportTests.group
        let port = try await SharedMediaPort.bind(.server(), group: group)
        let client = try await MediaTransport.bind(.client(), group: group)
        let session = try await port.makeSession(remote: TransportParameters(
            ice: client.localParameters.ice, fingerprint: client.localParameters.fingerprint, candidates: [], dtlsRole: .client)).get()
        let serverEvents = NIOLockedValueBox<[String]>([]), clientEvents = NIOLockedValueBox<[String]>([])
        @Sendable func describe(_ event: DataChannelEndpoint.Event) -> String {
            switch event {
            case .connected: "connected"
            case .disconnected: "disconnected"
            case .opened(let channel): "opened \(channel.parameters.label) on \(channel.stream)"
            case .closed(let stream): "closed \(stream)"
            case .message(let channel, let data, let binary): "\(channel.parameters.label) \(binary ? "bin" : "text") \(String(decoding: data, as: UTF8.self))"
            }
        }
        let serverData = try await session.eventLoop.submit {
            let endpoint = try session.enableDataChannelsOnLoop()
            endpoint.onEvent = { event in serverEvents.withLockedValue { $0.append(describe(event)) } }
            return endpoint
        }.get()
        let clientData = try await client.session.eventLoop.submit {
            let endpoint = try client.session.enableDataChannelsOnLoop()
            endpoint.onEvent = { event in clientEvents.withLockedValue { $0.append(describe(event)) } }
            return endpoint
        }.get()
        var remote = session.localParameters
        remote.candidates = [try SocketAddress(ipAddress: "127.0.0.1", port: try #require(port.localAddress?.port))]
        client.start(remote: remote)
        #expect(await eventually { clientEvents.withLockedValue { $0.contains("connected") } && serverEvents.withLockedValue { $0.contains("connected") } })
        let stream = try await client.session.eventLoop.submit { try clientData.open(.init(label: "chat")) }.get()
        #expect(stream % 2 == 0, "the DTLS client opens on even streams")
        try await client.session.eventLoop.submit {
            for index in 0..<50 { try clientData.send(Array("hello \(index)".utf8), binary: false, on: stream) }
        }.get()
        #expect(await eventually { serverEvents.withLockedValue { $0.filter { $0.hasPrefix("chat text") }.count } == 50 })
        #expect(serverEvents.withLockedValue { $0.filter { $0.hasPrefix("chat text") } } == (0..<50).map { "chat text hello \($0)" })
        #expect(await eventually { clientEvents.withLockedValue { $0.contains("opened chat on \(stream)") } }, "the server acknowledged")
        // The server opens one of its own (odd stream) and answers on it.
        let back = try await session.eventLoop.submit { try serverData.open(.init(label: "reply", ordered: false, reliability: .maxRetransmits(0))) }.get()
        #expect(back % 2 == 1)
        try await session.eventLoop.submit { try serverData.send([1, 2, 3], binary: true, on: back) }.get()
        #expect(await eventually { clientEvents.withLockedValue { $0.contains("opened reply on \(back)") && $0.contains { $0.hasPrefix("reply bin") } } })
        // Closing resets the stream: both ends see it closed.
        try await client.session.eventLoop.submit { clientData.close(stream: stream) }.get()
        #expect(await eventually { serverEvents.withLockedValue { $0.contains("closed \(stream)") } })
        await client.close()
        await port.close()
    }
}

@Suite("Data channel sections in offers (RFC 8841)")
struct DataChannelSDPTests {
    static func offer(_ application: String, extra: String = "") -> String {
        """
        v=0\r
        o=- 1 2 IN IP4 127.0.0.1\r
        s=-\r
        t=0 0\r
        a=group:BUNDLE 0\(extra.isEmpty ? "" : " 1")\r
        \(application)\r
        a=mid:0\r
        a=ice-ufrag:abcd\r
        a=ice-pwd:abcdefghijklmnopqrstuvwx\r
        a=fingerprint:sha-256 00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF\r
        a=setup:actpass\r
        \(extra)
        """
    }

    @Test("a data-only offer is answered: sctp-port and max-message-size read (RFC defaults when absent), one section only", arguments: [
        ("m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\na=sctp-port:5001\r\na=max-message-size:1073741823", DataChannelOffer(sctpPort: 5001, maxMessageSize: 1_073_741_823)),
        ("m=application 9 UDP/DTLS/SCTP webrtc-datachannel", DataChannelOffer(sctpPort: 5000, maxMessageSize: 65536)),
        ("m=application 9 TCP/DTLS/SCTP webrtc-datachannel\r\na=max-message-size:0", DataChannelOffer(sctpPort: 5000, maxMessageSize: 0)),
    ])
    func dataOnly(application: String, expected: DataChannelOffer) throws {
        let negotiated = try SessionDescription(parsing: Self.offer(application)).negotiate()
        #expect(negotiated.dataChannel == expected)
        #expect(negotiated.accepted.isEmpty)
        let transport = TransportParameters(ice: ICECredentials(ufrag: "srvr", pwd: "serverpasswordserverpass"),
                                            fingerprint: try DTLSCertificate().fingerprint,
                                            candidates: [try SocketAddress(ipAddress: "127.0.0.1", port: 7882)], dtlsRole: .server)
        let answer = SessionDescription.answer(to: negotiated, sessionID: 1, transport: transport, iceLite: true, setup: "passive",
                                               direction: { $0.reversed })
        let section = try #require(answer.media.first)
        #expect(section.mediaLine.kind == "application" && section.mediaLine.port == "7882")
        #expect(section.mediaLine.proto == "UDP/DTLS/SCTP" && section.mediaLine.formats == ["webrtc-datachannel"])
        #expect(section.mid == "0" && section.attributes("sctp-port") == ["5000"] && section.attributes("max-message-size") == ["262144"])
        #expect(section.attributes("candidate").count == 1 && section.attributes("ice-ufrag") == ["srvr"])
        #expect(answer.bundleGroups.first == ["0"])
        // What we answer, we parse back the same way.
        #expect(try SessionDescription(parsing: answer.serialized).media.first?.attributes("sctp-port") == ["5000"])
    }

    @Test("a bad data section is rejected with its reason", arguments: [
        ("m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\na=sctp-port:notaport", "a=sctp-port:notaport is not a port"),
        ("m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\na=max-message-size:-4", "a=max-message-size:-4 is not a size"),
        ("m=application 0 UDP/DTLS/SCTP webrtc-datachannel", "the offer disabled it (port 0)"),
        ("m=application 9 UDP/DTLS/SCTP something-else", "(wanted UDP/DTLS/SCTP webrtc-datachannel)"),
    ])
    func rejected(application: String, reason: String) throws {
        let offer = try SessionDescription(parsing: Self.offer(application))
        #expect(throws: NegotiationError.self) { try offer.negotiate() }
        do {
            _ = try offer.negotiate()
        } catch {
            #expect(error.reason.contains(reason), "\(error.reason)")
        }
    }

    @Test("a second data section is rejected: one SCTP association per transport")
    func second() throws {
        let text = Self.offer("m=application 9 UDP/DTLS/SCTP webrtc-datachannel",
                              extra: "m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\na=mid:1\r\n")
        let negotiated = try SessionDescription(parsing: text).negotiate()
        #expect(negotiated.sections.map(\.isAccepted) == [true, false])
        #expect(negotiated.sections[1].rejection?.contains("second data channel section") == true)
    }
}

@Suite("The SDK's data message envelope")
struct DataEnvelopeTests {
    @Test("envelopes parse what they serialize", arguments: [
        DataEnvelope(payload: []),
        DataEnvelope(topic: "chat", destinations: ["1001", "2001"], sender: "3001", streamID: 3, payload: Array("hi".utf8)),
        DataEnvelope(topic: String(repeating: "t", count: 1024), destinations: [String(repeating: "u", count: 255)], payload: [0, 1, 2]),
    ])
    func roundTrip(envelope: DataEnvelope) throws {
        #expect(try DataEnvelope(parsing: envelope.serialized) == envelope)
    }

    @Test("bad envelopes are typed errors, never traps", arguments: [
        ([UInt8](), DataEnvelope.ParseError.truncated(at: 0)),
        ([2, 0, 0, 0, 0, 0, 0], .unknownVersion(2)),
        ([1, 0, 0x04, 0x01], .topicTooLong(1025)),
        ([1, 0, 0, 2, 0x61], .truncated(at: 5)),
        ([1, 0, 0, 0, 0x01, 0x01], .tooManyDestinations(257)),
        ([1, 0, 0, 0, 0, 1, 0], .emptyUID),
        ([1, 0, 0, 1, 0xFF, 0, 0, 0], .notUTF8),
        ([1, 0, 0, 0, 0, 0, 5, 0x61], .truncated(at: 8)),
    ] as [([UInt8], DataEnvelope.ParseError)])
    func badInput(bytes: [UInt8], error: DataEnvelope.ParseError) {
        #expect(throws: error) { try DataEnvelope(parsing: bytes) }
    }

    /// Tests/Fixtures/data-envelopes.json: the table the web client's codec (Web/data-envelope.js)
    /// is checked against too, so the two implementations of the rule cannot drift apart.
    static var shared: [String: Any] {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/data-envelopes.json")
        return (try? JSONSerialization.jsonObject(with: Data(contentsOf: url))) as? [String: Any] ?? [:]
    }

    static func bytes(_ hex: String) -> [UInt8] {
        var out: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex, let next = hex.index(index, offsetBy: 2, limitedBy: hex.endIndex) {
            out.append(UInt8(hex[index..<next], radix: 16) ?? 0)
            index = next
        }
        return out
    }

    @Test("the shared table (Swift and JS): each valid vector serializes to its bytes and parses back; each invalid one fails with its kind")
    func sharedTable() throws {
        let table = Self.shared
        let valid = table["valid"] as? [[String: Any]] ?? [], invalid = table["invalid"] as? [[String: Any]] ?? []
        #expect(valid.count >= 4 && invalid.count >= 6, "the table did not load")
        for vector in valid {
            let envelope = DataEnvelope(topic: vector["topic"] as? String ?? "", destinations: vector["destinations"] as? [String] ?? [],
                                        sender: vector["sender"] as? String ?? "", streamID: UInt8(vector["stream"] as? Int ?? 0),
                                        payload: Self.bytes(vector["payloadHex"] as? String ?? ""))
            let hex = vector["hex"] as? String ?? ""
            #expect(envelope.serialized == Self.bytes(hex), "\(hex)")
            #expect(try DataEnvelope(parsing: Self.bytes(hex)) == envelope, "\(hex)")
        }
        for vector in invalid {
            let hex = vector["hex"] as? String ?? "", kind = vector["kind"] as? String ?? ""
            do {
                _ = try DataEnvelope(parsing: Self.bytes(hex))
                Issue.record("\(hex) was accepted")
            } catch {
                let name = "\(error)".prefix { $0 != "(" }
                let got = switch error {
                case .truncated: "truncated"
                case .unknownVersion: "unknownVersion"
                case .topicTooLong: "topicTooLong"
                case .tooManyDestinations: "tooManyDestinations"
                case .emptyUID: "emptyUID"
                case .notUTF8: "notUTF8"
                }
                #expect(got == kind, "\(hex): \(name)")
            }
        }
    }

    @Test("the web client's codec (node, Web/data-envelope.js) passes the same table")
    func sharedTableInJavaScript() throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Tools/envelope_vectors.mjs").path
        let run = try runTool(["node", script], timeout: 30)
        #expect(run.status == 0 && run.out.contains("\"ok\":true"), "\(run.out) \(run.err)")
    }

    @Test("every prefix of a valid envelope parses or fails cleanly")
    func prefixes() {
        let bytes = DataEnvelope(topic: "topic", destinations: ["a", "bb"], sender: "s", streamID: 1, payload: [9, 9]).serialized
        var parsed = 0
        for length in 0...bytes.count where (try? DataEnvelope(parsing: Array(bytes.prefix(length)))) != nil { parsed += 1 }
        #expect(parsed == 3, "the header ends after the sender; payloads of 0, 1 and 2 bytes parse")
    }
}
