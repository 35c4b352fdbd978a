import Foundation
import RTCMedia
import TestKit
import Testing

@Suite("Screen-share uids")
struct ScreenShareUIDTests {
    @Test("a sharer's uid is the host's plus _sub, and back", arguments: ["1001", "alice", "a-sub"])
    func roundTrip(host: String) {
        let sharer = ScreenShareUID.sharer(of: host)
        #expect(sharer == host + "_sub")
        #expect(ScreenShareUID.isScreenShare(sharer))
        #expect(ScreenShareUID.host(of: sharer) == host)
    }

    @Test("plain uids are not screen shares", arguments: ["1001", "_sub", "", "1001_su", "sub"])
    func notScreenShare(uid: String) {
        #expect(!ScreenShareUID.isScreenShare(uid))
        #expect(ScreenShareUID.host(of: uid) == nil)
    }

    /// Tests/Fixtures/screen-share-uids.json: the one table for this rule and the web client's.
    struct Case: Decodable {
        var suffix: String
        var uid: String
        var isShare: Bool
        var host: String?
        var sharer: String
    }

    static let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/screen-share-uids.json")

    @Test("the shared table: whether a uid is a share, its host, and the uid its sharer joins as (a share's is its own)")
    func sharedTable() throws {
        struct Table: Decodable { var cases: [Case] }
        let table = try JSONDecoder().decode(Table.self, from: Data(contentsOf: Self.fixture))
        #expect(table.cases.count >= 10)
        for item in table.cases {
            let rule = ScreenShareUID(suffix: item.suffix)
            #expect(rule.isScreenShare(item.uid) == item.isShare && rule.host(of: item.uid) == item.host && rule.sharer(of: item.uid) == item.sharer,
                    "\(item.uid) with suffix '\(item.suffix)'")
        }
    }

    @Test("the web client's rule (node, Web/screen-share-uid.js) passes the same table")
    func sharedTableInJavaScript() throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Tools/uid_vectors.mjs").path
        let run = try runTool(["node", script], timeout: 30)
        #expect(run.status == 0 && run.out.contains("\"ok\":true"), "\(run.out) \(run.err)")
    }
}

/// The rejoin backoff: one table for Swift and the web client (Tests/Fixtures/rejoin-policy.json).
@Suite("Rejoin backoff")
struct RejoinBackoffTests {
    struct Run: Decodable {
        var name: String
        var failures: [Bool]
        var waitsMs: [Int]
        var unreachable: Int
    }

    @Test("the shared table: the wait after each failure and the unreachable count")
    func sharedTable() throws {
        struct Table: Decodable { var runs: [Run] }
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/rejoin-policy.json")
        let table = try JSONDecoder().decode(Table.self, from: Data(contentsOf: url))
        #expect(table.runs.count >= 3)
        for run in table.runs {
            var backoff = RejoinBackoff()
            let waits = run.failures.map { backoff.failed(answered: $0) }
            #expect(waits == run.waitsMs && backoff.unreachable == run.unreachable, "\(run.name): \(waits)")
        }
    }

    @Test("the web client's backoff (node, Web/rejoin-policy.js) passes the same table")
    func sharedTableInJavaScript() throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Tools/rejoin_vectors.mjs").path
        let run = try runTool(["node", script], timeout: 30)
        #expect(run.status == 0 && run.out.contains("\"ok\":true"), "\(run.out) \(run.err)")
    }
}
