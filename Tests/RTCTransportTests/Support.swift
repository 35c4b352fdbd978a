import Foundation
import NIOCore
import Testing
@testable import RTCTransport

/// Bytes from a hex string; spaces, newlines and `#` comments to the end of a line are ignored.
func hex(_ text: String) -> [UInt8] {
    let cleaned = text.split(separator: "\n").map { line in line.split(separator: "#", maxSplits: 1).first ?? "" }
        .joined().filter { $0.isHexDigit }
    var bytes: [UInt8] = []
    var index = cleaned.startIndex
    while index < cleaned.endIndex {
        let next = cleaned.index(index, offsetBy: 2)
        bytes.append(UInt8(cleaned[index..<next], radix: 16)!)
        index = next
    }
    return bytes
}

func buffer(_ bytes: [UInt8]) -> ByteBuffer { ByteBuffer(bytes: bytes) }

func bytes(_ buffer: ByteBuffer) -> [UInt8] { Array(buffer.readableBytesView) }

/// Runs `parse` on every proper prefix of `whole` and expects each to throw a ParseError.
func expectEveryPrefixFails(_ whole: [UInt8], _ what: String, sourceLocation: SourceLocation = #_sourceLocation,
                            _ parse: ([UInt8]) throws -> Void) {
    for length in 0..<whole.count {
        do {
            try parse(Array(whole[..<length]))
            Issue.record("\(what): prefix of \(length)/\(whole.count) bytes parsed", sourceLocation: sourceLocation)
        } catch is ParseError {
        } catch {
            Issue.record("\(what): unexpected error \(error)", sourceLocation: sourceLocation)
        }
    }
}

func fixture(_ name: String) throws -> String {
    let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/\(name)")
    return try String(contentsOf: url, encoding: .utf8)
}
