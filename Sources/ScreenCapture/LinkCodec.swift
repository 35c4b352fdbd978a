import RTCMedia

/// The bytes of a ``LinkMessage`` on the host ↔ sharer link: a tag byte, then the fields in order,
/// integers as 8-byte big-endian, doubles as their IEEE bits, strings as a 4-byte length and UTF-8,
/// optionals as a presence byte. Hand-written so that the relay sharer needs no Foundation; the
/// decoder takes bytes from another process and never traps on them.
public enum LinkCodec {
    /// Strings longer than this are refused (a token or URL is far shorter).
    static let maxString = 16 * 1024

    enum Tag: UInt8 {
        case hello = 1, configure, start, pause, resume, stop, started, paused, resumed, finished, stats, frame
    }

    public static func encode(_ message: LinkMessage) -> [UInt8] {
        var writer = LinkWriter()
        switch message {
        case .hello(let version):
            writer.tag(.hello)
            writer.int(version)
        case .configure(let setup):
            writer.tag(.configure)
            writer.setup(setup)
        case .start: writer.tag(.start)
        case .pause: writer.tag(.pause)
        case .resume: writer.tag(.resume)
        case .stop: writer.tag(.stop)
        case .started: writer.tag(.started)
        case .paused: writer.tag(.paused)
        case .resumed: writer.tag(.resumed)
        case .finished(let reason):
            writer.tag(.finished)
            writer.reason(reason)
        case .stats(let stats):
            writer.tag(.stats)
            writer.double(stats.framesPerSecond)
            writer.double(stats.bitrateKbps)
            for value in [stats.width, stats.height, stats.framesPushed, stats.framesResent] { writer.int(value) }
        case .frame(let slot, let sequence, let width, let height, let timestampUs):
            writer.tag(.frame)
            for value in [slot, sequence, width, height] { writer.int(value) }
            writer.int(Int(timestampUs))
        }
        return writer.bytes
    }

    public static func decode(_ bytes: [UInt8]) throws(LinkError) -> LinkMessage {
        var reader = LinkReader(bytes)
        let raw = try reader.u8()
        guard let tag = Tag(rawValue: raw) else { throw LinkError("unknown link message type \(raw)") }
        let message: LinkMessage
        switch tag {
        case .hello: message = .hello(version: try reader.int())
        case .configure: message = .configure(try reader.setup())
        case .start: message = .start
        case .pause: message = .pause
        case .resume: message = .resume
        case .stop: message = .stop
        case .started: message = .started
        case .paused: message = .paused
        case .resumed: message = .resumed
        case .finished: message = .finished(reason: try reader.reason())
        case .stats:
            message = .stats(ScreenShareStats(framesPerSecond: try reader.double(), bitrateKbps: try reader.double(),
                                              width: try reader.int(), height: try reader.int(),
                                              framesPushed: try reader.int(), framesResent: try reader.int()))
        case .frame:
            message = .frame(slot: try reader.int(), sequence: try reader.int(), width: try reader.int(), height: try reader.int(),
                             timestampUs: Int64(try reader.int()))
        }
        guard reader.remaining == 0 else { throw LinkError("\(reader.remaining) stray bytes after a link message") }
        return message
    }
}

struct LinkWriter {
    var bytes: [UInt8] = []

    mutating func tag(_ tag: LinkCodec.Tag) { bytes.append(tag.rawValue) }

    mutating func int(_ value: Int) {
        let bits = UInt64(bitPattern: Int64(value))
        for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: bits >> UInt64(shift))) }
    }

    mutating func double(_ value: Double) { int(Int(Int64(bitPattern: value.bitPattern))) }

    mutating func bool(_ value: Bool) { bytes.append(value ? 1 : 0) }

    mutating func string(_ value: String) {
        let utf8 = Array(value.utf8)
        let count = UInt32(truncatingIfNeeded: utf8.count)
        bytes += [UInt8(count >> 24), UInt8(count >> 16 & 0xFF), UInt8(count >> 8 & 0xFF), UInt8(count & 0xFF)]
        bytes += utf8
    }

    mutating func reason(_ reason: ScreenShareFinishReason) {
        switch reason {
        case .requestedByHost: bytes.append(1)
        case .hostLeft: bytes.append(2)
        case .disconnected: bytes.append(3)
        case .versionMismatch: bytes.append(4)
        case .error(let message):
            bytes.append(5)
            string(message)
        }
    }

    mutating func setup(_ setup: ScreenShareSetup) {
        let configuration = setup.configuration
        for text in [configuration.serverURL, configuration.channel, configuration.hostUID, configuration.token, configuration.uidSuffix] {
            string(text)
        }
        let policy = configuration.policy
        for value in [policy.maxWidth, policy.maxHeight, policy.framesPerSecond, policy.idleResendMs, policy.bitrateKbps] { int(value) }
        bool(configuration.shareAudio)
        bytes.append(setup.mode == .standalone ? 0 : 1)
        string(setup.source)
        bool(setup.rawSize != nil)
        if let size = setup.rawSize {
            int(size.width)
            int(size.height)
        }
        bool(setup.frameRingPath != nil)
        if let path = setup.frameRingPath { string(path) }
    }
}

