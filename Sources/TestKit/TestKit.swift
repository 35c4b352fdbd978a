import Foundation
import Signaling

// The small helpers every test target shares: polling, a temporary directory and a signed token
// (programs: ChildProcess.swift; ffprobe and ffmpeg's PSNR: MediaProbe.swift). Foundation and
// Signaling only, so the unit-test targets can use it without the server or the engine
// (RTCTestSupport, which re-exports this, has those).

/// Polls `condition` every 10 ms until it holds or `seconds` pass, and says whether it held.
/// A check that throws counts as "not yet", so a condition may use `try` freely.
public func eventually(_ seconds: Double = 10, _ condition: () async throws -> Bool) async -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if (try? await condition()) == true { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return (try? await condition()) == true
}

/// A fresh directory under the system's temporary directory, named after `name`.
public func temporaryDirectory(_ name: String) -> String {
    let path = NSTemporaryDirectory() + "rtc-tests-\(name)-" + UUID().uuidString
    try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// The secret `testToken` signs with unless told otherwise (the embedded test server's too).
public let testSecret = "test-secret"

/// A signed access token (Signaling's `AccessToken`), valid from `now` for `ttl` seconds.
public func testToken(uid: String, channel: String = "room", secret: String = testSecret, grants: TokenGrants = .all,
                      ttl: Int64 = 3600, now: Int64 = Int64(Date().timeIntervalSince1970)) -> String {
    AccessToken(uid: uid, channel: channel, grants: grants, now: now, ttl: ttl).signed(secret: secret)
}
