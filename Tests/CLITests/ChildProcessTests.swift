import Foundation
import RTCTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// TestKit's process runner (`ChildProcess`, `runTool`), which every end-to-end test starts its
/// programs with: children start with no signal blocked or ignored, see only fds 0–2, stop on
/// SIGTERM (SIGKILL after the grace period) and take what they left in their group with them.
@Suite("The tests' process runner", .serialized)
struct ChildProcessTests {
    /// The SigBlk and SigIgn masks of a shell started by `runTool`/`ChildProcess`.
    static func masks(_ output: String) -> [String: String] {
        Dictionary(output.split(separator: "\n").compactMap { line -> (String, String)? in
            let parts = line.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            return parts.count == 2 ? (parts[0], parts[1]) : nil
        }, uniquingKeysWith: { first, _ in first })
    }

    /// (Foundation's `Process` passed on the spawning thread's mask: SigBlk fffffffe3bfbea27 from a
    /// test task, SIGTERM among the blocked.)
    @Test("a child started by runTool or ChildProcess has no signal blocked and none ignored")
    func unblockedSignals() async throws {
        let fromTask = try runTool(["grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"])
        let child = try ChildProcess(["grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"])
        #expect(await child.wait(10) == 0)
        for output in [fromTask.out, child.outputText] {
            let masks = Self.masks(output)
            #expect(masks["SigBlk"] == "0000000000000000" && masks["SigIgn"] == "0000000000000000", "\(output)")
        }
    }

    @Test("stop() ends a child with SIGTERM, and with SIGKILL after the grace period when it ignores SIGTERM")
    func stopEscalates() async throws {
        let sleeper = try ChildProcess(["sleep", "30"])
        let started = Date()
        #expect(sleeper.stop() == SIGTERM)
        #expect(Date().timeIntervalSince(started) < 2)
        let stubborn = try ChildProcess(["sh", "-c", "trap '' TERM; echo ready; sleep 30"])
        #expect(await stubborn.line(0, within: 10) == "ready")
        let again = Date()
        #expect(stubborn.stop(grace: 1) == SIGKILL)
        #expect(Date().timeIntervalSince(again) >= 1 && Date().timeIntervalSince(again) < 5)
    }

    @Test("stop() also ends what the child left running in its process group")
    func stopEndsTheGroup() async throws {
        let parent = try ChildProcess(["sh", "-c", "sleep 60 & echo $!; wait"])
        let line = try #require(await parent.line(0, within: 10))
        let orphan = try #require(pid_t(line))
        #expect(kill(orphan, 0) == 0)
        parent.stop()
        #expect(await eventually(5) { kill(orphan, 0) != 0 }, "sleep \(orphan) outlived its parent's stop()")
    }

    @Test("output by line, input by line, both streams to one file, /dev/null and the test's descriptors closed")
    func streams() async throws {
        let echo = try ChildProcess(["sh", "-c", "read a; echo got $a; read b; echo got $b >&2"], input: .pipe)
        #expect(echo.send("one") && echo.send("two"))
        #expect(await echo.wait(10) == 0)
        #expect(echo.output == ["got one"] && echo.errorText == "got two\n")
        #expect(!echo.send("three"), "a send to a program that ended fails (and raises no SIGPIPE)")

        let log = temporaryDirectory("child-process") + "/both.log"
        let both = try ChildProcess(["sh", "-c", "echo out; echo err >&2"], output: .file(log), errors: .file(log))
        #expect(await both.wait(10) == 0)
        #expect(Set(try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")) == ["out", "err"])

        // A descriptor the test process holds without close-on-exec is not the child's.
        let devNull = open("/dev/null", O_RDONLY)
        let held = dup2(devNull, 200)
        close(devNull)
        defer { close(held) }
        #expect(held == 200)
        let fds = try runTool(["sh", "-c", "test -e /proc/$$/fd/200 && echo open || echo closed; cat"])
        #expect(fds.out == "closed\n", "\(fds)")  // and stdin is /dev/null: cat ends at once
    }

    @Test("runTool stops a program at its timeout; a missing program or bad arguments are errors, not traps")
    func runToolTimeout() throws {
        let started = Date()
        let run = try runTool(["sleep", "30"], timeout: 1)
        #expect(run.status == SIGTERM && Date().timeIntervalSince(started) < 3)
        let missing = try runTool(["no-such-program-here"])
        #expect(missing.status == 127 && missing.err.contains("no-such-program-here"), "\(missing)")
        #expect(throws: ChildProcessError.self) { try ChildProcess([]) }
    }
}
