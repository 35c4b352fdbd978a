import ArgumentParser
import Dispatch
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RTCConventions
import RTCServer
import RTCTransport
import Signaling

#if canImport(Glibc)
import Glibc
#endif

/// Runs the signaling server and SFU until SIGTERM or SIGINT: `rtc-server`, and `rtc-cli server`.
public struct ServerCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "server",
        abstract: "Run the signaling server (WebSocket /rtc, /healthz, /metrics) and the SFU (one UDP port).")

    public init() {}

    @Option(help: "Address to listen on; 0.0.0.0 for every interface.") var host: String = "127.0.0.1"
    @Option(name: .customLong("announce-ip"),
            help: "An address clients reach the media port at, offered instead of the interfaces' (repeatable; a NAT's or cloud VM's public address).")
    var announceIP: [String] = []
    @Option(name: .customLong("turn-url"),
            help: "A TURN server clients get in joined: turn:HOST:PORT?transport=udp|tcp, or turns: for TLS (repeatable).")
    var turnURL: [String] = []
    @Option(name: .customLong("turn-secret"),
            help: "The TURN server's static-auth-secret: each client gets credentials made from it (TURN REST API form), valid 24 h.")
    var turnSecret: String?
    @Option(help: "TCP port for WebSocket signaling and HTTP.") var port: Int = 7880
    @Option(name: .customLong("udp-port"), help: "UDP port for all media.") var udpPort: Int = 7882
    @Option(name: .customLong("tcp-port"),
            help: "TCP port for media (ICE-TCP, passive candidates) for clients whose UDP is blocked; 0 picks one.")
    var tcpPort: Int?
    @Option(name: .customLong("media-threads"),
            help: "Event loops rooms are spread over (a room lives on one); thread i takes --udp-port + i (and --tcp-port + i). Default: one per core.")
    var mediaThreads: Int?
    @Option(name: .customLong("media-processes"),
            help: "Spread rooms over this many processes instead, one media thread each: this one and N - 1 children, process i on --udp-port + i (and --tcp-port + i); joins reach the room's process through this one. Each process is alone on its core: no lock and no heap shared with another.")
    var mediaProcesses: Int?
    /// A media process: where its signaling listens (loopback), and its front, whose end is its own.
    @Option(name: .customLong("signaling-host"), help: .hidden) var signalingHost: String?
    @Option(name: .customLong("parent-pid"), help: .hidden) var parentPID: Int32?
    @Option(help: "Join a cluster of nodes sharing rooms through Redis: redis://HOST:PORT[/DB]. Without it the server runs alone.")
    var redis: String?
    @Option(name: .customLong("node-id"), help: "This node's id in the cluster (default: node-<signaling port>).")
    var nodeID: String?
    @Option(name: .customLong("node-url"),
            help: "The signaling URL other nodes relay joins to (default: ws://<first --announce-ip or --host>:<port>/rtc).")
    var nodeURL: String?
    @Option(help: "HS256 secret tokens are signed with.") var secret: String?
    @Option(name: .customLong("api-key"), parsing: .singleValue,
            help: "A LiveKit API key (repeatable, each with an --api-secret): LiveKit's clients with tokens it signs may join (docs/livekit.md).")
    var apiKeys: [String] = []
    @Option(name: .customLong("api-secret"), parsing: .singleValue, help: "The secret of the --api-key before it.")
    var apiSecrets: [String] = []
    @Option(name: .customLong("webhook-url"), parsing: .singleValue,
            help: "POST room events here as LiveKit's webhooks, signed with the first --api-key's secret (repeatable; docs/server-api.md).")
    var webhookURLs: [String] = []
    @Option(name: .customLong("webhook-queue-limit"), help: "Events that wait for one webhook receiver at most; later ones are dropped and counted.")
    var webhookQueueLimit = 1000
    @Flag(help: "Development mode: make up a secret (unless --secret is given), print it with a sample token and the web page's URL, and hand out tokens at /dev-token.")
    var dev = false
    @Option(name: .customLong("web-root"), help: "Directory of the web client served at / (default: the repository's Web/).")
    var webRoot: String?
    @Option(name: .customLong("tls-cert"), help: "PEM certificate chain: serve wss:// and https://.") var tlsCertificate: String?
    @Option(name: .customLong("tls-key"), help: "PEM private key for --tls-cert.") var tlsKey: String?
    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel: String = "info"
    @Option(name: .customLong("publisher-limit-floor"),
            help: "Least kbps a publisher's video is held to for its slowest subscriber (REMB); 0 turns the limit off.")
    var publisherLimitFloor: Int = 150
    @Option(name: .customLong("screen-share-suffix"),
            help: "The uid suffix that marks a screen-share participant (<host><suffix>): hidden from its owner, removed with it.")
    var screenShareSuffix: String = ScreenShareUID.standard
    @Flag(name: .customLong("require-encryption"),
          help: "Every room requires end-to-end encryption: a track published without it is refused (docs/e2ee.md).")
    var requireEncryption = false
    @Flag(name: .customLong("answer-sender-parameters"), inversion: .prefixedNo,
          help: "Answer a publisher's VP8 x-google-* parameters (its start bitrate) back to it, as Pion does; --no-… only to compare.")
    var answerSenderParameters = true
    @Flag(name: .customLong("allow-ownerless-share"),
          help: "Take a screen share (<host><suffix>) even when its host is not in the channel.")
    var allowOwnerlessShare = false
    @Option(name: .customLong("resume-window"), help: "Seconds a dropped participant may resume within (and holds its uid).")
    var resumeWindow: Int = 20
    @Option(name: .customLong("drain-timeout"),
            help: "On SIGTERM or SIGINT: seconds to wait, at most, after telling every participant to reconnect, for their connections to close and webhooks to go out (a second signal stops at once).")
    var drainTimeout: Double = 10
    @Option(name: .customLong("livekit-transcript"),
            help: "Write each LiveKit connection's signal messages (kind and fields set, one JSON line each) to a file in this directory: conformance checks (docs/livekit.md).")
    var liveKitTranscript: String?
    @Option(name: .customLong("state-file"),
            help: "Where a drain leaves the rooms' state (settings, metadata, participants' metadata and attributes) and where the next server started with it takes it up.")
    var stateFile: String?
    @Option(name: .customLong("ping-interval"), help: "Seconds between the pings clients send (told in joined).")
    var pingInterval: Int = 5
    @Option(name: .customLong("ping-timeout"),
            help: "Seconds of silence after which a client's session is dropped, and a WHIP session whose media is gone leaves; more than --ping-interval.")
    var pingTimeout: Int = 15
    // Limits (ServerLimits): what one client may use.
    @Option(name: .customLong("join-deadline"), help: "Seconds a connection has to upgrade and join before it is closed.")
    var joinDeadline: Int = ServerLimits().joinDeadlineSeconds
    @Option(name: .customLong("max-token-lifetime"), help: "Longest lifetime (s) of a token this server accepts.")
    var maxTokenLifetime: Int64 = ServerLimits().maxTokenLifetimeSeconds
    @Option(name: .customLong("max-tracks"), help: "Tracks one participant may publish.")
    var maxTracks: Int = ServerLimits().maxTracksPerParticipant
    @Option(name: .customLong("max-room-participants"), help: "Participants in one room.")
    var maxRoomParticipants: Int = ServerLimits().maxParticipantsPerRoom
    @Option(name: .customLong("max-participants"), help: "Participants on the whole server.")
    var maxParticipants: Int = ServerLimits().maxParticipants
    @Option(name: .customLong("max-connections-per-ip"), help: "Open signaling connections from one IP address.")
    var maxConnectionsPerIP: Int = ServerLimits().maxConnectionsPerIP
    @Option(name: .customLong("max-pinned"), help: "Users one participant may pin at once.")
    var maxPinned: Int = ServerLimits().maxPinned
    @Option(name: .customLong("messages-per-second"), help: "Signaling messages a connection may send per second (burst: 4x).")
    var messagesPerSecond: Double = ServerLimits().messagesPerSecond
    @Option(name: .customLong("max-outbound-kb"), help: "KiB queued towards a client that does not read before it is closed.")
    var maxOutboundKB: Int = ServerLimits().maxOutboundBytes / 1024
    @Option(name: .customLong("max-data-message-bytes"), help: "Largest data channel message relayed; larger ones are dropped and counted.")
    var maxDataMessageBytes: Int = ServerLimits().maxDataMessageBytes
    @Option(name: .customLong("data-messages-per-second"), help: "Data channel messages one participant may send per second (burst: 10 s worth).")
    var dataMessagesPerSecond: Double = ServerLimits().dataMessagesPerSecond
    @Option(name: .customLong("data-bytes-per-second"), help: "Data channel bytes one participant may send per second (burst: 10 s worth).")
    var dataBytesPerSecond: Double = ServerLimits().dataBytesPerSecond

    public func validate() throws {
        guard secret != nil || dev else { throw ValidationError("give --secret, or --dev for a generated one") }
        guard apiKeys.count == apiSecrets.count else {
            throw ValidationError("--api-key and --api-secret come in pairs (\(apiKeys.count) keys, \(apiSecrets.count) secrets)")
        }
        for (key, secret) in zip(apiKeys, apiSecrets) where key.isEmpty || key.utf8.count > 256 || secret.utf8.count < 8 {
            throw ValidationError("--api-key must be 1 to 256 bytes and its --api-secret at least 8")
        }
        guard Set(apiKeys).count == apiKeys.count else { throw ValidationError("--api-key given twice") }
        guard (1...100_000).contains(webhookQueueLimit) else { throw ValidationError("--webhook-queue-limit must be 1 to 100000") }
        if !webhookURLs.isEmpty {
            guard !apiKeys.isEmpty else { throw ValidationError("--webhook-url needs an --api-key and --api-secret to sign its events with") }
            for url in webhookURLs {
                let lower = url.lowercased()
                guard lower.hasPrefix("http://") || lower.hasPrefix("https://"), url.utf8.count <= 2048 else {
                    throw ValidationError("--webhook-url '\(url.prefix(80))' is not an http:// or https:// URL")
                }
            }
        }
        guard (0...65535).contains(port), (0...65535).contains(udpPort), (0...65535).contains(tcpPort ?? 0) else {
            throw ValidationError("ports must be 0...65535")
        }
        if let mediaThreads, !(1...256).contains(mediaThreads) { throw ValidationError("--media-threads must be 1...256, not \(mediaThreads)") }
        if let mediaProcesses {
            guard (1...64).contains(mediaProcesses) else { throw ValidationError("--media-processes must be 1...64, not \(mediaProcesses)") }
            guard mediaThreads == nil else { throw ValidationError("--media-processes and --media-threads: each media process runs one media thread") }
            guard redis == nil else { throw ValidationError("--media-processes and --redis: run a node per process instead") }
        }
        let spread = shardCount
        guard udpPort == 0 || udpPort + spread - 1 <= 65535, (tcpPort ?? 0) == 0 || (tcpPort ?? 0) + spread - 1 <= 65535 else {
            throw ValidationError("\(mediaProcesses == nil ? "--media-threads" : "--media-processes") \(spread) needs ports up to \(max(udpPort, tcpPort ?? 0) + spread - 1), past 65535")
        }
        if let redis {
            do { _ = try RedisURL(parsing: redis) } catch { throw ValidationError("--redis \(error.reason)") }
        }
        // Other nodes relay joins to this one's URL: a wildcard address is no address for them.
        if redis != nil, nodeURL == nil, announceIP.isEmpty, host == "0.0.0.0" || host == "::" {
            throw ValidationError("--redis with --host \(host): give --announce-ip or --node-url, the address other nodes reach this one at")
        }
        if redis == nil && (nodeID != nil || nodeURL != nil) { throw ValidationError("--node-id and --node-url go with --redis") }
        if let nodeID, nodeID.isEmpty || nodeID.utf8.count > 64 || nodeID.contains(" ") {
            throw ValidationError("--node-id must be 1 to 64 bytes without spaces")
        }
        if let nodeURL, !nodeURL.hasPrefix("ws://") && !nodeURL.hasPrefix("wss://") { throw ValidationError("--node-url must be a ws:// URL") }
        guard Logger.Level(rawValue: logLevel) != nil else { throw ValidationError("--log-level \(logLevel) is not a level") }
        guard (tlsCertificate == nil) == (tlsKey == nil) else { throw ValidationError("--tls-cert and --tls-key go together") }
        guard (0...100_000).contains(publisherLimitFloor) else { throw ValidationError("--publisher-limit-floor must be 0...100000 kbps") }
        for address in announceIP where (try? SocketAddress(ipAddress: address, port: 0)) == nil {
            throw ValidationError("--announce-ip \(address) is not an IPv4 or IPv6 address")
        }
        for url in turnURL {
            do {
                let parsed = try ICEServerURL(parsing: url)
                guard parsed.scheme == .turn || parsed.scheme == .turns else { throw ValidationError("--turn-url \(url) is not a turn: or turns: URL") }
            } catch let error as ICEServerURL.ParseError {
                throw ValidationError("--turn-url \(error)")
            }
        }
        if turnSecret != nil && turnURL.isEmpty { throw ValidationError("--turn-secret goes with --turn-url") }
        guard (try? SocketAddress(ipAddress: host, port: 0)) != nil || host == "localhost" else {
            throw ValidationError("--host \(host) is not an IPv4 or IPv6 address")
        }
        for (name, value) in [("--resume-window", resumeWindow), ("--join-deadline", joinDeadline), ("--max-tracks", maxTracks),
                              ("--max-room-participants", maxRoomParticipants), ("--max-participants", maxParticipants),
                              ("--max-connections-per-ip", maxConnectionsPerIP), ("--max-pinned", maxPinned), ("--max-outbound-kb", maxOutboundKB)]
        where !(1...1_000_000).contains(value) {
            throw ValidationError("\(name) must be 1...1000000, not \(value)")
        }
        guard drainTimeout.isFinite, (0...600).contains(drainTimeout) else {
            throw ValidationError("--drain-timeout must be 0...600 seconds, not \(drainTimeout)")
        }
        if stateFile != nil, let mediaProcesses, mediaProcesses > 1 {
            throw ValidationError("--state-file is not taken with --media-processes (each process holds its own rooms)")
        }
        guard maxTokenLifetime >= 60 else { throw ValidationError("--max-token-lifetime must be at least 60 s") }
        guard (1...300).contains(pingInterval), (2...600).contains(pingTimeout), pingTimeout > pingInterval else {
            throw ValidationError("--ping-interval (1 to 300 s) must be less than --ping-timeout (2 to 600 s): \(pingInterval) and \(pingTimeout)")
        }
        guard (1...262_144).contains(maxDataMessageBytes) else { throw ValidationError("--max-data-message-bytes must be 1...262144") }
        guard dataMessagesPerSecond.isFinite, dataMessagesPerSecond >= 1, dataBytesPerSecond.isFinite, dataBytesPerSecond >= 1 else {
            throw ValidationError("--data-messages-per-second and --data-bytes-per-second must be at least 1")
        }
        guard messagesPerSecond.isFinite, messagesPerSecond >= 1 else { throw ValidationError("--messages-per-second must be at least 1") }
        guard !screenShareSuffix.isEmpty, screenShareSuffix.utf8.count <= 32 else {
            throw ValidationError("--screen-share-suffix must be 1 to 32 bytes")
        }
        if let webRoot, WebRoot.existing(webRoot) == nil {
            throw ValidationError("--web-root \(webRoot) is not a directory with an index.html")
        }
    }

    /// `--web-root`, else the repository's `Web/` (next to the working directory, or where this
    /// source file was built from), else none.
    /// Media threads, or media processes: the ports --udp-port (and --tcp-port) onwards they take.
    var shardCount: Int { mediaProcesses ?? mediaThreads ?? System.coreCount }

    var resolvedWebRoot: WebRoot? {
        if let webRoot { return WebRoot.existing(webRoot) }
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let candidates = [FileManager.default.currentDirectoryPath + "/Web", source.appendingPathComponent("Web").path]
        return candidates.lazy.compactMap(WebRoot.existing).first
    }

    public func run() async throws {
        var logger = Logger(label: "rtc.server")
        logger.logLevel = Logger.Level(rawValue: logLevel) ?? .info
        let secret = self.secret ?? Self.randomSecret()
        if let parentPID { Self.stopWith(parent: parentPID) }
        let threads = mediaProcesses == nil ? (mediaThreads ?? System.coreCount) : 1
        let group = MultiThreadedEventLoopGroup(numberOfThreads: max(System.coreCount, threads))
        var configuration = ServerConfiguration(host: host, signalingPort: port, mediaPort: udpPort, secret: secret,
                                                publisherLimitFloorKbps: publisherLimitFloor == 0 ? nil : publisherLimitFloor,
                                                screenShareSuffix: screenShareSuffix, tlsCertificatePath: tlsCertificate, tlsKeyPath: tlsKey)
        configuration.announceAddresses = announceIP
        configuration.liveKitKeys = Dictionary(uniqueKeysWithValues: zip(apiKeys, apiSecrets))
        configuration.webhookURLs = webhookURLs
        configuration.webhookAPIKey = apiKeys.first
        configuration.webhookQueueLimit = webhookQueueLimit
        configuration.tcpMediaPort = tcpPort
        configuration.mediaThreads = threads
        configuration.signalingHost = signalingHost
        configuration.redisURL = redis
        configuration.stateFilePath = stateFile
        configuration.liveKitTranscriptDirectory = liveKitTranscript
        configuration.nodeID = nodeID
        configuration.nodeSignalingURL = nodeURL
        configuration.resumeWindow = resumeWindow
        configuration.pingInterval = pingInterval
        configuration.pingTimeout = pingTimeout
        configuration.screenShareNeedsOwner = !allowOwnerlessShare
        configuration.requireEncryption = requireEncryption
        configuration.answersSenderParameters = answerSenderParameters
        configuration.limits.joinDeadlineSeconds = joinDeadline
        configuration.limits.maxTokenLifetimeSeconds = maxTokenLifetime
        configuration.limits.maxTracksPerParticipant = maxTracks
        configuration.limits.maxParticipantsPerRoom = maxRoomParticipants
        configuration.limits.maxParticipants = maxParticipants
        configuration.limits.maxConnectionsPerIP = maxConnectionsPerIP
        configuration.limits.maxPinned = maxPinned
        configuration.limits.messagesPerSecond = messagesPerSecond
        configuration.limits.messageBurst = messagesPerSecond * 4
        configuration.limits.maxOutboundBytes = maxOutboundKB * 1024
        configuration.limits.maxDataMessageBytes = maxDataMessageBytes
        configuration.limits.dataMessagesPerSecond = dataMessagesPerSecond
        configuration.limits.dataBytesPerSecond = dataBytesPerSecond
        let descriptors = FileDescriptorLimit.raise()
        if descriptors.soft < 4096 {
            logger.warning("only \(descriptors.soft) file descriptors: idle connections can shut users out; raise the hard limit (ulimit -Hn)")
        }
        configuration.turnURLs = turnURL
        configuration.turnSecret = turnSecret
        let web = resolvedWebRoot
        configuration.webRoot = web?.directory
        configuration.mintsDevTokens = dev
        let app: RTCServerApp
        do {
            app = try await RTCServerApp.start(configuration: configuration, group: group, logger: logger)
        } catch let error as RedisError {
            try? await group.shutdownGracefully()
            throw CLIError("cannot join the cluster: \(error)")
        }
        let scheme = tlsCertificate == nil ? "ws" : "wss"
        print("signaling: \(scheme)://\(host):\(app.signalingAddress?.port ?? port)/rtc  media: udp \(host):\(app.mediaAddress?.port ?? udpPort)")
        let offered = LocalInterfaces.candidates(boundTo: host, port: app.mediaAddress?.port ?? udpPort, announced: announceIP, includeLoopback: true)
        print("media candidates: \(offered.map { "\($0.ipAddress ?? "?"):\($0.port ?? 0)" }.joined(separator: " "))"
              + (app.sfu.port.tcpAddress.map { " (and ICE-TCP on port \($0.port ?? 0))" } ?? ""))
        if app.sfu.shards.count > 1 {
            print("media threads: \(app.sfu.shards.count), udp ports \(app.sfu.mediaAddresses.compactMap(\.port).map(String.init).joined(separator: " "))"
                  + (app.sfu.port.tcpAddress == nil ? "" : ", ICE-TCP ports \(app.sfu.shards.compactMap { $0.port.tcpAddress?.port }.map(String.init).joined(separator: " "))"))
        }
        if dev {
            let now = Int64(time(nil))
            print("dev secret: \(secret)")
            print("sample token (channel demo, uid 1001, 24 h):")
            print(AccessToken(uid: "1001", channel: "demo", now: now, ttl: 86400).signed(secret: secret))
            if web != nil {
                let httpScheme = tlsCertificate == nil ? "http" : "https"
                let pageHost = host == "0.0.0.0" || host == "::" ? "127.0.0.1" : host
                print("web page: \(httpScheme)://\(pageHost):\(app.signalingAddress?.port ?? port)/?channel=demo&uid=web1&mode=watch")
            }
        }
        var processes: MediaProcesses?
        if let mediaProcesses, mediaProcesses > 1 {
            let (front, host, udpPort, tcpPort, parent) = (CommandLine.arguments, host, udpPort, tcpPort, getpid())
            let children = try MediaProcesses(count: mediaProcesses - 1) { index, port in
                MediaProcesses.childArguments(front: front, secret: secret, host: host, index: index, port: port, udpPort: udpPort,
                                              tcpPort: tcpPort, parent: parent)
            }
            processes = children
            // Waiting blocks a thread: not one of the cooperative pool's.
            guard await Task.detached(operation: { children.waitUntilReady(seconds: 30) }).value else {
                await Task.detached { children.stop() }.value
                await app.shutdown()
                try? await group.shutdownGracefully()
                throw CLIError("the media processes did not start (their errors are above)")
            }
            let sfu = app.sfu
            app.placeRooms(with: ProcessPlacer(
                workers: children.urls.enumerated().map { ProcessPlacer.Worker(name: "media-\($0.offset + 1)", signalingURL: $0.element) },
                forgetAfter: .seconds(Int64(resumeWindow)), maxParticipants: maxParticipants, isAlive: { children.isReady($0) },
                localLoad: { sfu.participantsPerShard.reduce(0, +) }, hasRoom: { sfu.serves($0) }))
            // One scrape of the front covers the whole server.
            app.sumMetrics { await children.metricsPages() }
            print("media processes: \(mediaProcesses), this one and pids \(children.pids.map(String.init).joined(separator: " "))"
                  + (udpPort == 0 ? "" : ", udp ports \(udpPort)-\(udpPort + mediaProcesses - 1)")
                  + "; joins relayed to \(children.urls.joined(separator: " "))")
        }
        if let cluster = app.cluster { print("cluster node \(cluster.nodeID) at \(cluster.signalingURL), redis \(cluster.redisURL)") }
        if let web { print("web client: \(web.directory)") }
        fflush(nil)  // operators and scripts read these lines while the server runs
        await Self.waitForTermination(secondSignalStops: true)
        print("draining (at most \(drainTimeout) s; a second signal stops at once)")
        fflush(nil)
        let drain = Duration.milliseconds(Int64(drainTimeout * 1000))
        if let processes {
            // No new joins at the front; each media process drains its own participants (their
            // leave goes out through this front's relays, which stay open meanwhile).
            await app.stopAccepting()
            let grace = drainTimeout + 2
            await Task.detached { processes.stop(grace: grace) }.value
        }
        let left = await app.shutdown(drainTimeout: drain)
        print(left.connections + left.webhooks == 0 ? "drained" : "drain timed out: \(left.connections) connections, \(left.webhooks) webhooks left")
        fflush(nil)
        try await group.shutdownGracefully()
    }

    /// A media process ends with its front: when its parent is no longer `parent` (reparented),
    /// it stops as on SIGTERM.
    static func stopWith(parent: pid_t) {
        Thread.detachNewThread {
            while getppid() == parent { usleep(250_000) }
            kill(getpid(), SIGTERM)
        }
    }

    public static func randomSecret() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in String(UInt8.random(in: 0...15, using: &generator), radix: 16) }.joined()
    }

    /// Returns on SIGTERM or SIGINT. With `secondSignalStops`, another one later ends the process
    /// at once (a server's drain that an operator does not want to wait for).
    public static func waitForTermination(secondSignalStops: Bool = false) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let queue = DispatchQueue(label: "rtc.signals")
            let once = OnceFlag()
            var sources: [DispatchSourceSignal] = []
            for number in [SIGTERM, SIGINT] {
                signal(number, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
                source.setEventHandler {
                    if once.claim() {
                        continuation.resume()
                    } else if secondSignalStops {
                        // A second signal during the drain: stop now.
                        FileHandle.standardError.write(Data("second signal: stopping without waiting for the drain\n".utf8))
                        Glibc.exit(1)
                    }
                }
                source.resume()
                sources.append(source)
            }
            SignalSources.keep(sources)
        }
    }
}

/// Keeps signal sources alive for the life of the process.
public enum SignalSources {
    nonisolated(unsafe) static var kept: [DispatchSourceSignal] = []
    public static func keep(_ sources: [DispatchSourceSignal]) { kept += sources }
}

/// True for the first caller only.
public final class OnceFlag: Sendable {
    private let done = NIOLockedValueBox(false)
    public init() {}
    public func claim() -> Bool {
        done.withLockedValue { done in
            defer { done = true }
            return !done
        }
    }
}

/// The process's open-file limit: the soft limit raised to the hard one at start (as nginx and Go
/// do), since every signaling connection holds a descriptor and the default soft limit (1024) is
/// below what the connection limits allow.
public enum FileDescriptorLimit {
    @discardableResult
    public static func raise() -> (soft: UInt64, hard: UInt64) {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return (0, 0) }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
        }
        return (UInt64(limit.rlim_cur), UInt64(limit.rlim_max))
    }
}
