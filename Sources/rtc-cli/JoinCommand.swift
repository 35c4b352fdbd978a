import ArgumentParser
import NIOConcurrencyHelpers
import NIOCore
import RTCCore
import RTCRecording
import ScreenShareUser
import LiveKitProtocol
import Signaling
import ServerCommandLine

#if canImport(Glibc)
import Glibc
#endif

/// A headless bot: joins a channel, publishes a pattern, a file or a tone, records what it
/// receives and prints live stats once a second.
struct JoinCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "join",
        abstract: "Join a channel as a headless bot: publish, record, print live stats.")

    @Option(name: [.customLong("server"), .customLong("url")],
            help: "Signaling URL (default: $LIVEKIT_URL's /rtc when it is set, as `lk` reads it).")
    var server: String = LiveKitEnvironment.signalingURL ?? "ws://127.0.0.1:7880/rtc"
    @Option(name: .customLong("fallback-server"),
            help: "Another node of the same cluster, tried in turn when a rejoin after losing --server fails (repeatable).")
    var fallbackServer: [String] = []
    @Option(name: .customLong("protocol"),
            help: "The server's signaling protocol: native (ours) or livekit (a LiveKit server, or ours through its LiveKit front end; the token is a LiveKit JWT).")
    var signalingProtocol: String = "native"
    @Option(help: "Channel name (with --protocol livekit: the token's room when left out).") var channel: String = ""
    @Option(help: "User id (with --protocol livekit: the token's identity when left out).") var uid: String = ""
    @Option(help: "Access token (or give --secret to mint one; with --protocol livekit a LiveKit JWT, or --api-key and --api-secret).")
    var token: String?
    @Option(help: "Server secret to mint a token with (development only).") var secret: String?
    @Option(name: .customLong("api-key"), help: "With --protocol livekit: the LiveKit API key to mint a token with (default $LIVEKIT_API_KEY).")
    var apiKey: String?
    @Option(name: .customLong("api-secret"), help: "With --protocol livekit: its secret (default $LIVEKIT_API_SECRET).")
    var apiSecret: String?
    @Option(help: "broadcaster or audience.") var role: String = "broadcaster"
    @Option(help: "pattern, screen, FILE.y4m or none.") var video: String = "pattern"
    @Option(help: "tone, silence, speech (1 s of silence, then 2 s of tone, over and over; prints `speech on <monotonic µs> <wall ms>` at each start), FILE.wav or none.")
    var audio: String = "tone"
    @Option(help: "Largest encoded size (frames are fit inside, never stretched).") var size: VideoSize = VideoSize(width: 640, height: 360)
    @Option(help: "Frames per second (the pattern's rate and the encoder's cap).") var fps: Int = 15
    @Option(help: "Video bitrate, kbps.") var bitrate: Int = 800
    @Option(help: "Folder to record what arrives in (never overwritten; see --record-format).") var record: String?
    @Option(name: .customLong("record-format"),
            help: "tracks (an IVF or WAV per remote track), webm (one synchronized WebM per participant) or both.")
    var recordFormat: String = "tracks"
    @Option(name: .customLong("record-uid"), help: "Record only this uid (repeatable; default: everyone).") var recordUID: [String] = []
    @Option(help: "Seconds to stay; without it, until SIGINT or SIGTERM.") var duration: Double?
    @Flag(name: .customLong("no-subscribe"), help: "Receive nothing (auto-subscribe off).") var noSubscribe = false
    @Option(help: "Local address the media sockets bind to (default ::, every interface, IPv6 and IPv4, one candidate per address; 0.0.0.0 for IPv4 only).")
    var bind: String = "::"
    @Option(name: .customLong("ice-server"),
            help: "A TURN server to relay through, turn:HOST[:PORT][?transport=udp|tcp] or turns:HOST[:PORT] (TLS), or a STUN server for server-reflexive candidates, stun:HOST[:PORT] (repeatable; default: those the server hands out).")
    var iceServer: [String] = []
    @Option(name: .customLong("ice-trust"), help: "PEM certificates to trust for turns: servers instead of the system's roots.")
    var iceTrust: String?
    @Option(name: .customLong("ice-username"), help: "Username for --ice-server.") var iceUsername: String?
    @Option(name: .customLong("ice-credential"), help: "Credential for --ice-server.") var iceCredential: String?

    /// The `--ice-server` URLs that are relays (they take the credentials).
    private var relays: [String] { iceServer.filter { !$0.lowercased().hasPrefix("stun:") } }

    /// `--ice-server`: the STUN servers without credentials, the relays with them; nil: the server's.
    private var iceServers: [ICEServer]? {
        guard !iceServer.isEmpty else { return nil }
        let stun = iceServer.filter { $0.lowercased().hasPrefix("stun:") }
        return (stun.isEmpty ? [] : [ICEServer(urls: stun)])
            + (relays.isEmpty ? [] : [ICEServer(urls: relays, username: iceUsername, credential: iceCredential)])
    }
    @Flag(name: .customLong("relay-only"), help: "Send media only through a TURN server (iceTransportPolicy relay).") var relayOnly = false
    @Flag(name: .customLong("no-ice-tcp"), help: "Do not check the server's ICE-TCP candidates (UDP and the TURN servers only).") var noICETCP = false
    @Flag(help: "Print no stats lines.") var quiet = false
    @Option(help: "Simulcast layers of the video: 1, 2 (dual stream: full and quarter size) or 3 (full, half, quarter).")
    var simulcast: Int = 1
    @Option(name: .customLong("stream-type"), help: "Which stream of layered remote video to receive: high or low.")
    var streamType: String?
    @Option(name: .customLong("frame-log"),
            help: "Append a line per decoded remote video frame to FILE: monotonic µs, uid, width, height.")
    var frameLog: String?
    @Option(name: .customLong("playout-wav"),
            help: "Write what this bot would play out (every remote audio track mixed, 48 kHz stereo, silence where nothing played) to FILE.")
    var playoutWAV: String?
    @Option(help: "Screen-share mode (a `_sub` uid): pattern, x11[:DISPLAY], FILE.y4m, or - for raw BGRA on stdin.")
    var source: String = "pattern"
    @Option(help: "Screen-share frame-rate profile: low (5), default (15) or high (30).") var profile: String = "default"
    @Option(name: .customLong("raw-size"), help: "Size of raw frames on stdin (--source -).") var rawSize: VideoSize?
    @Option(name: .customLong("owner-wait"),
            help: "Screen-share mode: seconds to wait for the host uid to be in the channel (the server refuses a share without it).")
    var ownerWait: Double = ScreenShareConfiguration.defaultOwnerWaitSeconds
    @Flag(name: .customLong("share-screen"), help: "Also share the screen as <uid>_sub from a sharer process this host controls.")
    var shareScreen = false
    @Flag(help: "With --share-screen: the sharer only captures; this process publishes its frames (relay mode).") var relay = false
    @Option(name: .customLong("share-token"), help: "Token for <uid>_sub (or --secret mints one).") var shareToken: String?
    @Option(name: .customLong("send-data"),
            help: "Send TEXT on a data stream once, or every SECONDS with TEXT@SECONDS, until the end; {n} in TEXT is the message's number, from 0.")
    var sendData: String?
    @Option(name: .customLong("data-topic"), help: "The topic of --send-data's messages.") var dataTopic: String = ""
    @Option(name: .customLong("data-count"), help: "Stop --send-data after this many messages.") var dataCount: Int?
    @Option(name: .customLong("data-to"), help: "Send --send-data's messages to this uid only (repeatable).") var dataTo: [String] = []
    @Flag(name: .customLong("data-lossy"), help: "--send-data on a lossy stream (unordered, never retransmitted).") var dataLossy = false
    @Option(name: .customLong("data-wait-peers"),
            help: "With --send-data: first say `<uid> hello` every 200 ms until messages from this many other uids have arrived (the server relays only to participants whose channels are up), then send.")
    var dataWaitPeers: Int = 0
    @Option(name: .customLong("set-metadata"),
            help: "After joining, set this client's own metadata (its token must grant updateMetadata); prints `metadata set` or `metadata refused: <reason>`.")
    var setMetadata: String?
    @Option(name: .customLong("mute-audio-at"),
            help: "Mute the microphone track SECONDS after joining and unmute it 2 s later; prints `muted <µs>` and `unmuted <µs>`.")
    var muteAudioAt: Double?
    @Option(name: .customLong("set-attribute"), help: "With --set-metadata: also set this attribute, KEY=VALUE (repeatable).")
    var setAttribute: [String] = []
    @Flag(name: .customLong("print-speakers"),
          help: "Print a line when the loudest speaker changes (the server's active speakers): speaker <monotonic µs> <uid or ->.")
    var printSpeakers = false
    @Option(name: .customLong("volume-interval"),
            help: "With --print-speakers: volume indications every this many ms (Agora's enableAudioVolumeIndication), a line each: volume <monotonic µs> <uid>:<0-255>:<vad 0/1> ...")
    var volumeInterval: Int?
    @Flag(name: .customLong("print-timing"),
          help: "Print where the join's time goes, on the monotonic clock the frame log uses: timing start <µs>, timing joined <µs>, timing published <µs> (the publisher transport connected).")
    var printTiming = false
    @Flag(name: .customLong("print-quality"),
          help: "Print the server's connection quality of each user every 2 s: quality <monotonic µs> <uid> up <0-6> down <0-6> (1 excellent … 6 down).")
    var printQuality = false
    @Option(name: .customLong("allow-subscribers-at"),
            help: "SECONDS:UID[,UID…]: that many seconds after joining, let only these uids subscribe to this bot's tracks (none after the colon: nobody); the server unsubscribes the rest. Prints `permission set <monotonic µs>`.")
    var allowSubscribersAt: String?
    @Flag(name: .customLong("print-data"),
          help: "Print a line per data message received: data <monotonic µs> <uid> <topic> <bytes> <text>.")
    var printData = false
    @Option(name: .customLong("e2ee-key"),
            help: "End-to-end encryption with this passphrase as the room's shared key (LiveKit's frame format; docs/e2ee.md): every frame sent is encrypted, encrypted tracks received are decrypted.")
    var e2eeKey: String?
    @Option(name: .customLong("e2ee-key-index"), help: "The key index --e2ee-key is set at and sent with (0-15).") var e2eeKeyIndex: Int = 0
    @Option(name: .customLong("e2ee-rotate"),
            help: "SECONDS:PASSPHRASE:INDEX: that many seconds after joining, add a key at INDEX; 2 s later, send with it (repeatable). Peers that rotate at the same time lose no frame.")
    var e2eeRotate: [String] = []
    @Option(name: .customLong("sharer"),
            help: "With --share-screen: the sharer to start, a command split at spaces (`--link PATH` is added), instead of rtc-sharer (rtc-capture for --relay) next to this executable.")
    var sharerCommand: String?

    /// `--e2ee-rotate` entries: when (seconds after the join), the passphrase, the index.
    private var rotations: [(seconds: Double, key: String, index: Int)] {
        e2eeRotate.compactMap { entry in
            let parts = entry.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false).map(String.init)
            guard parts.count == 3, let seconds = Double(parts[0]), seconds >= 0, !parts[1].isEmpty,
                  let index = Int(parts[2]), (0..<16).contains(index) else { return nil }
            return (seconds, parts[1], index)
        }
    }

    /// `--allow-subscribers-at SECONDS:UID[,UID…]` read: nil without one (validate refuses a bad one).
    static func permission(_ text: String?) -> (seconds: Double, uids: [String])? {
        guard let text, let colon = text.firstIndex(of: ":"), let seconds = Double(text[..<colon]), seconds.isFinite, seconds >= 0 else { return nil }
        let uids = text[text.index(after: colon)...].split(separator: ",").map(String.init)
        guard uids.allSatisfy({ !$0.isEmpty && $0.utf8.count <= 128 }) else { return nil }
        return (seconds, uids)
    }

    func validate() throws {
        if let allowSubscribersAt, Self.permission(allowSubscribersAt) == nil {
            throw ValidationError("--allow-subscribers-at takes SECONDS:UID[,UID…] (seconds from 0; uids of 1 to 128 bytes), not '\(allowSubscribersAt)'")
        }
        if e2eeKey?.isEmpty == true { throw ValidationError("--e2ee-key needs a passphrase") }
        guard (0..<16).contains(e2eeKeyIndex) else { throw ValidationError("--e2ee-key-index is 0 to 15, not \(e2eeKeyIndex)") }
        guard rotations.count == e2eeRotate.count else {
            throw ValidationError("--e2ee-rotate is SECONDS:PASSPHRASE:INDEX with an index 0 to 15 (got \(e2eeRotate))")
        }
        if !e2eeRotate.isEmpty && e2eeKey == nil { throw ValidationError("--e2ee-rotate goes with --e2ee-key") }
        if e2eeKey != nil && ScreenShareUID.isScreenShare(uid) { throw ValidationError("--e2ee-key is not available for a _sub share yet") }
        if let muteAudioAt, !(muteAudioAt.isFinite && muteAudioAt >= 0) { throw ValidationError("--mute-audio-at is seconds, 0 or more") }
        if !setAttribute.isEmpty {
            guard setMetadata != nil else { throw ValidationError("--set-attribute goes with --set-metadata") }
            for pair in setAttribute where !pair.contains("=") || pair.hasPrefix("=") {
                throw ValidationError("--set-attribute takes KEY=VALUE, not \(pair)")
            }
        }
        if let volumeInterval {
            guard (50...10_000).contains(volumeInterval) else { throw ValidationError("--volume-interval must be 50 to 10000 ms") }
            guard printSpeakers else { throw ValidationError("--volume-interval prints with --print-speakers") }
        }
        guard let engineProtocol = RTCEngineConfiguration.SignalingProtocol(rawValue: signalingProtocol) else {
            throw ValidationError("--protocol is native or livekit, not \(signalingProtocol)")
        }
        switch engineProtocol {
        case .native:
            guard !channel.isEmpty, !uid.isEmpty else { throw ValidationError("give --channel and --uid") }
            guard token != nil || secret != nil else { throw ValidationError("give --token, or --secret to mint one") }
        case .livekit:
            if token == nil {
                guard (apiKey ?? LiveKitEnvironment.apiKey) != nil, (apiSecret ?? LiveKitEnvironment.apiSecret) != nil, !channel.isEmpty, !uid.isEmpty else {
                    throw ValidationError("--protocol livekit needs --token (a LiveKit JWT), or --api-key, --api-secret, --channel and --uid to mint one")
                }
            }
            if let token {
                let claims: LiveKitClaims
                do { claims = try LiveKitClaims.unverified(token) } catch { throw ValidationError("--token is not a LiveKit access token: \(error)") }
                if !uid.isEmpty, uid != claims.identity { throw ValidationError("--uid \(uid) is not the token's identity \(claims.identity)") }
                if !channel.isEmpty, let room = claims.room, room != channel { throw ValidationError("--channel \(channel) is not the token's room \(room)") }
                if channel.isEmpty && claims.room == nil { throw ValidationError("the token names no room: give --channel") }
            }
            if shareScreen { throw ValidationError("--share-screen is not available with --protocol livekit yet: join the _sub uid as its own bot") }
            if e2eeKey != nil { throw ValidationError("--e2ee-key is not available with --protocol livekit yet") }
        }
        for url in fallbackServer where !url.hasPrefix("ws://") && !url.hasPrefix("wss://") {
            throw ValidationError("--fallback-server \(url) is not a ws:// or wss:// URL")
        }
        guard ["broadcaster", "audience"].contains(role) else { throw ValidationError("--role is broadcaster or audience, not \(role)") }
        guard (1...60).contains(fps) else { throw ValidationError("--fps must be 1...60") }
        guard (1...3).contains(simulcast) else { throw ValidationError("--simulcast must be 1, 2 or 3, not \(simulcast)") }
        if let streamType, VideoStreamType(rawValue: streamType) == nil {
            throw ValidationError("--stream-type is high or low, not \(streamType)")
        }
        for url in iceServer {
            do {
                let parsed = try ICEServerURL(parsing: url)
                guard parsed.scheme == .turn || parsed.scheme == .turns || parsed.scheme == .stun else {
                    throw ValidationError("--ice-server \(url): only stun:, turn: (UDP or TCP) and turns: (TLS) URLs are used")
                }
            } catch let error as ICEServerURL.ParseError {
                throw ValidationError("--ice-server \(error)")
            }
        }
        guard relays.isEmpty || (iceUsername != nil && iceCredential != nil) else {
            throw ValidationError("--ice-server turn: and turns: URLs need --ice-username and --ice-credential")
        }
        guard (try? SocketAddress(ipAddress: bind, port: 0)) != nil else { throw ValidationError("--bind \(bind) is not an IPv4 or IPv6 address") }
        guard ownerWait.isFinite, ownerWait >= 0 else { throw ValidationError("--owner-wait is seconds, 0 or more, not \(ownerWait)") }
        if let duration, !(duration > 0) { throw ValidationError("--duration must be positive") }
        guard server.hasPrefix("ws://") || server.hasPrefix("wss://") else { throw ValidationError("--server must be a ws:// or wss:// URL") }
        guard ScreenShareProfile(rawValue: profile) != nil else { throw ValidationError("--profile is low, default or high, not \(profile)") }
        if source == "-" && rawSize == nil { throw ValidationError("--source - needs --raw-size WIDTHxHEIGHT") }
        if shareScreen && ScreenShareUID.isScreenShare(uid) { throw ValidationError("--share-screen is for the host uid, not a _sub") }
        if shareScreen && shareToken == nil && secret == nil { throw ValidationError("--share-screen needs --share-token or --secret") }
        if relay && !shareScreen { throw ValidationError("--relay goes with --share-screen") }
        guard ChannelRecorder.Options.Layout(rawValue: recordFormat) != nil else {
            throw ValidationError("--record-format is tracks, webm or both, not \(recordFormat)")
        }
        if record == nil && (recordFormat != "tracks" || !recordUID.isEmpty) {
            throw ValidationError("--record-format and --record-uid go with --record DIR")
        }
    }

    private func mint(_ uid: String) -> String {
        AccessToken(uid: uid, channel: channel, now: Int64(time(nil)), ttl: 86400).signed(secret: secret!)
    }

    private func policy() -> ScreenSharePolicy {
        var policy = ScreenSharePolicy(profile: ScreenShareProfile(rawValue: profile) ?? .default)
        if fps != 15 { policy.framesPerSecond = fps }
        return policy
    }

    private func wait() async { await Self.wait(duration) }

    /// Returns after `duration` seconds or, without one, on SIGINT or SIGTERM.
    private static func wait(_ duration: Double?) async {
        if let duration {
            try? await Task.sleep(for: .milliseconds(Int(duration * 1000)))
        } else {
            await ServerCommand.waitForTermination()
        }
    }

    /// A `_sub` uid: the screen-share user, standalone. It runs the share `rtc-sharer` runs (the
    /// same process settings and ``ScreenShareSharer/runStandalone(_:source:onEvent:onEnd:nextControl:)``),
    /// driven by the duration or a signal instead of a host's link, so it keeps the sharer's memory budget.
    private func runShare() async throws {
        // Before the source, the session or the codec exist: the budget's malloc settings, and the
        // encoder then trims its buffers and drops start-up pages (docs/screen-share.md, "Memory").
        ScreenShareSharer.prepareProcess()
        let token = self.token ?? mint(uid)
        guard let host = ScreenShareUID.host(of: uid) else { throw CLIError("\(uid) is not a screen-share uid") }
        var configuration = ScreenShareConfiguration(serverURL: server, channel: channel, hostUID: host, token: token,
                                                     policy: policy(), ownerWaitSeconds: ownerWait)
        configuration.liveKit = engineProtocol == .livekit ? true : nil
        configuration.turnURLs = iceServer.isEmpty ? nil : iceServer
        configuration.turnUsername = iceUsername
        configuration.turnCredential = iceCredential
        configuration.relayOnly = relayOnly
        configuration.turnTrustedCertificates = iceTrust
        let setup = ScreenShareSetup(configuration: configuration,
                                     source: source, rawSize: rawSize)
        let screen: ScreenSource
        do { screen = try ScreenShareSharer.defaultSource(setup) } catch { throw CLIError(error.message) }
        let quiet = self.quiet, uid = setup.configuration.uid, duration = self.duration
        // The share ends at the duration or a signal (`stop`), both counted from the join as before,
        // or on its own (its host left, the connection was lost): whichever is first.
        let (controls, control) = AsyncStream.makeStream(of: ScreenShareControl.self)
        let waiting = NIOLockedValueBox<Task<Void, Never>?>(nil)
        var next = controls.makeAsyncIterator()
        let reason = await ScreenShareSharer.runStandalone(
            setup, source: screen,
            onEvent: { event in
                switch event {
                case .started:
                    waiting.withLockedValue {
                        $0 = Task {
                            await Self.wait(duration)
                            control.yield(.stop)
                        }
                    }
                case .stats(let stats) where !quiet:
                    print("[\(uid)] share \(Int(stats.bitrateKbps)) kbps \(Int(stats.framesPerSecond.rounded())) fps "
                        + "\(stats.width)x\(stats.height) pushed \(stats.framesPushed) re-sent \(stats.framesResent)")
                    fflush(nil)
                case .finished(let reason):
                    print("share finished: \(reason)")
                    fflush(nil)
                default: break
                }
            },
            onEnd: { control.finish() },
            nextControl: { await next.next() })
        waiting.withLockedValue { $0?.cancel() }
        if case .error(let message) = reason { throw CLIError(message) }
    }

    /// `--send-data TEXT[@SECONDS]`: a data stream and a task sending on it (nil without the option).
    private func startSendingData(_ engine: RTCEngine) async throws -> Task<Void, Never>? {
        guard let sendData else { return nil }
        var text = sendData, every: Double?
        if let at = sendData.lastIndex(of: "@"), let seconds = Double(sendData[sendData.index(after: at)...]), seconds > 0 {
            text = String(sendData[..<at])
            every = seconds
        }
        let stream: Int
        do { stream = try await engine.createDataStream(reliable: !dataLossy, ordered: !dataLossy) } catch { throw CLIError("\(error)") }
        let (topic, destinations, count, waitPeers, uid) = (dataTopic, dataTo, dataCount, dataWaitPeers, uid)
        // Who has been heard on data, for --data-wait-peers (the sender as the server wrote it).
        let heard = NIOLockedValueBox<Set<String>>([])
        let events = waitPeers > 0 ? engine.events : nil
        let listening = events.map { events in
            Task {
                for await event in events {
                    guard case .streamMessage(let from, _, _, _) = event, !from.isEmpty else { continue }
                    if heard.withLockedValue({ $0.insert(from); return $0.count >= waitPeers }) { return }
                }
            }
        }
        return Task {
            defer { listening?.cancel() }
            if waitPeers > 0 {
                // Hellos until the others are heard, then three more for those still waiting on this one.
                let hello = Array("\(uid) hello".utf8)
                var extra = 3
                while !Task.isCancelled, extra > 0 {
                    if heard.withLockedValue({ $0.count >= waitPeers }) { extra -= 1 }
                    try? engine.sendStreamMessage(streamId: stream, data: hello, topic: topic, to: destinations)
                    try? await Task.sleep(for: .milliseconds(200))
                }
            }
            var number = 0
            repeat {
                let message = Array(text.replacingOccurrences(of: "{n}", with: String(number)).utf8)
                do {
                    try engine.sendStreamMessage(streamId: stream, data: message, topic: topic, to: destinations)
                    number += 1
                    if let count, number >= count { return }
                } catch let error as RTCEngineError where error.code == .messageRateExceeded {
                    // Backpressure (the channels not open yet, or the stream's rate): the same message again soon.
                    try? await Task.sleep(for: .milliseconds(20))
                    continue
                } catch {
                    print("data: not sent: \(error)")
                    fflush(nil)
                }
                guard let every else { return }
                try? await Task.sleep(for: .milliseconds(Int(every * 1000)))
            } while !Task.isCancelled
        }
    }

    /// With LiveKit's protocol: the token (given, or minted with the API key) and the channel and
    /// uid it names.
    private mutating func resolveLiveKit() {
        guard signalingProtocol == RTCEngineConfiguration.SignalingProtocol.livekit.rawValue else { return }
        if token == nil, let apiKey = apiKey ?? LiveKitEnvironment.apiKey, let apiSecret = apiSecret ?? LiveKitEnvironment.apiSecret {
            var grant = LiveKitVideoGrant(roomJoin: true, room: channel, canPublishData: true)
            grant.canUpdateOwnMetadata = true
            token = LiveKitClaims(apiKey: apiKey, identity: uid, video: grant, now: Int64(time(nil)), ttl: 86400).signed(secret: apiSecret)
        }
        if let token, let claims = try? LiveKitClaims.unverified(token) {
            if uid.isEmpty { uid = claims.identity }
            if channel.isEmpty { channel = claims.room ?? "" }
        }
    }

    var engineProtocol: RTCEngineConfiguration.SignalingProtocol { RTCEngineConfiguration.SignalingProtocol(rawValue: signalingProtocol) ?? .native }

    mutating func run() async throws {
        resolveLiveKit()
        if printTiming {
            print("timing start \(MediaClock.monotonicUs())")
            fflush(nil)
        }
        if ScreenShareUID.isScreenShare(uid) { return try await runShare() }
        let token = self.token ?? mint(uid)
        let videoSource = BotVideoSource(parsing: video), audioSource = BotAudioSource(parsing: audio)
        let bot = try await Bot.start(server: server, channel: channel, uid: uid, token: token,
                                      role: role == "audience" ? .audience : .broadcaster, video: videoSource, audio: audioSource,
                                      settings: VideoEncoderConfiguration(dimensions: size, frameRate: fps, bitrateKbps: bitrate),
                                      subscribe: !noSubscribe, record: record, printStats: !quiet, bind: bind,
                                      iceServers: iceServers,
                                      relayOnly: relayOnly, iceTCP: !noICETCP, iceTrust: iceTrust,
                                      layers: Bot.Layers(simulcast: simulcast, streamType: streamType.flatMap(VideoStreamType.init(rawValue:)),
                                                         frameLog: frameLog, playoutWAV: playoutWAV),
                                      recordOptions: ChannelRecorder.Options(layout: ChannelRecorder.Options.Layout(rawValue: recordFormat) ?? .tracks,
                                                                             uids: recordUID.isEmpty ? nil : Set(recordUID)),
                                      fallbackServers: fallbackServer, data: (printData || sendData != nil, printData),
                                      printSpeakers: printSpeakers, e2ee: e2eeKey.map { ($0, e2eeKeyIndex) }, printQuality: printQuality,
                                      printTiming: printTiming, signalingProtocol: engineProtocol)
        if printTiming {
            print("timing published \(MediaClock.monotonicUs())")
            fflush(nil)
        }
        var muting: Task<Void, Never>?
        if let muteAudioAt {
            let engine = bot.engine
            muting = Task {
                try? await Task.sleep(for: .milliseconds(Int(muteAudioAt * 1000)))
                for muted in [true, false] {
                    do {
                        try await engine.muteLocalAudioStream(muted)
                        print("\(muted ? "muted" : "unmuted") \(MediaClock.monotonicUs())")
                    } catch {
                        print("mute refused: \(error)")
                    }
                    fflush(nil)
                    if muted { try? await Task.sleep(for: .seconds(2)) }
                }
            }
        }
        defer { muting?.cancel() }
        var permitting: Task<Void, Never>?
        if let (seconds, uids) = Self.permission(allowSubscribersAt) {
            let engine = bot.engine
            permitting = Task {
                try? await Task.sleep(for: .milliseconds(Int(seconds * 1000)))
                do {
                    try await engine.setSubscriptionPermission(allowAll: false, allowed: Dictionary(uniqueKeysWithValues: uids.map { ($0, nil) }))
                    print("permission set \(MediaClock.monotonicUs()) \(uids.joined(separator: ","))")
                } catch {
                    print("permission not set: \(error)")
                }
                fflush(nil)
            }
        }
        defer { permitting?.cancel() }
        var rotating: Task<Void, Never>?
        if !rotations.isEmpty {
            let engine = bot.engine, rotations = self.rotations
            rotating = Task {
                let start = MediaClock.monotonicUs()
                for rotation in rotations.sorted(by: { $0.seconds < $1.seconds }) {
                    let due = start + Int64(rotation.seconds * 1_000_000)
                    let wait = due - MediaClock.monotonicUs()
                    if wait > 0 { try? await Task.sleep(for: .microseconds(wait)) }
                    if Task.isCancelled { return }
                    do {
                        try engine.setEncryptionKey(rotation.key, index: rotation.index, makeCurrent: false)
                        try? await Task.sleep(for: .seconds(2))
                        try engine.setEncryptionKeyIndex(rotation.index)
                        print("e2ee key index \(rotation.index) at \(MediaClock.monotonicUs())")
                    } catch {
                        print("e2ee key refused: \(error)")
                    }
                    fflush(nil)
                }
            }
        }
        defer { rotating?.cancel() }
        if let volumeInterval { bot.engine.enableAudioVolumeIndication(interval: volumeInterval, smooth: 0, reportVad: true) }
        if let setMetadata {
            do {
                let pairs = setAttribute.compactMap { pair -> (String, String)? in
                    guard let equals = pair.firstIndex(of: "=") else { return nil }
                    return (String(pair[..<equals]), String(pair[pair.index(after: equals)...]))
                }
                try await bot.engine.updateLocalMetadata(metadata: setMetadata,
                                                         attributes: pairs.isEmpty ? nil : Dictionary(pairs, uniquingKeysWith: { _, last in last }))
                print("metadata set")
            } catch {
                print("metadata refused: \(error)")
            }
            fflush(nil)
        }
        let sending = try await startSendingData(bot.engine)
        defer { sending?.cancel() }
        var host: ScreenShareHost?
        if shareScreen {
            let linkPath = "/tmp/rtc-share-\(getpid()).sock"
            let sharerUID = ScreenShareUID.sharer(of: uid)
            let setup = ScreenShareSetup(
                configuration: ScreenShareConfiguration(serverURL: server, channel: channel, hostUID: uid,
                                                        token: shareToken ?? mint(sharerUID), policy: policy()),
                mode: relay ? .relay : .standalone, source: source, rawSize: rawSize)
            do {
                let made = try ScreenShareHost(linkPath: linkPath)
                var sharer = ProcessRunner.sharerCommand(link: linkPath, mode: setup.mode)
                if let words = sharerCommand?.split(separator: " ").map(String.init), let first = words.first {
                    sharer = (first, Array(words.dropFirst()) + ["--link", linkPath])
                }
                try made.launchSharer(executable: sharer.executable, arguments: sharer.arguments)
                try await made.start(setup)
                host = made
                print("sharing the screen as \(sharerUID) (\(setup.mode.rawValue))")
                let quiet = self.quiet
                Task {
                    for await event in made.events {
                        if case .finished(let reason) = event { print("share finished: \(reason)"); fflush(nil) }
                        if case .stats(let stats) = event, !quiet {
                            print("[\(sharerUID)] share \(Int(stats.bitrateKbps)) kbps \(Int(stats.framesPerSecond.rounded())) fps \(stats.width)x\(stats.height)")
                            fflush(nil)
                        }
                    }
                }
            } catch {
                _ = await bot.stop()
                throw CLIError("screen share failed: \(error)")
            }
        }
        await wait()
        if let host {
            await host.stop()
            host.waitForSharer()
        }
        if let sent = await bot.stopSources() { print(sent) }
        let files = await bot.stop()
        for file in files { print(Bot.describe(file)) }
    }
}

