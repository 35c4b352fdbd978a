import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RTCTransport
import TestKit
import Testing

@Suite("Packet capture (tshark)", .serialized)
struct CaptureTests {
    @Test("a capture of the media port shows RTP headers but never the plaintext payload")
    func noPlaintextOnTheWire() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let server = try await MediaTransport.bind(.server(), group: group)
        let client = try await MediaTransport.bind(.client(), group: group)
        let port = try #require(server.localAddress?.port)
        let pcap = NSTemporaryDirectory() + "rtc-capture-\(port).pcap"
        defer { try? FileManager.default.removeItem(atPath: pcap) }

        // Capture on loopback, only this port, until stopped.
        let tshark = try ChildProcess(["tshark", "-i", "lo", "-f", "udp port \(port)", "-w", pcap, "-q"])
        defer { tshark.stop() }
        // tshark's capture child (dumpcap) outlived a terminated tshark after every suite run: end
        // both by their command line, which names this test's port alone.
        defer { _ = try? runTool(["pkill", "-KILL", "-f", "udp port \(port) "], timeout: 10) }
        // tshark opens the file once it captures; give it a moment to start.
        _ = await eventually(10) { FileManager.default.fileExists(atPath: pcap) }
        try await Task.sleep(nanoseconds: 500_000_000)

        let received = NIOLockedValueBox(0)
        server.onRTP = { _ in received.withLockedValue { $0 += 1 } }
        server.start(remote: TransportParameters(ice: client.localParameters.ice, fingerprint: client.localParameters.fingerprint,
                                                 candidates: [], dtlsRole: .client))
        client.start(remote: server.localParameters)
        _ = await eventually(10) { try await client.state.get() == .connected }
        let pattern = Array("SWIFT-RTC-KNOWN-PAYLOAD-PATTERN".utf8)
        for sequence in UInt16(0)..<200 {
            let packet = RTPPacket(header: RTPHeader(payloadType: 96, sequenceNumber: sequence, timestamp: UInt32(sequence) * 3000,
                                                     ssrc: 0xFACE_B00C),
                                   payload: ByteBuffer(bytes: pattern + pattern))
            client.sendRTP(packet.serialized)
        }
        #expect(await eventually(10) { received.withLockedValue { $0 } == 200 })
        try await Task.sleep(nanoseconds: 500_000_000)
        // SIGTERM: tshark stops cleanly, its file complete.
        tshark.signal(SIGTERM)
        _ = await tshark.wait(10)

        let captured = [UInt8](try Data(contentsOf: URL(fileURLWithPath: pcap)))
        #expect(captured.count > 200 * pattern.count, "capture of \(captured.count) bytes is too small")
        #expect(!captured.contains(subsequence: pattern), "the plaintext payload appears on the wire")
        // tshark itself sees the RTP (decoded as such) with our SSRC: the capture is of the real traffic.
        let fields = try ChildProcess(["tshark", "-r", pcap, "-d", "udp.port==\(port),rtp", "-T", "fields", "-e", "rtp.ssrc"])
        _ = await fields.wait(20)
        let ssrcs = fields.output.filter { $0 == "0xfaceb00c" }
        #expect(ssrcs.count >= 200, "tshark decoded \(ssrcs.count) RTP packets with our SSRC")
        await client.close()
        await server.close()
        try await group.shutdownGracefully()
    }
}

extension Array where Element: Equatable {
    func contains(subsequence: [Element]) -> Bool {
        guard !subsequence.isEmpty, count >= subsequence.count else { return false }
        return (0...(count - subsequence.count)).contains { Array(self[$0..<($0 + subsequence.count)]) == subsequence }
    }
}
