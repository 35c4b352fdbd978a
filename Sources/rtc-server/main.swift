// The server operators run: signaling and the SFU, and nothing of the client (no codecs, no X11,
// no libavformat): `rtc-server --secret S` (or `--dev`). `rtc-cli server` takes the same options.
import ArgumentParser
import ServerCommandLine

@main
struct RTCServerMain: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rtc-server", abstract: ServerCommand.configuration.abstract)

    @OptionGroup var server: ServerCommand

    func run() async throws { try await server.run() }
}
