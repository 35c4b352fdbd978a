import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RTCCore
import RTCTransport
import TestKit
import Testing

@Suite("Interop with aiortc (an independent WebRTC stack)", .serialized)
struct AiortcInteropTests {
    @Test("aiortc answers our offer; ICE, DTLS-SRTP complete; each side decodes the other's VP8")
    func videoBothWays() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        // We offer (controlling ICE, setup:actpass); aiortc answers setup:active, so we are the DTLS server.
        let transport = try await MediaTransport.bind(
            MediaTransportConfiguration(iceRole: .controlling, dtlsRole: .server), group: group)
        let local = transport.localParameters
        let address = try #require(transport.localAddress)
        let ssrc: UInt32 = 0x1122_3344
        let offer = """
            v=0\r\no=- 4242 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0\r\na=msid-semantic: WMS swift\r
            m=video \(address.port!) UDP/TLS/RTP/SAVPF 96\r\nc=IN IP4 127.0.0.1\r\na=mid:0\r\na=sendrecv\r\na=rtcp-mux\r
            a=ice-ufrag:\(local.ice.ufrag)\r\na=ice-pwd:\(local.ice.pwd)\r\na=fingerprint:\(local.fingerprint.value)\r
            a=setup:actpass\r\na=rtpmap:96 VP8/90000\r\na=rtcp-fb:96 nack\r\na=rtcp-fb:96 nack pli\r
            a=msid:swift video\r\na=ssrc:\(ssrc) cname:swift-rtc\r
            a=candidate:1 1 udp \(ICEPriority.candidate()) 127.0.0.1 \(address.port!) typ host\r\n
            """
        _ = try SessionDescription(parsing: offer)  // our own parser accepts what we send

        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("scripts/aiortc_peer.py").path
        // The peer's log goes to a file in the temporary directory, for when the test fails.
        let peer = try ChildProcess(["python3", script, "30"], errors: .file(NSTemporaryDirectory() + "rtc-interop-peer.log"), input: .pipe)
        defer { peer.stop() }
        peer.send(String(decoding: try JSONSerialization.data(withJSONObject: ["sdp": offer]), as: UTF8.self))
        let answerLine = try #require(await peer.line(0, within: 20), "aiortc gave no answer (is aiortc installed? `make test` installs it)")
        let answerJSON = try JSONSerialization.jsonObject(with: Data(answerLine.utf8)) as? [String: Any]
        let answer = try SessionDescription(parsing: try #require(answerJSON?["sdp"] as? String))
        let video = try #require(answer.media.first)
        #expect(video.setup == "active")
        let vp8 = try #require(video.rtpMaps.first { $0.encoding.uppercased() == "VP8" })
        // Only loopback candidates: nothing is sent off this machine.
        let candidates = try video.candidates.filter { $0.address == "127.0.0.1" && $0.transport.lowercased() == "udp" }
            .map { try SocketAddress(ipAddress: $0.address, port: Int($0.port)) }
        try #require(!candidates.isEmpty, "no loopback candidate in the answer")
        let remote = TransportParameters(ice: ICECredentials(ufrag: try #require(answer.iceUfrag), pwd: try #require(answer.icePwd)),
                                         fingerprint: try #require(answer.fingerprint), candidates: candidates, dtlsRole: .client)

        // Receive: assemble and decode aiortc's VP8 with our own code.
        let assembled = NIOLockedValueBox<[AssembledVP8Frame]>([])
        let assembler = NIOLockedValueBox(VP8FrameAssembler())
        transport.onRTP = { datagram in
            guard let packet = try? RTPPacket(parsing: datagram), packet.header.payloadType == vp8.payloadType else { return }
            let frames = (try? assembler.withLockedValue {
                try $0.insert(sequenceNumber: packet.header.sequenceNumber, timestamp: packet.header.timestamp,
                              marker: packet.header.marker, payload: packet.payload)
            }) ?? []
            assembled.withLockedValue { $0 += frames }
        }
        // aiortc asks for keyframes with PLI/FIR when it cannot decode: answer them, as a sender must.
        let keyframeRequests = NIOLockedValueBox(0)
        transport.onRTCP = { datagram in
            for packet in (try? RTCPPacket.parseCompound(datagram)) ?? [] {
                switch packet {
                case .pictureLossIndication, .fullIntraRequest: keyframeRequests.withLockedValue { $0 += 1 }
                default: break
                }
            }
        }
        transport.start(remote: remote)
        let connected = await eventually(10) { try await transport.state.get() == .connected }
        let state = try await transport.state.get()
        #expect(connected, "state \(state)")
        // Media from aiortc means its side of DTLS-SRTP is up too: only then start sending.
        _ = await eventually(10) { assembled.withLockedValue { !$0.isEmpty } }

        // Send: 3 s of our VP8 at 30 fps.
        let encoder = try VP8Encoder(configuration: VP8EncoderConfiguration(width: 320, height: 240, bitrateKbps: 500))
        let generator = try PatternGenerator(kind: .camera, size: VideoSize(width: 320, height: 240))
        var packetizer = VP8Packetizer()
        var sequence: UInt16 = 1
        var answered = 0
        for index in 0..<90 {
            let requests = keyframeRequests.withLockedValue { $0 }
            if requests > answered {
                answered = requests
                encoder.requestKeyframe()
            }
            for frame in try encoder.encode(generator.frame(at: index)) {
                let payloads = packetizer.packetize(ByteBuffer(bytes: frame.data))
                for (offset, payload) in payloads.enumerated() {
                    let header = RTPHeader(marker: offset == payloads.count - 1, payloadType: 96, sequenceNumber: sequence,
                                           timestamp: UInt32(index * 3000), ssrc: ssrc)
                    transport.sendRTP(RTPPacket(header: header, payload: payload).serialized)
                    sequence &+= 1
                }
            }
            try await Task.sleep(nanoseconds: 33_000_000)
        }
        peer.send("done")
        let resultLine = try #require(await peer.line(1, within: 15))
        let result = try JSONSerialization.jsonObject(with: Data(resultLine.utf8)) as? [String: Any]
        let framesAtAiortc = result?["framesReceived"] as? Int ?? 0
        #expect(framesAtAiortc >= 45, "aiortc decoded \(framesAtAiortc) of our 90 frames; \(resultLine)")
        let decoder = try VP8Decoder()
        var decoded = 0
        for frame in assembled.withLockedValue({ $0 }) {
            if (try? decoder.decode(Array(frame.data.readableBytesView))) != nil { decoded += 1 }
        }
        #expect(decoded >= 30, "we decoded \(decoded) of aiortc's frames")
        await transport.close()
        try await group.shutdownGracefully()
    }
}
