import ArgumentParser
import Foundation
import RTCCore
import ServerCommandLine

/// The cost of LiveKit-format frame encryption per frame, next to `openssl speed` for AES-128-GCM
/// over the same number of bytes in the same run: the cipher alone is the floor, the rest is the
/// frame's layout (clear bytes as additional data, IV, trailer) and one copy.
struct E2EEBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "e2ee", abstract: "Encrypt and decrypt per frame (µs) at 720p (a keyframe, a delta frame) and for Opus, next to openssl speed.")

    @Option(help: "Frames per round.") var frames: Int = 2000
    @Option(help: "Rounds; the median is reported.") var rounds: Int = 5
    @Option(name: .customLong("keyframe-bytes"), help: "A 720p VP8 keyframe's size.") var keyframeBytes: Int = 60_000
    @Option(name: .customLong("delta-bytes"), help: "A 720p delta frame's size (1.5 Mbit/s at 30 fps).") var deltaBytes: Int = 6_250
    @Option(name: .customLong("opus-bytes"), help: "A 20 ms Opus packet's size.") var opusBytes: Int = 120
    @Option(name: .customLong("end-to-end"),
            help: "Seconds of a 720p30 call through an embedded server with E2EE off, then on: frames decoded per second at the viewer (0: skip).")
    var endToEnd: Int = 10

    func validate() throws {
        guard frames > 0, rounds > 0, [keyframeBytes, deltaBytes, opusBytes].allSatisfy({ (16...2_000_000).contains($0) }) else {
            throw ValidationError("--frames and --rounds must be positive, sizes 16 to 2 000 000 bytes")
        }
    }

    func run() async throws {
        try perFrame()
        guard endToEnd > 0 else { return }
        print("\nend to end, 1280x720 at 30 fps and a tone, publisher → server → viewer on loopback, \(endToEnd) s each")
        print("E2EE\tviewer fps\tframes decoded\tundecryptable\tpublisher encode fps")
        for encrypted in [false, true] {
            let row = try await call(encrypted: encrypted)
            print("\(encrypted ? "on" : "off")\t\(String(format: "%.1f", row.fps))\t\(row.frames)\t\(row.undecryptable)\t\(String(format: "%.1f", row.sentFps))")
        }
    }

    /// One call: the viewer's decoded frames over the last `endToEnd` seconds (after a 3 s start).
    private func call(encrypted: Bool) async throws -> (fps: Double, frames: Int, undecryptable: Int, sentFps: Double) {
        let server = try await BenchServer()
        let channel = encrypted ? "e2ee-on" : "e2ee-off", e2ee: (key: String, index: Int)? = encrypted ? ("bench passphrase", 0) : nil
        let publisher = try await Bot.start(server: server.url, channel: channel, uid: "publisher", token: server.token("publisher", channel),
                                            role: .broadcaster, video: .pattern(.camera), audio: .tone(440),
                                            settings: VideoEncoderConfiguration(dimensions: VideoSize(width: 1280, height: 720), frameRate: 30,
                                                                                bitrateKbps: 1500),
                                            subscribe: false, record: nil, printStats: false, e2ee: e2ee)
        let viewer = try await Bot.start(server: server.url, channel: channel, uid: "viewer", token: server.token("viewer", channel),
                                         role: .broadcaster, video: .none, audio: .none, settings: VideoEncoderConfiguration(),
                                         subscribe: true, record: nil, printStats: false, e2ee: e2ee)
        try await Task.sleep(for: .seconds(3))
        func counts() -> (Int, Int, Int) {
            let remote = viewer.latestStats.withLockedValue { $0 }?.remote.first { $0.kind == .video }
            let sent = publisher.latestStats.withLockedValue { $0 }?.local.first { $0.kind == .video }
            return (remote?.framesDecoded ?? 0, remote?.decryptionFailures ?? 0, sent?.framesEncoded ?? 0)
        }
        let (startFrames, _, startSent) = counts(), start = RTPBench.now()
        try await Task.sleep(for: .seconds(endToEnd))
        let (frames, undecryptable, sent) = counts(), seconds = (RTPBench.now() - start) / 1e9
        _ = await viewer.stop()
        _ = await publisher.stop()
        await server.app.shutdown()
        return (Double(frames - startFrames) / seconds, frames - startFrames, undecryptable, Double(sent - startSent) / seconds)
    }

    private func perFrame() throws {
        let keys = E2EEKeyProvider()
        try keys.setSharedKey(Array("bench".utf8))
        print("frame\tbytes\tencrypt µs\tdecrypt µs\topenssl speed µs\tencrypt / openssl")
        for (name, codec, first, size) in [("VP8 720p keyframe", E2EECodec.vp8, UInt8(0x10), keyframeBytes),
                                           ("VP8 720p delta", E2EECodec.vp8, UInt8(0x11), deltaBytes),
                                           ("Opus 20 ms", E2EECodec.opus, UInt8(0x78), opusBytes)] {
            var frame = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7) }
            frame[0] = first
            let sender = try FrameCryptor(codec: codec, participant: nil, provider: keys)
            let receiver = try FrameCryptor(codec: codec, participant: nil, provider: keys)
            var sealed = try sender.encrypt(frame, ssrc: 1)
            var encrypt: [Double] = [], decrypt: [Double] = []
            for _ in 0..<rounds {
                var start = RTPBench.now()
                for _ in 0..<frames { sealed = try sender.encrypt(frame, ssrc: 1) }
                encrypt.append((RTPBench.now() - start) / Double(frames) / 1000)
                start = RTPBench.now()
                for _ in 0..<frames { _ = try receiver.decrypt(sealed) }
                decrypt.append((RTPBench.now() - start) / Double(frames) / 1000)
            }
            let cipher = try opensslSpeedMicroseconds(bytes: size)
            let (e, d) = (encrypt.sorted()[rounds / 2], decrypt.sorted()[rounds / 2])
            print("\(name)\t\(size)\t\(String(format: "%.2f", e))\t\(String(format: "%.2f", d))\t"
                  + "\(cipher.map { String(format: "%.2f", $0) } ?? "-")\t\(cipher.map { String(format: "%.2fx", e / $0) } ?? "-")")
        }
    }

    /// µs per AES-128-GCM operation over `bytes` from `openssl speed -evp` (one second), nil when
    /// the tool is missing or its table cannot be read.
    private func opensslSpeedMicroseconds(bytes: Int) throws -> Double? {
        guard let (status, output) = try? ProcessRunner.capture(["openssl", "speed", "-evp", "aes-128-gcm", "-bytes", "\(bytes)", "-seconds", "1"]),
              status == 0 else { return nil }
        // The last line: "AES-128-GCM   12345.67k" (thousands of bytes per second).
        guard let line = output.split(separator: "\n").last(where: { $0.lowercased().hasPrefix("aes-128-gcm") }),
              let field = line.split(separator: " ").last, field.hasSuffix("k"), let kilo = Double(field.dropLast()), kilo > 0
        else { return nil }
        return Double(bytes) / (kilo * 1000) * 1_000_000
    }
}
