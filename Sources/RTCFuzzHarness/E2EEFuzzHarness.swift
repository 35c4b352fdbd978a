import RTCE2EE

extension FuzzHarness {
    /// Keys the e2ee target decrypts with, derived once (PBKDF2 is slow by design).
    private static let e2eeProvider: E2EEKeyProvider = {
        let provider = E2EEKeyProvider(options: .init(sharedKey: true, ratchetWindowSize: 1))
        try! provider.setSharedKey(Array("fuzz key".utf8), index: 0)
        return provider
    }()

    /// LiveKit's encrypted frame from a hostile sender: the first byte picks the codec and whether
    /// the rest is taken as it is or first encrypted by a sender with the same key. Taken as it is,
    /// it must be refused with a typed error (a trailer too short, a wrong IV length, an index out of
    /// the ring, no key there, or a tag that does not match); encrypted first, it must decrypt to
    /// exactly what went in.
    public static func e2ee(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        let codec: E2EECodec = first & 1 == 0 ? .vp8 : .opus
        let frame = Array(bytes.dropFirst())
        let receiver = try! FrameCryptor(codec: codec, participant: "fuzz", provider: e2eeProvider)
        if first & 2 != 0 {
            let sender = try! FrameCryptor(codec: codec, participant: "fuzz", provider: e2eeProvider)
            let sealed = try! sender.encrypt(frame, ssrc: 0x1234_5678)
            let opened = try? receiver.decrypt(sealed)
            precondition(opened == frame, "an encrypted frame did not decrypt to itself")
            return
        }
        if let layout = try? EncryptedFrame(parsing: frame, clearCount: codec.clearCount(of: frame)) {
            precondition(layout.cipherRange.upperBound + EncryptedFrame.overhead == frame.count, "the parts do not add up")
            precondition(layout.cipherRange.lowerBound <= layout.cipherRange.upperBound)
        }
        _ = try? receiver.decrypt(frame)
    }
}
