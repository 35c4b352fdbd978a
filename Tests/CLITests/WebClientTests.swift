import Foundation
import RTCTestSupport
import Testing

/// The web client (`Web/`, docs/web.md) checked without a server: its JSDoc types by TypeScript
/// (`tsc --checkJs`, Debian's `node-typescript`), and its unit tests (`Tests/Web/`) in headless
/// Chromium, including the screen-share uid, rejoin and data-envelope tables Swift checks too.
@Suite("Web client", .serialized)
struct WebClientTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    @Test("tsc --checkJs over Web/ (Web/jsconfig.json: strict) reports no errors")
    func typesCheck() throws {
        let config = Self.repository.appendingPathComponent("Web/jsconfig.json").path
        let run = try runTool(["tsc", "--project", config, "--checkJs", "--noEmit", "--pretty", "false"], timeout: 180)
        #expect(run.status == 0, "tsc exited \(run.status):\n\(run.out)\(run.err)")
        #expect(!run.out.contains("error TS"), "\(run.out)")
    }

    @Test("the unit tests (Tests/Web/unit.html) all pass in headless Chromium, and there are at least 62")
    func unitTestsInChromium() throws {
        let run = try runTool(["python3", DataChannelInteropTests.browserTool("web_unit.py"), "--seconds", "90"], timeout: 150)
        let line = try #require(run.out.split(separator: "\n").last { $0.hasPrefix("{") }, "no report: \(run.err.suffix(800))")
        let report = try #require(JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        let tests = report["tests"] as? [[String: Any]] ?? []
        #expect(tests.count >= 62, "\(tests.count) tests ran: \(report["reason"] ?? "") \(report["console"] ?? "")")
        for test in tests {
            #expect(test["ok"] as? Bool == true, "\(test["name"] ?? "?"): \(test["error"] ?? "")")
        }
        #expect(run.status == 0 && report["ok"] as? Bool == true, "web_unit.py exited \(run.status): \(line.prefix(2000))")
    }
}
