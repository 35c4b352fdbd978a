import ArgumentParser
import NIOCore
import NIOPosix
import NetSim
import ServerCommandLine

/// The impairment proxy as a process of its own (`NetSim.ImpairmentProxy`): random loss and delay
/// each way between clients and a UDP target, for measurements where the kernel can drop packets
/// (nftables) but cannot delay them (no netem here). A server announcing the proxy's address makes
/// every client's media go through it.
struct ProxyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "proxy",
        abstract: "Relay UDP to a target with loss and delay each way (the impairment proxy), until SIGTERM or SIGINT.")

    @Option(help: "Address and port clients send to, HOST:PORT.") var listen: String
    @Option(help: "Where the datagrams go, HOST:PORT.") var target: String
    @Option(help: "Random loss each way, percent.") var loss: Double = 0
    @Option(name: .customLong("delay-ms"), help: "Delay each way, ms.") var delayMs: Double = 0
    @Option(help: "Seed of the loss draws.") var seed: UInt64 = 1

    static func address(_ text: String, _ flag: String) throws -> SocketAddress {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port),
              let address = try? SocketAddress(ipAddress: String(text[..<colon]).trimmingCharacters(in: ["[", "]"]), port: port)
        else { throw ValidationError("\(flag) \(text) is not HOST:PORT with a numeric address") }
        return address
    }

    func validate() throws {
        _ = try Self.address(listen, "--listen")
        _ = try Self.address(target, "--target")
        guard (0..<100).contains(loss), (0...5000).contains(delayMs) else { throw ValidationError("--loss is 0..<100 %, --delay-ms 0...5000") }
    }

    func run() async throws {
        let front = try Self.address(listen, "--listen")
        let profile = ImpairmentProfile(loss: loss / 100, delayMs: delayMs)
        let proxy = try await ImpairmentProxy.start(target: try Self.address(target, "--target"), upstream: profile, downstream: profile,
                                                    seed: seed, group: MultiThreadedEventLoopGroup.singleton,
                                                    host: front.ipAddress ?? "0.0.0.0", port: front.port ?? 0)
        print("proxy: \(proxy.address) → \(target), \(loss) % loss and \(delayMs) ms each way")
        fflush(nil)
        await ServerCommand.waitForTermination()
        let stats = proxy.statistics
        print("proxy: dropped \(stats.upDropped) of \(stats.up) up, \(stats.downDropped) of \(stats.down) down")
        await proxy.close()
    }
}
