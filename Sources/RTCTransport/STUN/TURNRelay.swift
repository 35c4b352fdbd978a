import NIOCore
import NIOPosix
import TLSStream

extension STUNMessage {
    public static let sendMethod: UInt16 = 0x006
    public static let dataMethod: UInt16 = 0x007

    /// XOR-PEER-ADDRESS (RFC 8656 §18.3).
    public var xorPeerAddress: STUNAddress? { xorAddress(STUNAttribute.xorPeerAddress) }
    /// DATA (RFC 8656 §18.4).
    public var data: [UInt8]? { attribute(STUNAttribute.data)?.value }
}

extension STUNAttribute {
    public static let channelNumber: UInt16 = 0x000C
    public static let xorPeerAddress: UInt16 = 0x0012
    public static let data: UInt16 = 0x0013

    /// An XOR-encoded address of `type` (RFC 8489 §14.2's encoding).
    static func xorAddress(_ type: UInt16, _ address: STUNAddress, transactionID: [UInt8]) -> STUNAttribute {
        var attribute = xorMappedAddress(address, transactionID: transactionID)
        attribute.type = type
        return attribute
    }

    /// CHANNEL-NUMBER: the number and two reserved bytes.
    static func channel(_ number: UInt16) -> STUNAttribute {
        STUNAttribute(type: channelNumber, value: bigEndian(number) + [0, 0])
    }
}

/// TURN's stream framing (RFC 8656 §12.5): over TCP, STUN messages delimit themselves (20 bytes and
/// their length) and ChannelData messages are padded to a multiple of four.
public enum TURNStream {
    /// The next whole message (STUN or ChannelData) off the front of `buffer`, nil until one has
    /// arrived. Bytes that are neither (the first two bits 11 or 10 and not a channel) end the
    /// stream's use: `buffer` is emptied and nil returned. Never traps.
    public static func nextMessage(from buffer: inout ByteBuffer) -> ByteBuffer? {
        guard let first = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self),
              let length = buffer.getInteger(at: buffer.readerIndex + 2, as: UInt16.self)
        else { return nil }
        let size: Int
        switch first {
        case 0x00...0x3F: size = 20 + Int(length)
        case 0x40...0x4F: size = 4 + (Int(length) + 3) / 4 * 4
        default:
            buffer.moveReaderIndex(forwardBy: buffer.readableBytes)
            return nil
        }
        guard buffer.readableBytes >= size else { return nil }
        guard first >= 0x40 else { return buffer.readSlice(length: size) }
        // ChannelData: hand on the header and the data, without the padding.
        let message = buffer.getSlice(at: buffer.readerIndex, length: 4 + Int(length))
        buffer.moveReaderIndex(forwardBy: size)
        return message
    }
}

/// A TURN server a client may relay through: where, over what, and its credentials.
public struct TURNServer: Sendable, Hashable {
    /// `tls`: TCP with TLS (`turns:`), the server's certificate checked against `trustedCertificates`
    /// (a PEM file) or the system's roots, for `hostname`.
    public enum Transport: String, Sendable, Hashable { case udp, tcp, tls }
    public var address: SocketAddress
    public var transport: Transport
    public var username: String
    public var password: String
    /// The name the TLS certificate must carry (the URL's host).
    public var hostname: String?
    /// PEM certificates to trust for TLS instead of the system's roots (a private CA).
    public var trustedCertificates: String?

    public init(address: SocketAddress, transport: Transport, username: String, password: String, hostname: String? = nil,
                trustedCertificates: String? = nil) {
        self.address = address
        self.transport = transport
        self.username = username
        self.password = password
        self.hostname = hostname
        self.trustedCertificates = trustedCertificates
    }
}

/// One allocation on a TURN server (RFC 8656) that a client transport sends its media through:
/// Allocate with the long-term credential (401, then again with REALM and NONCE; 438 takes a new
/// nonce), CreatePermission for the peers, ChannelBind (ChannelData once bound, Send indications
/// before), and Refresh, permission and channel renewals on their timers. Over UDP it shares the
/// transport's socket (the transport hands it what comes from the server); over TCP it has its
/// own connection. Everything on the transport's event loop.
final class TURNRelay: @unchecked Sendable {
    let server: TURNServer
    private let loop: EventLoop
    /// The transport's UDP socket now (a new one after ``SocketKeeper`` bound it again); on the loop.
    private let currentUDP: () -> Channel
    private var udp: Channel { currentUDP() }
    private var tcp: Channel?
    private let deliver: (ByteBuffer, SocketAddress) -> Void
    /// Called once the peers are permitted (checks may go through the relay), or with why not.
    var onPermitted: (() -> Void)?
    var onFailure: ((String) -> Void)?

