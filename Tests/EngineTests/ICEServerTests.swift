import Foundation
import RTCCore
import RTCTestSupport
import Signaling
import Testing

@Suite("ICE servers and transport policy in the engine", .serialized)
struct ICEServerTests {
    @Test("ICE servers the engine cannot use are each reported with why, and the join goes on over the direct path")
    func unusableServersReported() async throws {
        let server = try await TestServer()
        var configuration = RTCEngineConfiguration(serverURL: server.url)
        configuration.iceServers = [
            ICEServer(urls: ["turn:", "stuns:stun.example.com", "turn:host.invalid:3478"], username: "u", credential: "c"),
            ICEServer(urls: ["turn:127.0.0.1:3478"]),
        ]
        let engine = RTCEngine(configuration: configuration)
        let events = EventLog(engine)
        try await engine.join(token: testToken(uid: "1001", channel: "ice"), channel: "ice", uid: "1001",
                              options: JoinOptions(autoSubscribeAudio: false, autoSubscribeVideo: false))
        let reasons = await eventually {
            events.all.compactMap { if case .error(let error) = $0 { error.reason } else { nil } }.count >= 4
        }
        let errors = events.all.compactMap { if case .error(let error) = $0 { error.reason } else { nil } }
        #expect(reasons, "\(errors)")
        for fragment in ["turn:: not an ICE server URL", "stuns:stun.example.com: only stun:, turn: and turns:", "host.invalid does not resolve",
                         "turn:127.0.0.1:3478: no username"] {
            #expect(errors.contains { $0.contains(fragment) }, "\(fragment) not among \(errors)")
        }
        #expect(engine.connectionState == .connected)
        await engine.leave()
        await server.shutdown()
    }

    @Test("relay only with no TURN server anywhere: the broadcaster's join fails with that reason instead of waiting")
    func relayOnlyWithoutServers() async throws {
        let server = try await TestServer()
        var configuration = RTCEngineConfiguration(serverURL: server.url)
        configuration.iceTransportPolicy = .relay
        let engine = RTCEngine(configuration: configuration)
        try await engine.enableVideo()
        let started = Date()
        do {
            try await engine.join(token: testToken(uid: "1001", channel: "relay"), channel: "relay", uid: "1001")
            Issue.record("joined without any relay")
        } catch {
            #expect("\(error)".contains("no TURN server"), "\(error)")
        }
        #expect(Date().timeIntervalSince(started) < 5, "failed after \(Date().timeIntervalSince(started)) s")
        await engine.leave()
        await server.shutdown()
    }
}
