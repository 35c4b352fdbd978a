import Dispatch
import Foundation
import Signaling

// The small helpers every test target shares: polling, running a tool, a temporary directory and a
// signed token. Foundation and Signaling only, so the unit-test targets can use it without the
// server or the engine (RTCTestSupport, which re-exports this, has those).

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

/// Runs a program (looked up on PATH, or an absolute path) to completion and returns its exit status,
/// standard output and standard error. After `timeout` seconds the program is terminated.
public func runTool(_ arguments: [String], timeout: Double = 120) throws -> (status: Int32, out: String, err: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = arguments
    let outPipe = Pipe(), errPipe = Pipe()
    process.standardOutput = outPipe
    process.standardError = errPipe
    try process.run()
    // Both pipes are drained at once, so a chatty program cannot block on a full one.
    let out = Collected(), err = Collected()
    let readers = DispatchGroup()
    for (handle, sink) in [(outPipe.fileHandleForReading, out), (errPipe.fileHandleForReading, err)] {
        readers.enter()
        DispatchQueue.global().async {
            sink.set(handle.readDataToEndOfFile())
            readers.leave()
        }
    }
    if readers.wait(timeout: .now() + timeout) == .timedOut {
        process.terminate()
        _ = readers.wait(timeout: .now() + 5)
    }
    process.waitUntilExit()
    return (process.terminationStatus, out.text, err.text)
}

/// Bytes one reader thread of `runTool` collected.
private final class Collected: @unchecked Sendable {
    private let lock = NSLock()
    private var data = Data()

    func set(_ bytes: Data) { lock.withLock { data = bytes } }
    var text: String { lock.withLock { String(decoding: data, as: UTF8.self) } }
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

/// A program the test started, its output going to temporary files that can be read while it
/// runs; stopped (and the files removed) when released.
public final class ChildProcess: @unchecked Sendable {
    private let process = Process()
    public var pid: Int32 { process.processIdentifier }
    private let outPath: String, errPath: String

    /// Runs `arguments` (through /usr/bin/env, so a bare program name is looked up in PATH).
    public init(_ arguments: [String]) throws {
        let base = NSTemporaryDirectory() + "child-process-" + UUID().uuidString
        outPath = base + ".out"
        errPath = base + ".err"
        _ = FileManager.default.createFile(atPath: outPath, contents: nil)
        _ = FileManager.default.createFile(atPath: errPath, contents: nil)
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        process.standardOutput = FileHandle(forWritingAtPath: outPath)
        process.standardError = FileHandle(forWritingAtPath: errPath)
        try process.run()
    }

    /// Its standard output so far, by line.
    public var output: [String] {
        ((try? String(contentsOfFile: outPath, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }
    public var errorText: String { (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? "" }
    public var isRunning: Bool { process.isRunning }

    /// Waits for the program to end by itself (up to `seconds`) and returns its status.
    public func wait(_ seconds: Double) async -> Int32? {
        let deadline = Date().addingTimeInterval(seconds)
        while process.isRunning && Date() < deadline { try? await Task.sleep(for: .milliseconds(50)) }
        return process.isRunning ? nil : process.terminationStatus
    }

    /// SIGTERM, then SIGKILL after 3 s.
    public func stop() {
        guard process.isRunning else { return }
        process.terminate()
        let deadline = Date().addingTimeInterval(3)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(atPath: outPath)
        try? FileManager.default.removeItem(atPath: errPath)
    }
}