    private(set) var relayed: STUNAddress?
    private var realm: String?
    private var nonce: String?
    private var key: [UInt8]?
    private var lifetime: UInt32 = 600
    private var peers: [SocketAddress] = []
    private var channels: [SocketAddress: UInt16] = [:]
    private var channelPeers: [UInt16: SocketAddress] = [:]
    private var nextChannel: UInt16 = 0x4000
    private var permitted = false
    private var failed = false
    private var timer: RepeatedTask?
    private var refreshAt: NIODeadline?
    private var permissionsAt: NIODeadline?
    private var channelsAt: NIODeadline?

    fileprivate enum Purpose { case allocate, refresh, permission, channelBind(UInt16, SocketAddress) }
    private struct Pending {
        var purpose: Purpose
        var bytes: [UInt8]
        var firstSent: NIODeadline
        var next: NIODeadline
        var interval: Int64
    }
    private var pending: [[UInt8]: Pending] = [:]

    init(server: TURNServer, udp: @escaping () -> Channel, loop: EventLoop, deliver: @escaping (ByteBuffer, SocketAddress) -> Void) {
        self.server = server
        currentUDP = udp
        self.loop = loop
        self.deliver = deliver
    }

    /// "relay/udp" or "relay/tcp": the path's name in stats.
    var pathName: String { "relay/\(server.transport.rawValue)" }

