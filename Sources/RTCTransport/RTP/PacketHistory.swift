/// The last packets of a stream by RTP sequence number, to answer NACKs: a ring where a packet
/// stays until one `capacity` sequence numbers later takes its slot. The sender keeps what it sent;
/// the SFU keeps what publishers sent, so it can repair a subscriber without asking upstream.
public struct PacketHistory<Packet>: Sendable where Packet: Sendable {
    // Inlinable: the server's caches hold packets of its own type, and an unspecialized generic
    // insert looked up witness tables and metadata on every packet a publisher sent.
    /// Made on the first insert: a history that never holds a packet costs nothing.
    @usableFromInline var slots: [(sequence: UInt16, packet: Packet)?] = []
    public let capacity: Int

    public init(capacity: Int = 512) { self.capacity = max(1, capacity) }

    @inlinable
    public mutating func insert(_ packet: Packet, sequence: UInt16) {
        if slots.isEmpty { slots = Array(repeating: nil, count: capacity) }
        slots[Int(sequence) % capacity] = (sequence, packet)
    }

    /// The packet with this sequence number, if it is still held.
    @inlinable
    public func packet(_ sequence: UInt16) -> Packet? {
        guard !slots.isEmpty, let slot = slots[Int(sequence) % capacity], slot.sequence == sequence else { return nil }
        return slot.packet
    }
}
