import Foundation

#if canImport(Glibc)
import Glibc
#endif

// The one way the tests start a program: `ChildProcess` (a program running beside the test) and
// `runTool` (a program run to completion), both spawned by `spawn` below.
//
// Why not Foundation's `Process`: on Linux it calls posix_spawn with no signal attributes, so a
// child starts with the signal mask of the thread that spawned it and with the parent's ignored
// signals. The test runner's threads (Dispatch's and the cooperative pool's) block SIGTERM and
// more, so a child spawned from one never saw a `terminate()` (coturn, Xvfb and tshark sat on it).
// Here every child starts with an empty signal mask and every signal at its default action, in a
// process group of its own (so what it leaves behind can be ended with it), with only standard
// input, output and error open.

/// Why a program could not be started.
public struct ChildProcessError: Error, CustomStringConvertible, Sendable {
    public let description: String
}

/// A program the test started. Its output goes to temporary files that can be read while it runs
/// (`output`, `errorText`), to a file of the test's, or nowhere; its standard input is /dev/null or
/// a pipe (`send`). When released it is stopped (`stop`) and the temporary files are removed, so a
/// test that fails or throws leaves nothing running.
public final class ChildProcess: @unchecked Sendable {
    /// Where one of the program's output streams goes.
    public enum Output: Sendable {
        /// A temporary file, read with `output`/`outputText` (standard output) or `errorText`.
        case captured
        /// The file at this path, emptied first; kept when the process is released.
        case file(String)
        /// /dev/null.
        case discarded
    }

    /// The program's standard input.
    public enum Input: Sendable {
        /// /dev/null.
        case none
        /// A pipe the test writes to with `send(_:)`.
        case pipe
    }

    /// How the program ended.
    public enum Termination: Sendable, Equatable {
        case exited(Int32)
        case signaled(Int32)
    }

    public let pid: pid_t
    private let outPath: String?, errPath: String?
    private let temporaryFiles: [String]
    private let inputSocket: Int32
    private let lock = NSLock()
    private var ended: Termination?

    /// Runs `arguments` (through /usr/bin/env, so a bare program name is looked up in PATH).
    public init(_ arguments: [String], output: Output = .captured, errors: Output = .captured, input: Input = .none) throws(ChildProcessError) {
        guard !arguments.isEmpty else { throw ChildProcessError(description: "ChildProcess: no program to run") }
        let base = NSTemporaryDirectory() + "child-process-" + UUID().uuidString
        var temporary: [String] = []
        func path(of stream: Output, suffix: String) -> String? {
            switch stream {
            case .captured:
                temporary.append(base + suffix)
                return base + suffix
            case .file(let path): return path
            case .discarded: return nil
            }
        }
        outPath = path(of: output, suffix: ".out")
        errPath = path(of: errors, suffix: ".err")
        temporaryFiles = temporary
        // Emptied here, appended to by the child (both streams may share one file).
        for file in [outPath, errPath].compactMap({ $0 }) where !FileManager.default.createFile(atPath: file, contents: nil) {
            for file in temporary { try? FileManager.default.removeItem(atPath: file) }
            throw ChildProcessError(description: "ChildProcess: cannot create \(file) for \(arguments[0])'s output")
        }
        var sockets: [Int32] = [-1, -1]
        if case .pipe = input {
            // A socket pair rather than a pipe: `send` writes with MSG_NOSIGNAL, so a program that
            // already ended costs an error, not a SIGPIPE to the test process.
            guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &sockets) == 0 else {
                throw ChildProcessError(description: "ChildProcess: socketpair: \(String(cString: strerror(errno)))")
            }
        }
        defer { if sockets[1] >= 0 { close(sockets[1]) } }
        do {
            pid = try spawn(["/usr/bin/env"] + arguments, input: sockets[1], output: outPath, errors: errPath)
        } catch {
            if sockets[0] >= 0 { close(sockets[0]) }
            for file in temporary { try? FileManager.default.removeItem(atPath: file) }
            throw error
        }
        inputSocket = sockets[0]
    }

    /// Its standard output so far, by line (a last line not ended yet is left out while it runs).
    public var output: [String] {
        let text = outputText
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        if text.hasSuffix("\n") || isRunning { lines.removeLast() }
        return lines.filter { !$0.isEmpty }
    }
    /// Line `index` (from 0) of its standard output, waiting up to `seconds` for it.
    public func line(_ index: Int, within seconds: Double) async -> String? {
        _ = await eventually(seconds) { self.output.count > index || !self.isRunning }
        let lines = output
        return lines.count > index ? lines[index] : nil
    }

    /// Its standard output so far (captured or written to a file; bytes that are not UTF-8 read as U+FFFD).
    public var outputText: String { Self.text(of: outPath) }
    /// Its standard error so far (captured or written to a file).
    public var errorText: String { Self.text(of: errPath) }

    private static func text(of path: String?) -> String {
        path.flatMap { FileManager.default.contents(atPath: $0) }.map { String(decoding: $0, as: UTF8.self) } ?? ""
    }

    /// Writes `line` and a newline to its standard input (`input: .pipe`); false when it cannot.
    @discardableResult
    public func send(_ line: String) -> Bool {
        guard inputSocket >= 0 else { return false }
        let bytes = Array((line + "\n").utf8)
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes { Glibc.send(inputSocket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return false }
            sent += count
        }
        return true
    }

    /// How it ended, once it has.
    public var termination: Termination? {
        lock.withLock {
            if ended == nil {
                var status: Int32 = 0
                var result: pid_t
                repeat { result = waitpid(pid, &status, WNOHANG) } while result < 0 && errno == EINTR
                if result == pid {
                    // WIFEXITED / WEXITSTATUS / WTERMSIG, which Swift does not import.
                    ended = status & 0x7F == 0 ? .exited((status >> 8) & 0xFF) : .signaled(status & 0x7F)
                } else if result < 0 {
                    ended = .exited(-1)  // not ours to wait for any more (ECHILD): over
                }
            }
            return ended
        }
    }

    public var isRunning: Bool { termination == nil }

    /// Its exit status, or the number of the signal that ended it (as Foundation's `Process` says);
    /// nil while it runs.
    public var status: Int32? {
        switch termination {
        case .exited(let code): code
        case .signaled(let signal): signal
        case nil: nil
        }
    }

    /// Waits for the program to end by itself (up to `seconds`) and returns its status.
    public func wait(_ seconds: Double) async -> Int32? {
        let deadline = Date().addingTimeInterval(seconds)
        while isRunning && Date() < deadline { try? await Task.sleep(for: .milliseconds(20)) }
        return status
    }

    /// `wait` for code that cannot suspend: blocks the calling thread.
    public func waitBlocking(_ seconds: Double) -> Int32? {
        let deadline = Date().addingTimeInterval(seconds)
        while isRunning && Date() < deadline { usleep(10_000) }
        return status
    }

    /// Sends `signal` to the program (SIGKILL to end it at once, SIGINT, SIGSTOP…).
    public func signal(_ signal: Int32) {
        if isRunning { kill(pid, signal) }
    }

    /// SIGTERM, then SIGKILL after `grace` seconds; then SIGKILL to whatever it left running in its
    /// process group (a capture child, a browser). Returns its status.
    @discardableResult
    public func stop(grace: Double = 3) -> Int32? {
        if isRunning {
            kill(pid, SIGTERM)
            if waitBlocking(grace) == nil {
                kill(pid, SIGKILL)
                _ = waitBlocking(10)
            }
        }
        kill(-pid, SIGKILL)
        return status
    }

    deinit {
        stop()
        if inputSocket >= 0 { close(inputSocket) }
        for file in temporaryFiles { try? FileManager.default.removeItem(atPath: file) }
    }
}

