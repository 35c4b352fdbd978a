import Foundation
import NIOConcurrencyHelpers
import RTCTestSupport
import ScreenShareUser
import Signaling
import Testing

/// Collects a host's events with arrival times.
final class HostEvents: @unchecked Sendable {
    private let log = NIOLockedValueBox<[(ScreenShareEvent, Date)]>([])
    private var task: Task<Void, Never>?

    init(_ host: ScreenShareHost) {
        task = Task { [log] in for await event in host.events { log.withLockedValue { $0.append((event, Date())) } } }
    }

    func finished(within seconds: Double) async -> (ScreenShareFinishReason, Date)? {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if let found = finishedNow { return found }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return finishedNow
    }

    private var finishedNow: (ScreenShareFinishReason, Date)? {
        log.withLockedValue { $0 }.lazy.compactMap { event, at in if case .finished(let reason) = event { (reason, at) } else { nil } }.first
    }
}

@Suite("Screen-share host link", .serialized)
struct HostLinkTests {
    static let channel = "ScreenShare"

    func setup(_ server: TestServer, mode: ScreenShareMode = .standalone) -> ScreenShareSetup {
        ScreenShareSetup(configuration: ScreenShareConfiguration(serverURL: server.url, channel: Self.channel, hostUID: "1001",
                                                                 token: testToken(uid: "1001_sub", channel: Self.channel)),
                         mode: mode, source: "pattern")
    }

    func linkPath() -> String { NSTemporaryDirectory() + "link-\(UUID().uuidString.prefix(8)).sock" }

    /// The relay-only sharer, built next to rtc-cli.
    static var capturePath: String { String(cliPath.dropLast("rtc-cli".count)) + "rtc-capture" }

