import Foundation
import Testing
import NIOCore
import RTCFuzzHarness
import RTCTransport

/// Replays the committed corpora of the wire-format fuzz targets (Fuzz/Corpus) through the same
/// entry points libFuzzer drives, so every kept input, seeds and past crashes, runs on every test run.
@Suite("Wire fuzz corpus replay")
struct WireCorpusReplayTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fuzz/Corpus")

    @Test("every corpus input runs through its fuzz entry point", arguments: ["rtp", "rtcp", "vp8", "opus", "stun", "sdp", "dtls", "ice", "srtp", "dcep"])
    func replay(name: String) throws {
        let folder = Self.root.appendingPathComponent(name)
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
        #expect(files.count >= 3, "Fuzz/Corpus/\(name) needs seeds")
        let entry: ([UInt8]) -> Void = switch name {
        case "rtp": FuzzHarness.rtp
        case "rtcp": FuzzHarness.rtcp
        case "vp8": FuzzHarness.vp8
        case "opus": FuzzHarness.opus
        case "stun": FuzzHarness.stun
        case "dtls": FuzzHarness.dtls
        case "ice": FuzzHarness.ice
        case "srtp": FuzzHarness.srtp
        case "dcep": FuzzHarness.dcep
        default: FuzzHarness.sdp
        }
        for file in files { entry([UInt8](try Data(contentsOf: folder.appendingPathComponent(file)))) }
    }

    @Test("the seeds are valid input, so fuzzing starts from inside each parser")
    func seedsParse() throws {
        func seeds(_ name: String) throws -> [(String, [UInt8])] {
            let folder = Self.root.appendingPathComponent(name)
            // Regression inputs kept from fuzzing crashes may be invalid on purpose.
            return try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { !$0.hasPrefix("regression-") }.map {
                ($0, [UInt8](try Data(contentsOf: folder.appendingPathComponent($0))))
            }
        }
        for (file, bytes) in try seeds("rtp") { #expect(throws: Never.self, "\(file)") { try RTPPacket(parsing: ByteBuffer(bytes: bytes)) } }
        for (file, bytes) in try seeds("rtcp") {
            #expect(throws: Never.self, "\(file)") { try RTCPPacket.parseCompound(ByteBuffer(bytes: bytes)) }
        }
        for (file, bytes) in try seeds("stun") { #expect(throws: Never.self, "\(file)") { try STUNMessage(parsing: bytes) } }
        for (file, bytes) in try seeds("sdp") {
            #expect(throws: Never.self, "\(file)") { try SessionDescription(parsing: String(decoding: bytes, as: UTF8.self)) }
        }
    }
}
