import NIOWebSocket
import Signaling

/// What a signaling connection speaks, between its WebSocket frames and the SFU core's messages
/// (our protocol's). Ours passes text through; LiveKit's (``LiveKitDialect``) translates protobuf.
/// Called on the connection's event loop only.
protocol SignalingDialect: AnyObject {
    /// Messages (our protocol's bytes) the core gets when the connection opens: LiveKit's join
    /// comes with the upgrade, ours with the first frame.
    func opening() -> [[UInt8]]
    /// One data frame from the client.
    func inbound(_ payload: [UInt8], binary: Bool) -> DialectOutput
    /// One message from the core (or from the room's node, relayed as our protocol's bytes).
    func outbound(_ envelope: ServerEnvelope) -> DialectOutput
}

/// What a frame or a core message turns into.
struct DialectOutput {
    /// Our protocol's messages for the core (or the room's node).
    var toCore: [[UInt8]] = []
    /// Frames for the client: text (ours) or binary (LiveKit's).
    var toClient: [[UInt8]] = []
    var binary = false
    /// Ends the connection after `toClient`, with this reason and WebSocket close code.
    var close: String?
    var closeCode = WebSocketErrorCode.normalClosure
}

/// Our JSON signaling: text frames are our messages, as they are.
final class NativeDialect: SignalingDialect {
    func opening() -> [[UInt8]] { [] }
    func inbound(_ payload: [UInt8], binary: Bool) -> DialectOutput { DialectOutput(toCore: [payload]) }
    func outbound(_ envelope: ServerEnvelope) -> DialectOutput { DialectOutput(toClient: [envelope.encoded()]) }
}