    /// Connects (TCP, TLS) and allocates; `peers` are permitted and bound once allocated.
    func start(peers: [SocketAddress]) {
        self.peers = peers
        timer = loop.scheduleRepeatedTask(initialDelay: .milliseconds(50), delay: .milliseconds(50)) { [weak self] _ in self?.tick() }
        guard server.transport != .udp else { return request(.allocate) }
        let tls: TLSContext?
        do { tls = server.transport == .tls ? try Self.tlsContext(server) : nil } catch {
            return fail("TLS to the TURN server \(server.address): \(error)")
        }
        let hostname = server.hostname ?? server.address.ipAddress
        ClientBootstrap(group: loop)
            .connectTimeout(.seconds(3))
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { [weak self] channel in
                channel.eventLoop.makeCompletedFuture {
                    if let tls {
                        // The name it was given (sent as SNI), else its address: what the certificate must name.
                        try channel.pipeline.syncOperations.addHandler(try tls.handler(serverName: hostname))
                    }
                    try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(StreamFrameDecoder(TURNStream.nextMessage)))
                    try channel.pipeline.syncOperations.addHandler(Inbound(relay: self))
                }
            }
            .connect(to: server.address)
            .whenComplete { [weak self] result in
                guard let self else { return }
                switch result {
                case .success(let channel):
                    self.tcp = channel
                    self.request(.allocate)
                case .failure(let error):
                    self.fail("cannot reach the TURN server \(self.server.address) over TCP: \(error)")
                }
            }
    }

    /// A client TLS context that checks the server's certificate against the given PEM file (or
    /// the system's roots) and, for an address, its IP address entries.
    private static func tlsContext(_ server: TURNServer) throws -> TLSContext {
        try TLSContext.client(TLSClientOptions(trustedCertificateFiles: server.trustedCertificates.map { [$0] }))
    }

    func close() {
        timer?.cancel()
        timer = nil
        pending.removeAll()
        // A zero lifetime releases the allocation (RFC 8656 §7.2); no answer is awaited.
        if relayed != nil, let key, !failed {
            let message = authenticated(STUNMessage(method: STUNMessage.refreshMethod, messageClass: .request,
                                                    transactionID: STUNMessage.randomTransactionID(), attributes: [.lifetime(0)]))
            transmit(message.serialized(integrityKey: key, fingerprint: true))
        }
        tcp?.close(promise: nil)
        tcp = nil
    }

    // MARK: Sending

    /// Media or a check for `peer`, through the relay (dropped until the allocation is up).
    func send(_ bytes: ByteBuffer, to peer: SocketAddress) {
        guard relayed != nil, !failed else { return }
        if let number = channels[peer] {
            var message = udp.allocator.buffer(capacity: 4 + bytes.readableBytes + 3)
            message.writeInteger(number)
            message.writeInteger(UInt16(bytes.readableBytes))
            message.writeImmutableBuffer(bytes)
            if server.transport != .udp { message.writeRepeatingByte(0, count: (4 - bytes.readableBytes % 4) % 4) }
            transmit(message)
            return
        }
        guard let address = STUNAddress(peer) else { return }
        let id = STUNMessage.randomTransactionID()
        let indication = STUNMessage(method: STUNMessage.sendMethod, messageClass: .indication, transactionID: id,
                                     attributes: [.xorAddress(STUNAttribute.xorPeerAddress, address, transactionID: id),
                                                  STUNAttribute(type: STUNAttribute.data, value: Array(bytes.readableBytesView))])
        transmit(indication.serialized(integrityKey: nil, fingerprint: false))
    }

    private func transmit(_ bytes: [UInt8]) { transmit(ByteBuffer(bytes: bytes)) }

    private func transmit(_ bytes: ByteBuffer) {
        if server.transport != .udp {
            tcp?.writeAndFlush(bytes, promise: nil)
        } else {
            udp.writeAndFlush(AddressedEnvelope(remoteAddress: server.address, data: bytes), promise: nil)
        }
    }

    private func authenticated(_ message: STUNMessage) -> STUNMessage {
        var message = message
        if let realm, let nonce { message.attributes += [.username(server.username), .realm(realm), .nonce(nonce)] }
        return message
    }

    private func request(_ purpose: Purpose) {
        let id = STUNMessage.randomTransactionID()
        var attributes: [STUNAttribute]
        let method: UInt16
        switch purpose {
        case .allocate:
            method = STUNMessage.allocateMethod
            attributes = [.requestedTransportUDP, .lifetime(600)]
        case .refresh:
            method = STUNMessage.refreshMethod
            attributes = [.lifetime(600)]
        case .permission:
            method = STUNMessage.createPermissionMethod
            attributes = peers.compactMap(STUNAddress.init).map { .xorAddress(STUNAttribute.xorPeerAddress, $0, transactionID: id) }
        case .channelBind(let number, let peer):
            method = STUNMessage.channelBindMethod
            guard let address = STUNAddress(peer) else { return }
            attributes = [.channel(number), .xorAddress(STUNAttribute.xorPeerAddress, address, transactionID: id)]
        }
        let message = authenticated(STUNMessage(method: method, messageClass: .request, transactionID: id, attributes: attributes))
        let bytes = message.serialized(integrityKey: key, fingerprint: true)
        let now = NIODeadline.now()
        pending[id] = Pending(purpose: purpose, bytes: bytes, firstSent: now, next: now + .milliseconds(250), interval: 250)
        transmit(bytes)
    }

    // MARK: Receiving

    /// A datagram or stream message from the TURN server.
    func receive(_ bytes: ByteBuffer) {
        guard let first = bytes.getInteger(at: bytes.readerIndex, as: UInt8.self) else { return }
        if (0x40...0x4F).contains(first) {
            guard let number = bytes.getInteger(at: bytes.readerIndex, as: UInt16.self),
                  let length = bytes.getInteger(at: bytes.readerIndex + 2, as: UInt16.self),
                  let peer = channelPeers[number], bytes.readableBytes >= 4 + Int(length),
                  let data = bytes.getSlice(at: bytes.readerIndex + 4, length: Int(length))
            else { return }
            return deliver(data, peer)
        }
        let raw = Array(bytes.readableBytesView)
        guard let message = try? STUNMessage(parsing: raw) else { return }
        if message.messageClass == .indication {
            guard message.method == STUNMessage.dataMethod, let peer = message.xorPeerAddress, let data = message.data,
                  let address = try? SocketAddress(stun: peer)
            else { return }
            return deliver(ByteBuffer(bytes: data), address)
        }
        guard let answered = pending.removeValue(forKey: message.transactionID) else { return }
        if message.messageClass == .errorResponse {
            let code = message.errorCode?.code ?? 0
            // 401: the first, unauthenticated request; 438: the nonce went stale. Again with the new one.
            if code == 401 || code == 438, let realm = message.realm, let nonce = message.nonce {
                let retried = code == 438 || key == nil
                self.realm = realm
                self.nonce = nonce
                key = STUNLongTermKey.make(username: server.username, realm: realm, password: server.password)
                if retried { return request(answered.purpose) }
            }
            switch answered.purpose {
            case .allocate, .permission:
                fail("the TURN server \(server.address) refused \(answered.purpose.name): \(code) \(message.errorCode?.reason ?? "")")
            case .refresh, .channelBind:
                break  // the allocation lives on to its lifetime; Send indications stand in for a channel
            }
            return
        }
        guard message.messageClass == .successResponse, let key, STUNMessage.verifyIntegrity(raw, key: key) else { return }
        switch answered.purpose {
        case .allocate:
            guard let relayed = message.xorRelayedAddress else { return fail("the TURN server gave no relayed address") }
            self.relayed = relayed
            lifetime = max(60, message.lifetime ?? 600)
            refreshAt = .now() + .seconds(Int64(lifetime / 2))
            request(.permission)
        case .refresh:
            lifetime = max(60, message.lifetime ?? lifetime)
            refreshAt = .now() + .seconds(Int64(lifetime / 2))
        case .permission:
            // Permissions last 300 s; channels 600 s (RFC 8656 §9, §12).
            permissionsAt = .now() + .seconds(240)
            guard !permitted else { return }
            permitted = true
            channelsAt = .now() + .seconds(540)
            for peer in peers { bind(peer) }
            onPermitted?()
        case .channelBind(let number, let peer):
            channels[peer] = number
            channelPeers[number] = peer
        }
    }

    private func bind(_ peer: SocketAddress) {
        let number = channels[peer] ?? {
            defer { nextChannel += 1 }
            return nextChannel
        }()
        guard number <= 0x4FFF else { return }
        request(.channelBind(number, peer))
    }

    private func fail(_ reason: String) {
        guard !failed else { return }
        failed = true
        timer?.cancel()
        pending.removeAll()
        onFailure?(reason)
    }

    /// Retransmissions (UDP) and renewals.
    private func tick() {
        let now = NIODeadline.now()
        // A request unanswered for 8 s is given up at the next tick, not at its next retransmission
        // (due up to 2 s later): the ICE agent's own 10 s connect timeout must not come first.
        for (id, var entry) in pending {
            guard !failed else { return }  // given up: nothing more is sent
            let expired = now - entry.firstSent > .seconds(8)
            guard expired || entry.next <= now else { continue }
            if expired {
                pending[id] = nil
                if case .allocate = entry.purpose { fail("no answer from the TURN server \(server.address)") }
                if case .permission = entry.purpose { fail("no answer from the TURN server \(server.address) to CreatePermission") }
                continue
            }
            guard server.transport == .udp else { continue }  // TCP delivers or the connection fails
            entry.interval = min(entry.interval * 2, 2000)
            entry.next = now + .milliseconds(entry.interval)
            pending[id] = entry
            transmit(entry.bytes)
        }
        guard !failed else { return }
        if let refreshAt, now >= refreshAt {
            self.refreshAt = now + .seconds(Int64(lifetime / 2))
            request(.refresh)
        }
        if let permissionsAt, now >= permissionsAt {
            self.permissionsAt = now + .seconds(240)
            request(.permission)
        }
        if let channelsAt, now >= channelsAt {
            self.channelsAt = now + .seconds(540)
            for peer in channels.keys { bind(peer) }
        }
    }

    /// The TCP connection's messages, handed to the relay.
    private final class Inbound: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = ByteBuffer
        weak var relay: TURNRelay?
        init(relay: TURNRelay?) { self.relay = relay }
        func channelRead(context: ChannelHandlerContext, data: NIOAny) { relay?.receive(unwrapInboundIn(data)) }
        private var error: (any Error)?
        func channelInactive(context: ChannelHandlerContext) {
            relay?.fail("the \(relay?.server.transport == .tls ? "TLS" : "TCP") connection to the TURN server closed"
                        + (error.map { ": \($0)" } ?? ""))
            context.fireChannelInactive()
        }
        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            self.error = self.error ?? error
            context.close(promise: nil)
        }
    }
}

extension TURNRelay.Purpose {
    var name: String {
        switch self {
        case .allocate: "the allocation"
        case .refresh: "a refresh"
        case .permission: "the permission"
        case .channelBind: "a channel"
        }
    }
}

extension SocketAddress {
    /// The NIO form of a STUN address.
    init(stun address: STUNAddress) throws {
        if address.ip.count == 4 {
            try self.init(ipAddress: address.ip.map(String.init).joined(separator: "."), port: Int(address.port))
        } else {
            let groups = stride(from: 0, to: address.ip.count, by: 2).map { String(UInt16(address.ip[$0]) << 8 | UInt16(address.ip[$0 + 1]), radix: 16) }
            try self.init(ipAddress: groups.joined(separator: ":"), port: Int(address.port))
        }
    }
}
