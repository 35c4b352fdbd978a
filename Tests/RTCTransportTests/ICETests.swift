import NIOCore
import Testing
@testable import RTCTransport

@Suite("ICE (RFC 8445 controlling and lite, RFC 7675 consent)")
struct ICETests {
    let clientAddress = try! SocketAddress(ipAddress: "127.0.0.1", port: 40000)
    let serverAddress = try! SocketAddress(ipAddress: "127.0.0.1", port: 7882)

    /// Delivers every datagram in `output` between the two agents until both are quiet.
    func pump(_ output: ICEOutput, from: ICEAgent, fromAddress: SocketAddress, to: ICEAgent, toAddress: SocketAddress,
              now: Double, drop: Bool = false) {
        var queue: [(ICEAgent, SocketAddress, [UInt8], ICEAgent, SocketAddress)] =
            output.datagrams.map { (to, fromAddress, $0.bytes, from, toAddress) }
        while !queue.isEmpty {
            let (receiver, source, bytes, sender, receiverAddress) = queue.removeFirst()
            if drop { continue }
            let reply = receiver.receive(bytes, from: source, now: now)
            queue += reply.datagrams.map { (sender, receiverAddress, $0.bytes, receiver, source) }
        }
    }

    /// A controlling client and a lite server that have connected at time 0.
    func connectedPair() -> (client: ICEAgent, server: ICEAgent) {
        let client = ICEAgent(role: .controlling), server = ICEAgent(role: .lite)
        _ = server.start(remote: client.local, candidates: [], now: 0)
        pump(client.start(remote: server.local, candidates: [serverAddress], now: 0), from: client,
             fromAddress: clientAddress, to: server, toAddress: serverAddress, now: 0)
        return (client, server)
    }

    @Test("a controlling client nominates the lite server's candidate; both connect and the server learns the address")
    func connect() throws {
        let client = ICEAgent(role: .controlling), server = ICEAgent(role: .lite)
        _ = server.start(remote: client.local, candidates: [], now: 0)
        let first = client.start(remote: server.local, candidates: [serverAddress], now: 0)
        #expect(client.state == .checking && first.datagrams.count == 1)
        let request = try STUNMessage(parsing: first.datagrams[0].bytes)
        #expect(request.username == "\(server.local.ufrag):\(client.local.ufrag)" && request.hasUseCandidate)
        #expect(request.iceControlling != nil && request.priority == ICEPriority.peerReflexive)
        #expect(STUNMessage.verifyIntegrity(first.datagrams[0].bytes, key: Array(server.local.pwd.utf8)))
        pump(first, from: client, fromAddress: clientAddress, to: server, toAddress: serverAddress, now: 0.02)
        #expect(client.state == .connected && server.state == .connected)
        #expect(client.selectedAddress == serverAddress && server.selectedAddress == clientAddress)
        #expect(client.roundTripTime == 0.02)
    }

    @Test("with two server candidates, the first answered wins: checks to the other stop, and the winner is nominated again at once so the lite server ends on it")
    func firstAnswerWins() throws {
        let other = try SocketAddress(ipAddress: "10.0.0.1", port: 7882)
        let client = ICEAgent(role: .controlling), server = ICEAgent(role: .lite)
        _ = server.start(remote: client.local, candidates: [], now: 0)
        let first = client.start(remote: server.local, candidates: [other, serverAddress], now: 0)
        #expect(first.datagrams.map(\.to) == [other, serverAddress])
        // Only the check to serverAddress reaches the server; the one to `other` arrives later,
        // from the client's second address (another interface), and the lite side follows it.
        let secondAddress = try SocketAddress(ipAddress: "10.0.0.2", port: 40000)
        var reached = ICEOutput()
        reached.datagrams = [first.datagrams[1]]
        pump(reached, from: client, fromAddress: clientAddress, to: server, toAddress: serverAddress,
             now: 0.02)
        #expect(client.selectedAddress == serverAddress)
        _ = server.receive(first.datagrams[0].bytes, from: secondAddress, now: 0.05)
        #expect(server.selectedAddress == secondAddress)
        // No retransmission to `other` any more; the selected pair is checked again within 0.2 s.
        let later = client.handleTimers(now: 0.25)
        #expect(later.datagrams.map(\.to) == [serverAddress])
        pump(later, from: client, fromAddress: clientAddress, to: server, toAddress: serverAddress, now: 0.26)
        #expect(server.selectedAddress == clientAddress)
        #expect(client.handleTimers(now: 1.0).datagrams.isEmpty)
    }