struct LinkReader {
    private let bytes: [UInt8]
    private var offset = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    var remaining: Int { bytes.count - offset }

    private mutating func take(_ count: Int) throws(LinkError) -> ArraySlice<UInt8> {
        guard count >= 0, count <= remaining else { throw LinkError("a link message ends early (needs \(count) more bytes, has \(remaining))") }
        defer { offset += count }
        return bytes[offset..<offset + count]
    }

    mutating func u8() throws(LinkError) -> UInt8 { try take(1).first! }

    mutating func int() throws(LinkError) -> Int {
        var bits: UInt64 = 0
        for byte in try take(8) { bits = bits << 8 | UInt64(byte) }
        return Int(Int64(bitPattern: bits))
    }

    mutating func double() throws(LinkError) -> Double { Double(bitPattern: UInt64(bitPattern: Int64(try int()))) }

    mutating func bool() throws(LinkError) -> Bool {
        switch try u8() {
        case 0: return false
        case 1: return true
        case let other: throw LinkError("a link flag is \(other), not 0 or 1")
        }
    }

    mutating func string() throws(LinkError) -> String {
        var count = 0
        for byte in try take(4) { count = count << 8 | Int(byte) }
        guard count <= LinkCodec.maxString else { throw LinkError("a link string of \(count) bytes is over \(LinkCodec.maxString)") }
        guard let text = String(validating: try take(count), as: UTF8.self) else { throw LinkError("a link string is not UTF-8") }
        return text
    }

    mutating func size() throws(LinkError) -> VideoSize {
        let width = try int(), height = try int()
        guard (1...16384).contains(width), (1...16384).contains(height) else { throw LinkError("a link frame size \(width)x\(height) is out of range") }
        return VideoSize(width: width, height: height)
    }

    mutating func reason() throws(LinkError) -> ScreenShareFinishReason {
        switch try u8() {
        case 1: return .requestedByHost
        case 2: return .hostLeft
        case 3: return .disconnected
        case 4: return .versionMismatch
        case 5: return .error(try string())
        case let other: throw LinkError("unknown finish reason \(other)")
        }
    }

    mutating func setup() throws(LinkError) -> ScreenShareSetup {
        let serverURL = try string(), channel = try string(), hostUID = try string(), token = try string(), suffix = try string()
        var policy = ScreenSharePolicy()
        policy.maxWidth = try int()
        policy.maxHeight = try int()
        policy.framesPerSecond = try int()
        policy.idleResendMs = try int()
        policy.bitrateKbps = try int()
        guard (16...16384).contains(policy.maxWidth), (16...16384).contains(policy.maxHeight) else {
            throw LinkError("a link policy bound \(policy.maxWidth)x\(policy.maxHeight) is out of range")
        }
        guard (1...120).contains(policy.framesPerSecond), (1...60_000).contains(policy.idleResendMs), (1...100_000).contains(policy.bitrateKbps) else {
            throw LinkError("a link policy value is out of range")
        }
        let shareAudio = try bool()
        let mode: ScreenShareMode
        switch try u8() {
        case 0: mode = .standalone
        case 1: mode = .relay
        case let other: throw LinkError("unknown share mode \(other)")
        }
        let source = try string()
        let rawSize = try bool() ? try size() : nil
        let ringPath = try bool() ? try string() : nil
        return ScreenShareSetup(
            configuration: ScreenShareConfiguration(serverURL: serverURL, channel: channel, hostUID: hostUID, token: token,
                                                    uidSuffix: suffix, policy: policy, shareAudio: shareAudio),
            mode: mode, source: source, rawSize: rawSize, frameRingPath: ringPath)
    }
}