/// One engine with its sources and recorder: what `join` and `demo` run.
final class Bot: Sendable {
    let uid: String
    let engine: RTCEngine
    private let videoPump: VideoPump?
    private let audioPump: AudioPump?
    let recorder: ChannelRecorder?
    private let playout: PlayoutWAV?
    private let statsTask: Task<Void, Never>
    /// Simulcast for the bot's own video, the stream type it receives, and where decoded frames are logged.
    struct Layers {
        var simulcast = 1
        var streamType: VideoStreamType?
        var frameLog: String?
        var playoutWAV: String?
    }

    /// The newest `rtcStats`, and a log of joins, departures, first frames and state changes.
    let latestStats: NIOLockedValueBox<RTCStats?>
    let log: NIOLockedValueBox<[String]>

    static func start(server: String, channel: String, uid: String, token: String, role: ClientRole, video: BotVideoSource,
                      audio: BotAudioSource, settings: VideoEncoderConfiguration, subscribe: Bool, record: String?,
                      printStats: Bool, bind: String = "::", iceServers: [ICEServer]? = nil, relayOnly: Bool = false,
                      iceTCP: Bool = true, iceTrust: String? = nil, layers: Layers = Layers(),
                      recordOptions: ChannelRecorder.Options = ChannelRecorder.Options(),
                      source: (video: TrackSource, audio: TrackSource) = (.camera, .microphone),
                      fallbackServers: [String] = [], data: (open: Bool, print: Bool) = (false, false),
                      printSpeakers: Bool = false, e2ee: (key: String, index: Int)? = nil, printQuality: Bool = false, printTiming: Bool = false,
                      signalingProtocol: RTCEngineConfiguration.SignalingProtocol = .native) async throws -> Bot {
        var configuration = RTCEngineConfiguration(serverURL: server, clientRole: role, protocol: signalingProtocol)
        if let e2ee {
            let keys = E2EEKeyProvider()
            do { try keys.setSharedKey(Array(e2ee.key.utf8), index: e2ee.index) } catch { throw CLIError("--e2ee-key: \(error)") }
            configuration.encryption = keys
        }
        configuration.alternateServerURLs = fallbackServers
        configuration.bindAddress = bind
        configuration.iceServers = iceServers
        configuration.iceTransportPolicy = relayOnly ? .relay : .all
        configuration.iceTCP = iceTCP
        configuration.turnTrustedCertificates = iceTrust
        configuration.statsIntervalSeconds = 1
        configuration.dataChannels = data.open
        let engine = RTCEngine(configuration: configuration)
        do { try engine.setVideoEncoderConfiguration(settings) } catch { throw CLIError("\(error)") }
        if layers.simulcast > 1 { try await engine.setSimulcast(layers: layers.simulcast) }
        if let streamType = layers.streamType { try await engine.setRemoteDefaultVideoStreamType(streamType) }
        if let path = layers.frameLog {
            guard let file = fopen(path, "a") else { throw CLIError("--frame-log \(path): \(String(cString: strerror(errno)))") }
            let handle = FrameLogFile(file)
            engine.setRemoteVideoSink { frame in
                handle.write("\(MediaClock.monotonicUs()) \(frame.uid) \(frame.frame.width) \(frame.frame.height)\n")
            }
        }
        let playout = try layers.playoutWAV.map(PlayoutWAV.init(path:))
        if let playout { engine.setMixedAudioSink { playout.write($0) } }
        if case .none = video {} else { try await engine.enableVideo() }
        if case .none = audio {} else { try await engine.enableAudio() }
        // Files and tones are not microphones: no echo cancellation or noise suppression on them.
        engine.setAudioProcessing(enabled: false)
        var recorder: ChannelRecorder?
        if let record {
            try makeDirectories(record)
            let made = ChannelRecorder(directory: record, options: recordOptions)
            // One line per file that fails (a full disk, an unwritable folder); the bot goes on.
            made.onError = { failure in
                // One write(2) to fd 2: unbuffered, a whole line.
                let line = Array("rtc-cli: recording error: \(failure.message)\n".utf8)
                _ = line.withUnsafeBytes { Glibc.write(2, $0.baseAddress, $0.count) }
            }
            made.attach(to: engine)
            recorder = made
        }
        let events = engine.events
        let latest = NIOLockedValueBox<RTCStats?>(nil), log = NIOLockedValueBox<[String]>([])
        let statsTask = Task {
            for await event in events {
                switch event {
                case .rtcStats(let stats):
                    latest.withLockedValue { $0 = stats }
                    if printStats { print(Bot.format(stats, uid: uid)); fflush(nil) }
                case .joinedChannel where printTiming:
                    print("timing joined \(MediaClock.monotonicUs())")
                    fflush(nil)
                case .userJoined(let other): log.withLockedValue { $0.append("\(uid): \(other) joined") }
                case .userOffline(let other, let reason): log.withLockedValue { $0.append("\(uid): \(other) offline (\(reason.rawValue))") }
                case .firstRemoteVideoFrameDecoded(let other, let source, let size, let elapsed):
                    let line = "\(uid): first frame of \(other)/\(source.rawValue) \(size) after \(elapsed) ms"
                    log.withLockedValue { $0.append(line) }
                    if printStats { print(line); fflush(nil) }
                case .connectionStateChanged(let state, let reason):
                    log.withLockedValue { $0.append("\(uid): \(state.rawValue) (\(reason.rawValue))") }
                    if printStats { print("\(uid): connection \(state.rawValue) (\(reason.rawValue))"); fflush(nil) }
                    // Made to leave by the server (its API, a duplicate, an expired token): one line, whatever --quiet says.
                    if [.bannedByServer, .roomDeleted, .duplicateIdentity, .tokenExpired].contains(reason) {
                        print("server left \(reason.rawValue)")
                        fflush(nil)
                    }
                // What the server's API did to this bot and its room (docs/server-api.md), likewise.
                case .localTrackMutedByServer(let trackSid, let muted):
                    print("server muted \(trackSid) \(muted)")
                    fflush(nil)
                case .audioVolumeIndication(let speakers, _) where printSpeakers:
                    print("volume \(MediaClock.monotonicUs()) " + speakers.map { "\($0.uid):\($0.volume):\($0.vad ? 1 : 0)" }.joined(separator: " "))
                    fflush(nil)
                case .activeSpeaker(let speaker) where printSpeakers:
                    print("speaker \(MediaClock.monotonicUs()) \(speaker ?? "-")")
                    fflush(nil)
                case .subscriptionPermissionChanged(let other, let trackSid, let allowed):
                    // Whatever --quiet says: bots and tests read these.
                    print("permission \(MediaClock.monotonicUs()) \(other) \(trackSid) \(allowed ? "allowed" : "denied")")
                    fflush(nil)
                case .networkQuality(let other, let up, let down) where printQuality:
                    print("quality \(MediaClock.monotonicUs()) \(other) up \(up) down \(down)")
                    fflush(nil)
                case .roomMetadataChanged(let metadata):
                    print("server roomMetadata \(metadata.replacingOccurrences(of: "\n", with: " "))")
                    fflush(nil)
                case .remoteUserInfoChanged(let other, _, let metadata, let attributes):
                    // Whatever --quiet says: bots and tests read these.
                    let pairs = attributes.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
                    print("participant \(other) metadata \((metadata ?? "-").replacingOccurrences(of: "\n", with: " ")) attributes \(pairs.isEmpty ? "-" : pairs)")
                    fflush(nil)
                case .error(let error) where error.code == .transportFailed && error.reason.contains("could not connect"):
                    // No media path at all: one line naming the cause, and the bot ends with a failure.
                    let line = Array("rtc-cli: media failed: \(error.reason)\n".utf8)
                    _ = line.withUnsafeBytes { Glibc.write(2, $0.baseAddress, $0.count) }
                    fflush(nil)
                    exit(4)
                // End-to-end encryption: one line per change of a track's state, whatever --quiet says.
                case .encryptionStateChanged(let track, let state):
                    print("e2ee \(track.uid)/\(track.kind.rawValue) \(state.rawValue) at \(MediaClock.monotonicUs())")
                    fflush(nil)
                case .decryptionFailed(let other, let trackSid, let reason):
                    print("e2ee failed \(other) \(trackSid): \(reason)")
                    fflush(nil)
                case .error(let error):
                    if printStats || error.reason.hasPrefix("end-to-end") { print("\(uid): error \(error)"); fflush(nil) }
                case .streamMessage(let from, _, let bytes, let topic) where data.print:
                    // One line per message, whatever --quiet says: bots and tests read these.
                    let text = String(decoding: bytes, as: UTF8.self).replacingOccurrences(of: "\n", with: " ")
                    print("data \(MediaClock.monotonicUs()) \(from.isEmpty ? "-" : from) \(topic.isEmpty ? "-" : topic) \(bytes.count) \(text)")
                    fflush(nil)
                default: break
                }
            }
        }
        // The sources are ready before the join (a bad file is an error before joining), and start
        // once it is done.
        let videoPump = try VideoPump(video, size: settings.dimensions, fps: settings.frameRate, engine: engine)
        let audioPump = try AudioPump(audio, engine: engine)
        // The start on CLOCK_MONOTONIC (the clock of --frame-log lines), to time a join across processes.
        if printStats { print("\(uid): joining at monotonic \(MediaClock.monotonicUs()) µs"); fflush(nil) }
        do {
            try await engine.join(token: token, channel: channel, uid: uid,
                                  options: JoinOptions(autoSubscribeAudio: subscribe, autoSubscribeVideo: subscribe,
                                                       videoSource: source.video, audioSource: source.audio))
        } catch {
            statsTask.cancel()
            throw CLIError("join failed: \(error)")
        }
        let timeline = CaptureTimeline()
        videoPump.start(timeline)
        audioPump.start(timeline)
        return Bot(uid: uid, engine: engine, videoPump: videoPump, audioPump: audioPump, recorder: recorder, playout: playout,
                   statsTask: statsTask, latest: latest, log: log)
    }

