import Foundation
import RTCTestSupport
import Testing

/// The quality bench (`Benchmarks/quality.sh`, docs/quality.md) as a short smoke run: one pair
/// (LiveKit's Python SDK publishing speech to our bot: libwebrtc's sender, our receiver), one
/// condition (10 % loss and 20 ms each way at the proxy), 15 s. The figures are printed; the test
/// asserts only what makes them figures: the speech played out and the scorer scored it.
@Suite("Quality bench (smoke)", .serialized)
struct QualityBenchTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test("one pair, one condition: the bench runs end to end, our bot plays out LiveKit's speech and it is scored (PESQ, kept and silent shares)")
    func smoke() async throws {
        let out = temporaryDirectory("quality")
        let bench = try ChildProcess(["env", "CONDITIONS=10:20", "PAIRS=lo", "RUN_SECONDS=15", "bash", Self.root.appendingPathComponent("Benchmarks/quality.sh").path,
                                      cliPath, out])
        defer { bench.stop() }
        let status = await bench.wait(180)
        print(bench.output.joined(separator: "\n"))
        #expect(status == 0, "the bench: \(bench.errorText.suffix(800))")
        let rows = ((try? String(contentsOfFile: out + "/rows.json", encoding: .utf8)) ?? "").split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        try #require(rows.count == 1, "rows: \(rows)")
        let score = rows[0]["score"] as? [String: Any] ?? [:]
        #expect(score["error"] == nil, "\(score)")
        // Scored: a PESQ in its range, and most spoken blocks heard (the speech did play out).
        let pesq = (score["pesq"] as? NSNumber)?.doubleValue ?? 0
        #expect(pesq > 1.0 && pesq <= 4.7, "\(score)")
        #expect((score["kept"] as? NSNumber)?.doubleValue ?? 0 > 0.5, "\(score)")
        #expect((score["blocks"] as? NSNumber)?.intValue ?? 0 > 300, "\(score)")
    }
}
