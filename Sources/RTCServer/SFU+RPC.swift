import Foundation
import LiveKitProtocol
import NIOCore
import RTCTransport

/// Why a call of a participant's RPC method failed: LiveKit's RPC error codes (1500 application
/// error, 1501 connection timeout, 1502 response timeout, 1503 recipient disconnected, 1505 send
/// failed, 1400 unsupported method, 1402 request payload too large), a message, and the handler's
/// own data when it sent an error.
public struct RPCFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: UInt32
    public var message: String
    public var data: String

    public static let applicationError: UInt32 = 1500, connectionTimeout: UInt32 = 1501, responseTimeout: UInt32 = 1502,
                      recipientDisconnected: UInt32 = 1503, sendFailed: UInt32 = 1505,
                      unsupportedMethod: UInt32 = 1400, requestPayloadTooLarge: UInt32 = 1402

    public init(_ code: UInt32, _ message: String, data: String = "") {
        self.code = code
        self.message = message
        self.data = data
    }

    public var description: String { "RpcError \(code): \(message)" + (data.isEmpty ? "" : ": \(data)") }
}

/// One RPC the server made and waits on.
final class PendingRPC {
    let participant: ObjectIdentifier
    let promise: EventLoopPromise<String>
    var ackTimer: Scheduled<Void>?
    var responseTimer: Scheduled<Void>?

    init(participant: ObjectIdentifier, promise: EventLoopPromise<String>) {
        self.participant = participant
        self.promise = promise
    }

    func settle(_ result: Result<String, RPCFailure>) {
        ackTimer?.cancel()
        responseTimer?.cancel()
        promise.completeWith(result.mapError { $0 as any Error })
    }
}

/// The server calling a participant's RPC method (the API's `PerformRpc`), as LiveKit's SDKs take
/// it: a reliable `DataPacket` with an `RpcRequest` whose sender identity is the request id, so
/// the SDK acks and answers to that id; the server takes the `RpcAck` and `RpcResponse` for its
/// own requests and relays them to no one. The ack must come within ``ackTimeoutMs``, the answer
/// within the request's timeout.
extension SFU {
    /// How long the recipient's SDK has to ack a request.
    static let ackTimeoutMs: Int64 = 2000
    /// A request's payload, at most (LiveKit's RPC limit).
    static let maxRPCPayloadBytes = 15 * 1024

    /// Calls `method` of participant `identity` in `room`; the future has the answer's payload,
    /// fails with ``RPCFailure``, or with ``AdminError/notFound(_:)`` for no such room or participant.
    func performRPC(room: String, identity: String, method: String, payload: String, timeoutMs: Int64) -> EventLoopFuture<String> {
        let promise = loop.makePromise(of: String.self)
        loop.execute {
            guard let found = self.directory.room(named: room) else { return promise.fail(AdminError.notFound("no room \(room)")) }
            guard let participant = found.participants.values.first(where: { $0.uid == identity }) else {
                return promise.fail(AdminError.notFound("no participant \(identity) in room \(room)"))
            }
            guard payload.utf8.count <= Self.maxRPCPayloadBytes else {
                return promise.fail(RPCFailure(RPCFailure.requestPayloadTooLarge, "Request payload too large"))
            }
            // Only LiveKit's SDKs answer RPCs; ours and plain data channel peers cannot.
            guard participant.dataFraming == .liveKit, participant.publisher?.dataChannels != nil else {
                return promise.fail(RPCFailure(RPCFailure.unsupportedMethod, "Method not supported at destination",
                                               data: "\(identity) has no LiveKit data channel to take RPCs on"))
            }
            let id = UUID().uuidString.lowercased()
            var request = LKRpcRequest()
            request.id = id
            request.method = method
            request.payload = payload
            request.responseTimeoutMs = UInt32(clamping: timeoutMs)
            request.version = 1
            var packet = LKDataPacket()
            packet.kind = .reliable
            packet.participantIdentity = id
            packet.value = .rpcRequest(request)
            let sent = self.deliver(RelayedData(serverPacket: packet, destinations: [identity]), reliable: true,
                                    channel: DataEnvelope.reliableChannel, fromSDK: true, binary: true, in: found, except: nil)
            // Not sent to channels that are up: failed. (Channels still coming hold it: the ack decides.)
            guard sent == 1 || !participant.dataReady else { return promise.fail(RPCFailure(RPCFailure.sendFailed, "Failed to send")) }
            let pending = PendingRPC(participant: ObjectIdentifier(participant), promise: promise)
            pending.ackTimer = self.loop.scheduleTask(in: .milliseconds(Self.ackTimeoutMs)) { [weak self] in
                self?.settleRPC(id, .failure(RPCFailure(RPCFailure.connectionTimeout, "Connection timeout")))
            }
            pending.responseTimer = self.loop.scheduleTask(in: .milliseconds(timeoutMs)) { [weak self] in
                self?.settleRPC(id, .failure(RPCFailure(RPCFailure.responseTimeout, "Response timeout")))
            }
            self.pendingRPCs[id] = pending
        }
        return promise.futureResult
    }

    /// An ack or answer from `sender` to one of the server's own requests: taken here (true), not relayed.
    func takeRPCReply(_ packet: LKDataPacket, from sender: Participant) -> Bool {
        let id: String
        switch packet.value {
        case .rpcAck(let ack): id = ack.requestID
        case .rpcResponse(let response): id = response.requestID
        default: return false
        }
        guard let pending = pendingRPCs[id], pending.participant == ObjectIdentifier(sender) else { return false }
        switch packet.value {
        case .rpcAck:
            pending.ackTimer?.cancel()
            pending.ackTimer = nil
        case .rpcResponse(let response):
            switch response.value {
            case .payload(let payload): settleRPC(id, .success(payload))
            case .error(let error): settleRPC(id, .failure(RPCFailure(error.code, error.message, data: error.data)))
            case nil: settleRPC(id, .success(""))
            }
        default:
            break
        }
        return true
    }

    /// The requests waiting on a participant that left fail with recipientDisconnected.
    func failRPCs(of participant: Participant) {
        let mine = pendingRPCs.filter { $0.value.participant == ObjectIdentifier(participant) }.keys
        for id in mine { settleRPC(id, .failure(RPCFailure(RPCFailure.recipientDisconnected, "Recipient disconnected"))) }
    }

    private func settleRPC(_ id: String, _ result: Result<String, RPCFailure>) {
        guard let pending = pendingRPCs.removeValue(forKey: id) else { return }
        pending.settle(result)
    }
}
