#if canImport(Glibc)
import Glibc
#endif

/// WebRTC data channels over one SCTP association ([RFC 8831](https://www.rfc-editor.org/rfc/rfc8831)):
/// channels opened by either end with DCEP ([RFC 8832](https://www.rfc-editor.org/rfc/rfc8832)),
/// messages as strings or binary (payload protocol ids 51/53, 56/57 for empty ones), channels
/// closed by resetting their streams.
///
/// Threading: the association's callbacks (which run inside usrsctp, on whichever thread) only hand
/// work to `executor` (the owner's event loop); everything else, events included, runs there, so an
/// event handler may send (a server relaying a message) without re-entering usrsctp.
public final class DataChannelEndpoint: @unchecked Sendable {
    /// One channel: its SCTP stream (its id) and what DCEP said of it.
    public struct Channel: Sendable, Hashable {
        public let stream: UInt16
        public var parameters: DCEPMessage.DataChannelParameters
    }

    public enum Event: Sendable {
        /// The association is up: channels can be opened.
        case connected
        /// The peer opened a channel (we acknowledged it), or acknowledged ours.
        case opened(Channel)
        /// A whole message on a channel.
        case message(Channel, [UInt8], binary: Bool)
        /// The channel on this stream was closed (by either end).
        case closed(UInt16)
        /// The association went down.
        case disconnected
    }

    public struct Error: Swift.Error, Sendable, Hashable, CustomStringConvertible {
        public let description: String
        /// Too large for the peer's `a=max-message-size` (or ours).
        public var isTooLarge = false
    }

    /// Called on `executor` with each event.
    public var onEvent: (@Sendable (Event) -> Void)?
    public let association: SCTPAssociation
    private let executor: @Sendable (@escaping @Sendable () -> Void) -> Void
    /// Open channels by stream; channels we opened that the peer has not acknowledged yet.
    private var channels: [UInt16: Channel] = [:]
    private var unacknowledged: Set<UInt16> = []
    private var nextStream: UInt16
    public private(set) var isConnected = false
    /// Messages and bytes dropped: DCEP that did not parse, data on a stream with no channel.
    public private(set) var malformedDropped = 0
    /// The most channels an end may have open (streams 0...1023).
    public static let maxChannels = 1024

    /// - Parameters: `dtlsClient`: whether this end is the DTLS client, which opens channels on
    ///   even streams (the server on odd ones, RFC 8832 §6); `executor` runs work on the owner's loop.
    public init(association: SCTPAssociation, dtlsClient: Bool,
                executor: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void) {
        self.association = association
        self.executor = executor
        nextStream = dtlsClient ? 0 : 1
        association.onMessage = { [weak self] stream, ppid, data in
            guard let self else { return }
            self.executor { self.received(stream: stream, ppid: ppid, data) }
        }
        association.onState = { [weak self] up in
            guard let self else { return }
            self.executor {
                self.isConnected = up
                self.onEvent?(up ? .connected : .disconnected)
            }
        }
        association.onStreamReset = { [weak self] stream in
            guard let self else { return }
            self.executor { self.peerClosed(stream) }
        }
    }

    /// The open channels (ours and the peer's), by stream.
    public var openChannels: [Channel] { channels.values.sorted { $0.stream < $1.stream } }

    /// The open channel labelled `label`, if any.
    public func channel(labelled label: String) -> Channel? { openChannels.first { $0.parameters.label == label } }

    /// Opens a channel: DCEP OPEN on a new stream. Messages may follow at once (an ordered
    /// channel's data cannot overtake its OPEN). Returns its stream.
    @discardableResult
    public func open(_ parameters: DCEPMessage.DataChannelParameters) throws(Error) -> UInt16 {
        guard isConnected else { throw Error(description: "the SCTP association is not up") }
        var stream = nextStream
        while channels[stream] != nil { stream &+= 2 }
        guard Int(stream) < Self.maxChannels else { throw Error(description: "no stream left for another channel") }
        nextStream = stream &+ 2
        do {
            try association.send(stream: stream, ppid: DCEPMessage.PPID.dcep.rawValue, DCEPMessage.open(parameters).serialized)
        } catch {
            throw Error(description: "DCEP OPEN: \(error)")
        }
        channels[stream] = Channel(stream: stream, parameters: parameters)
        unacknowledged.insert(stream)
        return stream
    }

    /// Sends a message on an open channel, with the channel's ordering and reliability.
    public func send(_ data: [UInt8], binary: Bool, on stream: UInt16) throws(Error) {
        guard let channel = channels[stream] else { throw Error(description: "no open channel on stream \(stream)") }
        let ppid: DCEPMessage.PPID = data.isEmpty ? (binary ? .emptyBinary : .emptyString) : (binary ? .binary : .string)
        do {
            // An empty message is sent as one zero byte (RFC 8831 §6.6).
            try association.send(stream: stream, ppid: ppid.rawValue, data.isEmpty ? [0] : data,
                                 ordered: channel.parameters.ordered, reliability: channel.parameters.reliability)
        } catch {
            throw Error(description: error.description, isTooLarge: error.code == EMSGSIZE)
        }
    }

    /// Closes a channel: its outgoing stream is reset; the peer resets its own in turn.
    public func close(stream: UInt16) {
        guard channels.removeValue(forKey: stream) != nil else { return }
        unacknowledged.remove(stream)
        association.resetStream(stream)
        onEvent?(.closed(stream))
    }

    private func received(stream: UInt16, ppid: UInt32, _ data: [UInt8]) {
        switch DCEPMessage.PPID(rawValue: ppid) {
        case .dcep:
            guard let message = try? DCEPMessage(parsing: data) else {
                malformedDropped += 1
                return
            }
            switch message {
            case .open(let parameters):
                // A stream of the peer's parity that is free (a repeated OPEN re-opens it).
                guard Int(stream) < Self.maxChannels else {
                    malformedDropped += 1
                    return
                }
                let channel = Channel(stream: stream, parameters: parameters)
                channels[stream] = channel
                try? association.send(stream: stream, ppid: DCEPMessage.PPID.dcep.rawValue, DCEPMessage.ack.serialized)
                onEvent?(.opened(channel))
            case .ack:
                guard unacknowledged.remove(stream) != nil, let channel = channels[stream] else { return }
                onEvent?(.opened(channel))
            }
        case .string, .binary:
            guard let channel = channels[stream] else {
                malformedDropped += 1
                return
            }
            onEvent?(.message(channel, data, binary: ppid == DCEPMessage.PPID.binary.rawValue))
        case .emptyString, .emptyBinary:
            guard let channel = channels[stream] else {
                malformedDropped += 1
                return
            }
            onEvent?(.message(channel, [], binary: ppid == DCEPMessage.PPID.emptyBinary.rawValue))
        case nil:
            malformedDropped += 1
        }
    }

    private func peerClosed(_ stream: UInt16) {
        guard channels.removeValue(forKey: stream) != nil else { return }
        unacknowledged.remove(stream)
        association.resetStream(stream)  // closing is both directions (RFC 8831 §6.7)
        onEvent?(.closed(stream))
    }
}
