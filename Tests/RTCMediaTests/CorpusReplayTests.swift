import Testing
import RTCFuzzHarness

/// Replays the committed libFuzzer corpora (Fuzz/Corpus) through the same entry points the fuzz
/// targets use, so every kept input — seeds and past crashes — is checked on every test run.
@Suite("Fuzz corpus replay")
struct CorpusReplayTests {
    @Test("every corpus input runs through its fuzz entry point", arguments: ["y4m", "ivf", "wav", "ogg"])
    func replay(name: String) throws {
        let inputs = try corpus(name)
        #expect(inputs.count >= 2, "Fuzz/Corpus/\(name) needs seeds")
        let entry: ([UInt8]) -> Void = switch name {
        case "y4m": FuzzHarness.y4m
        case "ivf": FuzzHarness.ivf
        case "wav": FuzzHarness.wav
        default: FuzzHarness.ogg
        }
        for input in inputs { entry(input.bytes) }
    }
}
