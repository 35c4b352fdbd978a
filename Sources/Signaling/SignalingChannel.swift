/// What an engine's session needs of its signaling connection, whichever protocol it speaks:
/// ours (``SignalingClient``) or LiveKit's (`LiveKitSignalingClient`, which turns our messages
/// into LiveKit's and back). The session speaks our messages only.
public protocol SignalingChannel: AnyObject, Sendable {
    /// The server's host (a loopback host lets the media transports offer loopback candidates).
    var host: String { get }
    /// Server messages that are not replies to a request: offers, participant updates, leave, ...
    var events: AsyncStream<ServerMessage> { get }
    /// The joined connection's life: lost, then resumed within the window (or the stream ends).
    var connectionEvents: AsyncStream<SignalingConnectionEvent> { get }
    /// Opens the connection (a protocol that joins in its URL may open it with the join instead).
    func connect() async throws
    /// Sends a request and waits for its reply (a server `error` is thrown).
    func request(_ message: ClientMessage) async throws -> ServerMessage
    /// Sends requests back to back and returns each one's reply or error, in order.
    func requests(_ messages: [ClientMessage]) async throws -> [Result<ServerMessage, any Error>]
    /// Sends a message without waiting for anything.
    func send(_ message: ClientMessage) async throws
    /// Drops the connection without a leave (tests of resume).
    func dropConnection() async
    /// Leaves (if joined) and closes.
    func close() async
}

extension SignalingClient: SignalingChannel {}
