/// One Ogg page ([RFC 3533 §6](https://www.rfc-editor.org/rfc/rfc3533#section-6)).
///
/// ```
///  0 "OggS"  4 version (0)  5 header type (1 continued, 2 first, 4 last)  6 granule position (i64)
/// 14 serial number  18 page sequence  22 CRC-32 (poly 0x04C11DB7, over the page with this field 0)
/// 26 segment count  27 lacing values, then the body
/// ```
public struct OggPage: Sendable, Hashable {
    public var headerType: UInt8
    public var granulePosition: Int64
    public var serial: UInt32
    public var sequence: UInt32
    /// Lacing values: each segment's length; a value below 255 ends a packet.
    public var segments: [UInt8]
    public var body: [UInt8]

    public static let continued: UInt8 = 0x01
    public static let beginningOfStream: UInt8 = 0x02
    public static let endOfStream: UInt8 = 0x04

    /// Serializes the page, computing its checksum.
    public var bytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(27 + segments.count + body.count)
        out.appendASCII("OggS")
        out.append(0)
        out.append(headerType)
        out.appendLE(granulePosition)
        out.appendLE(serial)
        out.appendLE(sequence)
        out.appendLE(UInt32(0))
        out.append(UInt8(segments.count))
        out.append(contentsOf: segments)
        out.append(contentsOf: body)
        let crc = OggCRC.checksum(out)
        out[22] = UInt8(truncatingIfNeeded: crc)
        out[23] = UInt8(truncatingIfNeeded: crc >> 8)
        out[24] = UInt8(truncatingIfNeeded: crc >> 16)
        out[25] = UInt8(truncatingIfNeeded: crc >> 24)
        return out
    }
}

/// The CRC-32 of Ogg: polynomial 0x04C11DB7, not reflected, initial value 0, no final XOR.
enum OggCRC {
    static let table: [UInt32] = (0..<256).map { index in
        var crc = UInt32(index) << 24
        for _ in 0..<8 { crc = crc & 0x8000_0000 != 0 ? (crc << 1) ^ 0x04C1_1DB7 : crc << 1 }
        return crc
    }

    static func checksum(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0
        for byte in bytes { crc = (crc << 8) ^ table[Int(UInt8(truncatingIfNeeded: crc >> 24) ^ byte)] }
        return crc
    }
}

/// Reads the pages of one logical Ogg stream and reassembles its packets.
public final class OggPacketReader {
    /// A packet and the granule position of the page on which it ends (nil when another packet
    /// ends later on the same page, as RFC 3533 gives the position only for the last one).
    public struct Packet: Sendable, Hashable {
        public var data: [UInt8]
        public var granulePosition: Int64?
        public var isLastOfStream: Bool
    }

    /// Largest packet the reader will assemble; larger is treated as corruption.
    public static let maxPacketSize = 1 << 20

    private let input: any ByteInput
    private let source: String
    private var serial: UInt32?
    private var expectedSequence: UInt32 = 0
    private var ready: [Packet] = []
    private var partial: [UInt8] = []
    private var pagesRead = 0
    private var ended = false

    public init(input: any ByteInput, source: String) {
        self.input = input
        self.source = source
    }

    /// The next packet, or nil after the last one.
    public func readPacket() throws(MediaFileError) -> Packet? {
        while ready.isEmpty {
            if ended { return nil }
            guard let page = try readPage() else {
                if !partial.isEmpty { throw MediaFileError(.truncated, "\(source): the file ends inside an Ogg packet") }
                return nil
            }
            try absorb(page)
        }
        return ready.removeFirst()
    }

    private func absorb(_ page: OggPage) throws(MediaFileError) {
        if let serial, serial != page.serial {
            throw MediaFileError(.unsupported, "\(source): multiplexed or chained Ogg streams are not supported")
        }
        if serial == nil {
            guard page.headerType & OggPage.beginningOfStream != 0 else {
                throw MediaFileError(.corrupt, "\(source): the first Ogg page does not begin a stream")
            }
            serial = page.serial
            expectedSequence = page.sequence
        }
        if page.sequence != expectedSequence {
            throw MediaFileError(.corrupt, "\(source): Ogg page \(expectedSequence) is missing")
        }
        expectedSequence &+= 1
        if page.headerType & OggPage.continued == 0 && !partial.isEmpty {
            throw MediaFileError(.corrupt, "\(source): an Ogg packet is cut off by page \(page.sequence)")
        }
        if page.headerType & OggPage.continued != 0 && partial.isEmpty {
            throw MediaFileError(.corrupt, "\(source): Ogg page \(page.sequence) continues no packet")
        }
        var offset = 0
        var completed: [[UInt8]] = []
        for lace in page.segments {
            let length = Int(lace)
            partial.append(contentsOf: page.body[offset..<(offset + length)])
            offset += length
            if partial.count > Self.maxPacketSize {
                throw MediaFileError(.corrupt, "\(source): an Ogg packet is over \(Self.maxPacketSize) bytes")
            }
            if lace < 255 {
                completed.append(partial)
                partial = []
            }
        }
        let isLast = page.headerType & OggPage.endOfStream != 0
        for (index, data) in completed.enumerated() {
            let final = index == completed.count - 1
            ready.append(Packet(data: data, granulePosition: final ? page.granulePosition : nil,
                                isLastOfStream: final && isLast && partial.isEmpty))
        }
        if isLast { ended = true }
    }