/// Runs a program (looked up on PATH, or an absolute path) to completion and returns its exit status
/// (or the signal that ended it), standard output and standard error. After `timeout` seconds the
/// program is stopped (SIGTERM, then SIGKILL).
public func runTool(_ arguments: [String], timeout: Double = 120) throws(ChildProcessError) -> (status: Int32, out: String, err: String) {
    let process = try ChildProcess(arguments)
    let status = process.waitBlocking(timeout) ?? process.stop() ?? -1
    return (status, process.outputText, process.errorText)
}

/// posix_spawn with an empty signal mask, default signal actions, a process group of its own and
/// only fds 0, 1 and 2 open: stdin from `input` (or /dev/null), stdout and stderr appended to
/// their files (or /dev/null).
private func spawn(_ arguments: [String], input: Int32, output: String?, errors: String?) throws(ChildProcessError) -> pid_t {
    var actions = posix_spawn_file_actions_t()
    var attributes = posix_spawnattr_t()
    posix_spawn_file_actions_init(&actions)
    posix_spawnattr_init(&attributes)
    defer {
        posix_spawn_file_actions_destroy(&actions)
        posix_spawnattr_destroy(&attributes)
    }
    var results: [Int32] = []
    if input >= 0 {
        results.append(posix_spawn_file_actions_adddup2(&actions, input, 0))
    } else {
        results.append(posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0))
    }
    for (fd, path) in [(Int32(1), output), (Int32(2), errors)] {
        results.append(posix_spawn_file_actions_addopen(&actions, fd, path ?? "/dev/null", O_WRONLY | O_APPEND | O_CREAT, 0o644))
    }
    // Every other descriptor of the test process (sockets, pipes, files not marked close-on-exec)
    // is closed in the child. (glibc's addclosefrom_np is not visible to Swift.)
    let open = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []).compactMap { Int32($0) }.filter { $0 > 2 }
    for fd in open.sorted() { results.append(posix_spawn_file_actions_addclose(&actions, fd)) }

    var none = sigset_t(), all = sigset_t()
    sigemptyset(&none)
    sigfillset(&all)
    sigdelset(&all, SIGKILL)
    sigdelset(&all, SIGSTOP)
    // glibc's sigfillset leaves out its two internal signals (32 and 33), and its posix_spawn then
    // sets them to SIG_IGN in the child, which exec keeps: their bits are set by hand so that the
    // child starts with every signal at its default action, as a shell's child does.
    withUnsafeMutableBytes(of: &all) { bits in
        for signal in [32, 33] { bits[(signal - 1) / 8] |= UInt8(1 << ((signal - 1) % 8)) }
    }
    results.append(posix_spawnattr_setsigmask(&attributes, &none))
    results.append(posix_spawnattr_setsigdefault(&attributes, &all))
    results.append(posix_spawnattr_setpgroup(&attributes, 0))
    results.append(posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP)))
    if let failed = results.first(where: { $0 != 0 }) {
        throw ChildProcessError(description: "ChildProcess: preparing \(arguments.dropFirst().first ?? ""): \(String(cString: strerror(failed)))")
    }

    let argv = arguments.map { strdup($0) } + [nil]
    defer { for pointer in argv { free(pointer) } }
    var pid: pid_t = 0
    let result = posix_spawn(&pid, arguments[0], &actions, &attributes, argv, environ)
    guard result == 0 else {
        throw ChildProcessError(description: "ChildProcess: cannot start \(arguments.joined(separator: " ")): \(String(cString: strerror(result)))")
    }
    return pid
}
