import Foundation
import NIOCore
import RTCTransport
import ServerCommandLine

#if canImport(Glibc)
import Glibc
#endif

/// The controls `bench sfu --rooms` prints next to its thread ratio: the same kinds of work as a
/// media thread's, without the SFU, on one thread and then on two at once. What two threads of a
/// control reach is what this machine (and its C libraries) allows two media threads.
enum ScalingControl {
    /// Packets per second that `threads` threads protect (AEAD AES-128-GCM as our peers negotiate
    /// it, each thread its own context, 1200-byte RTP packets protected in place in one buffer)
    /// over `seconds`, all together.
    static func srtpProtect(threads: Int, seconds: Double) throws -> Double {
        var contexts: [SRTPContext] = []
        for index in 0..<threads {
            let profile = SRTPProfile.aeadAes128Gcm
            let key = (0..<(profile.keyLength + profile.saltLength)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ index) }
            contexts.append(try SRTPContext(keys: SRTPKeyingMaterial(profile: profile, localKeyAndSalt: key, remoteKeyAndSalt: key)))
        }
        let counts = Counts(threads)
        let done = DispatchGroup()
        let deadline = monotonic() + seconds
        for (index, context) in contexts.enumerated() {
            done.enter()
            let unchecked = UncheckedContext(context: context)
            Thread.detachNewThread {
                let header: [UInt8] = [0x80, 96, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, UInt8(index)]
                var packet = ByteBufferAllocator().buffer(capacity: 1200 + SRTPProfile.maxTrailer)
                packet.writeBytes(header + [UInt8](repeating: 0xAB, count: 1188))
                var sequence: UInt16 = 0
                var protected = 0
                while monotonic() < deadline {
                    for _ in 0..<256 {
                        sequence &+= 1
                        packet.moveWriterIndex(to: 1200)
                        packet.setInteger(sequence, at: 2)
                        if (try? unchecked.context.protectRTP(&packet)) != nil { protected += 1 }
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