    private func readPage() throws(MediaFileError) -> OggPage? {
        guard let head = try input.readExactly(27, what: "an Ogg page header in \(source)", endAllowed: true) else {
            return nil
        }
        var reader = ByteReader(head, what: "an Ogg page header")
        guard try reader.bytes(4) == Array("OggS".utf8) else {
            let what = pagesRead == 0 ? "is not an Ogg file (no OggS signature)" : "has no Ogg page where one should start"
            throw MediaFileError(pagesRead == 0 ? .wrongFormat : .corrupt, "\(source) \(what)")
        }
        let version = try reader.u8()
        guard version == 0 else { throw MediaFileError(.unsupported, "\(source): Ogg version \(version) is not supported") }
        let headerType = try reader.u8()
        let granule = Int64(bitPattern: try reader.u64le())
        let serial = try reader.u32le()
        let sequence = try reader.u32le()
        let storedCRC = try reader.u32le()
        let segmentCount = Int(try reader.u8())
        guard let segments = try input.readExactly(segmentCount, what: "an Ogg lacing table in \(source)") else {
            throw MediaFileError(.truncated, "\(source): the file ends inside an Ogg page")
        }
        let bodySize = segments.reduce(0) { $0 + Int($1) }
        guard let body = try input.readExactly(bodySize, what: "an Ogg page body in \(source)") else {
            throw MediaFileError(.truncated, "\(source): the file ends inside an Ogg page")
        }
        let page = OggPage(headerType: headerType, granulePosition: granule, serial: serial, sequence: sequence,
                           segments: segments, body: body)
        var check = head
        check.append(contentsOf: segments)
        check.append(contentsOf: body)
        check[22] = 0; check[23] = 0; check[24] = 0; check[25] = 0
        guard OggCRC.checksum(check) == storedCRC else {
            throw MediaFileError(.corrupt, "\(source): Ogg page \(sequence) fails its CRC check")
        }
        pagesRead += 1
        return page
    }
}

/// Writes packets of one logical Ogg stream, one page per packet (or more for a large packet).
public final class OggPacketWriter {
    private let output: any ByteOutput
    private let serial: UInt32
    private var sequence: UInt32 = 0
    /// The page held back so that ``finish()`` can mark it as the last one.
    private var held: [OggPage] = []

    public init(output: any ByteOutput, serial: UInt32) {
        self.output = output
        self.serial = serial
    }

    /// Adds a packet that ends at `granulePosition`. `flush` puts it on its own page(s) right away
    /// (the Opus headers must each end a page).
    public func write(_ packet: [UInt8], granulePosition: Int64) throws(MediaFileError) {
        try flushHeld()
        var lacing: [UInt8] = Array(repeating: 255, count: packet.count / 255)
        lacing.append(UInt8(packet.count % 255))
        var offset = 0
        var first = true
        while !lacing.isEmpty {
            let pageLaces = Array(lacing.prefix(255))
            lacing.removeFirst(pageLaces.count)
            let size = pageLaces.reduce(0) { $0 + Int($1) }
            var type: UInt8 = first ? 0 : OggPage.continued
            if sequence == 0 { type |= OggPage.beginningOfStream }
            // A page on which no packet ends carries granule position -1 (RFC 3533 §6).
            let ends = lacing.isEmpty
            held.append(OggPage(headerType: type, granulePosition: ends ? granulePosition : -1, serial: serial,
                                sequence: sequence, segments: pageLaces,
                                body: Array(packet[offset..<(offset + size)])))
            sequence &+= 1
            offset += size
            first = false
        }
    }

    private func flushHeld() throws(MediaFileError) {
        for page in held { try output.write(page.bytes) }
        held = []
    }

    /// Writes the held page marked end-of-stream, with `finalGranulePosition` when given, and closes.
    public func finish(finalGranulePosition: Int64? = nil) throws(MediaFileError) {
        if var last = held.popLast() {
            last.headerType |= OggPage.endOfStream
            if let finalGranulePosition { last.granulePosition = finalGranulePosition }
            held.append(last)
        }
        try flushHeld()
        try output.close()
    }
}
