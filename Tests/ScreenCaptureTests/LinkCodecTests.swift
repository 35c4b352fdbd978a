import Foundation
import RTCFuzzHarness
import ScreenCapture
import Testing

/// The host ↔ sharer link's wire format: every message round-trips, bad bytes give a typed error.
@Suite("Link codec")
struct LinkCodecTests {
    static let setup = ScreenShareSetup(
        configuration: ScreenShareConfiguration(serverURL: "ws://127.0.0.1:7880/rtc", channel: "ScreenShare", hostUID: "1001",
                                                token: "eyJ.a.b", policy: ScreenSharePolicy(profile: .low), shareAudio: true),
        mode: .relay, source: "-", rawSize: VideoSize(width: 1080, height: 2340), frameRingPath: "/tmp/x.frames")

    static let messages: [LinkMessage] = [
        .hello(version: screenShareLinkVersion), .hello(version: -7),
        .configure(setup),
        .configure(ScreenShareSetup(configuration: ScreenShareConfiguration(serverURL: "", channel: "ü", hostUID: "h", token: ""),
                                    mode: .standalone, source: "x11:99")),
        .start, .pause, .resume, .stop, .started, .paused, .resumed,
        .finished(reason: .requestedByHost), .finished(reason: .hostLeft), .finished(reason: .disconnected),
        .finished(reason: .versionMismatch), .finished(reason: .error("no display :9 ✗")),
        .stats(ScreenShareStats(framesPerSecond: 14.8, bitrateKbps: 1234.5, width: 1280, height: 720, framesPushed: 300, framesResent: 4)),
        .frame(slot: 2, sequence: 1_000_001, width: 1280, height: 720, timestampUs: 9_876_543_210),
    ]

    @Test("every message decodes to itself, and its encoding is canonical", arguments: messages)
    func roundTrip(message: LinkMessage) throws {
        let bytes = LinkCodec.encode(message)
        let decoded = try LinkCodec.decode(bytes)
        #expect(decoded == message)
        #expect(LinkCodec.encode(decoded) == bytes)
    }

    @Test("bad bytes are a LinkError, never a trap", arguments: [
        ("empty", [] as [UInt8]),
        ("unknown type", [0x7E]),
        ("short integer", [1, 0, 0, 0]),
        ("stray bytes", LinkCodec.encode(.start) + [0]),
        ("string longer than the message", [10, 5, 0, 0, 0, 9, 0x61]),
        ("string over the limit", [10, 5, 0x7F, 0xFF, 0xFF, 0xFF]),
        ("not UTF-8", [10, 5, 0, 0, 0, 2, 0xC3, 0x28]),
        ("unknown reason", [10, 9]),
    ] as [(String, [UInt8])])
    func badBytes(name: String, bytes: [UInt8]) {
        #expect(throws: LinkError.self, "\(name)") { try LinkCodec.decode(bytes) }
    }

    @Test("a flag that is neither 0 nor 1 is refused")
    func badFlag() {
        var bytes = LinkCodec.encode(.configure(Self.setup))
        let configuration = Self.setup.configuration
        let strings = [configuration.serverURL, configuration.channel, configuration.hostUID, configuration.token, configuration.uidSuffix]
        let shareAudio = 1 + strings.reduce(0) { $0 + 4 + $1.utf8.count } + 5 * 8
        #expect(bytes[shareAudio] == 1)
        bytes[shareAudio] = 7
        #expect(throws: LinkError.self) { try LinkCodec.decode(bytes) }
    }

    @Test("a setup with an out-of-range policy or raw size is refused")
    func outOfRange() {
        var tiny = Self.setup
        tiny.configuration.policy.maxWidth = 2
        #expect(throws: LinkError.self) { try LinkCodec.decode(LinkCodec.encode(.configure(tiny))) }
        var huge = Self.setup
        huge.rawSize = VideoSize(width: 100_000, height: 10)
        #expect(throws: LinkError.self) { try LinkCodec.decode(LinkCodec.encode(.configure(huge))) }
        var zeroRate = Self.setup
        zeroRate.configuration.policy.framesPerSecond = 0
        #expect(throws: LinkError.self) { try LinkCodec.decode(LinkCodec.encode(.configure(zeroRate))) }
    }

    @Test("the committed fuzz corpus (Fuzz/Corpus/link) replays through the fuzz entry point")
    func corpusReplay() throws {
        let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Fuzz/Corpus/link")
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        #expect(names.count >= 4)
        var decodable = 0
        for name in names {
            let bytes = Array(try Data(contentsOf: directory.appendingPathComponent(name)))
            FuzzHarness.link(bytes)
            if (try? LinkCodec.decode(bytes)) != nil { decodable += 1 }
        }
        #expect(decodable >= 4, "the seeds include real messages")
    }
}
