import CMemory
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RTCServer
import RTCTransport
import Signaling
import TestKit
import Testing

/// A WebSocket client that writes frames byte by byte as told (masked or not, any opcode), to
/// see what the server does with frames RFC 6455 forbids. Blocking, with a 5 s read timeout.
final class RawWebSocket {
    let fd: Int32

    init(port: Int, upgrade: Bool = true) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw POSIXError(.ECONNREFUSED) }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard upgrade else { return }
        write(Array(("GET /rtc HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").utf8))
        var response = [UInt8]()
        while !response.suffix(4).elementsEqual(Array("\r\n\r\n".utf8)) {
            guard let byte = readBytes(1).first else { break }
            response.append(byte)
        }
        guard String(decoding: response, as: UTF8.self).hasPrefix("HTTP/1.1 101") else { throw POSIXError(.EPROTO) }
    }

    deinit { close(fd) }

    func write(_ bytes: [UInt8]) { _ = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) } }

    /// Up to `count` bytes; fewer (or none) when the server closed or nothing came in 5 s.
    func readBytes(_ count: Int) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: count)
        var got = 0
        while got < count {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress! + got, count - got) }
            if n <= 0 { break }
            got += n
        }
        return Array(buffer[..<got])
    }

    /// One frame: FIN, `opcode` (and `rsv` bits), masked with a fixed key unless `masked` is false.
    func send(opcode: UInt8, payload: [UInt8], masked: Bool = true, rsv: UInt8 = 0) {
        var frame: [UInt8] = [0x80 | (rsv << 4) | opcode]
        let maskBit: UInt8 = masked ? 0x80 : 0
        if payload.count < 126 {
            frame.append(maskBit | UInt8(payload.count))
        } else {
            frame.append(maskBit | 126)
            frame += [UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
        }
        let key: [UInt8] = [0x12, 0x34, 0x56, 0x78]
        if masked {
            frame += key
            frame += payload.enumerated().map { $1 ^ key[$0 % 4] }
        } else {
            frame += payload
        }
        write(frame)
    }

    /// Reads frames until a close frame and returns its status code (nil when the connection
    /// ended without one, or nothing came within the timeout).
    func closeCode() -> UInt16? {
        while true {
            let head = readBytes(2)
            guard head.count == 2 else { return nil }
            var length = Int(head[1] & 0x7F)
            if length == 126 { length = readBytes(2).reduce(0) { $0 << 8 | Int($1) } }
            let payload = readBytes(length)
            if head[0] & 0x0F == 0x8 { return payload.count >= 2 ? UInt16(payload[0]) << 8 | UInt16(payload[1]) : nil }
        }
    }

    /// Whether the server closed the TCP connection (a read returns 0) within the timeout.
    func closedByServer() -> Bool {
        var byte: UInt8 = 0
        return read(fd, &byte, 1) == 0
    }
}

