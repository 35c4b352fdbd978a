@_exported import TestKit
import Foundation
import LiveKitProtocol
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RTCCore
import RTCServer
import Signaling

/// Shared by the end-to-end test targets (EngineTests, ScreenShareUserTests, CLITests); not a product.
/// Re-exports TestKit (eventually, ChildProcess and runTool, MediaProbe and PSNRMeasurement, temporaryDirectory, testToken).
///
/// An embedded server on loopback with ephemeral ports, and helpers to make engines join it.
public final class TestServer: @unchecked Sendable {
    /// The server's secret: TestKit's `testSecret`, so `testToken(uid:channel:)` makes tokens it accepts.
    public static let secret = testSecret
    public private(set) var app: RTCServerApp
    public let url: String
    private let configuration: ServerConfiguration

    /// The repository's web client (`Web/`).
    public static let webRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Web").path

    /// `http://127.0.0.1:<port>`: the web client (with `webRoot`), `/healthz`, `/metrics`.
    public var httpURL: String { "http://127.0.0.1:\(app.signalingAddress!.port!)" }

    /// The LiveKit API key and secret the server takes (``liveKitToken(uid:channel:)`` signs with them).
    public static let liveKitKey = "APIharness", liveKitSecret = "harness-api-secret-0123456789abcdef"

    public init(pingInterval: Int = 5, pingTimeout: Int = 15, resumeWindow: Int = 20, publisherLimitFloorKbps: Int?? = nil,
                webRoot: String? = nil, devTokens: Bool = false, liveKit: Bool = false) async throws {
        var configuration = ServerConfiguration(signalingPort: 0, mediaPort: 0, secret: Self.secret)
        if liveKit { configuration.liveKitKeys = [Self.liveKitKey: Self.liveKitSecret] }
        configuration.webRoot = webRoot
        configuration.mintsDevTokens = devTokens
        if let publisherLimitFloorKbps { configuration.publisherLimitFloorKbps = publisherLimitFloorKbps }
        configuration.pingInterval = pingInterval
        configuration.pingTimeout = pingTimeout
        configuration.resumeWindow = resumeWindow
        app = try await RTCServerApp.start(configuration: configuration, group: MultiThreadedEventLoopGroup.singleton)
        url = "ws://127.0.0.1:\(app.signalingAddress!.port!)/rtc"
        configuration.signalingPort = app.signalingAddress!.port!
        configuration.mediaPort = app.mediaAddress!.port!
        self.configuration = configuration
    }

