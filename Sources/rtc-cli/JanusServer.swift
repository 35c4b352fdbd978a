import Foundation
import ServerCommandLine

#if canImport(Glibc)
import Glibc
#endif

/// Janus (Debian's `janus`, 1.1.2 here) started for a side-by-side bench: Debian's configuration
/// copied to a temporary folder, WebSockets on a free port, the HTTP transport off, and whatever
/// the bench appends to the videoroom plugin's configuration.
struct JanusServer {
    let pid: pid_t
    let url: String
    let directory: String
    let name: String

    /// Starts `janus` (looked up on PATH) with `videoroomRooms` appended to
    /// `janus.plugin.videoroom.jcfg`; `files` is the descriptor limit it gets.
    static func start(janus: String = "janus", videoroomRooms: String = "", files: Int = 1024) throws -> JanusServer {
        guard FileManager.default.fileExists(atPath: "/etc/janus/janus.jcfg") else {
            throw CLIError("Janus is not installed (apt-get install janus), or pass --no-janus")
        }
        let directory = NSTemporaryDirectory() + "janus-bench-\(getpid())"
        try? FileManager.default.removeItem(atPath: directory)
        try FileManager.default.copyItem(atPath: "/etc/janus", toPath: directory)
        let port = try FreePort.tcp()
        try edit("\(directory)/janus.transport.websockets.jcfg") { $0.replacingOccurrences(of: "ws_port = 8188", with: "ws_port = \(port)") }
        try edit("\(directory)/janus.transport.http.jcfg") { $0.replacingOccurrences(of: "http = true", with: "http = false") }
        try edit("\(directory)/janus.jcfg", onlyWhatTheBenchUses)
        if !videoroomRooms.isEmpty {
            try edit("\(directory)/janus.plugin.videoroom.jcfg") { $0 + "\n" + videoroomRooms + "\n" }
        }
        // No core file: Janus 1.1.2 can crash in its shutdown (a plugin's thread outliving it), and
        // the dump would land in the working directory.
        // Its errors go to a log in its folder, for the message when it does not come up.
        let pid = try ProcessRunner.spawn(["sh", "-c", "ulimit -Sn \(files); ulimit -c 0; exec \(janus) -F \(directory) -C \(directory)/janus.jcfg -o -d 2 2>&1"],
                                          output: directory + "/janus.log")
        return JanusServer(pid: pid, url: "ws://127.0.0.1:\(port)/", directory: directory, name: "Janus \(version(janus))")
    }

    /// Starts Janus and waits until its WebSocket port takes connections. A start that does not
    /// listen within 15 s (the free port taken by someone else before Janus bound it, a plugin slow
    /// to load) is stopped and tried again on another port, three times in all; the error then
    /// carries the end of each attempt's log.
    static func startListening(janus: String = "janus", videoroomRooms: String = "", files: Int = 1024) async throws -> JanusServer {
        var failures: [String] = []
        for attempt in 1...3 {
            let server = try start(janus: janus, videoroomRooms: videoroomRooms, files: files)
            do {
                try await JanusLoadBench.waitForListener(url: server.url, pid: server.pid, name: server.name, seconds: 15)
                return server
            } catch {
                failures.append("attempt \(attempt): \(error); its log ends: \(server.logTail())")
                server.stop()
            }
        }
        throw CLIError("Janus did not come up. " + failures.joined(separator: " | "))
    }

    /// The last 600 characters of Janus's log (its errors), or a note that there is none.
    func logTail() -> String {
        guard let text = try? String(contentsOfFile: directory + "/janus.log", encoding: .utf8), !text.isEmpty else { return "(empty)" }
        return String(text.suffix(600))
    }

    /// Stops Janus (SIGTERM, then SIGKILL) and removes its configuration folder.
    func stop() {
        AbuseBench.stop(pid)
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// "1.1.2" from `janus --version` ("?" when it cannot be read).
    static func version(_ janus: String) -> String {
        guard let text = try? ChildOutput(["/usr/bin/env", janus, "--version"]).finish() else { return "?" }
        return text.split(separator: "(").dropFirst().first.map { String($0.prefix { $0 != ")" }) } ?? "?"
    }

    /// Only the WebSocket transport and the videoroom plugin: Debian's Janus otherwise loads every
    /// transport, plugin and event handler it ships, and one of them (MQTT's transport, after its
    /// configuration fails to parse) crashes it at start about half the time on this machine. Each
    /// `#disable = …` sample line of `janus.jcfg` becomes the list of that folder's other modules.
    static func onlyWhatTheBenchUses(_ configuration: String) throws -> String {
        let sections: [(folderKey: String, sample: String, keep: String)] = [
            ("plugins_folder", "#disable = \"libjanus_voicemail.so,libjanus_recordplay.so\"", "libjanus_videoroom.so"),
            ("transports_folder", "#disable = \"libjanus_rabbitmq.so\"", "libjanus_websockets.so"),
            ("loggers_folder", "#disable = \"libjanus_jsonlog.so\"", ""),
            ("events_folder", "#disable = \"libjanus_sampleevh.so\"", ""),
        ]
        var text = configuration
        for section in sections {
            guard let line = text.split(separator: "\n").first(where: { $0.contains(section.folderKey) && $0.contains("=") }),
                  let folder = line.split(separator: "\"").dropFirst().first,
                  let range = text.range(of: section.sample) else {
                throw CLIError("janus.jcfg: no \(section.folderKey) or no sample line \(section.sample) to edit (a Janus other than Debian's 1.1.2?)")
            }
            guard let listing = try? FileManager.default.contentsOfDirectory(atPath: String(folder)) else {
                throw CLIError("janus.jcfg: cannot list \(section.folderKey) \(folder)")
            }
            let modules = listing.filter { $0.hasSuffix(".so") && $0 != section.keep }.sorted()
            text.replaceSubrange(range, with: modules.isEmpty ? section.sample : "disable = \"\(modules.joined(separator: ","))\"")
        }
        return text
    }

    private static func edit(_ path: String, _ change: (String) throws -> String) throws {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        try change(text).write(toFile: path, atomically: true, encoding: .utf8)
    }
}

/// A script of this repository's `Tests/Tools` (benches run from the repository or from a build of it).
enum RepositoryTool {
    static func path(_ name: String, override: String?) throws -> String {
        if let override { return override }
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let candidates = [FileManager.default.currentDirectoryPath + "/Tests/Tools/" + name, source.appendingPathComponent("Tests/Tools/" + name).path]
        guard let found = candidates.first(where: { FileManager.default.fileExists(atPath: $0) }) else {
            throw CLIError("Tests/Tools/\(name) not found: run from the repository or pass --tool")
        }
        return found
    }
}