@Suite("Hardening: limits, grants, identities and strict WebSocket framing", .serialized)
struct HardeningTests {
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)

    func makeSFU(_ limits: ServerLimits = ServerLimits()) async throws -> SFU {
        var configuration = ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: "test-secret")
        configuration.limits = limits
        return try await SFU.start(configuration: configuration, group: Self.group)
    }

    func joined(_ sfu: SFU, _ uid: String, grants: TokenGrants = .all, role: ParticipantRole = .broadcaster) async throws -> TestClient {
        let client = TestClient(uid: uid, sfu: sfu, group: Self.group)
        guard case .joined? = try await client.join(channel: "hard", token: testToken(uid: uid, channel: "hard", grants: grants), role: role)
        else { throw SignalingError(.internalError, "\(uid) did not join: \(client.messages)") }
        return client
    }

    func error(_ client: TestClient, _ id: UInt32) async throws -> SignalingError? {
        if case .error(let error)? = try await client.reply(to: id) { return error }
        return nil
    }

    @Test("grants by kind and source: an audio-only token cannot publish video, not by announcing it nor by offering it in an audio mid")
    func grantsByKind() async throws {
        let sfu = try await makeSFU()
        let audioOnly = TokenGrants(join: true, publishAudio: true, publishVideo: false, publishScreen: false, subscribe: true)
        let client = try await joined(sfu, "talker", grants: audioOnly)
        let video = client.send(.publishTrack(PublishTrackRequest(kind: .video, source: .camera, mid: "1", ssrc: nil)))
        #expect(try await error(client, video)?.code == .permissionDenied)
        // A video track passed off as a microphone.
        let disguised = client.send(.publishTrack(PublishTrackRequest(kind: .video, source: .microphone, mid: "1", ssrc: nil)))
        let refusal = try await error(client, disguised)
        #expect(refusal?.code == .permissionDenied && refusal?.reason.contains("cannot come from") == true, "\(String(describing: refusal))")
        // Audio announced in mid 0, then an offer that sends video there.
        let audio = client.send(.publishTrack(PublishTrackRequest(kind: .audio, source: .microphone, mid: "0", ssrc: nil)))
        guard case .trackPublished? = try await client.reply(to: audio) else { Issue.record("audio refused"); return }
        let offer = try await client.publish([MediaSectionDescription(mid: "0", kind: .video, direction: .sendonly, ssrc: 0x77, trackID: "v")])
        guard case .error(let offerError)? = offer else { Issue.record("the video offer was accepted: \(String(describing: offer))"); return }
        #expect(offerError.code == .permissionDenied && offerError.reason.contains("announced as audio"), "\(offerError)")
        let tracks = try await sfu.participants(in: "hard").get().first?.tracks ?? []
        #expect(tracks.map(\.kind) == [.audio])
        #expect(try await sfu.counterSnapshot.get().permissionRefusals >= 3)
        await client.close()
        await sfu.shutdown()
    }

    @Test("a screen share needs its owner: 1001_sub alone is refused with 3003 and closed; beside its owner it joins, auto-subscribes to nothing whatever it asks, and receives only whom it pins")
    func screenShareOwnerRule() async throws {
        let sfu = try await makeSFU()
        let early = TestClient(uid: "1001_sub", sfu: sfu, group: Self.group)
        guard case .error(let refusal)? = try await early.join(channel: "hard", token: testToken(uid: "1001_sub", channel: "hard")) else {
            Issue.record("a share without its owner joined: \(early.messages)")
            return
        }
        #expect(refusal.code == .screenShareOwnerAbsent && refusal.reason.contains("1001"), "\(refusal)")
        #expect(await eventually { early.peer.closed.withLockedValue { $0 } }, "a refused join keeps its connection")
        #expect(try await sfu.participants(in: "hard").get().isEmpty)

        let owner = try await joined(sfu, "1001")
        let talker = try await joined(sfu, "2001")
        _ = try await talker.publish([MediaSectionDescription(mid: "0", kind: .video, direction: .sendonly, ssrc: 0x2001, trackID: "cam")])
        // The share asks for everything automatically: it gets nothing.
        let share = TestClient(uid: "1001_sub", sfu: sfu, group: Self.group)
        guard case .joined? = try await share.join(channel: "hard", token: testToken(uid: "1001_sub", channel: "hard"), autoSubscribe: true) else {
            Issue.record("the share beside its owner did not join: \(share.messages)")
            return
        }
        let byKind = share.send(.updateSubscription(SubscriptionUpdate(trackSids: [], subscribe: true, kind: .video)))
        #expect(try await error(share, byKind)?.code == .permissionDenied)
        talker.sendRTP(ssrc: 0x2001, count: 20)
        try await Task.sleep(for: .milliseconds(300))
        #expect(try await sfu.packetsForwarded(to: "1001_sub", in: "hard").get().values.reduce(0, +) == 0)
        #expect(share.subscribedSSRCs.withLockedValue { $0.isEmpty })
        // Pinning is the app's choice: then it receives that user.
        _ = share.send(.updateSubscription(SubscriptionUpdate(trackSids: [], subscribe: true, uids: ["2001"])))
        #expect(await eventually { share.subscribedSSRCs.withLockedValue { $0.count } == 1 })
        for client in [early, owner, talker, share] { await client.close() }
        await sfu.shutdown()
    }

    @Test("setRole to broadcaster needs a publish grant; an audience token without one stays audience")
    func setRoleHonoursGrants() async throws {
        let sfu = try await makeSFU()
        let watchOnly = TokenGrants(join: true, publishAudio: false, publishVideo: false, publishScreen: false, subscribe: true)
        let viewer = try await joined(sfu, "viewer", grants: watchOnly, role: .audience)
        let id = viewer.send(.setRole(.broadcaster))
        #expect(try await error(viewer, id)?.code == .permissionDenied)
        #expect(try await sfu.participants(in: "hard").get().first?.role == .audience)
        let host = try await joined(sfu, "host", role: .audience)
        host.send(.setRole(.broadcaster))
        #expect(await eventually { (try? await sfu.participants(in: "hard").get().first { $0.uid == "host" }?.role) == .broadcaster })
        await viewer.close()
        await host.close()
        await sfu.shutdown()
    }

    @Test("a token that lives longer than the server allows is refused with 2002 and the reason")
    func tokenLifetime() async throws {
        var limits = ServerLimits()
        limits.maxTokenLifetimeSeconds = 86_400
        let sfu = try await makeSFU(limits)
        let client = TestClient(uid: "forever", sfu: sfu, group: Self.group)
        let reply = try await client.join(channel: "hard", token: testToken(uid: "forever", channel: "hard", ttl: 400 * 86_400))
        guard case .error(let error)? = reply else { Issue.record("joined with a 400-day token"); return }
        #expect(error.code == .tokenInvalid && error.reason.contains("at most 86400 s"), "\(error)")
        guard case .joined? = try await client.join(channel: "hard", token: testToken(uid: "forever", channel: "hard", ttl: 3600)) else {
            Issue.record("a one-hour token was refused")
            return
        }
        await sfu.shutdown()
    }

    @Test("the same uid joining again: the newer wins and the older is told duplicateIdentity")
    func duplicateIdentity() async throws {
        let sfu = try await makeSFU()
        let older = try await joined(sfu, "twin")
        let olderSid = try await sfu.participants(in: "hard").get().first?.sid
        let newer = try await joined(sfu, "twin")
        #expect(older.messages.contains { $0.message == .leave(reason: .duplicateIdentity) })
        #expect(older.peer.closed.withLockedValue { $0 })
        let now = try await sfu.participants(in: "hard").get()
        #expect(now.count == 1 && now.first?.sid != olderSid)
        #expect(try await sfu.counterSnapshot.get().duplicateIdentities == 1)
        await older.close()
        await newer.close()
        await sfu.shutdown()
    }

    @Test("tracks, pins and room size stop at their limits with 4004; a reason quoting the client's input is cut short")
    func limits() async throws {
        var limits = ServerLimits()
        limits.maxTracksPerParticipant = 4
        limits.maxPinned = 3
        limits.maxParticipantsPerRoom = 3
        let sfu = try await makeSFU(limits)
        let flooder = try await joined(sfu, "flooder")
        var codes: [SignalingError.Code?] = []
        for index in 0..<6 {
            let id = flooder.send(.publishTrack(PublishTrackRequest(kind: .audio, source: .microphone, mid: "m\(index)", ssrc: nil)))
            codes.append(try await error(flooder, id)?.code)
        }
        #expect(codes == [nil, nil, nil, nil, .limitExceeded, .limitExceeded])
        let pins = flooder.send(.updateSubscription(SubscriptionUpdate(trackSids: [], subscribe: true, uids: ["a", "b", "c", "d"])))
        #expect(try await error(flooder, pins)?.code == .limitExceeded)
        let long = flooder.send(.unpublishTrack(trackSid: String(repeating: "x", count: 60_000)))
        let cut = try await error(flooder, long)
        #expect(cut?.code == .trackNotFound && (cut?.reason.count ?? .max) < 400, "a reason of \(cut?.reason.count ?? 0) characters")
        _ = try await joined(sfu, "second")
        _ = try await joined(sfu, "third")
        let fourth = TestClient(uid: "fourth", sfu: sfu, group: Self.group)
        guard case .error(let full)? = try await fourth.join(channel: "hard", token: testToken(uid: "fourth", channel: "hard")) else {
            Issue.record("a fourth participant joined a room of three")
            return
        }
        #expect(full.code == .limitExceeded)
        #expect(try await sfu.counterSnapshot.get().limitRefusals == 4)
        await sfu.shutdown()
    }

    @Test("RFC 6455 framing: unmasked frames and reserved opcodes fail with 1002, text that is not UTF-8 with 1007")
    func strictFraming() async throws {
        let app = try await RTCServerApp.start(configuration: ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: "test-secret"),
                                               group: Self.group)
        let port = app.signalingAddress!.port!
        let unmasked = try RawWebSocket(port: port)
        unmasked.send(opcode: 0x1, payload: Array(#"{"v":"1.3","type":"ping","payload":{"timestamp":1}}"#.utf8), masked: false)
        #expect(unmasked.closeCode() == 1002)
        let reserved = try RawWebSocket(port: port)
        reserved.send(opcode: 0x3, payload: [1, 2, 3])
        #expect(reserved.closeCode() == 1002)
        let rsv = try RawWebSocket(port: port)
        rsv.send(opcode: 0x1, payload: Array("{}".utf8), rsv: 0b100)
        #expect(rsv.closeCode() == 1002)
        let notUTF8 = try RawWebSocket(port: port)
        notUTF8.send(opcode: 0x1, payload: [0x7B, 0xC3, 0x28, 0x7D])
        #expect(notUTF8.closeCode() == 1007)
        // A well-formed ping on the same server is answered.
        let good = try RawWebSocket(port: port)
        good.send(opcode: 0x1, payload: Array(#"{"v":"1.3","type":"ping","payload":{"timestamp":1}}"#.utf8))
        let head = good.readBytes(2)
        #expect(head.first == 0x81, "no text frame back: \(head)")
        await app.shutdown()
    }

    @Test("connections that never join are closed at the deadline: a WebSocket that never sends join, a TCP connection that never upgrades")
    func joinDeadline() async throws {
        var configuration = ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: "test-secret")
        configuration.limits.joinDeadlineSeconds = 1
        let app = try await RTCServerApp.start(configuration: configuration, group: Self.group)
        let port = app.signalingAddress!.port!
        let idle = try RawWebSocket(port: port)
        let bare = try RawWebSocket(port: port, upgrade: false)
        let start = Date()
        #expect(idle.closeCode() == 1008)
        #expect(bare.closedByServer())
        let waited = Date().timeIntervalSince(start)
        #expect(waited < 4, "closed after \(waited) s")
        // A client that joins in time stays.
        let client = try SignalingClient(url: "ws://127.0.0.1:\(port)/rtc", group: Self.group)
        try await client.connect()
        guard case .joined = try await client.request(.join(JoinRequest(token: testToken(uid: "u"), channel: "room", uid: "u"))) else {
            Issue.record("join failed")
            return
        }
        try await Task.sleep(for: .seconds(2))
        guard case .pong = try await client.request(.ping(timestamp: 5)) else {
            Issue.record("a joined client was closed")
            return
        }
        #expect(try await app.sfu.counterSnapshot.get().connectionsClosedUnjoined == 2)
        await client.close()
        await app.shutdown()
    }

    static let ping = Array(#"{"v":"1.3","type":"ping","payload":{"timestamp":1}}"#.utf8)

    @Test("a connection over its message budget gets 4004 and is closed with 1008; others carry on")
    func messageFlood() async throws {
        var configuration = ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: "test-secret")
        configuration.limits.messagesPerSecond = 20
        configuration.limits.messageBurst = 40
        let app = try await RTCServerApp.start(configuration: configuration, group: Self.group)
        let port = app.signalingAddress!.port!
        let flood = try RawWebSocket(port: port)
        for _ in 0..<200 { flood.send(opcode: 0x1, payload: Self.ping) }
        var texts: [String] = []
        var close: UInt16?
        while close == nil {
            let head = flood.readBytes(2)
            guard head.count == 2 else { break }
            var length = Int(head[1] & 0x7F)
            if length == 126 { length = flood.readBytes(2).reduce(0) { $0 << 8 | Int($1) } }
            let payload = flood.readBytes(length)
            if head[0] & 0x0F == 0x8 { close = payload.count >= 2 ? UInt16(payload[0]) << 8 | UInt16(payload[1]) : 0 }
            if head[0] & 0x0F == 0x1 { texts.append(String(decoding: payload, as: UTF8.self)) }
        }
        #expect(close == 1008)
        #expect(texts.contains { $0.contains("4004") }, "no limitExceeded error among \(texts.count) replies")
        #expect(texts.count <= 45, "\(texts.count) replies to a flood the budget allows 40 of")
        // A polite client on the same server is untouched.
        let polite = try RawWebSocket(port: port)
        polite.send(opcode: 0x1, payload: Self.ping)
        #expect(polite.readBytes(2).first == 0x81)
        #expect(try await app.sfu.counterSnapshot.get().limitRefusals >= 1)
        await app.shutdown()
    }

    @Test("a client that never reads cannot make the server queue replies: it stops reading that client (or closes it past the bound), and others are served")
    func nonReadingClient() async throws {
        var configuration = ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: "test-secret")
        configuration.limits.messagesPerSecond = 1_000_000
        configuration.limits.messageBurst = 1_000_000
        configuration.limits.inboundBytesPerSecond = 1e9
        configuration.limits.inboundByteBurst = 1e9
        configuration.limits.maxOutboundBytes = 64 * 1024
        let app = try await RTCServerApp.start(configuration: configuration, group: Self.group)
        let port = app.signalingAddress!.port!
        let reader = try RawWebSocket(port: port)
        var small: Int32 = 4096
        setsockopt(reader.fd, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
        var sendTimeout = timeval(tv_sec: 0, tv_usec: 300_000)
        setsockopt(reader.fd, SOL_SOCKET, SO_SNDTIMEO, &sendTimeout, socklen_t(MemoryLayout<timeval>.size))
        signal(SIGPIPE, SIG_IGN)
        // 125-byte WebSocket pings, each asking for a 125-byte pong that is never read, until the
        // server stops taking them (it stopped reading: our send buffer fills and a write times
        // out) or closes the connection.
        let ping: [UInt8] = [0x89, 0x80 | 125, 1, 2, 3, 4] + [UInt8](repeating: 7, count: 125)
        var sent = 0, stopped = false
        while sent < 200_000 {
            let n = ping.withUnsafeBytes { Glibc.write(reader.fd, $0.baseAddress, $0.count) }
            if n < ping.count { stopped = true; break }
            sent += 1
        }
        let refused = (try? await app.sfu.counterSnapshot.get().limitRefusals) ?? 0
        print("non-reading client: the server stopped taking pings after \(sent) (\(sent * 131 / 1024) KB), closed: \(refused > 0)")
        #expect(stopped, "the server took 200 000 pings from a client that read none of the replies")
        let polite = try RawWebSocket(port: port)
        polite.send(opcode: 0x1, payload: Self.ping)
        #expect(polite.readBytes(2).first == 0x81, "another client was not served")
        await app.shutdown()
    }

    /// A connection that keeps nothing of what it is sent but whether it joined.
    final class QuietPeer: SignalingPeer, @unchecked Sendable {
        let joined = NIOLockedValueBox(false)
        func send(_ envelope: ServerEnvelope) {
            if case .joined = envelope.message { joined.withLockedValue { $0 = true } }
        }
        func close() {}
    }

    /// Heap bytes in use (glibc's `mallinfo2`: small blocks plus mmapped ones), which, unlike the
    /// resident set, does not hide new allocations in memory freed by earlier tests.
    static func heapBytesInUse() -> Int { Int(rtc_heap_bytes_in_use()) }

    @Test("300 joins cost at most 256 KB each, and 300 abrupt drops are all forgotten within the resume window")
    func joinsAndDrops() async throws {
        let sfu = try await SFU.start(configuration: ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: "test-secret", resumeWindow: 2),
                                      group: Self.group)
        let peers = (0..<300).map { _ in QuietPeer() }
        let tokens = (0..<300).map { testToken(uid: "p\($0)", channel: "crowd") }
        let before = Self.heapBytesInUse()
        for (index, peer) in peers.enumerated() {
            let join = ClientEnvelope(.join(JoinRequest(token: tokens[index], channel: "crowd", uid: "p\(index)")), requestID: 1)
            sfu.received(join.encoded(), from: peer)
        }
        #expect(await eventually(30) { peers.allSatisfy { $0.joined.withLockedValue { $0 } } })
        let perParticipant = (Self.heapBytesInUse() - before) / 300
        print("300 joins: \(perParticipant / 1024) KB of heap each")
        #expect(perParticipant <= 256 * 1024, "\(perParticipant / 1024) KB per participant")
        for peer in peers { sfu.disconnected(peer) }
        #expect(await eventually(8) { (try? await sfu.participants(in: "crowd").get().count) == 0 })
        #expect(try await sfu.counterSnapshot.get().participants == 0)
        await sfu.shutdown()
    }

    @Test("connections past the per-address limit are closed at once; a freed slot takes a new one")
    func connectionsPerAddress() async throws {
        var configuration = ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: "test-secret")
        configuration.limits.maxConnectionsPerIP = 3
        let app = try await RTCServerApp.start(configuration: configuration, group: Self.group)
        let port = app.signalingAddress!.port!
        var open = try (0..<3).map { _ in try RawWebSocket(port: port) }
        #expect(throws: (any Error).self) { try RawWebSocket(port: port) }
        open.removeLast()  // closes its socket
        #expect(await eventually(5) { (try? RawWebSocket(port: port)) != nil })
        #expect(try await app.sfu.counterSnapshot.get().limitRefusals >= 1)
        _ = open
        await app.shutdown()
    }

    @Test("pipelined HTTP requests whose responses are never read: the server stops reading them and keeps serving others")
    func pipelinedHTTPFlood() async throws {
        var configuration = ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: "test-secret")
        configuration.limits.maxOutboundBytes = 64 * 1024
        let app = try await RTCServerApp.start(configuration: configuration, group: Self.group)
        let port = app.signalingAddress!.port!
        let flooder = try RawWebSocket(port: port, upgrade: false)
        var small: Int32 = 4096
        setsockopt(flooder.fd, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
        var sendTimeout = timeval(tv_sec: 0, tv_usec: 300_000)
        setsockopt(flooder.fd, SOL_SOCKET, SO_SNDTIMEO, &sendTimeout, socklen_t(MemoryLayout<timeval>.size))
        signal(SIGPIPE, SIG_IGN)
        let request = Array("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
        var sent = 0, stopped = false
        while sent < 300_000 {
            let n = request.withUnsafeBytes { Glibc.write(flooder.fd, $0.baseAddress, $0.count) }
            if n < request.count { stopped = true; break }
            sent += 1
        }
        print("pipelined HTTP flood: the server stopped taking requests after \(sent) (\(sent * request.count / 1024) KB)")
        #expect(stopped, "the server took 300 000 pipelined requests from a client that read no responses")
        #expect(try httpGet(app.signalingAddress!, "/healthz").hasSuffix("ok\n"), "another client was not served")
        await app.shutdown()
    }
}
