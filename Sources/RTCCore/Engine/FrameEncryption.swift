/// This client's end-to-end encryption (docs/e2ee.md): the keys, and the identity whose ring its
/// own frames are sent with (the shared ring in shared-key mode).
struct FrameEncryption: Sendable {
    let keys: E2EEKeyProvider
    let uid: String
}

/// Encrypts one local track's encoded frames on its encode thread. A frame that cannot be
/// encrypted (no key at the index sent with) is dropped, never sent in the clear; the track's
/// error callback hears it once per change of state, not per frame.
struct OutgoingFrameEncryptor {
    private let cryptor: FrameCryptor
    private var told: FrameCryptor.State = .new

    init?(_ encryption: FrameEncryption?, codec: E2EECodec) {
        guard let encryption, let cryptor = try? FrameCryptor(codec: codec, participant: encryption.uid, provider: encryption.keys)
        else { return nil }
        self.cryptor = cryptor
    }

    /// `frame` encrypted for the stream `ssrc`, or nil to drop it (`report` told why, once).
    mutating func seal(_ frame: [UInt8], ssrc: UInt32, report: ((RTCEngineError) -> Void)?) -> [UInt8]? {
        do {
            let sealed = try cryptor.encrypt(frame, ssrc: ssrc)
            told = cryptor.state
            return sealed
        } catch {
            if cryptor.state != told {
                told = cryptor.state
                report?(RTCEngineError(.invalidState, "end-to-end encryption: \(error) (frames are dropped until a key is set)"))
            }
            return nil
        }
    }
}
