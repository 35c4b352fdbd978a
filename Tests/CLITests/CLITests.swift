import Foundation
import RTCTestSupport
import Testing

/// Runs rtc-cli (`cliPath`, from RTCTestSupport); returns exit status, stdout and stderr.
func cli(_ arguments: [String]) throws -> (status: Int32, out: String, err: String) {
    try runTool([cliPath] + arguments, timeout: 600)
}

@Suite("rtc-cli", .serialized)
struct CLITests {
    let dir = temporaryDirectory("cli")

    @Test("pattern → encode → decode, and audio encode → decode, work end to end")
    func roundTrip() throws {
        #expect(FileManager.default.isExecutableFile(atPath: cliPath), "rtc-cli not found at \(cliPath)")
        let clip = "\(dir)/c.y4m", ivf = "\(dir)/c.ivf", back = "\(dir)/c-back.y4m"
        var result = try cli(["pattern", "--output", clip, "--size", "640x360", "--frames", "20", "--kind", "screen"])
        #expect(result.status == 0, "\(result.err)")
        result = try cli(["encode", "--input", clip, "--output", ivf, "--bitrate", "500", "--max-size", "320x320", "--screen"])
        #expect(result.status == 0, "\(result.err)")
        #expect(result.out.contains("320x180"), "\(result.out)")
        result = try cli(["decode", "--input", ivf, "--output", back])
        #expect(result.status == 0, "\(result.err)")
        #expect(result.out.contains("320x180"))
        let decoded = try #require(FileManager.default.attributesOfItem(atPath: back)[.size] as? Int)
        // 20 frames of 320x180 I420 plus headers: dropped frames are repeated, none are lost.
        #expect(decoded >= 20 * 320 * 180 * 3 / 2)
    }

    @Test("token mints a JWT on its last line, with the grants asked for")
    func token() throws {
        let result = try cli(["token", "--secret", "s", "--channel", "ScreenShare", "--uid", "1001_sub", "--ttl", "60",
                              "--grants", "join,publishScreen"])
        #expect(result.status == 0, "\(result.err)")
        let jwt = try #require(result.out.split(separator: "\n").last.map(String.init))
        let parts = jwt.split(separator: ".")
        #expect(parts.count == 3)
        var claims = String(parts[1]).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while claims.count % 4 != 0 { claims += "=" }
        let json = try #require(Data(base64Encoded: claims).flatMap { try JSONSerialization.jsonObject(with: $0) as? [String: Any] })
        #expect(json["sub"] as? String == "1001_sub" && json["channel"] as? String == "ScreenShare")
        let grants = try #require(json["grants"] as? [String: Bool])
        #expect(grants["publishScreen"] == true && grants["publishVideo"] == false)
    }

    @Test("bad input gives one clear error line and a non-zero exit", arguments: [
        (["encode", "--input", "/nonexistent.y4m", "--output", "/tmp/x.ivf"], "cannot open /nonexistent.y4m"),
        (["decode", "--input", "/nonexistent.ivf", "--output", "/tmp/x.y4m"], "cannot open"),
        (["encode-audio", "--input", "/nonexistent.wav", "--output", "/tmp/x.ogg"], "cannot open"),
        (["decode-audio", "--input", "/nonexistent.ogg", "--output", "/tmp/x.wav"], "cannot open"),
        (["pattern", "--output", "/tmp/x.y4m", "--size", "641x360", "--frames", "1"], "even width and height"),
        (["pattern", "--output", "/tmp/x.y4m", "--size", "big", "--frames", "1"], "size"),
        (["pattern", "--output", "/tmp/x.y4m", "--frames", "0"], "--frames must be positive"),
        (["encode", "--input", "/tmp/x.y4m", "--output", "/tmp/x.ivf", "--max-size", "641x360"], "--max-size"),
        (["encode", "--input", "/tmp/x.y4m", "--output", "/tmp/x.ivf", "--bitrate", "0"], "bitrate"),
        (["token", "--secret", "s", "--channel", "c", "--uid", "u", "--grants", "fly"], "unknown grant"),
        (["token", "--secret", "", "--channel", "c", "--uid", "u"], "--secret"),
    ])
    func badArguments(arguments: [String], message: String) throws {
        let result = try cli(arguments)
        #expect(result.status != 0)
        #expect(result.err.contains(message), "stderr: \(result.err)")
        #expect(!result.err.contains("Fatal error"), "trapped: \(result.err)")
    }

