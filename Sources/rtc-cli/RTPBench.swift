import ArgumentParser
import NIOCore
import RTCTransport
import ServerCommandLine

#if canImport(Glibc)
import Glibc
#endif

/// RTP parse + serialize cost per packet, next to a plain copy of the same bytes as the floor.
struct RTPBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rtp", abstract: "RTP parse plus serialize per packet (ns), next to a plain copy of the same bytes.")

    @Option(help: "Packets per round.") var packets: Int = 1_000_000
    @Option(help: "Rounds; the median is reported.") var rounds: Int = 7
    @Option(help: "Payload bytes.") var payload: Int = 1100

    func validate() throws {
        guard packets > 0, rounds > 0, (0...1400).contains(payload) else {
            throw ValidationError("--packets and --rounds must be positive, --payload 0...1400")
        }
    }

    static func now() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) * 1e9 + Double(time.tv_nsec)
    }

    /// Parses each packet and writes it into a reused buffer; returns ns per packet.
    static func parseAndSerialize(_ datagram: ByteBuffer, count: Int) throws -> (Double, Int) {
        var output = ByteBufferAllocator().buffer(capacity: 2048)
        var checksum = 0
        let start = now()
        for _ in 0..<count {
            let packet = try RTPPacket(parsing: datagram)
            output.clear()
            packet.write(to: &output)
            checksum &+= output.readableBytes
        }
        return ((now() - start) / Double(count), checksum)
    }

    /// Copies the same bytes into a reused buffer: the floor.
    static func plainCopy(_ datagram: ByteBuffer, count: Int) -> (Double, Int) {
        var output = ByteBufferAllocator().buffer(capacity: 2048)
        var checksum = 0
        let start = now()
        for _ in 0..<count {
            output.clear()
            output.writeImmutableBuffer(datagram)
            checksum &+= output.readableBytes
        }
        return ((now() - start) / Double(count), checksum)
    }

    func run() throws {
        // A typical video packet: marker, three one-byte extensions, a VP8 payload.
        var header = RTPHeader(marker: true, payloadType: 96, sequenceNumber: 4242, timestamp: 90000, ssrc: 0xCAFE_BABE)
        header.setExtension(id: 2, data: AbsSendTime(microseconds: 123_456).data)
        header.setExtension(id: 3, data: TransportSequenceNumber(777).data)
        header.setExtension(id: 4, data: SDESMid("1").data)
        let datagram = RTPPacket(header: header, payload: ByteBuffer(bytes: (0..<payload).map { UInt8(truncatingIfNeeded: $0) })).serialized
        let size = datagram.readableBytes
        var parseSerialize: [Double] = [], copy: [Double] = []
        var checksum = 0
        for _ in 0..<rounds {
            let (a, sumA) = try Self.parseAndSerialize(datagram, count: packets)
            let (b, sumB) = Self.plainCopy(datagram, count: packets)
            parseSerialize.append(a)
            copy.append(b)
            checksum &+= sumA &+ sumB
        }
        let ours = median(parseSerialize), floor = median(copy)
        print("RTP packet of \(size) bytes (3 header extensions), \(packets) packets x \(rounds) rounds, medians:")
        print("  parse + serialize: \(String(format1: ours)) ns/packet")
        print("  plain copy:        \(String(format1: floor)) ns/packet")
        print("  ratio:             \(String(format2: ours / floor))x the copy")
        if checksum == 42 { print("") }  // keeps the work observable
    }
}
