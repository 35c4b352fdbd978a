import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RTCServer
import RTCTransport
import Signaling
import TestKit
import Testing

/// Sends a plain HTTP GET over TCP and returns the response text.
func httpGet(_ address: SocketAddress, _ path: String) throws -> String {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    guard case .v4(let v4) = address else { return "" }
    var target = v4.address
    let connected = withUnsafePointer(to: &target) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard connected == 0 else { return "" }
    var timeout = timeval(tv_sec: 5, tv_usec: 0)  // never hang a test on a server that keeps the connection
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    let request = "GET \(path) HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    _ = request.withCString { write(fd, $0, strlen($0)) }
    var response = [UInt8]()
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let count = read(fd, &buffer, buffer.count)
        if count <= 0 { break }
        response += buffer[..<count]
    }
    return String(decoding: response, as: UTF8.self)
}

@Suite("Server over real sockets: WebSocket signaling, HTTP endpoints, resume", .serialized)
struct WebSocketServerTests {
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)

    func start() async throws -> (RTCServerApp, String) {
        let app = try await RTCServerApp.start(
            configuration: ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: "test-secret", pingInterval: 1, resumeWindow: 5),
            group: Self.group)
        return (app, "ws://127.0.0.1:\(app.signalingAddress!.port!)/rtc")
    }

    @Test("two clients join over WebSocket; one publishes, the other receives its RTP")
    func publishAndReceive() async throws {
        let (app, url) = try await start()
        let alice = try SignalingClient(url: url, group: Self.group)
        let bob = try SignalingClient(url: url, group: Self.group)
        try await alice.connect()
        try await bob.connect()
        guard case .joined = try await alice.request(.join(JoinRequest(token: testToken(uid: "alice"), channel: "room", uid: "alice"))),
              case .joined = try await bob.request(.join(JoinRequest(token: testToken(uid: "bob"), channel: "room", uid: "bob")))
        else { Issue.record("join failed"); return }
        // Bob answers subscriber offers with a transport of his own.
        let bobTransport = try await MediaTransport.bind(.client(), group: Self.group)
        let received = NIOLockedValueBox(0)
        bobTransport.onRTP = { _ in received.withLockedValue { $0 += 1 } }
        let bobEvents = Task {
            var started = false
            for await event in bob.events {
                guard case .offer(let offer) = event else { continue }
                let description = try SessionDescription(parsing: offer.sdp)
                let answer = SessionDescription.make(sessionID: 9, transport: bobTransport.localParameters, iceLite: false, setup: "active",
                                                     sections: description.sections.map {
                                                         MediaSectionDescription(mid: $0.mid, kind: $0.kind, direction: $0.reversed)
                                                     })
                try await bob.send(.answer(SessionDescriptionMessage(transport: .subscriber, sdp: answer.serialized)))
                if !started {
                    started = true
                    bobTransport.start(remote: try description.transportParameters(offererRole: .server))
                }
            }
        }
        // Alice publishes.
        let aliceTransport = try await MediaTransport.bind(.client(), group: Self.group)
        let offer = SessionDescription.make(sessionID: 1, transport: aliceTransport.localParameters, iceLite: false, setup: "actpass",
                                            sections: [MediaSectionDescription(mid: "0", kind: .video, direction: .sendonly, ssrc: 77)])
        guard case .answer(let answer) = try await alice.request(.offer(SessionDescriptionMessage(transport: .publisher, sdp: offer.serialized)))
        else { Issue.record("no answer"); return }
        aliceTransport.start(remote: try SessionDescription(parsing: answer.sdp).transportParameters())
        #expect(await eventually { try await aliceTransport.state.get() == .connected })
        #expect(await eventually { try await bobTransport.state.get() == .connected })
        try await Task.sleep(nanoseconds: 100_000_000)
        aliceTransport.sendRTP(batch: (0..<30).map { sequence in
            RTPPacket(header: RTPHeader(payloadType: 96, sequenceNumber: UInt16(sequence), timestamp: 0, ssrc: 77),
                      payload: ByteBuffer(bytes: [1, 2, 3])).serialized
        })
        #expect(await eventually { received.withLockedValue { $0 } == 30 })
        // Health and metrics over HTTP on the same port.
        let address = try #require(app.signalingAddress)
        #expect(try httpGet(address, "/healthz").contains("200 OK"))
        let metrics = try httpGet(address, "/metrics")
        #expect(metrics.contains("rtc_participants 2") && metrics.contains("rtc_packets_in_total"))
        #expect(metrics.contains("rtc_forward_latency_seconds_bucket"))
        // The media socket's send losses (DatagramBatchTests count them): none on loopback.
        #expect(metrics.contains("rtc_udp_send_refused_total 0") && metrics.contains("rtc_udp_send_dropped_total 0"))
        #expect(try httpGet(address, "/nope").contains("404"))
        bobEvents.cancel()
        await alice.close()
        await bob.close()
        await aliceTransport.close()
        await bobTransport.close()
        await app.shutdown()
    }

    @Test("bad messages over the WebSocket get error replies and the connection lives on")
    func badInput() async throws {
        let (app, url) = try await start()
        let client = try SignalingClient(url: url, group: Self.group)
        try await client.connect()
        let errors = Task { () -> [Int] in
            var codes: [Int] = []
            for await event in client.events {
                if case .error(let error) = event { codes.append(error.code.rawValue) }
                if codes.count == 3 { break }
            }
            return codes
        }
        try await client.sendRaw(Array("{oops".utf8))
        try await client.sendRaw(Array(#"{"v":"1.0","type":"hover","payload":{}}"#.utf8))
        try await client.sendRaw([UInt8](repeating: 0x41, count: 100_000))
        #expect(await errors.value.sorted() == [1001, 1002, 1003])
        // Before join, a request is refused with notJoined; after join, it works.
        await #expect(throws: SignalingError.self) { try await client.request(.mute(MuteRequest(trackSid: "x", muted: true))) }
        guard case .joined = try await client.request(.join(JoinRequest(token: testToken(uid: "u"), channel: "room", uid: "u"))) else {
            Issue.record("join failed after bad input")
            return
        }
        await client.close()
        await app.shutdown()
    }

    @Test("pipelined requests (SignalingClient.requests) get their replies in order, an error as that request's failure: two announcements and the offer that sends them in one flight, as the engine publishes")
    func pipelined() async throws {
        let (app, url) = try await start()
        let client = try SignalingClient(url: url, group: Self.group)
        try await client.connect()
        // Before the join the first is refused (notJoined); the join behind it still goes through.
        let early = try await client.requests([.mute(MuteRequest(trackSid: "x", muted: true)),
                                               .join(JoinRequest(token: testToken(uid: "u"), channel: "room", uid: "u"))])
        #expect(throws: SignalingError.self) { try early[0].get() }
        guard case .joined = try early[1].get() else { Issue.record("join: \(early[1])"); return }
        let transport = try await MediaTransport.bind(.client(), group: Self.group)
        let offer = SessionDescription.make(sessionID: 1, transport: transport.localParameters, iceLite: false, setup: "actpass",
                                            sections: [MediaSectionDescription(mid: "v0", kind: .video, direction: .sendonly, ssrc: 77)])
        let replies = try await client.requests([
            .publishTrack(PublishTrackRequest(kind: .video, source: .camera, mid: "v0", ssrc: 77)),
            .publishTrack(PublishTrackRequest(kind: .audio, source: .camera, mid: "a1", ssrc: 78)),
            .offer(SessionDescriptionMessage(transport: .publisher, sdp: offer.serialized)),
        ])
        #expect(replies.count == 3)
        guard case .trackPublished(let video) = try replies[0].get() else { Issue.record("video: \(replies[0])"); return }
        #expect(video.mid == "v0" && video.kind == .video)
        // An audio track from the camera is refused with its reason; the offer after it is answered.
        do {
            _ = try replies[1].get()
            Issue.record("an audio track from the camera was accepted")
        } catch let error as SignalingError {
            #expect(error.code == .permissionDenied && error.reason.contains("camera"), "\(error)")
        }
        guard case .answer(let answer) = try replies[2].get() else { Issue.record("offer: \(replies[2])"); return }
        #expect(try SessionDescription(parsing: answer.sdp).sections.map(\.mid) == ["v0"])
        // The offer's section is the announced track, found by its mid: no second track was made for it.
        let participants = try await app.sfu.participants(in: "room").get()
        #expect(participants.map { $0.tracks.map(\.sid) } == [[video.sid]])
        await client.close()
        await transport.close()
        await app.shutdown()
    }

    @Test("a dropped connection resumes inside the window, keeping the participant")
    func resume() async throws {
        let (app, url) = try await start()
        let client = try SignalingClient(url: url, group: Self.group)
        try await client.connect()
        guard case .joined(let joined) = try await client.request(.join(JoinRequest(token: testToken(uid: "r"), channel: "room", uid: "r"))) else {
            Issue.record("join failed")
            return
        }
        await client.dropConnection()
        #expect(await eventually { await client.resumes == 1 })
        let participants = try await app.sfu.participants(in: "room").get()
        #expect(participants.map(\.sid) == [joined.participant.sid])
        guard case .pong = try await client.request(.ping(timestamp: 3)) else { Issue.record("no pong after resume"); return }
        await client.close()
        #expect(await eventually { try await app.sfu.participants(in: "room").get().isEmpty })
        await app.shutdown()
    }

    @Test("shutdown tells every participant serverShutdown")
    func shutdown() async throws {
        let (app, url) = try await start()
        let client = try SignalingClient(url: url, group: Self.group)
        try await client.connect()
        _ = try await client.request(.join(JoinRequest(token: testToken(uid: "s"), channel: "room", uid: "s")))
        let leave = Task { () -> LeaveReason? in
            for await event in client.events { if case .leave(let reason) = event { return reason } }
            return nil
        }
        await app.shutdown()
        #expect(await leave.value == .serverShutdown)
        await client.close()
    }

    /// Places every room on a node that is gone, or refuses every join (a full server).
    struct FixedPlacer: RoomPlacer {
        let placement: RoomPlacement
        func place(_ channel: String) async -> RoomPlacement { placement }
        func released(_ channel: String, from placement: RoomPlacement) {}
    }

    /// A join the front cannot serve is answered before its connection closes: a client must
    /// tell "the server answered" (try again there) from "the server is unreachable" (try the next).
    @Test("a join whose room's node cannot be reached gets internalError (5000), one refused at the front limitExceeded (4004), each before the close", arguments: [
        (RoomPlacement.remote(node: "gone", signalingURL: "ws://127.0.0.1:1/rtc"), SignalingError.Code.internalError),
        (RoomPlacement.refused(reason: "the server is full (2 participants over its processes)"), SignalingError.Code.limitExceeded),
    ] as [(RoomPlacement, SignalingError.Code)])
    func unservedJoinAnswered(placement: RoomPlacement, code: SignalingError.Code) async throws {
        let (app, url) = try await start()
        app.placeRooms(with: FixedPlacer(placement: placement))
        let client = try SignalingClient(url: url, group: Self.group)
        try await client.connect()
        do {
            let reply = try await client.request(.join(JoinRequest(token: testToken(uid: "u"), channel: "room", uid: "u")))
            Issue.record("joined: \(reply.type)")
        } catch let error as SignalingError {
            #expect(error.code == code, "\(error)")
        }
        await client.close()
        await app.shutdown()
    }

    /// Between telling everyone `serverShutdown` and closing its listener, a server must not take
    /// a join: the participant would publish to a media port that is closing (a fast rejoin did).
    @Test("once shutting down, a join or resume on a connection still accepted is refused with shuttingDown (5001) and closed")
    func joinWhileShuttingDown() async throws {
        let (app, url) = try await start()
        await app.sfu.shutdown()
        for message: ClientMessage in [.join(JoinRequest(token: testToken(uid: "late"), channel: "room", uid: "late")),
                                       .resume(ResumeRequest(token: testToken(uid: "late"), participantSid: "PA_1"))] {
            let client = try SignalingClient(url: url, group: Self.group)
            try await client.connect()
            do {
                let reply = try await client.request(message)
                Issue.record("\(message.type) answered \(reply.type) by a server shutting down")
            } catch let error as SignalingError {
                #expect(error.code == .shuttingDown, "\(error)")
            }
            await client.close()
        }
        #expect(try await app.sfu.participants(in: "room").get().isEmpty)
        await app.shutdown()
    }
}

import TLSStream

@Suite("Signaling over TLS (wss://)", .serialized)
struct SecureSignalingTests {
    /// A self-signed P-256 certificate for localhost and 127.0.0.1, made with the openssl tool.
    func makeCertificate(names: String = "DNS:localhost,IP:127.0.0.1") throws -> (certificate: String, key: String) {
        let dir = NSTemporaryDirectory() + "rtc-tls-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        _ = try runTool(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                         "-keyout", dir + "/key.pem", "-out", dir + "/cert.pem", "-days", "1", "-subj", "/CN=localhost",
                         "-addext", "subjectAltName=" + names])
        return (dir + "/cert.pem", dir + "/key.pem")
    }

    @Test("a client joins over wss:// when it trusts the server's certificate, and is refused when it does not")
    func wss() async throws {
        let (certificate, key) = try makeCertificate()
        let app = try await RTCServerApp.start(
            configuration: ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: "test-secret", tlsCertificatePath: certificate,
                                               tlsKeyPath: key),
            group: WebSocketServerTests.group)
        let url = "wss://localhost:\(app.signalingAddress!.port!)/rtc"
        let trusting = TLSClientOptions(trustedCertificateFiles: [certificate])
        let client = try SignalingClient(url: url, group: WebSocketServerTests.group, tls: trusting)
        try await client.connect()
        guard case .joined = try await client.request(.join(JoinRequest(token: testToken(uid: "tls"), channel: "room", uid: "tls"))) else {
            Issue.record("join over wss failed")
            return
        }
        await client.close()
        // Default trust roots do not include a self-signed certificate: the handshake fails, cleanly.
        let untrusting = try SignalingClient(url: url, group: WebSocketServerTests.group)
        let refused = await #expect(throws: (any Error).self) { try await untrusting.connect() }
        #expect("\(refused.map { "\($0)" } ?? "")".contains("certificate was refused"), "\(String(describing: refused))")
        // https:// on the same port: the HTTP client webhooks and `rtc-cli room` use, over the same TLS.
        let metrics = try await HTTPPost.send(try HTTPPost.target("https://localhost:\(app.signalingAddress!.port!)/metrics"), method: .GET,
                                              headers: [], body: [], on: WebSocketServerTests.group.next(),
                                              tls: try TLSContext.client(trusting), timeout: .seconds(5)).get()
        #expect(metrics.status == 200 && String(decoding: metrics.body, as: UTF8.self).contains("rtc_"), "\(metrics.status)")
        // The certificate's IP entry is checked for an address.
        let byAddress = try SignalingClient(url: "wss://127.0.0.1:\(app.signalingAddress!.port!)/rtc", group: WebSocketServerTests.group,
                                            tls: trusting)
        try await byAddress.connect()
        await byAddress.close()
        // And a plain ws:// client cannot talk to a TLS port.
        let plain = try SignalingClient(url: "ws://127.0.0.1:\(app.signalingAddress!.port!)/rtc", group: WebSocketServerTests.group)
        await #expect(throws: (any Error).self) { try await plain.connect() }
        await app.shutdown()
    }

    @Test("a trusted certificate for another name is refused: by name (localhost) and by address (127.0.0.1)", arguments: ["localhost", "127.0.0.1"])
    func wrongName(host: String) async throws {
        let (certificate, key) = try makeCertificate(names: "DNS:other.test,IP:10.9.8.7")
        let app = try await RTCServerApp.start(
            configuration: ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: "test-secret", tlsCertificatePath: certificate,
                                               tlsKeyPath: key),
            group: WebSocketServerTests.group)
        let client = try SignalingClient(url: "wss://\(host):\(app.signalingAddress!.port!)/rtc", group: WebSocketServerTests.group,
                                         tls: TLSClientOptions(trustedCertificateFiles: [certificate]))
        let refused = await #expect(throws: (any Error).self) { try await client.connect() }
        #expect("\(refused.map { "\($0)" } ?? "")".contains("certificate was refused"), "\(String(describing: refused))")
        await app.shutdown()
    }

    @Test("a client handler needs a name or address it can verify: none, an empty one, or one OpenSSL cannot check (127.1) is refused, never a crash")
    func clientNeedsAName() throws {
        let client = try TLSContext.client()
        for name in [nil, "", "127.1"] as [String?] {
            #expect(throws: TLSError.self) { _ = try client.handler(serverName: name) }
        }
        _ = try client.handler(serverName: "localhost")
        _ = try client.handler(serverName: "::1")
    }

    /// Echoes what it reads.
    final class Echo: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        func channelRead(context: ChannelHandlerContext, data: NIOAny) { context.writeAndFlush(data, promise: nil) }
    }

    /// Collects what it reads until `count` bytes came.
    final class Collect: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = ByteBuffer
        let count: Int, done: EventLoopPromise<[UInt8]>
        var bytes: [UInt8] = []
        init(count: Int, done: EventLoopPromise<[UInt8]>) { (self.count, self.done) = (count, done) }
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            bytes += Array(buffer: unwrapInboundIn(data))
            if bytes.count >= count { done.succeed(bytes) }
        }
        func errorCaught(context: ChannelHandlerContext, error: any Error) { done.fail(error) }
        func channelInactive(context: ChannelHandlerContext) { done.fail(ChannelError.ioOnClosedChannel) }
    }

    @Test("TLSHandler both ways over loopback: writes made before the handshake go first and in order, their promises succeed; a 3 MB write arrives whole through 16 KB records")
    func handlerEcho() async throws {
        let (certificate, key) = try makeCertificate()
        let serverTLS = try TLSContext.server(certificateChainFile: certificate, privateKeyFile: key)
        let clientTLS = try TLSContext.client(TLSClientOptions(trustedCertificateFiles: [certificate]))
        let group = WebSocketServerTests.group
        let server = try await ServerBootstrap(group: group).childChannelInitializer { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(try serverTLS.handler())
                try channel.pipeline.syncOperations.addHandler(Echo())
            }
        }.bind(host: "127.0.0.1", port: 0).get()
        let first = Array("hello before the handshake ".utf8)
        let large = (0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let done = group.next().makePromise(of: [UInt8].self)
        let channel = try await ClientBootstrap(group: group).channelInitializer { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(try clientTLS.handler(serverName: "127.0.0.1"))
                try channel.pipeline.syncOperations.addHandler(Collect(count: first.count + large.count, done: done))
            }
        }.connect(to: server.localAddress!).get()
        // Written at once, before the handshake can have finished: both wait for it, in order.
        let firstWritten = channel.eventLoop.makePromise(of: Void.self), largeWritten = channel.eventLoop.makePromise(of: Void.self)
        channel.writeAndFlush(ByteBuffer(bytes: first), promise: firstWritten)
        channel.writeAndFlush(ByteBuffer(bytes: large), promise: largeWritten)
        try await firstWritten.futureResult.get()
        try await largeWritten.futureResult.get()
        let echoed = try await done.futureResult.get()
        #expect(echoed.count == first.count + large.count)
        #expect(Array(echoed.prefix(first.count)) == first && Array(echoed.dropFirst(first.count)) == large)
        try await channel.close()
        try await server.close()
    }

    @Test("a certificate or key that cannot be used is a clear error at start")
    func badFiles() async throws {
        let (certificate, key) = try makeCertificate()
        let (_, otherKey) = try makeCertificate()
        let cases: [(String, String, String)] = [
            ("/nonexistent/cert.pem", key, "cannot use the certificate chain"),
            (certificate, "/nonexistent/key.pem", "cannot use the private key"),
            (certificate, otherKey, "key values mismatch"),
            (key, key, "cannot use the certificate chain"),
        ]
        for (certificatePath, keyPath, message) in cases {
            let error = await #expect(throws: TLSError.self) {
                _ = try await RTCServerApp.start(configuration: ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: "test-secret",
                                                                                    tlsCertificatePath: certificatePath, tlsKeyPath: keyPath),
                                                 group: WebSocketServerTests.group)
            }
            #expect(error?.description.contains(message) == true, "\(String(describing: error))")
        }
    }
}
