import Synchronization

/// Hands out transport-wide sequence numbers across the tracks of one transport (the pacer stamps
/// them as packets leave), and holds its congestion control.
final class TransportSequencer: Sendable {
    private let next = Mutex<UInt16>(UInt16.random(in: 0...UInt16.max))
    let congestion = SendSideCongestion()
    func take() -> UInt16 { next.withLock { value in defer { value &+= 1 }; return value } }
}
