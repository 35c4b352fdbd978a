import ArgumentParser
import RTCCore
import ServerCommandLine

@main
struct RTCCLI: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rtc-cli",
        abstract: "Media tools, bots and benchmarks of the Swift RTC SDK.",
        subcommands: [
            PatternCommand.self, EncodeCommand.self, DecodeCommand.self, EncodeAudioCommand.self,
            DecodeAudioCommand.self, TokenCommand.self, ServerCommand.self, JoinCommand.self, ShareCommand.self, BenchCommand.self, DemoCommand.self, ProxyCommand.self,
            LoadTestCommand.self, RoomCommand.self,
        ])
}


/// Runs `body`, turning media and codec errors into a one-line CLI error.
func reporting<T>(_ body: () throws -> T) throws -> T {
    do {
        return try body()
    } catch let error as MediaFileError {
        throw CLIError(error.message)
    } catch let error as CodecError {
        throw CLIError(error.message)
    }
}

extension VideoSize: ExpressibleByArgument {
    public init?(argument: String) {
        guard let size = VideoSize(parsing: argument), size.width > 0, size.height > 0 else { return nil }
        self = size
    }
}

extension PatternKind: ExpressibleByArgument {}