    @Test("the sharer process joins as 1001_sub, or relays through the host (also as rtc-capture); a force-stop gives finished(requestedByHost) within 1 s",
          arguments: [(ScreenShareMode.standalone, false), (.relay, false), (.relay, true)])
    func forceStop(mode: ScreenShareMode, lean: Bool) async throws {
        let server = try await TestServer()
        let viewer = server.engine()
        let viewerEvents = EventLog(viewer)
        try await viewer.join(token: testToken(uid: "2001", channel: Self.channel), channel: Self.channel, uid: "2001")
        let owner = try await server.presentHost(channel: Self.channel)
        let host = try ScreenShareHost(linkPath: linkPath())
        let events = HostEvents(host)
        if lean {
            try host.launchSharer(executable: Self.capturePath, arguments: ["--link", host.linkPath])
        } else {
            try host.launchSharer(executable: cliPath, arguments: ["share", "--link", host.linkPath])
        }
        try await host.start(setup(server, mode: mode))
        let first = await viewerEvents.wait(15) {
            if case .firstRemoteVideoFrameDecoded(let uid, let source, let size, _) = $0, uid == "1001_sub" { (source, size) } else { nil }
        }
        #expect(first?.0 == .screen)
        #expect(first?.1 == VideoSize(width: 1280, height: 720))
        let asked = Date()
        await host.stop()
        let finished = await events.finished(within: 3)
        #expect(finished?.0 == .requestedByHost)
        if let at = finished?.1 { #expect(at.timeIntervalSince(asked) <= 1, "\(at.timeIntervalSince(asked)) s") }
        host.waitForSharer()
        #expect(await viewerEvents.wait { if case .userOffline(let uid, _) = $0, uid == "1001_sub" { true } else { nil } } == true)
        await owner.leave()
        await viewer.leave()
        await server.shutdown()
    }

    @Test("the relay-only sharer refuses a standalone setup with an error that names rtc-sharer")
    func leanSharerRefusesStandalone() async throws {
        let server = try await TestServer()
        let host = try ScreenShareHost(linkPath: linkPath())
        let events = HostEvents(host)
        try host.launchSharer(executable: Self.capturePath, arguments: ["--link", host.linkPath])
        try? await host.start(setup(server, mode: .standalone))
        let finished = await events.finished(within: 3)
        guard case .error(let message)? = finished?.0 else {
            Issue.record("expected finished(error), got \(String(describing: finished?.0))")
            await server.shutdown()
            return
        }
        #expect(message.contains("rtc-sharer"), "\(message)")
        host.waitForSharer()
        await server.shutdown()
    }

    @Test("a killed sharer process is reported to the host within 1 s")
    func killedSharer() async throws {
        let server = try await TestServer()
        let owner = try await server.presentHost(channel: Self.channel)
        defer { Task { await owner.leave() } }
        let host = try ScreenShareHost(linkPath: linkPath())
        let events = HostEvents(host)
        let pid = try host.launchSharer(executable: cliPath, arguments: ["share", "--link", host.linkPath])
        try await host.start(setup(server))
        try await Task.sleep(for: .milliseconds(300))
        kill(pid, SIGKILL)
        let killed = Date()
        let finished = await events.finished(within: 3)
        guard case .error(let message)? = finished?.0 else {
            Issue.record("expected finished(error), got \(String(describing: finished?.0))")
            await server.shutdown()
            return
        }
        #expect(message.contains("signal 9") || message.contains("ended"), "\(message)")
        if let at = finished?.1 { #expect(at.timeIntervalSince(killed) <= 1, "\(at.timeIntervalSince(killed)) s") }
        await server.shutdown()
    }

    @Test("a protocol-version mismatch ends the share with versionMismatch on both sides")
    func versionMismatch() async throws {
        let server = try await TestServer()
        let host = try ScreenShareHost(linkPath: linkPath())
        let events = HostEvents(host)
        let sharer = try ChildProcess([cliPath, "share", "--link", host.linkPath, "--link-version", "99"])
        await #expect(throws: LinkError.self) { try await host.start(setup(server)) }
        #expect(await events.finished(within: 2)?.0 == .versionMismatch)
        let status = await sharer.wait(30)
        let text = sharer.outputText
        #expect(text.contains("versionMismatch"), "\(text)")
        #expect(status == 3)
        await server.shutdown()
    }

    @Test("when the host leaves the channel, its standalone sharer finishes with hostLeft and the server removes it")
    func hostLeaves() async throws {
        let server = try await TestServer()
        let hostEngine = server.engine()
        try await hostEngine.join(token: testToken(uid: "1001", channel: Self.channel), channel: Self.channel, uid: "1001")
        let host = try ScreenShareHost(linkPath: linkPath())
        let events = HostEvents(host)
        try host.launchSharer(executable: cliPath, arguments: ["share", "--link", host.linkPath])
        try await host.start(setup(server))
        #expect(await eventually { try await server.app.sfu.participants(in: Self.channel).get().contains { $0.uid == "1001_sub" } })
        await hostEngine.leave()
        #expect(await events.finished(within: 3)?.0 == .hostLeft)
        host.waitForSharer()
        #expect(await eventually { try await server.app.sfu.participants(in: Self.channel).get().isEmpty })
        await server.shutdown()
    }

    @Test("bad bytes on the link end the share with an error, never a crash", arguments: [
        ("oversized", [0xFF, 0xFF, 0xFF, 0xFF] as [UInt8]),
        ("not a message", [0, 0, 0, 5, 0x68, 0x65, 0x6C, 0x6C, 0x6F] as [UInt8]),
        ("unknown message", [0, 0, 0, 1, 0x7E] as [UInt8]),
        ("truncated", [0, 0, 1, 0, 0x02] as [UInt8]),
    ] as [(String, [UInt8])])
    func badLinkInput(name: String, bytes: [UInt8]) async throws {
        let path = linkPath()
        let host = try ScreenShareHost(linkPath: path)
        let events = HostEvents(host)
        let starting = Task { try await host.start(ScreenShareSetup(configuration: ScreenShareConfiguration(
            serverURL: "ws://127.0.0.1:1/rtc", channel: "c", hostUID: "h", token: "t"))) }
        // A raw client: the right hello, then the bad bytes.
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in raw.copyBytes(from: Array(path.utf8) + [0]) }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        #expect(connected == 0)
        let hello = LinkCodec.encode(.hello(version: screenShareLinkVersion))
        let frame = [0, 0, 0, UInt8(hello.count)] + hello + bytes
        _ = frame.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, 0) }
        shutdown(fd, Int32(SHUT_WR))
        await #expect(throws: (any Error).self) { try await starting.value }
        let finished = await events.finished(within: 2)
        if case .error? = finished?.0 {} else { Issue.record("\(name): expected finished(error), got \(String(describing: finished?.0))") }
        close(fd)
    }
}
