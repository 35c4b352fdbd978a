import Foundation
import NIOCore
import RTCTransport

#if canImport(Glibc)
import Glibc
#endif

/// The controls `bench sfu --rooms` prints next to its thread ratio: the same kinds of work as a
/// media thread's, without the SFU, on one thread and then on two at once. What two threads of a
/// control reach is what this machine (and its C libraries) allows two media threads.
enum ScalingControl {
    /// Packets per second that `threads` threads protect (libsrtp2, AEAD AES-128-GCM as our peers
    /// negotiate it, each thread its own context, 1200-byte RTP packets) over `seconds`, all together.
    /// `copies`: thread i protects in libsrtp2 copy i + 1 (``SRTPLibrary/copy(_:)``), each in one of
    /// its own as media threads do; else all in the linked one.
    static func srtpProtect(threads: Int, seconds: Double, copies: Bool) throws -> Double {
        var contexts: [SRTPContext] = []
        for index in 0..<threads {
            let profile = SRTPProfile.aeadAes128Gcm
            let key = (0..<(profile.keyLength + profile.saltLength)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ index) }
            contexts.append(try SRTPContext(keys: SRTPKeyingMaterial(profile: profile, localKeyAndSalt: key, remoteKeyAndSalt: key),
                                            library: copies ? SRTPLibrary.copy(index + 1) : .linked))
        }
        let counts = Counts(threads)
        let done = DispatchGroup()
        let deadline = monotonic() + seconds
        for (index, context) in contexts.enumerated() {
            done.enter()
            let unchecked = UncheckedContext(context: context)
            Thread.detachNewThread {
                var header: [UInt8] = [0x80, 96, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, UInt8(index)]
                var packet = ByteBuffer(bytes: header + [UInt8](repeating: 0xAB, count: 1188))
                var sequence: UInt16 = 0
                var protected = 0
                while monotonic() < deadline {
                    for _ in 0..<256 {
                        sequence &+= 1
                        header[2] = UInt8(sequence >> 8)
                        header[3] = UInt8(sequence & 0xFF)
                        packet.setBytes(header[2...3], at: 2)
                        if (try? unchecked.context.protectRTP(packet)) != nil { protected += 1 }
                    }
                }
                counts.set(index, protected)
                done.leave()
            }
        }
        done.wait()
        return Double(counts.total) / seconds
    }

    /// Datagrams per second that `processes` rtc-relay blasters send at once (each to 64 loopback
    /// ports that are never read) over `seconds`: the kernel's UDP send path alone.
    static func blast(relay: String, processes: Int, seconds: Double) throws -> Double {
        let blasters = try (0..<processes).map { _ in try RelayProcess(path: relay, arguments: ["blast", "\(seconds)", "64"]) }
        var total = 0
        for blaster in blasters { total += try blaster.finish().0 }
        return Double(total) / seconds
    }

    private static func monotonic() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }

    /// One thread's context, handed to that thread only.
    private struct UncheckedContext: @unchecked Sendable { let context: SRTPContext }

    /// Each thread's count, read once all have finished.
    private final class Counts: @unchecked Sendable {
        private let lock = NSLock()
        private var values: [Int]
        init(_ count: Int) { values = Array(repeating: 0, count: count) }
        func set(_ index: Int, _ value: Int) { lock.withLock { values[index] = value } }
        var total: Int { lock.withLock { values.reduce(0, +) } }
    }
}
