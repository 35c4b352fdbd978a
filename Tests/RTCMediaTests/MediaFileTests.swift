import Foundation
import RTCMedia
import Testing

/// Readers and writers on their own; the Y4M round trip (checked with PSNR) and the ffmpeg interop,
/// which need the codecs, are in RTCCoreTests (MediaFileCodecTests).
@Suite("Media files: Y4M, IVF, WAV, Ogg Opus")
struct MediaFileTests {
    // MARK: Round trips in memory

    @Test("IVF round trip keeps frames, timestamps and the frame count")
    func ivfRoundTrip() throws {
        let output = MemoryOutput()
        let writer = try IVFWriter(output: output, header: IVFHeader(width: 320, height: 240, timebaseDenominator: 15))
        let frames = (0..<5).map { IVFFrame(data: [UInt8](repeating: UInt8($0), count: $0 * 100 + 1), timestamp: UInt64($0 * 2)) }
        for frame in frames { try writer.write(frame.data, timestamp: frame.timestamp) }
        try writer.finish()
        let reader = try IVFReader(input: MemoryInput(output.bytes))
        #expect(reader.header.frameCount == 5 && reader.header.fourcc == "VP80")
        #expect(reader.header.timebaseDenominator == 15 && reader.header.timebaseNumerator == 1)
        for frame in frames { #expect(try reader.readFrame() == frame) }
        #expect(try reader.readFrame() == nil)
    }

    @Test("WAV round trip keeps samples")
    func wavRoundTrip() throws {
        let output = MemoryOutput()
        let writer = try WAVWriter(output: output, sampleRate: 16000, channels: 2)
        let samples: [Int16] = (0..<2000).map { Int16(truncatingIfNeeded: $0 * 977) }
        try writer.write(AudioFrame(samples: .int16(samples), sampleRate: 16000, channels: 2))
        try writer.write(AudioFrame(samples: .float([1.5, -1.5]), sampleRate: 16000, channels: 2))  // clipped
        try writer.finish()
        let reader = try WAVReader(input: MemoryInput(output.bytes))
        #expect(reader.format == WAVFormat(sampleRate: 16000, channels: 2))
        var read: [Int16] = []
        while let frame = try reader.read(samplesPerChannel: 300) {
            #expect(frame.samplesPerChannel <= 300)
            read += frame.int16Samples
        }
        #expect(read == samples + [32767, -32768])
    }

    @Test("Ogg packet layer: packets of any size, across pages, come back whole",
          arguments: [[0, 1, 254, 255, 256, 510, 65025, 70000, 3]])
    func oggPackets(sizes: [Int]) throws {
        let output = MemoryOutput()
        let writer = OggPacketWriter(output: output, serial: 7)
        let packets = sizes.enumerated().map { index, size in (0..<size).map { UInt8(truncatingIfNeeded: $0 &+ index) } }
        for (index, packet) in packets.enumerated() { try writer.write(packet, granulePosition: Int64(index)) }
        try writer.finish()
        let reader = OggPacketReader(input: MemoryInput(output.bytes), source: "memory")
        for (index, packet) in packets.enumerated() {
            let read = try #require(try reader.readPacket())
            #expect(read.data == packet)
            #expect(read.granulePosition == Int64(index))
            #expect(read.isLastOfStream == (index == packets.count - 1))
        }
        #expect(try reader.readPacket() == nil)
    }

    @Test("a flipped byte fails the Ogg CRC")
    func oggCRC() throws {
        var bytes = try #require(try corpus("ogg").first { $0.name == "ours-tone.ogg" }).bytes
        bytes[bytes.count - 3] ^= 0x40
        let reader = try OggOpusReader(input: MemoryInput(bytes))
        #expect {
            while try reader.readPacket() != nil {}
        } throws: { ($0 as? MediaFileError)?.kind == .corrupt }
    }

    // MARK: Bad input

    @Test("wrong formats and broken headers are clear errors", arguments: [
        ("y4m", Array("RIFF....WAVE".utf8), MediaFileError.Kind.wrongFormat),
        ("y4m", Array("YUV4MPEG2 W0 H10\n".utf8), .corrupt),
        ("y4m", Array("YUV4MPEG2 W10 H10 C422\n".utf8), .unsupported),
        ("y4m", Array("YUV4MPEG2 W10 H10 Ii\n".utf8), .unsupported),
        ("y4m", Array("YUV4MPEG2 W10 H10 F0:0\n".utf8), .corrupt),
        ("y4m", [], .truncated),
        ("ivf", Array("DKIF".utf8) + [0, 0], .truncated),
        ("ivf", Array("OggS".utf8) + [UInt8](repeating: 0, count: 28), .wrongFormat),
        ("wav", Array("RIFF\u{0}\u{0}\u{0}\u{0}WAVEdata\u{0}\u{0}\u{0}\u{0}".utf8), .corrupt),
        ("wav", Array("RIFF\u{0}\u{0}\u{0}\u{0}WAVE".utf8), .truncated),
        ("ogg", Array("OggS".utf8), .truncated),
        ("ogg", Array("fLaC".utf8) + [UInt8](repeating: 0, count: 40), .wrongFormat),
    ])
    func badHeaders(format: String, bytes: [UInt8], kind: MediaFileError.Kind) {
        #expect {
            try open(format, bytes)
        } throws: { ($0 as? MediaFileError)?.kind == kind }
    }

    @Test("every prefix of every seed file reads or fails cleanly, and never gains data",
          arguments: ["y4m", "ivf", "wav", "ogg"])
    func truncation(format: String) throws {
        for seed in try corpus(format) {
            let whole = (try? readAll(format, seed.bytes)) ?? -1
            for length in 0..<seed.bytes.count {
                let prefix = Array(seed.bytes[..<length])
                if let count = try? readAll(format, prefix) {
                    #expect(count <= max(whole, 0), "\(seed.name) prefix \(length) read \(count) items, whole file \(whole)")
                }
            }
        }
    }

    @Test("a missing file and a directory are I/O errors with the path")
    func missingFile() {
        #expect {
            try Y4MReader(path: "/nonexistent/clip.y4m")
        } throws: { ($0 as? MediaFileError)?.kind == .io && "\($0)".contains("/nonexistent/clip.y4m") }
        #expect { try WAVReader(path: "/tmp") } throws: { ($0 as? MediaFileError)?.kind == .io }
        #expect { try IVFWriter(path: "/nonexistent/out.ivf", header: IVFHeader(width: 2, height: 2)) } throws: {
            ($0 as? MediaFileError)?.kind == .io
        }
    }

}

/// Opens `bytes` as `format` and reads everything; returns the number of frames/packets/blocks.
@discardableResult
func readAll(_ format: String, _ bytes: [UInt8]) throws -> Int {
    switch format {
    case "y4m":
        let reader = try Y4MReader(input: MemoryInput(bytes))
        var count = 0
        while try reader.readFrame() != nil { count += 1 }
        return count
    case "ivf":
        let reader = try IVFReader(input: MemoryInput(bytes))
        var count = 0
        while try reader.readFrame() != nil { count += 1 }
        return count
    case "wav":
        let reader = try WAVReader(input: MemoryInput(bytes))
        var count = 0
        while let frame = try reader.read(samplesPerChannel: 1) { count += frame.samplesPerChannel }
        return count
    default:
        let reader = try OggOpusReader(input: MemoryInput(bytes))
        var count = 0
        while try reader.readPacket() != nil { count += 1 }
        return count
    }
}

func open(_ format: String, _ bytes: [UInt8]) throws {
    try readAll(format, bytes)
}