    private init(uid: String, engine: RTCEngine, videoPump: VideoPump?, audioPump: AudioPump?, recorder: ChannelRecorder?, playout: PlayoutWAV?,
                 statsTask: Task<Void, Never>, latest: NIOLockedValueBox<RTCStats?>, log: NIOLockedValueBox<[String]>) {
        self.uid = uid
        self.playout = playout
        self.engine = engine
        self.videoPump = videoPump
        self.audioPump = audioPump
        self.recorder = recorder
        self.statsTask = statsTask
        latestStats = latest
        self.log = log
    }

    /// Stops the sources of a publishing bot, lets what is in flight go out and the stats catch up
    /// (1.2 s), and says what was pushed and sent: `1001: pushed 150 video frames; sent video 150
    /// frames, audio 400 packets`. Nil for a bot that pushed nothing.
    func stopSources() async -> String? {
        videoPump?.stop()
        audioPump?.stop()
        let pushed = videoPump?.framesPushed ?? 0
        guard videoPump?.isActive == true || audioPump?.isActive == true else { return nil }
        try? await Task.sleep(for: .milliseconds(1200))
        let local = latestStats.withLockedValue { $0 }?.local ?? []
        let sent = local.map { "\($0.kind.rawValue) \($0.kind == .video ? "\($0.framesEncoded) frames" : "\($0.packetsSent) packets")" }
        return "\(uid): pushed \(pushed) video frames; sent \(sent.joined(separator: ", "))"
    }

