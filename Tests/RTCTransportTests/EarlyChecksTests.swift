import NIOCore
import Testing
@testable import RTCTransport

@Suite("Checks that come before their session")
struct EarlyChecksTests {
    let from = try! SocketAddress(ipAddress: "10.0.0.2", port: 5000)

    func check(_ byte: UInt8, size: Int = 100) -> ByteBuffer { ByteBuffer(bytes: [UInt8](repeating: byte, count: size)) }

    @Test("kept per ufrag, handed over once, oldest first")
    func takeOnce() {
        var early = EarlyChecks()
        early.keep(check(1), ufrag: "a", from: from, nowUs: 0)
        early.keep(check(2), ufrag: "b", from: from, nowUs: 10)
        early.keep(check(3), ufrag: "a", from: from, nowUs: 20)
        let taken = early.take(ufrag: "a", nowUs: 30)
        #expect(taken.map { $0.datagram.getInteger(at: 0, as: UInt8.self) } == [1, 3])
        #expect(taken.allSatisfy { $0.from == from })
        #expect(early.take(ufrag: "a", nowUs: 40).isEmpty)
        #expect(early.count == 1)
    }

    @Test("none older than 2 s, none larger than 600 bytes, at most 64: a flood pushes out the oldest")
    func bounded() {
        var early = EarlyChecks()
        early.keep(check(1), ufrag: "old", from: from, nowUs: 0)
        #expect(early.take(ufrag: "old", nowUs: 2_000_001).isEmpty)
        early.keep(check(2, size: 601), ufrag: "big", from: from, nowUs: 0)
        #expect(early.count == 0)
        early.keep(check(3), ufrag: "first", from: from, nowUs: 0)
        for index in 0..<64 { early.keep(check(4), ufrag: "flood\(index)", from: from, nowUs: 1) }
        #expect(early.count == 64)
        #expect(early.take(ufrag: "first", nowUs: 2).isEmpty)
        #expect(early.take(ufrag: "flood63", nowUs: 2).count == 1)
    }
}
