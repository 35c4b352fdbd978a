import Foundation
import Testing
import RTCTestSupport

/// Hosts on separate networks, made of Linux network namespaces for one test: a router namespace
/// and, per host, a namespace joined to it by a veth pair with its own /24. A host may sit behind a
/// home NAT (nftables masquerade on the router, and nothing from outside gets in unless it answers
/// what the host sent). Needs root; everything is deleted by ``close()`` (and at deinit), processes
/// still running in them killed, and namespaces left by a test process that died (with whatever
/// runs in them) are deleted when the next lab starts.
final class NetworkLab: @unchecked Sendable {
    struct Host: Sendable {
        let namespace: String
        let address: String
        /// The router's end of the host's veth: what the router sends the host leaves through it.
        var routerInterface = ""
        /// Its IPv6 address (`fd77:<n>::1/64`, routed by the router), when it was made with one.
        var address6: String?
    }

    struct LabError: Error, CustomStringConvertible {
        let description: String
    }

    static let prefix = "rtclab"
    let id: String
    let router: String
    private var namespaces: [String] = []
    private var nextSubnet = 0

    /// Why a lab cannot be made here (not root, no `ip netns`), or nil.
    static var unavailableReason: String? {
        if getuid() != 0 { return "network namespaces need root" }
        guard let probe = try? runTool(["ip", "netns", "list"]), probe.status == 0 else { return "`ip netns` does not work here" }
        guard let nft = try? runTool(["nft", "--version"]), nft.status == 0 else { return "nftables (nft) is not installed" }
        return nil
    }

    /// Whether a lab can be made here; when not, records why as a known issue (the test is not
    /// run, and says so).
    static func availableOrKnownIssue() -> Bool {
        guard let reason = unavailableReason else { return true }
        withKnownIssue("no network namespaces here: \(reason)") { Issue.record("skipped") }
        return false
    }

