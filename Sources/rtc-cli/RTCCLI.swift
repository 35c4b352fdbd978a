import ArgumentParser

@main
struct RTCCLI: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rtc-cli",
        abstract: "Media tools, bots and the server of the Swift RTC SDK.",
        subcommands: [])
}
