import Foundation
import RTCServer

#if canImport(Glibc)
import Glibc
#endif

/// The media processes of `rtc-cli server --media-processes N`: N - 1 children of this server, each
/// an `rtc-server` with one media thread, its signaling on loopback (only the front relays to
/// it) and its media on the front's host at `--udp-port + i`. A child that dies is started again
/// on the same ports; all are stopped with the front, and a child whose front is gone stops itself
/// (`--parent-pid`).
final class MediaProcesses: @unchecked Sendable {
    private struct Child {
        var pid: pid_t
        let port: Int
        /// Started and taking connections on its signaling port.
        var ready = false
    }

    private let lock = NSLock()
    private var children: [Child] = []
    private var stopping = false
    private let command: @Sendable (_ index: Int, _ port: Int) -> [String]

    /// Starts `count` children; `command(i, port)` is child i's command line (1-based: the front is 0).
    init(count: Int, command: @escaping @Sendable (Int, Int) -> [String]) throws {
        self.command = command
        for index in 1...count {
            let port = try FreePort.tcp()
            children.append(Child(pid: try Self.spawn(command(index, port)), port: port))
        }
        let watcher = Thread { [weak self] in
            while let self, self.watch() { usleep(100_000) }
        }
        watcher.start()
    }

    /// The loopback signaling URLs of the children, in order.
    var urls: [String] { lock.withLock { children.map { "ws://127.0.0.1:\($0.port)/rtc" } } }
    var pids: [pid_t] { lock.withLock { children.map(\.pid) } }

    /// The `/metrics` pages of the children that take connections now, for the front to add to
    /// its own. Each is fetched on a thread of its own (a blocking loopback GET, 5 s at most), off
    /// the event loops and the cooperative pool; a child that does not answer is left out.
    func metricsPages() async -> [String] {
        let ports = lock.withLock { children.filter(\.ready).map(\.port) }
        return await withTaskGroup(of: String?.self) { group in
            for port in ports {
                group.addTask {
                    await withCheckedContinuation { continuation in
                        Thread { continuation.resume(returning: try? PlainHTTP.get("http://127.0.0.1:\(port)/metrics")) }.start()
                    }
                }
            }
            var pages: [String] = []
            for await page in group { if let page { pages.append(page) } }
            return pages
        }
    }

    /// Whether child `index` (0-based) runs and takes connections.
    func isReady(_ index: Int) -> Bool { lock.withLock { children.indices.contains(index) && children[index].ready } }

    /// Waits up to `seconds` for every child to take connections.
    func waitUntilReady(seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if lock.withLock({ children.allSatisfy(\.ready) }) { return true }
            usleep(50_000)
        }
        return false
    }

    /// SIGTERM to every child (they drain: `leave(serverShutdown)` to their participants), then
    /// SIGKILL to those still running after `grace` seconds.
    func stop(grace: Double = 5) {
        let pids = lock.withLock { () -> [pid_t] in
            stopping = true
            return children.map(\.pid)
        }
        for pid in pids { kill(pid, SIGTERM) }
        let deadline = Date().addingTimeInterval(grace)
        var running = Set(pids)
        while !running.isEmpty && Date() < deadline {
            for pid in running {
                var status: Int32 = 0
                if waitpid(pid, &status, WNOHANG) == pid { running.remove(pid) }
            }
            usleep(50_000)
        }
        for pid in running {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            waitpid(pid, &status, 0)
        }
    }

    /// One round of the watcher: reaps a child that died and starts it again, and marks children
    /// ready once their port takes connections. False once stopping.
    private func watch() -> Bool {
        let snapshot = lock.withLock { stopping ? nil : children }
        guard let snapshot else { return false }
        for (index, child) in snapshot.enumerated() {
            var status: Int32 = 0
            if waitpid(child.pid, &status, WNOHANG) == child.pid {
                let restarted = try? Self.spawn(command(index + 1, child.port))
                FileHandle.standardError.write(Data("media process \(index + 1) (pid \(child.pid)) exited (status \(status)): started again\n".utf8))
                lock.withLock {
                    children[index].ready = false
                    if let restarted { children[index].pid = restarted }
                }
            } else if !child.ready, FreePort.accepts(child.port) {
                lock.withLock { if children[index].pid == child.pid { children[index].ready = true } }
            }
        }
        return true
    }

    /// Starts a child with its standard output discarded (its log lines go to standard error).
    private static func spawn(_ arguments: [String]) throws -> pid_t {
        try ProcessRunner.spawn(arguments, quiet: true, keepErrors: true)
    }

    /// The server executable children run: `rtc-server` (no codecs) when it is this one or next
    /// to it, else this executable's `server` command.
    static var serverCommand: [String] {
        let me = ProcessRunner.selfPath
        if me.hasSuffix("/rtc-server") { return [me] }
        if let server = ProcessRunner.sibling("rtc-server") { return [server] }
        return [me, "server"]
    }

    /// The front's own command line for a child: every option but those the child gets its own
    /// value of (ports, threads, TLS, the per-address limit: all its connections come from the
    /// front), and `--dev` (the child gets the front's secret instead).
    static func childArguments(front: [String], secret: String, host: String, index: Int, port: Int, udpPort: Int, tcpPort: Int?,
                               parent: pid_t) -> [String] {
        let dropped: Set<String> = ["--port", "--udp-port", "--tcp-port", "--media-threads", "--media-processes", "--tls-cert", "--tls-key",
                                    "--max-connections-per-ip", "--secret", "--signaling-host", "--parent-pid", "--host"]
        var kept: [String] = []
        var skipValue = false
        // After the executable (and "server" when the front is `rtc-cli server`).
        for argument in front.dropFirst(front.count > 1 && front[1] == "server" ? 2 : 1) {
            if skipValue {
                skipValue = false
                continue
            }
            let name = String(argument.split(separator: "=", maxSplits: 1).first ?? "")
            if argument == "--dev" { continue }
            if dropped.contains(name) {
                skipValue = !argument.contains("=")
                continue
            }
            kept.append(argument)
        }
        var child = serverCommand + ["--host", host, "--signaling-host", "127.0.0.1", "--port", "\(port)",
                     "--udp-port", "\(udpPort == 0 ? 0 : udpPort + index)", "--media-threads", "1", "--secret", secret,
                     "--max-connections-per-ip", "1000000", "--parent-pid", "\(parent)"]
        if let tcpPort { child += ["--tcp-port", "\(tcpPort == 0 ? 0 : tcpPort + index)"] }
        return child + kept
    }
}
