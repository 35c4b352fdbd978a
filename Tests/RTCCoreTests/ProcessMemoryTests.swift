import CMemory
import Glibc
import Testing
@testable import RTCCore

/// The zero-page release `VP8Encoder` applies to libvpx's token buffer, on a buffer of the test's
/// own: found as the one new mmapped chunk of its size, released, still zero and writable after.
/// (In this long-lived test process libvpx's own buffer may come back from a freed heap chunk, which
/// the encoder then leaves alone; the sharers pin the threshold at start, and the share-memory bench
/// shows the effect there.)
@Suite("Process memory")
struct ProcessMemoryTests {
    @Test("a zero-filled 22 MB buffer is found as the one new chunk and its pages are released")
    func releaseZeroPages() throws {
        ProcessMemory.mapBigBuffers()
        let size = 22_118_432  // a 720p token buffer's size: no freed heap chunk of it is left to reuse
        var starts = [UInt](repeating: 0, count: 65_536), ends = [UInt](repeating: 0, count: 65_536)
        let mapped = rtc_snapshot_mappings(&starts, &ends, 65_536)
        let buffer = try #require(malloc(size))
        defer { free(buffer) }
        memset(buffer, 0, size)
        var addresses = [UInt](repeating: 0, count: 4), sizes = [Int](repeating: 0, count: 4)
        let found = rtc_find_new_mmapped_chunks(&starts, &ends, mapped, size, size + 4 * 4096, &addresses, &sizes, 4)
        #expect(found == 1)
        guard found == 1 else { return }
        #expect(addresses[0] < UInt(bitPattern: buffer) && UInt(bitPattern: buffer) < addresses[0] + 4096)
        let released = rtc_release_zero_pages(addresses[0], sizes[0])
        #expect(released >= size / 4096 - 2, "\(released) pages")
        let bytes = buffer.assumingMemoryBound(to: UInt8.self)
        #expect(bytes[size / 2] == 0 && bytes[size - 1] == 0)
        bytes[size / 2] = 7
        #expect(bytes[size / 2] == 7)
    }

    @Test("a page that is not all zero is kept")
    func keepsWrittenPages() throws {
        ProcessMemory.mapBigBuffers()
        let size = 4 * 1024 * 1024 + 123
        var starts = [UInt](repeating: 0, count: 65_536), ends = [UInt](repeating: 0, count: 65_536)
        let mapped = rtc_snapshot_mappings(&starts, &ends, 65_536)
        let buffer = try #require(malloc(size))
        defer { free(buffer) }
        memset(buffer, 0, size)
        let bytes = buffer.assumingMemoryBound(to: UInt8.self)
        bytes[size / 2] = 42
        var addresses = [UInt](repeating: 0, count: 4), sizes = [Int](repeating: 0, count: 4)
        let found = rtc_find_new_mmapped_chunks(&starts, &ends, mapped, size, size + 4 * 4096, &addresses, &sizes, 4)
        #expect(found == 1)
        guard found == 1 else { return }
        let released = rtc_release_zero_pages(addresses[0], sizes[0])
        #expect(released == sizes[0] / 4096 - 2, "all but the header page and the written one")
        #expect(bytes[size / 2] == 42)
    }
}