    /// Shuts the server down (everyone is told `serverShutdown`) and starts a new one on the same ports.
    public func restart(downFor seconds: Double = 0) async throws {
        await app.shutdown()
        if seconds > 0 { try await Task.sleep(for: .milliseconds(Int(seconds * 1000))) }
        // The old sockets may take a moment to be released: retry the same ports for a few seconds.
        var attempts = 0
        while true {
            do {
                app = try await RTCServerApp.start(configuration: configuration, group: MultiThreadedEventLoopGroup.singleton)
                return
            } catch where attempts < 30 {
                attempts += 1
                try await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    /// A LiveKit access token for `uid` in `channel`, signed with ``liveKitKey``.
    public static func liveKitToken(uid: String, channel: String) -> String {
        var grant = LiveKitVideoGrant(roomJoin: true, room: channel, canPublishData: true)
        grant.canUpdateOwnMetadata = true
        return LiveKitClaims(apiKey: liveKitKey, identity: uid, video: grant, now: Int64(Date().timeIntervalSince1970), ttl: 3600)
            .signed(secret: liveKitSecret)
    }

    /// An engine for this server; `signalingProtocol` `.livekit` speaks LiveKit's protocol to its
    /// LiveKit front end (tokens from ``liveKitToken(uid:channel:)``).
    public func engine(role: ClientRole = .broadcaster, profile: ChannelProfile = .communication, ignoreScreenShare: Bool? = nil,
                       mediaTimeoutSeconds: Double? = nil,
                       signalingProtocol: RTCEngineConfiguration.SignalingProtocol = .native) -> RTCEngine {
        var configuration = RTCEngineConfiguration(serverURL: signalingProtocol == .livekit ? url.replacingOccurrences(of: "/rtc", with: "") : url,
                                                   channelProfile: profile, clientRole: role,
                                                   ignoreScreenShareUsers: ignoreScreenShare, protocol: signalingProtocol)
        if let mediaTimeoutSeconds { configuration.mediaTimeoutSeconds = mediaTimeoutSeconds }
        return RTCEngine(configuration: configuration)
    }

    /// `uid` in `channel` as an audience member that subscribes to nothing: the owner a screen
    /// share (`<uid>_sub`) needs present before it may join.
    public func presentHost(_ uid: String = "1001", channel: String) async throws -> RTCEngine {
        let host = engine(role: .audience)
        try await host.join(token: testToken(uid: uid, channel: channel), channel: channel, uid: uid,
                            options: JoinOptions(autoSubscribeAudio: false, autoSubscribeVideo: false))
        return host
    }

    /// Packets the server forwarded to `uid`, from `publisher` (of `kind`, or all kinds).
    public func forwarded(to uid: String, from publisher: String, kind: TrackKind? = nil, in channel: String) async throws -> Int {
        try await app.sfu.packetsForwarded(to: uid, in: channel).get()
            .filter { $0.key.uid == publisher && (kind == nil || $0.key.kind == kind) }.values.reduce(0, +)
    }

    public func shutdown() async { await app.shutdown() }
}

/// Collects an engine's events for assertions.
public final class EventLog: @unchecked Sendable {
    private let events = NIOLockedValueBox<[RTCEngineEvent]>([])
    private var task: Task<Void, Never>?

    public init(_ engine: RTCEngine) {
        let stream = engine.events
        task = Task { [events] in
            for await event in stream { events.withLockedValue { $0.append(event) } }
        }
    }

    public var all: [RTCEngineEvent] { events.withLockedValue { $0 } }

    public func first<T>(_ match: (RTCEngineEvent) -> T?) -> T? { all.lazy.compactMap(match).first }

    /// Waits up to `seconds` for an event that `match` picks.
    public func wait<T>(_ seconds: Double = 10, _ match: @escaping (RTCEngineEvent) -> T?) async -> T? {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if let found = first(match) { return found }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return first(match)
    }

    deinit { task?.cancel() }
}

/// Pushes a synthetic pattern into an engine at `fps` until cancelled (``PacedSource``: its own
/// thread, absolute deadlines). A size the pattern generator refuses is a mistake in the test.
public func pushPattern(_ engine: RTCEngine, kind: PatternKind = .camera, size: VideoSize = VideoSize(width: 320, height: 240), fps: Int = 15)
    -> PacedSource
{
    do {
        return try PacedSource(pattern: kind, size: size, fps: fps) { _ = engine.pushVideoFrame($0) }
    } catch {
        preconditionFailure("pushPattern: \(kind) at \(size.width)x\(size.height): \(error)")
    }
}

/// Pushes a sine tone (mono, 10 ms blocks, 44.1 kHz unless told) into an engine until cancelled
/// (``PacedSource``).
public func pushTone(_ engine: RTCEngine, frequency: Double = 440, sampleRate: Int = 44100) -> PacedSource {
    PacedSource(tone: frequency, sampleRate: sampleRate) { _ = engine.pushAudioFrame($0) }
}

/// The built `rtc-cli`, next to the test bundle.
public let cliPath: String = {
    var url = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    for _ in 0..<4 where !FileManager.default.fileExists(atPath: url.appendingPathComponent("rtc-cli").path) {
        url = url.deletingLastPathComponent()
    }
    return url.appendingPathComponent("rtc-cli").path
}()

/// The dominant frequency of a 16-bit interleaved signal's first channel, by counting rising zero
/// crossings over whole periods (exact for a clean tone).
public func dominantFrequency(_ samples: [Int16], channels: Int, sampleRate: Int) -> Double {
    let mono = stride(from: 0, to: samples.count, by: channels).map { Double(samples[$0]) }
    var crossings: [Int] = []
    for index in 1..<mono.count where mono[index - 1] < 0 && mono[index] >= 0 { crossings.append(index) }
    guard crossings.count >= 2 else { return 0 }
    let periods = Double(crossings.count - 1)
    return periods * Double(sampleRate) / Double(crossings.last! - crossings.first!)
}