    @Test("files of the wrong kind or cut short are reported, not trapped on")
    func badFiles() throws {
        let clip = "\(dir)/ok.y4m"
        #expect(try cli(["pattern", "--output", clip, "--size", "64x64", "--frames", "3"]).status == 0)
        let data = try Data(contentsOf: URL(fileURLWithPath: clip))
        try data.prefix(data.count - 100).write(to: URL(fileURLWithPath: "\(dir)/cut.y4m"))
        try Data("RIFF1234WAVEjunk".utf8).write(to: URL(fileURLWithPath: "\(dir)/junk.wav"))
        let cases: [([String], String)] = [
            (["encode", "--input", "\(dir)/cut.y4m", "--output", "\(dir)/o.ivf"], "ends inside frame 2"),
            (["decode", "--input", clip, "--output", "\(dir)/o.y4m"], "not an IVF file"),
            (["decode-audio", "--input", clip, "--output", "\(dir)/o.wav"], "not an Ogg file"),
            (["encode-audio", "--input", "\(dir)/junk.wav", "--output", "\(dir)/o.ogg"], "junk.wav"),
            (["encode-audio", "--input", clip, "--output", "\(dir)/o.ogg"], "not a WAV file"),
        ]
        for (arguments, message) in cases {
            let result = try cli(arguments)
            #expect(result.status != 0, "\(arguments)")
            #expect(result.err.contains(message), "\(arguments): \(result.err)")
            #expect(result.err.split(separator: "\n").count <= 2, "\(arguments): \(result.err)")
        }
    }
}

@Suite("rtc-cli server", .serialized)
struct ServerCommandTests {
    @Test("server --dev prints its addresses, a secret, a token and the web page's URL, serves /healthz, the web client and dev tokens, and stops cleanly on SIGTERM")
    func devServer() async throws {
        let process = try ChildProcess([cliPath, "server", "--dev", "--port", "0", "--udp-port", "0"])
        defer { process.stop() }
        _ = await eventually(15) {
            let text = process.outputText
            return (text.contains("web client:") && text.hasSuffix("\n")) || !process.isRunning
        }
        let lines = process.output
        let ws = try #require(lines.first { $0.hasPrefix("signaling: ws://127.0.0.1:") })
        let port = try #require(Int(ws.split(separator: "/")[1].split(separator: ":")[1]))
        #expect(lines.contains { $0.hasPrefix("dev secret: ") })
        let tokenLine = lines.firstIndex { $0.hasPrefix("sample token") }.map { $0 + 1 }
        #expect(tokenLine.map { lines[$0].split(separator: ".").count == 3 } == true, "\(lines)")  // the token
        #expect(lines.contains("web page: http://127.0.0.1:\(port)/?channel=demo&uid=web1&mode=watch"), "\(lines)")
        let response = try rawGet(port: port, path: "/healthz")
        #expect(response.contains("200 OK") && response.hasSuffix("ok\n"))
        // The web client, and tokens for its page (dev mode only).
        let page = try rawGet(port: port, path: "/")
        #expect(page.contains("200 OK") && page.contains("text/html") && page.contains("<script"), "\(page.prefix(300))")
        let token = try rawGet(port: port, path: "/dev-token?channel=c&uid=u")
        #expect(token.contains("200 OK") && token.components(separatedBy: "\r\n\r\n").last?.split(separator: ".").count == 3, "\(token)")
        #expect(try rawGet(port: port, path: "/../Package.swift").contains("404"))
        process.signal(SIGTERM)
        let status = await process.wait(10)
        #expect(!process.isRunning && status == 0)
        // A drain: the log says it began and ended, the output that nothing was left.
        let log = process.errorText
        #expect(log.contains("draining") && log.contains("drained") && process.output.contains("drained"), "\(log) \(process.output.suffix(3))")
    }

    func rawGet(port: Int, path: String) throws -> String {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { return "" }
        let request = "GET \(path) HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        _ = request.withCString { write(fd, $0, strlen($0)) }
        var response = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(fd, &buffer, buffer.count)
            if count <= 0 { break }
            response += buffer[..<count]
        }
        return String(decoding: response, as: UTF8.self)
    }
}

@Suite("rtc-cli join and demo", .serialized)
struct BotCommandTests {
    let dir = temporaryDirectory("cli-bots")

