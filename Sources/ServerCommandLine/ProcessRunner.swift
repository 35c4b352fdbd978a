import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// What a child process cost: wall time and peak resident memory (from wait4's rusage).
public struct ProcessCost {
    public var exitCode: Int32
    public var seconds: Double
    public var peakRSSKiB: Int
}

/// Starts programs with posix_spawn and waits with wait4, so peak RSS comes from the kernel.
public enum ProcessRunner {
    /// Runs `arguments` (the first is looked up on PATH), with stdout and stderr sent to /dev/null
    /// unless `quiet` is false.
    public static func run(_ arguments: [String], quiet: Bool = true) throws -> ProcessCost {
        var start = timespec()
        clock_gettime(CLOCK_MONOTONIC, &start)
        let pid = try spawn(arguments, quiet: quiet)
        var waitStatus: Int32 = 0
        var usage = rusage()
        while wait4(pid, &waitStatus, 0, &usage) < 0 {
            guard errno == EINTR else { throw CLIError("waiting for \(arguments[0]) failed") }
        }
        var end = timespec()
        clock_gettime(CLOCK_MONOTONIC, &end)
        let seconds = Double(end.tv_sec - start.tv_sec) + Double(end.tv_nsec - start.tv_nsec) / 1e9
        let exited = waitStatus & 0x7F == 0
        let code = exited ? (waitStatus >> 8) & 0xFF : 128 + (waitStatus & 0x7F)
        return ProcessCost(exitCode: code, seconds: seconds, peakRSSKiB: Int(usage.ru_maxrss))
    }

    /// Starts `arguments` (the first is looked up on PATH) without waiting for it, with stdout and
    /// stderr sent to /dev/null unless `quiet` is false; the caller reaps it.
    /// `keepErrors`: when quiet, stderr still goes where this process's goes.
    /// `output`: a file that gets its stdout instead (created or truncated).
    ///
    /// The child starts with no signal blocked (what it ignores, it still ignores): this process's
    /// threads block some (NIO, Dispatch), and a child inherits the mask, so without this a child
    /// timing itself with alarm(2) (`openssl speed`) would never stop, and one without handlers of
    /// its own would not end on SIGTERM.
    public static func spawn(_ arguments: [String], quiet: Bool = true, keepErrors: Bool = false, output: String? = nil) throws -> pid_t {
        guard let program = arguments.first else { throw CLIError("nothing to start") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if let output {
            posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        } else if quiet {
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        }
        if quiet && !keepErrors { posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK))
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) }
        argv.append(nil)
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let status = posix_spawnp(&pid, program, &actions, &attributes, argv, environ)
        guard status == 0 else {
            throw CLIError("cannot start \(program): \(String(cString: strerror(status)))")
        }
        return pid
    }

    /// Runs `arguments` to its end and returns its exit code and standard output (stderr to
    /// /dev/null).
    public static func capture(_ arguments: [String]) throws -> (exitCode: Int32, output: String) {
        let child = try ChildOutput(arguments)
        let output = child.finish()
        return (child.exitCode ?? -1, output)
    }

    /// SIGTERM, then SIGKILL if it has not exited within `grace` seconds; reaped either way.
    public static func stop(_ pid: pid_t, grace: Double = 5) {
        kill(pid, SIGTERM)
        var status: Int32 = 0
        for _ in 0..<max(1, Int(grace * 20)) {
            if waitpid(pid, &status, WNOHANG) == pid { return }
            usleep(50_000)
        }
        kill(pid, SIGKILL)
        waitpid(pid, &status, 0)
    }

    /// Whether `pid` still runs: a child that has exited but is not reaped yet (a zombie) answers
    /// `kill(pid, 0)` as if it ran, so its state in `/proc` is read too. It does not reap it.
    public static func isRunning(_ pid: pid_t) -> Bool {
        guard kill(pid, 0) == 0 else { return false }
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return true }
        // "pid (comm) S ...": the state is the first field after the command's closing parenthesis.
        let state = stat[stat.index(after: close)...].first { $0 != " " }
        return state != "Z" && state != "X"
    }

    /// The executable `name` next to this one, when it was built there.
    public static func sibling(_ name: String) -> String? {
        let me = selfPath
        let path = String(me[..<(me.lastIndex(of: "/") ?? me.startIndex)]) + "/" + name
        return access(path, X_OK) == 0 ? path : nil
    }

    /// The path of the running executable.
    public static var selfPath: String {
        var buffer = [CChar](repeating: 0, count: 4096)
        let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        return count > 0 ? String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self) : CommandLine.arguments[0]
    }
}

/// A child process whose standard output is kept (in a temporary file) until it ends; started by
/// ``ProcessRunner/spawn(_:quiet:keepErrors:output:)`` (no signal blocked), stderr to /dev/null.
public final class ChildOutput {
    private let pid: pid_t
    private let path = NSTemporaryDirectory() + "rtc-child-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).txt"
    /// Its exit code (128 + the signal that ended it) once ``finish()`` returned.
    public private(set) var exitCode: Int32?

    public init(_ arguments: [String]) throws {
        pid = try ProcessRunner.spawn(arguments, output: path)
    }

    /// Waits for it to end and returns what it printed.
    public func finish() -> String {
        if exitCode == nil {
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
            exitCode = status & 0x7F == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F)
        }
        defer { unlink(path) }
        return (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }
}