    @Test("a lower-priority path (ICE-TCP) checked from the start: while UDP answers, its checks never nominate and the lite server stays on UDP; with UDP silent it is selected and nominated at once; UDP answering later takes over")
    func lowerPriorityPath() throws {
        let tcp = try SocketAddress(ipAddress: "127.0.0.1", port: 7883), clientTCP = try SocketAddress(ipAddress: "127.0.0.1", port: 50000)
        // Both answer, the TCP check last: nothing flips.
        do {
            let client = ICEAgent(role: .controlling), server = ICEAgent(role: .lite)
            _ = server.start(remote: client.local, candidates: [], now: 0)
            let udpChecks = client.start(remote: server.local, candidates: [serverAddress], now: 0)
            let tcpChecks = client.addCandidate(tcp, preference: .tcp, now: 0.001)
            #expect(try STUNMessage(parsing: tcpChecks.datagrams[0].bytes).hasUseCandidate == false)
            pump(udpChecks, from: client, fromAddress: clientAddress, to: server, toAddress: serverAddress, now: 0.01)
            pump(tcpChecks, from: client, fromAddress: clientTCP, to: server, toAddress: tcp, now: 0.02)
            #expect(client.selectedAddress == serverAddress && server.selectedAddress == clientAddress)
            #expect(!client.onLowerPriorityPath)
            // No TCP retransmission: the checks to it stopped when UDP answered.
            #expect(client.handleTimers(now: 0.5).datagrams.allSatisfy { $0.to == serverAddress })
        }
        // UDP silent: the TCP answer selects TCP and nominates it in the same step.
        do {
            let client = ICEAgent(role: .controlling), server = ICEAgent(role: .lite)
            _ = server.start(remote: client.local, candidates: [], now: 0)
            _ = client.start(remote: server.local, candidates: [serverAddress], now: 0)
            let tcpChecks = client.addCandidate(tcp, preference: .tcp, now: 0.001)
            let request = tcpChecks.datagrams[0].bytes
            let answer = server.receive(request, from: clientTCP, now: 0.01)
            #expect(server.selectedAddress == clientTCP && server.state == .checking)
            let picked = client.receive(answer.datagrams[0].bytes, from: tcp, now: 0.02)
            #expect(client.selectedAddress == tcp && client.state == .connected && client.onLowerPriorityPath)
            let nomination = try #require(picked.datagrams.first)
            #expect(try nomination.to == tcp && STUNMessage(parsing: nomination.bytes).hasUseCandidate)
            pump(picked, from: client, fromAddress: clientTCP, to: server, toAddress: tcp, now: 0.03)
            #expect(server.state == .connected && server.selectedAddress == clientTCP)
            // The UDP check's retransmission is still going; once answered, UDP takes over.
            let retransmit = client.handleTimers(now: 0.1)
            #expect(retransmit.datagrams.contains { $0.to == serverAddress })
            pump(retransmit, from: client, fromAddress: clientAddress, to: server, toAddress: serverAddress, now: 0.11)
            #expect(client.selectedAddress == serverAddress && !client.onLowerPriorityPath)
            #expect(server.selectedAddress == clientAddress)
            // ... and stays there: the checks left go to UDP only.
            #expect(client.handleTimers(now: 0.4).datagrams.allSatisfy { $0.to == serverAddress })
        }
    }

