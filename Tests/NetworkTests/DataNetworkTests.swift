import Foundation
import RTCTestSupport
import Testing

/// Data channels across hosts in network namespaces, through a router that drops one UDP packet in
/// ten each way (docs/data.md).
@Suite("Data channels across hosts with loss", .serialized)
struct DataNetworkTests {
    @Test("10 % of UDP dropped each way: 1000 reliable messages of 1 KB from one host reach another through the server, all, once, in order")
    func reliableUnderLoss() async throws {
        guard NetworkLab.availableOrKnownIssue() else { return }
        let lab = try NetworkLab()
        defer { lab.close() }
        let serverHost = try lab.addHost("s"), senderHost = try lab.addHost("a"), receiverHost = try lab.addHost("b")
        try lab.dropUDP(oneIn: 10)
        let cross = CrossHostTests()
        let server = try await cross.startServer(lab, on: serverHost)
        defer { server.stop() }
        let receiver = try cross.join(lab, on: receiverHost, server: serverHost, uid: "b",
                                      ["--video", "none", "--audio", "none", "--print-data", "--duration", "150", "--bind", receiverHost.address])
        defer { receiver.stop() }
        try await Task.sleep(for: .seconds(3))
        // 1 KB each: the number, then padding; 100 a second. The sender stays until the receiver has
        // them all (SCTP under 10 % loss each way took 6 to 25 s for 1 MB in runs on this machine).
        let padding = String(repeating: "x", count: 1000)
        let sender = try cross.join(lab, on: senderHost, server: serverHost, uid: "a",
                                    ["--video", "none", "--audio", "none", "--send-data", "m {n} \(padding)@0.01", "--data-count", "1000",
                                     "--duration", "140", "--bind", senderHost.address])
        defer { sender.stop() }
        let arrived = await eventually(120) { receiver.output.filter { $0.hasPrefix("data ") }.count >= 1000 }
        let lines = receiver.output.filter { $0.hasPrefix("data ") }
        let numbers = lines.compactMap { line -> Int? in
            let parts = line.split(separator: " ", maxSplits: 6)
            return parts.count >= 7 && parts[5] == "m" ? Int(parts[6].split(separator: " ").first ?? "") : nil
        }
        #expect(arrived, "\(lines.count) of 1000 arrived")
        let missing = Set(0..<1000).subtracting(numbers).sorted()
        let outOfOrder = numbers.indices.dropFirst().first { numbers[$0] != numbers[$0 - 1] + 1 } ?? -1
        let detail = "\(numbers.count) in all, missing \(missing.prefix(20)) (\(missing.count)), out of order at \(outOfOrder); "
            + "sender: \(sender.output.suffix(5))"
        #expect(numbers == Array(0..<1000), "all, once, in order: \(detail)")
        let times = lines.compactMap { Int($0.split(separator: " ")[1]) }
        if let first = times.first, let last = times.last {
            print("data across hosts at 10 % UDP loss: 1000 × 1 KB, first to last message \(Double(last - first) / 1e6) s "
                  + "(sent at 100 a second: 10 s without loss)")
        }
    }
}
