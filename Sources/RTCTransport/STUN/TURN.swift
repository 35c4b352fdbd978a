internal import COpenSSL
import NIOCore
import NIOPosix

// TURN (RFC 8656) on top of the STUN messages: methods, attributes and long-term credentials
// (RFC 8489 §9.2). What is here is enough to allocate a relay and prove a server's credentials;
// relayed candidates in ICE are not built on it yet (docs/networks.md).

extension STUNMessage {
    public static let allocateMethod: UInt16 = 0x003
    public static let refreshMethod: UInt16 = 0x004
    public static let createPermissionMethod: UInt16 = 0x008
    public static let channelBindMethod: UInt16 = 0x009

    public var realm: String? { attribute(STUNAttribute.realm).map { String(decoding: $0.value, as: UTF8.self) } }
    public var nonce: String? { attribute(STUNAttribute.nonce).map { String(decoding: $0.value, as: UTF8.self) } }
    public var lifetime: UInt32? { attribute(STUNAttribute.lifetime)?.integer(UInt32.self) }
    /// XOR-RELAYED-ADDRESS (RFC 8656 §18.5), decoded with this message's transaction ID.
    public var xorRelayedAddress: STUNAddress? { xorAddress(STUNAttribute.xorRelayedAddress) }
}

extension STUNAttribute {
    public static let lifetime: UInt16 = 0x000D
    public static let xorRelayedAddress: UInt16 = 0x0016
    public static let realm: UInt16 = 0x0014
    public static let nonce: UInt16 = 0x0015
    public static let requestedTransport: UInt16 = 0x0019

    public static func realm(_ value: String) -> STUNAttribute { STUNAttribute(type: realm, value: Array(value.utf8)) }
    public static func nonce(_ value: String) -> STUNAttribute { STUNAttribute(type: nonce, value: Array(value.utf8)) }
    /// REQUESTED-TRANSPORT: 17 for UDP, the only one a relay carries for ICE.
    public static var requestedTransportUDP: STUNAttribute { STUNAttribute(type: requestedTransport, value: [17, 0, 0, 0]) }
    public static func lifetime(_ seconds: UInt32) -> STUNAttribute { STUNAttribute(type: lifetime, value: bigEndian(seconds)) }
}

/// The key of STUN's long-term credential mechanism: MD5(username ":" realm ":" password)
/// (RFC 8489 §9.2.2, without SASLprep: ASCII credentials such as TURN REST ones need none).
public enum STUNLongTermKey {
    public static func make(username: String, realm: String, password: String) -> [UInt8] {
        let input = Array("\(username):\(realm):\(password)".utf8)
        var digest = [UInt8](repeating: 0, count: 16)
        var length: UInt32 = 16
        _ = EVP_Digest(input, input.count, &digest, &length, EVP_md5(), nil)
        return digest
    }
}

/// Why a TURN exchange failed, for a person.
public struct TURNError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// One relay allocated on a TURN server over UDP (RFC 8656 §7): the relayed address peers can
/// send to, the client's address as the server saw it, and the allocation's lifetime.
public struct TURNAllocation: Sendable, Hashable {
    public var relayed: STUNAddress
    public var mapped: STUNAddress?
    public var lifetimeSeconds: UInt32
}

/// A TURN client over UDP, as far as allocating: the unauthenticated Allocate, its 401 with REALM
/// and NONCE, the Allocate again with the long-term credential (and once more on a stale nonce).
/// Requests are sent again at 250 ms, doubling (RFC 8489 §6.2.1's schedule, shortened), until
/// `timeout`.
public enum TURNClient {
    public static func allocate(server: SocketAddress, username: String, password: String, group: EventLoopGroup,
                                timeout: Double = 5) async throws -> TURNAllocation {
        let answers = AsyncStream<[UInt8]>.makeStream(bufferingPolicy: .bufferingNewest(16))
        let channel = try await DatagramBootstrap(group: group)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(Collector(continuation: answers.continuation))
                }
            }
            .bind(host: server.protocol == .inet6 ? "::" : "0.0.0.0", port: 0).get()
        defer { channel.close(promise: nil) }
        let deadline = NIODeadline.now() + .milliseconds(Int64(timeout * 1000))
        var iterator = answers.stream.makeAsyncIterator()

        /// Sends `request` until an answer with its transaction ID arrives.
        func exchange(_ request: STUNMessage, key: [UInt8]?) async throws -> STUNMessage {
            let bytes = request.serialized(integrityKey: key, fingerprint: true)
            var wait: Int64 = 250
            while NIODeadline.now() < deadline {
                try await channel.writeAndFlush(AddressedEnvelope(remoteAddress: server, data: ByteBuffer(bytes: bytes)))
                let until = min(deadline, .now() + .milliseconds(wait))
                let timer = channel.eventLoop.scheduleTask(deadline: until) { answers.continuation.yield([]) }
                while let datagram = await iterator.next() {
                    if datagram.isEmpty { break }  // this round's timer
                    guard let answer = try? STUNMessage(parsing: datagram), answer.transactionID == request.transactionID else { continue }
                    timer.cancel()
                    return answer
                }
                wait *= 2
            }
            throw TURNError("no answer from the TURN server \(server) within \(timeout) s")
        }

        func allocateRequest(_ extra: [STUNAttribute]) -> STUNMessage {
            STUNMessage(method: STUNMessage.allocateMethod, messageClass: .request, transactionID: STUNMessage.randomTransactionID(),
                        attributes: [.requestedTransportUDP, .lifetime(600)] + extra)
        }

        var answer = try await exchange(allocateRequest([]), key: nil)
        for _ in 0..<2 where answer.messageClass == .errorResponse {
            guard let code = answer.errorCode, code.code == 401 || code.code == 438, let realm = answer.realm, let nonce = answer.nonce else {
                break
            }
            let key = STUNLongTermKey.make(username: username, realm: realm, password: password)
            answer = try await exchange(allocateRequest([.username(username), .realm(realm), .nonce(nonce)]), key: key)
        }
        guard answer.messageClass == .successResponse, let relayed = answer.xorRelayedAddress else {
            let code = answer.errorCode.map { "\($0.code) \($0.reason)" } ?? "no relayed address"
            throw TURNError("the TURN server \(server) refused the allocation: \(code)")
        }
        return TURNAllocation(relayed: relayed, mapped: answer.xorMappedAddress, lifetimeSeconds: answer.lifetime ?? 0)
    }

    private final class Collector: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = AddressedEnvelope<ByteBuffer>
        let continuation: AsyncStream<[UInt8]>.Continuation
        init(continuation: AsyncStream<[UInt8]>.Continuation) { self.continuation = continuation }
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            continuation.yield(Array(unwrapInboundIn(data).data.readableBytesView))
        }
    }
}
