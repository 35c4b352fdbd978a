import Foundation
import NIOCore
import RTCCore
import RTCTransport
import TestKit
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A UDP socket on loopback that sends datagrams to one port (the test's side of the wire).
final class LoopbackSender {
    private let fd: Int32
    private var address = sockaddr_in()

    init(port: UInt16) throws {
        fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EIO) }
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    }

    deinit { close(fd) }

    func send(_ buffer: ByteBuffer) {
        buffer.withUnsafeReadableBytes { bytes in
            withUnsafePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                    _ = sendto(fd, bytes.baseAddress, bytes.count, 0, socketAddress, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
    }

    /// An even port that, with the next one (ffmpeg opens RTP and RTCP), was free on every address
    /// a moment ago: both bound on 0.0.0.0, then closed. Any address, since ffmpeg binds the wildcard
    /// and a port taken on one address (a loopback socket of another test) stops it.
    static func freePort() -> UInt16 {
        func bindAny(_ port: UInt16) -> (fd: Int32, port: UInt16)? {
            let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafeMutablePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                    bind(fd, socketAddress, length) == 0 && getsockname(fd, socketAddress, &length) == 0
                }
            }
            guard bound else { close(fd); return nil }
            return (fd, UInt16(bigEndian: address.sin_port))
        }
        for _ in 0..<100 {
            guard let first = bindAny(0) else { continue }
            defer { close(first.fd) }
            guard first.port % 2 == 0, first.port < 65534, let second = bindAny(first.port + 1) else { continue }
            close(second.fd)
            return first.port
        }
        return 0
    }

    /// True once some process has a UDP socket bound to `port` (read from /proc/net/udp).
    static func isBound(_ port: UInt16) -> Bool {
        // ffmpeg may bind either family.
        let table = ["/proc/net/udp", "/proc/net/udp6"].compactMap { try? String(contentsOfFile: $0, encoding: .utf8) }.joined(separator: "\n")
        let needle = ":" + String(format: "%04X", port) + " "
        return table.split(separator: "\n").dropFirst().contains { line in
            line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.map { ($0 + " ").hasSuffix(needle) } ?? false
        }
    }
}

/// Runs ffmpeg reading RTP described by `sdp`, feeds it with `send`, then ends the stream with an RTCP BYE
/// (SIGTERM if ffmpeg does not end by itself) and returns its status.
func receiveWithFFmpeg(sdp: String, port: UInt16, outputArguments: [String], send: () throws -> Void) throws -> Int32 {
    let dir = NSTemporaryDirectory() + "rtc-interop-" + UUID().uuidString
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: dir) }
    let sdpPath = dir + "/stream.sdp"
    try sdp.write(toFile: sdpPath, atomically: true, encoding: .utf8)
    let ffmpeg = try ChildProcess(["ffmpeg", "-nostdin", "-v", "error", "-y", "-protocol_whitelist", "file,udp,rtp", "-i", sdpPath] + outputArguments,
                                  errors: .discarded)
    // Generous: with the whole suite running on two cores ffmpeg can take seconds to start.
    let deadline = Date().addingTimeInterval(30)
    while !LoopbackSender.isBound(port) && Date() < deadline && ffmpeg.isRunning { usleep(20_000) }
    try #require(LoopbackSender.isBound(port), "ffmpeg did not open UDP port \(port)")
    try send()
    // End the stream the standard way: an RTCP BYE on the RTCP port (RTP port + 1 without rtcp-mux),
    // built by our RTCP code. ffmpeg's RTP demuxer ends the input when every stream said BYE.
    let rtcp = try LoopbackSender(port: port + 1)
    let bye = RTCPPacket.serializeCompound([
        .receiverReport(ReceiverReport(ssrc: 0x0BAD_CAFE)), .goodbye(Goodbye(sources: [0x0BAD_CAFE], reason: "done")),
    ])
    let stop = Date().addingTimeInterval(10)
    while ffmpeg.isRunning && Date() < stop {
        rtcp.send(bye)
        usleep(100_000)
    }
    // SIGTERM if it has not ended (SIGKILL 30 s later).
    return ffmpeg.stop(grace: 30) ?? -1
}

