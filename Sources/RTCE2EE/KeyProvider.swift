import Synchronization

/// The keys a participant encrypts and decrypts frames with, as LiveKit's key providers hold them:
/// one ring of ``EncryptedFrame/keyRingSize`` keys shared by the whole room (`sharedKey`), or one
/// ring per participant identity. The sender encrypts with its ring's current index; a receiver
/// decrypts with the index each frame's trailer names.
///
/// Safe from any thread. Frame cryptors do not take its lock per frame: they watch ``generation``
/// (an atomic that grows with every change) and read a ring again only when it moved.
public final class E2EEKeyProvider: Sendable {
    public struct Options: Sendable, Hashable {
        /// One ring for everyone (LiveKit's shared key); else a ring per identity.
        public var sharedKey: Bool
        /// The PBKDF2 salt of every derivation (LiveKit's default unless every peer changes it).
        public var ratchetSalt: [UInt8]
        /// How many ratchet steps a receiver tries on a frame that fails with the key it has (a
        /// sender that ratcheted without telling): once per key, then that key fails fast until a
        /// key is set again.
        public var ratchetWindowSize: Int

        public init(sharedKey: Bool = true, ratchetSalt: [UInt8] = E2EEKeyDerivation.defaultSalt, ratchetWindowSize: Int = 8) {
            self.sharedKey = sharedKey
            self.ratchetSalt = ratchetSalt
            self.ratchetWindowSize = max(0, ratchetWindowSize)
        }
    }

    /// A ring as a cryptor reads it.
    public struct Ring: Sendable {
        public var keys: [E2EEKeySet?] = Array(repeating: nil, count: EncryptedFrame.keyRingSize)
        /// The index a sender encrypts with.
        public var currentIndex = 0
    }

    private struct State {
        var shared = Ring()
        var participants: [String: Ring] = [:]
    }

    public let options: Options
    private let state = Mutex(State())
    private let changes = Atomic<Int>(0)

    public init(options: Options = Options()) {
        self.options = options
    }

    /// Grows with every key set or ratcheted.
    public var generation: Int { changes.load(ordering: .acquiring) }

    /// Sets the shared key (a passphrase's bytes, or raw key material) at `index`, which becomes
    /// the index this client sends with unless `makeCurrent` is false (a rotation: every peer
    /// learns the new key first, then senders move to it with ``setCurrentIndex(_:participant:)``).
    /// Derives the key: tens of milliseconds.
    public func setSharedKey(_ material: [UInt8], index: Int = 0, makeCurrent: Bool = true) throws(E2EEError) {
        try set(material, participant: nil, index: index, makeCurrent: makeCurrent)
    }

    /// Sets `participant`'s key at `index` (per-participant mode; its own identity for sending).
    public func setKey(_ material: [UInt8], participant: String, index: Int = 0, makeCurrent: Bool = true) throws(E2EEError) {
        try set(material, participant: participant, index: index, makeCurrent: makeCurrent)
    }

    /// Makes `index` the one sent with (its key must be set already for frames to go out).
    public func setCurrentIndex(_ index: Int, participant: String? = nil) throws(E2EEError) {
        guard (0..<EncryptedFrame.keyRingSize).contains(index) else { throw E2EEError(.invalidKey, "key index \(index)") }
        update(participant) { $0.currentIndex = index }
    }

    /// Moves the key at `index` one ratchet step on (both ends must do it, or the receiver finds it
    /// within its window); returns the new material, nil when no key is set there.
    @discardableResult
    public func ratchet(index: Int, participant: String? = nil) throws(E2EEError) -> [UInt8]? {
        guard (0..<EncryptedFrame.keyRingSize).contains(index) else { throw E2EEError(.invalidKey, "key index \(index)") }
        guard let current = ring(for: participant).keys[index] else { return nil }
        let next = try E2EEKeySet(material: E2EEKeyDerivation.ratchet(current.material, salt: options.ratchetSalt), salt: options.ratchetSalt)
        update(participant) { $0.keys[index] = next }
        return next.material
    }

    /// The ring `participant` is read with: the shared one in shared mode.
    public func ring(for participant: String?) -> Ring {
        state.withLock { state in
            if options.sharedKey || participant == nil { return state.shared }
            return state.participants[participant!] ?? Ring()
        }
    }

    /// A receiver found the sender one or more ratchet steps on: the ring takes the newer key,
    /// unless it changed meanwhile (then the change wins).
    func adopt(_ ratcheted: E2EEKeySet, replacing old: E2EEKeySet, index: Int, participant: String?) {
        update(participant) { ring in
            if ring.keys[index] == old { ring.keys[index] = ratcheted }
        }
    }

    private func set(_ material: [UInt8], participant: String?, index: Int, makeCurrent: Bool) throws(E2EEError) {
        guard (0..<EncryptedFrame.keyRingSize).contains(index) else {
            throw E2EEError(.invalidKey, "key index \(index) (the ring holds \(EncryptedFrame.keyRingSize))")
        }
        let keys = try E2EEKeySet(material: material, salt: options.ratchetSalt)
        update(participant) {
            $0.keys[index] = keys
            if makeCurrent { $0.currentIndex = index }
        }
    }

    private func update(_ participant: String?, _ change: (inout Ring) -> Void) {
        state.withLock { state in
            if options.sharedKey || participant == nil {
                change(&state.shared)
            } else {
                change(&state.participants[participant!, default: Ring()])
            }
        }
        changes.add(1, ordering: .releasing)
    }
}