    /// A relayed path's key stands for the TURN server's relayed address on the server's side.
    @Test("three ranks: a relay that answers first is taken, ICE-TCP answering later takes over from it, and direct UDP from that; a relay answering after ICE-TCP is left")
    func relayedBelowTCP() throws {
        let tcp = try SocketAddress(ipAddress: "127.0.0.1", port: 7883), clientTCP = try SocketAddress(ipAddress: "127.0.0.1", port: 50000)
        let relay = try SocketAddress(ipAddress: "100::1:1", port: 7882), relayed = try SocketAddress(ipAddress: "127.0.0.9", port: 49152)
        // The relay first, then TCP, then UDP.
        do {
            let client = ICEAgent(role: .controlling), server = ICEAgent(role: .lite)
            _ = server.start(remote: client.local, candidates: [], now: 0)
            let udpChecks = client.start(remote: server.local, candidates: [serverAddress], now: 0)
            let tcpChecks = client.addCandidate(tcp, preference: .tcp, now: 0.001)
            let relayChecks = client.addCandidate(relay, preference: .relayed, now: 0.002)
            #expect(try STUNMessage(parsing: relayChecks.datagrams[0].bytes).hasUseCandidate == false)
            let overRelay = server.receive(relayChecks.datagrams[0].bytes, from: relayed, now: 0.01)
            let nominateRelay = client.receive(overRelay.datagrams[0].bytes, from: relay, now: 0.011)
            #expect(client.selectedAddress == relay && client.onLowerPriorityPath)
            pump(nominateRelay, from: client, fromAddress: relayed, to: server, toAddress: relay, now: 0.012)
            #expect(server.selectedAddress == relayed)
            pump(tcpChecks, from: client, fromAddress: clientTCP, to: server, toAddress: tcp, now: 0.02)
            #expect(client.selectedAddress == tcp && client.onLowerPriorityPath)
            #expect(server.selectedAddress == clientTCP)
            pump(udpChecks, from: client, fromAddress: clientAddress, to: server, toAddress: serverAddress, now: 0.03)
            #expect(client.selectedAddress == serverAddress && !client.onLowerPriorityPath)
            #expect(server.selectedAddress == clientAddress)
        }
        // TCP first: the relay's answer changes nothing, on either side.
        do {
            let client = ICEAgent(role: .controlling), server = ICEAgent(role: .lite)
            _ = server.start(remote: client.local, candidates: [], now: 0)
            _ = client.start(remote: server.local, candidates: [serverAddress], now: 0)
            let tcpChecks = client.addCandidate(tcp, preference: .tcp, now: 0.001)
            let relayChecks = client.addCandidate(relay, preference: .relayed, now: 0.002)
            pump(tcpChecks, from: client, fromAddress: clientTCP, to: server, toAddress: tcp, now: 0.01)
            #expect(client.selectedAddress == tcp && server.selectedAddress == clientTCP)
            pump(relayChecks, from: client, fromAddress: relayed, to: server, toAddress: relay, now: 0.02)
            #expect(client.selectedAddress == tcp && server.selectedAddress == clientTCP)
        }
    }

    @Test("a wrong password is answered 401 and fails the check with the reason")
    func wrongPassword() {
        let client = ICEAgent(role: .controlling), server = ICEAgent(role: .lite)
        let wrong = ICECredentials(ufrag: server.local.ufrag, pwd: "not-the-password-at-all")
        let first = client.start(remote: wrong, candidates: [serverAddress], now: 0)
        pump(first, from: client, fromAddress: clientAddress, to: server, toAddress: serverAddress, now: 0.01)
        #expect(client.state == .failed(reason: "check rejected: 401 Unauthorized"))
        #expect(server.state == .new && server.selectedAddress == nil)
    }