@Suite("RTP interop with ffmpeg", .serialized)
struct FFmpegRTPInteropTests {
    @Test("a VP8 clip packetized by our RTP code is decoded by ffmpeg, every frame")
    func vp8ToFFmpeg() throws {
        let size = VideoSize(width: 320, height: 240)
        let frames = 45
        let generator = try PatternGenerator(kind: .camera, size: size)
        let encoder = try VP8Encoder(configuration: VP8EncoderConfiguration(width: 320, height: 240, bitrateKbps: 600))
        var encoded: [EncodedVideoFrame] = []
        for index in 0..<frames { encoded += try encoder.encode(generator.frame(at: index)) }
        try #require(encoded.count == frames)

        let port = LoopbackSender.freePort()
        let sdp = """
            v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=swift-rtc VP8\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r
            m=video \(port) RTP/AVP 96\r\na=rtpmap:96 VP8/90000\r\n
            """
        try SessionDescription(parsing: sdp).media.first.map { #expect($0.rtpMaps.first?.encoding == "VP8") }
        let out = NSTemporaryDirectory() + "rtc-interop-vp8-\(port).yuv"
        defer { try? FileManager.default.removeItem(atPath: out) }
        let sender = try LoopbackSender(port: port)
        var packetizer = VP8Packetizer(maxPayloadSize: 1100, initialPictureID: 1234)
        var sequence: UInt16 = 65000
        let status = try receiveWithFFmpeg(
            sdp: sdp, port: port,
            outputArguments: ["-fps_mode", "passthrough", "-f", "rawvideo", "-pix_fmt", "yuv420p", out]) {
            for (index, frame) in encoded.enumerated() {
                let payloads = packetizer.packetize(ByteBuffer(bytes: frame.data))
                for (offset, payload) in payloads.enumerated() {
                    let header = RTPHeader(marker: offset == payloads.count - 1, payloadType: 96, sequenceNumber: sequence,
                                           timestamp: UInt32(index * 3000), ssrc: 0x1234_5678)
                    sender.send(RTPPacket(header: header, payload: payload).serialized)
                    sequence &+= 1
                    usleep(1000)
                }
            }
        }
        #expect(status == 0, "ffmpeg exit \(status)")
        let bytes = (try? FileManager.default.attributesOfItem(atPath: out)[.size] as? Int) ?? 0
        #expect(bytes == frames * 320 * 240 * 3 / 2, "ffmpeg decoded \(bytes / (320 * 240 * 3 / 2)) of \(frames) frames")
    }

    @Test("an Opus stream packetized by our RTP code is decoded by ffmpeg, every packet")
    func opusToFFmpeg() throws {
        let packets = 50
        let encoder = try OpusEncoder(configuration: OpusEncoderConfiguration(application: .audio, bitrate: 64000, inbandFEC: false))
        var encoded: [[UInt8]] = []
        for index in 0..<packets {
            var pcm: [Int16] = []
            for sample in 0..<960 {
                let value = Int16(8000 * sin(2 * Double.pi * 1000 * Double(index * 960 + sample) / 48000))
                pcm += [value, value]
            }
            encoded.append(try encoder.encode(AudioFrame(samples: .int16(pcm), sampleRate: 48000, channels: 2)))
        }
        let port = LoopbackSender.freePort()
        let sdp = """
            v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=swift-rtc Opus\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r
            m=audio \(port) RTP/AVP 111\r\na=rtpmap:111 opus/48000/2\r\n
            """
        let out = NSTemporaryDirectory() + "rtc-interop-opus-\(port).pcm"
        defer { try? FileManager.default.removeItem(atPath: out) }
        let sender = try LoopbackSender(port: port)
        var timestamp: UInt32 = 123_456
        let status = try receiveWithFFmpeg(sdp: sdp, port: port, outputArguments: ["-f", "s16le", "-ac", "2", "-ar", "48000", out]) {
            for (index, packet) in encoded.enumerated() {
                let info = try OpusPacketInfo(parsing: ByteBuffer(bytes: packet))
                let header = RTPHeader(marker: index == 0, payloadType: 111, sequenceNumber: UInt16(index), timestamp: timestamp,
                                       ssrc: 0xABCD_EF01)
                sender.send(RTPPacket(header: header, payload: ByteBuffer(bytes: packet)).serialized)
                timestamp &+= UInt32(info.samples)
                usleep(2000)
            }
        }
        #expect(status == 0, "ffmpeg exit \(status)")
        let data = (try? Data(contentsOf: URL(fileURLWithPath: out))) ?? Data()
        let samples = data.count / 4
        #expect(samples == packets * 960, "ffmpeg decoded \(samples) of \(packets * 960) samples")
        // And it is the 1 kHz tone: count zero crossings of the left channel after the first 100 ms.
        let left = stride(from: 0, to: data.count - 3, by: 4).map { Int16(data[$0]) | Int16(data[$0 + 1]) << 8 }
        let settled = left.dropFirst(4800)
        var crossings = 0
        var previous = settled.first ?? 0
        for value in settled.dropFirst() {
            if (previous < 0) != (value < 0) { crossings += 1 }
            previous = value
        }
        let expected = Double(settled.count) / 48000 * 2000
        #expect(abs(Double(crossings) - expected) < expected * 0.05, "\(crossings) zero crossings, expected about \(expected)")
    }
}
