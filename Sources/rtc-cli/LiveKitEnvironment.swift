import Foundation

/// What LiveKit's `lk` and its server SDKs read from the environment, read the same way here so a
/// user coming from them needs no flags: `LIVEKIT_URL`, `LIVEKIT_API_KEY`, `LIVEKIT_API_SECRET`.
/// A flag given on the command line wins; an empty variable counts as unset.
enum LiveKitEnvironment {
    static func value(_ name: String) -> String? {
        guard let value = ProcessInfo.processInfo.environment[name], !value.isEmpty else { return nil }
        return value
    }

    static var url: String? { value("LIVEKIT_URL") }
    static var apiKey: String? { value("LIVEKIT_API_KEY") }
    static var apiSecret: String? { value("LIVEKIT_API_SECRET") }

    /// `LIVEKIT_URL` as our signaling URL: a LiveKit URL names the server (`ws://host:7880`), and
    /// our protocol's WebSocket is its `/rtc` (a URL with a path of its own is taken as it is).
    static var signalingURL: String? {
        guard let url, var components = URLComponents(string: url) else { return nil }
        if components.path.isEmpty || components.path == "/" { components.path = "/rtc" }
        switch components.scheme?.lowercased() {
        case "http": components.scheme = "ws"
        case "https": components.scheme = "wss"
        default: break
        }
        return components.string
    }
}