    /// Stops the sources, leaves, and closes the recordings.
    func stop() async -> [ChannelRecorder.File] {
        videoPump?.stop()
        audioPump?.stop()
        await engine.leave()
        engine.setMixedAudioSink(nil)
        playout?.finish()
        statsTask.cancel()
        return recorder?.finish() ?? []
    }

    /// One line for a recorded file: where, what, how much, and why it ended.
    static func describe(_ file: ChannelRecorder.File) -> String {
        let amount = [file.kind == .video ? "\(file.units) frames" : nil, file.holdsAudio ? "\(file.durationMs) ms" : nil]
            .compactMap { $0 }.joined(separator: ", ")
        let segment = file.segment > 1 ? ", segment \(file.segment)" : ""
        let ended = file.ended.map { ", ended: \($0.rawValue)" } ?? ""
        let sync = file.synchronization.map { ", synchronized by \($0.rawValue)" } ?? ""
        return "recorded \(file.path) (\(file.uid)/\(file.source) \(file.codec), \(amount)\(segment)\(sync)\(ended))"
    }

    static func format(_ stats: RTCStats, uid: String) -> String {
        var parts = ["[\(uid) \(String(format2: Double(stats.durationMs) / 1000))s]"]
        // Which candidate pair carries each transport's media (udp, or tcp for ICE-TCP).
        let paths = [stats.publisherPath.map { "up \($0)" }, stats.subscriberPath.map { "down \($0)" }].compactMap { $0 }
        if !paths.isEmpty { parts.append("path " + paths.joined(separator: ", ")) }
        for track in stats.local {
            parts.append("send \(track.kind.rawValue) \(Int(track.bitrateKbps)) kbps \(Int(track.framesPerSecond.rounded())) fps"
                + (track.kind == .video ? " \(track.width)x\(track.height)" : "")
                + (track.layers.map { " layers \($0.isEmpty ? "none" : $0.joined(separator: ","))" } ?? "")
                + (track.temporalLayers.flatMap { $0 > 1 ? " temporal \($0)" : nil } ?? "")
                + " loss \(Int(track.lossFraction * 100))%" + (track.roundTripTimeMs.map { " rtt \(Int($0)) ms" } ?? ""))
        }
        for track in stats.remote {
            parts.append("recv \(track.uid)/\(track.source.rawValue) \(Int(track.bitrateKbps)) kbps \(Int(track.framesPerSecond.rounded())) fps"
                + (track.kind == .video ? " \(track.width)x\(track.height)" : "")
                + (track.layer.map { " layer \($0) (\(track.layerReason?.rawValue ?? "-"))" } ?? "")
                + " lost \(track.packetsLost) jitter \(String(format2: track.jitterMs)) ms"
                + (track.kind == .audio ? " concealed \(track.framesConcealed) recovered \(track.framesRecovered)" : "")
                + (track.decryptionFailures > 0 ? " undecryptable \(track.decryptionFailures)" : ""))
        }
        return parts.joined(separator: " | ")
    }
}

/// A `--frame-log` file: lines from decode threads, one locked write each, flushed per line so a
/// test reading it while the bot runs sees whole lines.
final class FrameLogFile: @unchecked Sendable {
    private let file: UnsafeMutablePointer<FILE>
    private let lock = NIOLock()

    init(_ file: UnsafeMutablePointer<FILE>) { self.file = file }

    func write(_ line: String) {
        lock.withLock {
            fputs(line, file)
            fflush(file)
        }
    }
}