    init() throws {
        Self.removeStale()
        id = "\(Self.prefix)\(getpid())x\(Int.random(in: 100...999))"
        router = "\(id)r"
        try addNamespace(router)
        try sh(["ip", "netns", "exec", router, "sysctl", "-qw", "net.ipv4.ip_forward=1"])
        try sh(["ip", "netns", "exec", router, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"])
        try nft("""
            table ip lab {
                chain post { type nat hook postrouting priority 100; }
                chain gate { type filter hook forward priority 0; }
            }
            """)
    }

    deinit { close() }

    /// A host on a network of its own, routed to every other host; `behindNAT` puts it on a
    /// private 192.168.x.0/24 that the router masquerades; `udpBlocked` drops every UDP packet to
    /// or from it at the router (a network that lets only TCP out).
    /// `ipv6`: the host also gets `fd77:<n>::1/64` (no duplicate address detection, so it is usable
    /// at once) and a default IPv6 route through the router.
    func addHost(_ label: String, behindNAT: Bool = false, udpBlocked: Bool = false, ipv6: Bool = false) throws -> Host {
        let subnet = nextSubnet
        nextSubnet += 1
        let namespace = "\(id)\(label)"
        try addNamespace(namespace)
        // Interface names are at most 15 bytes.
        let inside = "v\(getpid() % 100_000)h\(subnet)", outside = "v\(getpid() % 100_000)r\(subnet)"
        let net = behindNAT ? "192.168.\(70 + subnet)" : "10.77.\(subnet)"
        let hostAddress = behindNAT ? "\(net).2" : "\(net).1", routerAddress = behindNAT ? "\(net).1" : "\(net).254"
        try sh(["ip", "link", "add", inside, "netns", namespace, "type", "veth", "peer", "name", outside, "netns", router])
        try sh(["ip", "-n", namespace, "addr", "add", "\(hostAddress)/24", "dev", inside])
        try sh(["ip", "-n", namespace, "link", "set", inside, "up"])
        try sh(["ip", "-n", namespace, "route", "add", "default", "via", routerAddress])
        try sh(["ip", "-n", router, "addr", "add", "\(routerAddress)/24", "dev", outside])
        try sh(["ip", "-n", router, "link", "set", outside, "up"])
        if behindNAT {
            // Leaving: the router's address instead of the host's. Arriving: only answers.
            try nft("""
                add rule ip lab post ip saddr \(net).0/24 oifname != "\(outside)" masquerade
                add rule ip lab gate ip daddr \(net).0/24 ct state != { established, related } drop
                """)
        }
        if udpBlocked {
            try nft("""
                add rule ip lab gate ip saddr \(net).0/24 meta l4proto udp drop
                add rule ip lab gate ip daddr \(net).0/24 meta l4proto udp drop
                """)
        }
        var address6: String?
        if ipv6 {
            address6 = subnet == 0 ? "fd77::1" : "fd77:\(subnet)::1"  // as addresses are written out (RFC 5952)
            try sh(["ip", "-n", namespace, "addr", "add", "fd77:\(subnet)::1/64", "dev", inside, "nodad"])
            try sh(["ip", "-n", namespace, "-6", "route", "add", "default", "via", "fd77:\(subnet)::fe"])
            try sh(["ip", "-n", router, "addr", "add", "fd77:\(subnet)::fe/64", "dev", outside, "nodad"])
        }
        return Host(namespace: namespace, address: hostAddress, routerInterface: outside, address6: address6)
    }

    /// Caps what reaches `host` (its downlink) at `kbit` kbit/s with a token bucket on the router's
    /// side of its veth: a 16 kB bucket and up to 300 ms of queue, beyond which packets drop, as
    /// on a narrow access link. Nil lifts the cap.
    func capDownlink(of host: Host, kbit: Int?) throws {
        _ = try? runTool(["ip", "netns", "exec", router, "tc", "qdisc", "del", "dev", host.routerInterface, "root"])
        guard let kbit else { return }
        try sh(["ip", "netns", "exec", router, "tc", "qdisc", "add", "dev", host.routerInterface, "root", "tbf",
                "rate", "\(kbit)kbit", "burst", "16kb", "latency", "300ms"])
    }

    /// From now on drops every UDP packet to or from `host` at the router, as `udpBlocked` does
    /// from the start (a network that changed under a client: only TCP gets out now).
    func blockUDP(of host: Host) throws {
        let net = host.address.split(separator: ".").dropLast().joined(separator: ".")
        try nft("""
            add rule ip lab gate ip saddr \(net).0/24 meta l4proto udp drop
            add rule ip lab gate ip daddr \(net).0/24 meta l4proto udp drop
            """)
    }

    /// Cuts `host` off: every packet to or from it (TCP too) is dropped at the router until
    /// ``restore(_:)`` (a tunnel, a Wi-Fi dead spot: nothing gets through, nothing is refused).
    func cut(_ host: Host) throws {
        let net = host.address.split(separator: ".").dropLast().joined(separator: ".")
        try nft("""
            table ip cut {
                chain gate {
                    type filter hook forward priority -10;
                    ip saddr \(net).0/24 drop
                    ip daddr \(net).0/24 drop
                }
            }
            """)
    }

    /// Ends ``cut(_:)``.
    func restore() throws {
        try sh(["ip", "netns", "exec", router, "nft", "delete", "table", "ip", "cut"])
    }

    /// Drops one forwarded UDP packet in `every` at the router, each way, at random (nftables
    /// `numgen random`): a lossy path for media and data; signaling (TCP) is left alone.
    func dropUDP(oneIn every: Int) throws {
        try nft("""
            table ip loss {
                chain gate {
                    type filter hook forward priority 0;
                    meta l4proto udp numgen random mod \(every) == 0 drop
                }
            }
            """)
    }

    /// A command run inside `host`'s namespace (for `Process` or `runTool`).
    func command(in host: Host, _ arguments: [String]) -> [String] { ["ip", "netns", "exec", host.namespace] + arguments }

    /// Ends every process still running in the namespaces and deletes them (their veths go with
    /// them). Idempotent.
    func close() {
        for namespace in namespaces.reversed() { Self.delete(namespace) }
        namespaces = []
    }

    /// A process left in a namespace outlives `ip netns del`: it is killed first.
    private static func delete(_ namespace: String) {
        if let pids = try? runTool(["ip", "netns", "pids", namespace]) {
            for pid in pids.out.split(separator: "\n").compactMap({ Int32($0) }) { kill(pid, SIGKILL) }
        }
        _ = try? runTool(["ip", "netns", "del", namespace])
    }

    private func addNamespace(_ name: String) throws {
        try sh(["ip", "netns", "add", name])
        namespaces.append(name)
        try sh(["ip", "-n", name, "link", "set", "lo", "up"])
    }

    /// Loads nftables rules into the router namespace (through a file: `nft -f`).
    private func nft(_ rules: String) throws {
        let file = NSTemporaryDirectory() + "\(id)-\(UUID().uuidString).nft"
        try rules.write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        try sh(["ip", "netns", "exec", router, "nft", "-f", file])
    }

    private func sh(_ arguments: [String]) throws {
        let run = try runTool(arguments)
        guard run.status == 0 else { throw LabError(description: "\(arguments.joined(separator: " ")): \(run.err)") }
    }

    /// Namespaces of labs whose test process is gone.
    private static func removeStale() {
        guard let list = try? runTool(["ip", "netns", "list"]) else { return }
        for line in list.out.split(separator: "\n") {
            let name = String(line.split(separator: " ").first ?? "")
            guard name.hasPrefix(prefix), let pid = Int32(name.dropFirst(prefix.count).prefix { $0.isNumber }) else { continue }
            if kill(pid, 0) != 0 { delete(name) }
        }
    }
}

/// Programs run inside a namespace are `ChildProcess`es (TestKit).
typealias LabProcess = ChildProcess
