import ArgumentParser
import ScreenShareUser
import ServerCommandLine

/// The sharer process a host controls over its link (what a broadcast extension is on iOS).
struct ShareCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "share", abstract: "Run a screen sharer controlled by a host over the Unix-domain socket at --link.")

    @Option(help: "The host's link socket.") var link: String
    @Option(name: .customLong("link-version"), help: .hidden) var linkVersion: Int = screenShareLinkVersion

    func run() async throws {
        // The same process settings as `rtc-sharer`, which this stands in for when it is not installed.
        ScreenShareSharer.prepareProcess()
        let reason = await ScreenShareSharer.run(linkPath: link, version: linkVersion)
        print("share finished: \(reason)")
        if case .error(let message) = reason { throw CLIError(message) }
        let status = SharerCommandLine.exitStatus(for: reason)
        if status != 0 { throw ExitCode(status) }
    }
}