    @Test("demo: server, host, its _sub share and a viewer; a summary table and recordings ffprobe can read")
    func demo() throws {
        let out = "\(dir)/demo"
        let result = try cli(["demo", "--duration", "4", "--out", out])
        #expect(result.status == 0, "\(result.err)")
        #expect(result.out.contains("viewer 2001 receives"), "\(result.out)")
        #expect(result.out.contains("1001_sub/screen"))
        // The server's own figures (rtc-server's /debug/forwarded): the share reached the viewer and
        // never its owner; the share itself received nothing.
        #expect(result.out.contains("server: rtc-server pid "), "\(result.out)")
        #expect(result.out.contains("packets the server forwarded to 1001 from its own share 1001_sub: 0"))
        #expect(result.out.contains("packets the server forwarded to 1001_sub (it subscribes to nothing): 0"))
        let toViewer = result.out.split(separator: "\n").first { $0.hasPrefix("packets the server forwarded to 2001: ") } ?? ""
        let shareToViewer = toViewer.components(separatedBy: "1001_sub video ").dropFirst().first.flatMap { Int($0.prefix { $0.isNumber }) } ?? 0
        #expect(shareToViewer > 100, "\(toViewer)")
        for (file, codec) in [("1001-camera.ivf", "vp8"), ("1001_sub-screen.ivf", "vp8"), ("1001-microphone.wav", "pcm_s16le"),
                              ("1001.webm", "vp8"), ("1001_sub-screen.webm", "vp8")] {
            let probe = try MediaProbe("\(out)/\(file)")
            #expect(probe.status == 0, "ffprobe \(file)")
            #expect(probe.codecs.contains(codec), "\(file): \(probe.codecs)")
            let frames = probe.first?.frames ?? 0
            #expect(frames > 20, "\(file) has \(frames) frames")
            if file == "1001.webm" { #expect(probe.codecs.contains("opus"), "the host's WebM has no audio: \(probe.codecs)") }
        }
    }

    @Test("a server that announces an address nobody can reach: the publisher's join fails at the connect timeout, naming the candidates it tried")
    func unreachableAnnouncedAddress() async throws {
        let process = try ChildProcess([cliPath, "server", "--port", "0", "--udp-port", "0", "--secret", "s", "--announce-ip", "192.0.2.1",
                                       "--log-level", "error"])
        #expect(await eventually(15) { process.output.contains { $0.contains("/rtc") } }, "\(process.errorText)")
        let url = try #require(process.output.lazy.compactMap { $0.split(separator: " ").first { $0.hasPrefix("ws://") } }.first.map(String.init))
        let started = Date()
        let result = try cli(["join", "--server", url, "--channel", "c", "--uid", "1001", "--secret", "s", "--quiet", "--duration", "3"])
        let seconds = Date().timeIntervalSince(started)
        #expect(result.status != 0)
        #expect(result.err.contains("did not connect") && result.err.contains("udp 192.0.2.1:"), "\(result.err)")
        #expect(seconds < 15, "failed after \(seconds) s")
        process.stop()
    }

    @Test("join rejects bad flags with one clear line")
    func joinBadFlags() throws {
        for (arguments, message) in [
            (["join", "--channel", "c", "--uid", "u"], "--token"),
            (["join", "--channel", "c", "--uid", "u", "--secret", "s", "--role", "king"], "--role"),
            (["join", "--channel", "c", "--uid", "u", "--secret", "s", "--server", "http://x"], "ws://"),
            (["join", "--channel", "c", "--uid", "u", "--secret", "s", "--record", "/tmp/r", "--record-format", "mkv"], "--record-format"),
            (["join", "--channel", "c", "--uid", "u", "--secret", "s", "--record-format", "webm"], "--record DIR"),
            (["join", "--channel", "c", "--uid", "u", "--secret", "s", "--bind", "example.com"], "--bind"),
            (["join", "--channel", "c", "--uid", "u_sub", "--secret", "s", "--owner-wait", "-1"], "--owner-wait"),
            (["join", "--channel", "c", "--uid", "u", "--secret", "s", "--server", "ws://127.0.0.1:1/rtc", "--duration", "1"], "join failed"),
            (["join", "--channel", "c", "--uid", "u_sub", "--secret", "s", "--server", "ws://127.0.0.1:1/rtc", "--source", "pattern",
              "--duration", "1"], "join failed"),
        ] {
            let result = try cli(arguments)
            #expect(result.status != 0)
            #expect(result.err.contains(message), "\(arguments): \(result.err)")
        }
    }

    @Test("join --uid X_sub --source FILE.y4m shares the file at 720p until --duration, then leaves cleanly")
    func joinScreenShare() async throws {
        let clip = "\(dir)/screen-1080p.y4m"
        let made = try cli(["pattern", "--output", clip, "--size", "1920x1080", "--frames", "10", "--fps", "15", "--kind", "screen"])
        #expect(made.status == 0, "\(made.err)")
        let server = try ChildProcess([cliPath, "server", "--port", "0", "--udp-port", "0", "--secret", "s", "--log-level", "error"],
                                      errors: .discarded)
        defer { server.stop() }
        _ = await eventually(15) { server.outputText.contains("/rtc") || !server.isRunning }
        let text = server.outputText
        let url = try #require(text.split(whereSeparator: { $0 == " " || $0 == "\n" }).first { $0.hasPrefix("ws://") }.map(String.init))
        // The share's owner: the server takes a share only while its host is in the channel.
        let host = try ChildProcess([cliPath, "join", "--server", url, "--channel", "ScreenShare", "--uid", "1001", "--secret", "s",
                                     "--video", "none", "--audio", "none", "--no-subscribe", "--quiet", "--duration", "30"],
                                    output: .discarded, errors: .discarded)
        defer { host.stop() }
        let result = try cli(["join", "--server", url, "--channel", "ScreenShare", "--uid", "1001_sub", "--secret", "s",
                              "--source", clip, "--duration", "3"])
        #expect(result.status == 0, "\(result.err)")
        #expect(result.out.contains("[1001_sub] share ") && result.out.contains("1280x720"), "\(result.out)")
        #expect(result.out.hasSuffix("share finished: requestedByHost\n"), "\(result.out)")
    }
}
