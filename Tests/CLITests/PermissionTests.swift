import Foundation
import RTCTestSupport
import Testing

/// Subscription permissions (protocol 1.8; LiveKit's `UpdateSubscriptionPermission`) with LiveKit's
/// Python SDK: a publisher says who may subscribe, the server holds everyone to it.
@Suite("Subscription permissions", .serialized)
struct PermissionTests {
    typealias LK = LiveKitInteropTests

    static func frames(_ path: String, of uid: String) -> [Int64] { DrainTests.frames(path, of: uid) }

    @Test("a LiveKit publisher and a Swift publisher each let only carol subscribe: the excluded LiveKit participant and the excluded Swift bot stop receiving (their last frame) within 1 s and the Swift bot is told (permission … denied); carol keeps receiving")
    func onlyCarol() async throws {
        let (server, url, _) = try await LK.server()
        defer { server.stop() }
        let dir = temporaryDirectory("permissions")
        let frameLog = dir + "/frames.txt"
        let watcher = try LK.swiftBot(url, room: "perm", uid: "swift", ["--video", "none", "--audio", "none", "--frame-log", frameLog, "--duration", "24"])
        defer { watcher.stop() }
        let carol = try LK.peer("bot", url, ["--room", "perm", "--identity", "carol", "--duration", "20"])
        let dave = try LK.peer("bot", url, ["--room", "perm", "--identity", "dave", "--duration", "20"])
        try await Task.sleep(for: .seconds(1))
        let publisher = try LK.peer("bot", url, ["--room", "perm", "--identity", "lk", "--publish", "--size", "640x360", "--permit-at", "9:carol",
                                                 "--duration", "18"])
        let swiftPublisher = try LK.swiftBot(url, room: "perm", uid: "pub", ["--size", "640x360", "--audio", "tone", "--no-subscribe",
                                                                             "--allow-subscribers-at", "8:carol", "--duration", "20"])
        defer { swiftPublisher.stop() }
        let lkReport = try await LK.report(publisher), carolReport = try await LK.report(carol), daveReport = try await LK.report(dave)
        _ = await watcher.wait(30)
        _ = await swiftPublisher.wait(30)

        // The LiveKit publisher's permission (set at its 9 s): the Swift watcher's frames of lk stop, and it is told.
        let lkSetMs = try #require((lkReport["permissionSetMono"] as? NSNumber)?.int64Value, "\(lkReport.keys)")
        let swiftSetUs = try #require(swiftPublisher.output.first { $0.hasPrefix("permission set ") }.flatMap { Int64($0.split(separator: " ")[2]) },
                                      "\(swiftPublisher.output.suffix(3))")
        let lkAtSwift = Self.frames(frameLog, of: "lk")
        #expect(lkAtSwift.contains { $0 < lkSetMs * 1000 }, "the Swift bot had lk's video first: \(lkAtSwift.count) frames")
        let lastLK = lkAtSwift.last ?? 0
        #expect(lastLK < lkSetMs * 1000 + 1_000_000, "lk's frames at the Swift bot ended \(Double(lastLK - lkSetMs * 1000) / 1e6) s after the permission")
        let told = watcher.output.filter { $0.hasPrefix("permission ") }
        let lkDenied = told.first { $0.split(separator: " ").dropFirst(2).first == "lk" && $0.hasSuffix("denied") }
        #expect(lkDenied.flatMap { Int64($0.split(separator: " ")[1]) }.map { $0 - lkSetMs * 1000 < 1_000_000 } == true, "told: \(told)")
        // dave (LiveKit) stops receiving lk's and pub's video within 1 s of each permission. (The
        // server also sends it LiveKit's SubscriptionPermissionUpdate; the Python SDK 1.2 does not
        // surface that message, so what it shows is the frames stopping.)
        var daveEnds: [String: Int64] = [:]
        for (publisherID, setMs) in [("lk", lkSetMs), ("pub", swiftSetUs / 1000)] {
            let track = LK.track(daveReport, identity: publisherID, kind: "video")
            let lastMs = (track?["lastFrameMono"] as? NSNumber)?.int64Value ?? 0
            daveEnds[publisherID] = lastMs - setMs
            #expect((track?["frames"] as? Int ?? 0) > 0 && lastMs - setMs < 1000, "dave's last frame of \(publisherID): \(lastMs - setMs) ms after its permission")
        }
        // The Swift watcher loses pub's video too, and is told.
        let pubAtSwift = Self.frames(frameLog, of: "pub")
        #expect(pubAtSwift.contains { $0 < swiftSetUs } && (pubAtSwift.last ?? 0) < swiftSetUs + 1_000_000,
                "pub's frames at the Swift bot ended \(Double((pubAtSwift.last ?? 0) - swiftSetUs) / 1e6) s after its permission")
        #expect(told.contains { $0.split(separator: " ").dropFirst(2).first == "pub" && $0.hasSuffix("denied") }, "told: \(told)")
        // carol keeps both publishers' video to the end.
        for publisherID in ["lk", "pub"] {
            let track = LK.track(carolReport, identity: publisherID, kind: "video")
            let lastMs = (track?["lastFrameMono"] as? NSNumber)?.int64Value ?? 0
            #expect(lastMs > max(lkSetMs, swiftSetUs / 1000) + 3000, "carol's last frame of \(publisherID): \(lastMs - lkSetMs) ms after lk's permission")
        }
        print("permissions: lk's frames at the excluded Swift bot ended \(Double(lastLK - lkSetMs * 1000) / 1e3) ms after the permission, pub's "
              + "\(Double((pubAtSwift.last ?? 0) - swiftSetUs) / 1e3) ms; dave's last frames \(daveEnds) ms after; told \(told)")
    }
}
