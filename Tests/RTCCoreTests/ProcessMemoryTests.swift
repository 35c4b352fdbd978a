import Foundation
import CMemory
import Glibc
import Testing
@testable import RTCCore

/// The zero-page release `VP8Encoder` applies to libvpx's token buffer, on a buffer of the test's
/// own: found as the one new mmapped chunk of its size, released, still zero and writable after.
/// (In this long-lived test process libvpx's own buffer may come back from a freed heap chunk, which
/// the encoder then leaves alone; the sharers pin the threshold at start, and the share-memory bench
/// shows the effect there.)
@Suite("Process memory", .serialized)
struct ProcessMemoryTests {
    /// A buffer of `size` bytes malloc'd between two looks at the mappings, with the one new
    /// mmapped chunk the finder saw (its address and size), as `VP8Encoder` finds libvpx's.
    struct FoundChunk {
        var buffer: UnsafeMutableRawPointer
        var address: UInt
        var size: Int
    }

    /// Up to five tries. Earlier tests leave threads in this process that map and unmap memory:
    /// a new anonymous mapping next to the buffer's (merged into one line of /proc/self/maps), or
    /// a range unmapped between the look and the malloc, hides the chunk from the finder. A try
    /// that missed keeps its buffer until the end, so the next one is mapped somewhere else (freed,
    /// it would come back at the same address, next to the same neighbour, and miss again).
    static func mallocFoundChunk(size: Int) -> (chunk: FoundChunk?, misses: [String]) {
        var starts = [UInt](repeating: 0, count: 65_536), ends = [UInt](repeating: 0, count: 65_536)
        var addresses = [UInt](repeating: 0, count: 4), sizes = [Int](repeating: 0, count: 4)
        var missed: [UnsafeMutableRawPointer] = []
        defer { missed.forEach { free($0) } }
        var misses: [String] = []
        for _ in 0..<5 {
            let mapped = rtc_snapshot_mappings(&starts, &ends, 65_536)
            guard let buffer = malloc(size) else { return (nil, misses + ["malloc(\(size)) failed"]) }
            let found = rtc_find_new_mmapped_chunks(&starts, &ends, mapped, size, size + 4 * 4096, &addresses, &sizes, 4)
            if found == 1 { return (FoundChunk(buffer: buffer, address: addresses[0], size: sizes[0]), misses) }
            misses.append("found \(found) at \(String(UInt(bitPattern: buffer), radix: 16)) among \(mapped) mappings: "
                          + Self.mapsLine(holding: UInt(bitPattern: buffer)))
            missed.append(buffer)
        }
        return (nil, misses)
    }

    /// The /proc/self/maps line holding `address`, for a failure's message.
    static func mapsLine(holding address: UInt) -> String {
        // Read to the end: /proc files report no size, and a sized read stops short.
        let data = FileHandle(forReadingAtPath: "/proc/self/maps")?.readDataToEndOfFile() ?? Data()
        return String(decoding: data, as: UTF8.self).split(separator: "\n").first { line in
            let range = line.split(separator: " ").first?.split(separator: "-").compactMap { UInt($0, radix: 16) } ?? []
            return range.count == 2 && range[0] <= address && address < range[1]
        }.map(String.init) ?? "none"
    }

    @Test("a zero-filled 22 MB buffer is found as the one new chunk and its pages are released")
    func releaseZeroPages() throws {
        ProcessMemory.mapBigBuffers()
        let size = 22_118_432  // a 720p token buffer's size
        let (found, misses) = Self.mallocFoundChunk(size: size)
        let chunk = try #require(found, "\(misses)")
        defer { free(chunk.buffer) }
        let buffer = chunk.buffer
        memset(buffer, 0, size)
        #expect(chunk.address < UInt(bitPattern: buffer) && UInt(bitPattern: buffer) < chunk.address + 4096)
        let released = rtc_release_zero_pages(chunk.address, chunk.size)
        #expect(released >= size / 4096 - 2, "\(released) pages")
        let bytes = buffer.assumingMemoryBound(to: UInt8.self)
        #expect(bytes[size / 2] == 0 && bytes[size - 1] == 0)
        bytes[size / 2] = 7
        #expect(bytes[size / 2] == 7)
    }

    @Test("a page that is not all zero is kept")
    func keepsWrittenPages() throws {
        ProcessMemory.mapBigBuffers()
        let size = 37 * 1024 * 1024 + 123
        let (found, misses) = Self.mallocFoundChunk(size: size)
        let chunk = try #require(found, "\(misses)")
        defer { free(chunk.buffer) }
        memset(chunk.buffer, 0, size)
        let bytes = chunk.buffer.assumingMemoryBound(to: UInt8.self)
        bytes[size / 2] = 42
        let released = rtc_release_zero_pages(chunk.address, chunk.size)
        #expect(released == chunk.size / 4096 - 2, "all but the header page and the written one")
        #expect(bytes[size / 2] == 42)
    }

    @Test("releasing libvpx's token pages after every frame leaves the bitstream bit-exact and the buffer empty")
    func tokenPagesReleasedPerFrame() throws {
        ProcessMemory.mapBigBuffers()
        // 1440p: a token buffer (88 MB) larger than any heap chunk an earlier test could have freed,
        // so it gets a mapping of its own and the encoder finds it.
        let size = VideoSize(width: 2560, height: 1440)
        let configuration = VP8EncoderConfiguration(width: size.width, height: size.height, bitrateKbps: 3000,
                                                    frameRate: 15, contentType: .screen)
        let plain = try VP8Encoder(configuration: configuration)
        plain.releasesTokenPages = false
        let lean = try VP8Encoder(configuration: configuration)
        lean.releasesTokenPages = true
        let tokens = try #require(lean.tokenBuffer, "the token buffer is found")
        let generator = try PatternGenerator(kind: .screen, size: size)
        for index in 0..<12 {
            var frame = generator.frame(at: index)
            frame.timestampUs = Int64(index) * 66_667
            if index == 6 { plain.requestKeyframe(); lean.requestKeyframe() }
            let expected = try plain.encode(frame), actual = try lean.encode(frame)
            #expect(actual == expected, "frame \(index): the same bytes with and without the release")
            // Only the header page stays: every token page went back to the kernel.
            let resident = rtc_resident_pages(tokens.address, tokens.size)
            #expect(resident == 1, "frame \(index): \(resident) token pages resident")
        }
    }

    @Test("dropping clean file pages shrinks the file-backed resident set and the process runs on")
    func dropCleanFilePages() throws {
        let before = Self.status("RssFile")
        let dropped = ProcessMemory.dropCleanFilePages()
        let after = Self.status("RssFile")
        #expect(dropped > 0)
        #expect(after < before, "RssFile \(before) → \(after) KiB")
        // Code and constants come back from the files on use.
        let generator = try PatternGenerator(kind: .screen, size: VideoSize(width: 64, height: 64))
        #expect(generator.frame(at: 1).width == 64)
    }

    /// A `KEY: N kB` line of /proc/self/status.
    static func status(_ key: String) -> Int {
        let text = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        let line = text.split(separator: "\n").first { $0.hasPrefix(key + ":") } ?? ""
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? -1
    }
}