    @Test("unanswered checks are retransmitted with backoff, then fail after the connect timeout")
    func noAnswer() {
        var timers = ICETimers()
        timers.connectTimeout = 3
        let client = ICEAgent(role: .controlling, timers: timers)
        _ = client.start(remote: .random(), candidates: [serverAddress], now: 0)
        var sends: [Double] = []
        var now = 0.0
        while let next = client.nextTimer, now < 10 {
            now = next
            let output = client.handleTimers(now: now)
            if !output.datagrams.isEmpty { sends.append(now) }
            if case .failed = client.state { break }
        }
        #expect(client.state == .failed(reason: "no STUN answer within 3.0 s"))
        #expect(now == 3)
        // Retransmissions at 0.1, 0.3, 0.7, 1.5 s: the interval doubles from 100 ms.
        let expected = [0.1, 0.3, 0.7, 1.5]
        #expect(zip(sends.prefix(4), expected).allSatisfy { abs($0 - $1) < 1e-9 } && sends.count >= 4, "\(sends)")
    }

    @Test("consent freshness: checks every interval, disconnected then failed on silence, recovered by an answer")
    func consent() {
        let (client, server) = connectedPair()
        // Answered consent checks keep it connected.
        for second in stride(from: 5.0, through: 20, by: 5) {
            let output = client.handleTimers(now: second)
            #expect(output.datagrams.count == 1, "consent check at \(second)")
            pump(output, from: client, fromAddress: clientAddress, to: server, toAddress: serverAddress, now: second)
        }
        #expect(client.state == .connected)
        // Then the server goes silent.
        var now = 20.0
        var states: [ICEState] = []
        while now < 60, let next = client.nextTimer {
            now = next
            if let state = client.handleTimers(now: now).state { states.append(state) }
            if case .failed = client.state { break }
        }
        #expect(states.first == .disconnected(reason: "no consent answer for 10 s"))
        #expect(client.state == .failed(reason: "consent expired: no answer for 30 s") && now == 50)
    }

    @Test("the lite side follows the client to a new port (the client changed networks)")
    func addressChange() {
        let (client, server) = connectedPair()
        let moved = try! SocketAddress(ipAddress: "127.0.0.1", port: 40001)
        let output = client.handleTimers(now: 5)
        var changed: SocketAddress?
        for datagram in output.datagrams {
            let reply = server.receive(datagram.bytes, from: moved, now: 5)
            changed = reply.selectedAddress ?? changed
            for answer in reply.datagrams { _ = client.receive(answer.bytes, from: serverAddress, now: 5.01) }
        }
        #expect(changed == moved && server.selectedAddress == moved && client.state == .connected)
    }

    @Test("an ICE restart uses new credentials and connects again")
    func restart() {
        let (client, server) = connectedPair()
        let newClient = ICECredentials.random(), newServer = ICECredentials.random()
        _ = server.restart(local: newServer, remote: newClient, candidates: [], now: 1)
        let output = client.restart(local: newClient, remote: newServer, candidates: [serverAddress], now: 1)
        pump(output, from: client, fromAddress: clientAddress, to: server, toAddress: serverAddress, now: 1)
        #expect(client.state == .connected && server.local == newServer)
        #expect(ICECredentials.random() != ICECredentials.random())
        #expect(ICECredentials.random().pwd.count >= 22)
    }

    @Test("after a restart, checks the peer rejects (it has not taken the new credentials yet) are retried, not failed")
    func restartBeforePeer() {
        let (client, server) = connectedPair()
        let newClient = ICECredentials.random(), newServer = ICECredentials.random()
        // The client restarts first: its check names a ufrag the server does not have yet (400).
        let output = client.restart(local: newClient, remote: newServer, candidates: [serverAddress], now: 1)
        pump(output, from: client, fromAddress: clientAddress, to: server, toAddress: serverAddress, now: 1)
        #expect(client.state == .checking)
        // The server's answer arrives; the retransmitted check goes through.
        _ = server.restart(local: newServer, remote: newClient, candidates: [], now: 1.05)
        pump(client.handleTimers(now: 1.1), from: client, fromAddress: clientAddress, to: server, toAddress: serverAddress, now: 1.1)
        #expect(client.state == .connected && server.state == .connected)
    }
}
