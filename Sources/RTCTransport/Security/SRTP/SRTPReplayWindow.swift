/// Packet indices and the replay list of one SRTP or SRTCP stream
/// ([RFC 3711 §3.3.1-3.3.2](https://www.rfc-editor.org/rfc/rfc3711#section-3.3.1), Appendix A).
///
/// The window remembers which of the `size` indices up to the highest accepted one were received,
/// as a ring of bits (no shifting: a newer index clears the bits it passes over). A packet is
/// looked up with ``check(_:)`` before it is authenticated and recorded with ``accept(_:)`` after.
struct SRTPReplayWindow: Sendable {
    /// The highest index accepted (nil before the first).
    private(set) var highest: UInt64?
    private var bits: [UInt64]
    /// Indices remembered below and at ``highest``; a multiple of 64.
    let size: Int

    enum Verdict: Equatable { case fresh, replay, tooOld }

    init(size: Int) {
        let words = max(1, (size + 63) / 64)
        self.size = words * 64
        bits = Array(repeating: 0, count: words)
    }

    func check(_ index: UInt64) -> Verdict {
        guard let highest, index <= highest else { return .fresh }
        if highest - index >= UInt64(size) { return .tooOld }
        return isSet(index) ? .replay : .fresh
    }

    mutating func accept(_ index: UInt64) {
        if let last = highest, index <= last {
            set(index)
            return
        }
        if let last = highest, index - last < UInt64(size) {
            var clear = last + 1
            while clear < index {
                unset(clear)
                clear += 1
            }
        } else {
            for word in bits.indices { bits[word] = 0 }
        }
        highest = index
        set(index)
    }

    private func isSet(_ index: UInt64) -> Bool {
        let bit = Int(index % UInt64(size))
        return bits[bit >> 6] & (1 << UInt64(bit & 63)) != 0
    }

    private mutating func set(_ index: UInt64) {
        let bit = Int(index % UInt64(size))
        bits[bit >> 6] |= 1 << UInt64(bit & 63)
    }

    private mutating func unset(_ index: UInt64) {
        let bit = Int(index % UInt64(size))
        bits[bit >> 6] &= ~(1 << UInt64(bit & 63))
    }
}

/// The 48-bit SRTP packet index of sequence number `sequence`, given the highest index seen
/// on its stream (RFC 3711 Appendix A): the rollover counter guessed as the one that puts the
/// packet nearest the highest. Before any, and where the guess would fall below zero, the
/// rollover counter is 0 (as libsrtp guesses).
func srtpEstimateIndex(sequence: UInt16, highest: UInt64?) -> UInt64 {
    guard let highest else { return UInt64(sequence) }
    let roc = Int64(highest >> 16)
    let last = Int(highest & 0xFFFF), seq = Int(sequence)
    var guess = roc
    if last < 0x8000 {
        if seq - last > 0x8000 { guess = roc - 1 }
    } else if last - 0x8000 > seq {
        guess = roc + 1
    }
    if guess < 0 { guess = 0 }
    return UInt64(guess) << 16 | UInt64(sequence)
}
