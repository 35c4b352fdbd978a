import Foundation
import RTCE2EE
import RTCFuzzHarness
import Testing

private func hex(_ text: String) -> [UInt8] {
    var bytes: [UInt8] = []
    var index = text.startIndex
    while index < text.endIndex {
        let next = text.index(index, offsetBy: 2)
        bytes.append(UInt8(text[index..<next], radix: 16)!)
        index = next
    }
    return bytes
}

/// One derivation per passphrase for the whole suite: PBKDF2 at 100 000 iterations is slow by design.
private let testKey = Array("swift-rtc e2ee test key".utf8)
private let sharedProvider: E2EEKeyProvider = {
    let provider = E2EEKeyProvider()
    try! provider.setSharedKey(testKey)
    return provider
}()

@Suite("E2EE: keys")
struct E2EEKeyTests {
    // Expected values from Python's hashlib.pbkdf2_hmac('sha256', material, b'LKFrameEncryptionKey', 100000, n):
    // an implementation we did not write, with the parameters of LiveKit's frame cryptor.
    @Test("PBKDF2-HMAC-SHA256, LiveKit's salt, 100 000 iterations: the frame key", arguments: [
        ("swift-rtc e2ee test key", "aeef168909202c59ba9fc01795a0e1b4"),
        ("x", "c6a54a809e4c6cb7a4a5e01a4e6fc0d5"),
    ])
    func frameKey(passphrase: String, expected: String) throws {
        #expect(try E2EEKeyDerivation.frameKey(from: Array(passphrase.utf8)) == hex(expected))
    }

    @Test("a ratchet step: 256 bits of new material, then its own frame key")
    func ratchet() throws {
        let next = try E2EEKeyDerivation.ratchet(testKey)
        #expect(next == hex("aeef168909202c59ba9fc01795a0e1b4627467ca5a3a253078d288d0ca13f32f"))
        #expect(try E2EEKeyDerivation.frameKey(from: next) == hex("5a5a4c18a1518efc190c5c56347dd797"))
    }

    @Test("keys that cannot be used are refused with a typed error")
    func invalidKeys() {
        let provider = E2EEKeyProvider()
        #expect(throws: E2EEError.self) { try provider.setSharedKey([]) }
        #expect(throws: E2EEError.self) { try provider.setSharedKey(testKey, index: 16) }
        #expect(throws: E2EEError.self) { try provider.setSharedKey(testKey, index: -1) }
        #expect(throws: E2EEError.self) { try provider.setCurrentIndex(16) }
        #expect(provider.generation == 0)
    }
}

@Suite("E2EE: frames")
struct E2EEFrameTests {
    /// A VP8 keyframe's 10 clear bytes and a body, encrypted by Python's `cryptography` (AES-GCM,
    /// the clear bytes as additional data, IV 00..0b) in LiveKit's layout with the test key.
    static let foreignFrame = hex("1002009d012a800268019f90aeee82d01a8e0331fbdf7251f23bd4943996cb64d8ff81dea19e2cc28651000102030405060708090a0b0c00")

    @Test("a frame another implementation encrypted decrypts to its plain bytes")
    func foreignFrameDecrypts() throws {
        let receiver = try FrameCryptor(codec: .vp8, participant: "alice", provider: sharedProvider)
        let plain = try receiver.decrypt(Self.foreignFrame)
        #expect(plain == [0x10, 0x02, 0x00, 0x9d, 0x01, 0x2a, 0x80, 0x02, 0x68, 0x01] + Array("hello vp8 body!!".utf8))
        #expect(receiver.state == .ok)
    }

    @Test("the clear bytes follow the codec: VP8 keyframe 10, delta 3, Opus 1 (never more than the frame)", arguments: [
        (E2EECodec.vp8, [UInt8]([0x10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]), 10),
        (E2EECodec.vp8, [UInt8]([0x11, 1, 2, 3, 4, 5]), 3),
        (E2EECodec.vp8, [UInt8]([0x10, 1, 2]), 3),
        (E2EECodec.vp8, [UInt8]([0x31]), 1),
        (E2EECodec.vp8, [UInt8](), 0),
        (E2EECodec.opus, [UInt8]([0x78, 1, 2]), 1),
        (E2EECodec.opus, [UInt8](), 0),
    ])
    func clearBytes(codec: E2EECodec, frame: [UInt8], expected: Int) {
        #expect(codec.clearCount(of: frame) == expected)
    }

    @Test("round trip: the clear bytes stay as they were, the rest does not, the trailer names the IV and key", arguments: [
        (E2EECodec.vp8, [UInt8]([0x10, 0x02, 0x00, 0x9d, 0x01, 0x2a, 0x80, 0x02, 0x68, 0x01]), 5000),
        (E2EECodec.vp8, [UInt8]([0x31, 0x22, 0x00]), 700),
        (E2EECodec.vp8, [UInt8]([0x31, 0x22, 0x00]), 0),
        (E2EECodec.opus, [UInt8]([0x78]), 120),
        (E2EECodec.opus, [UInt8]([0x78]), 0),
    ])
    func roundTrip(codec: E2EECodec, header: [UInt8], bodyCount: Int) throws {
        let frame = header + (0..<bodyCount).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let sender = try FrameCryptor(codec: codec, participant: "alice", provider: sharedProvider)
        let receiver = try FrameCryptor(codec: codec, participant: "alice", provider: sharedProvider)
        let sealed = try sender.encrypt(frame, ssrc: 0xCAFE_F00D)
        let clear = codec.clearCount(of: frame)
        #expect(sealed.count == frame.count + EncryptedFrame.overhead)
        #expect(Array(sealed.prefix(clear)) == Array(frame.prefix(clear)))
        if frame.count > clear + 8 { #expect(Array(sealed[clear..<frame.count]) != Array(frame[clear...])) }
        #expect(Array(sealed.suffix(2)) == [12, 0])
        #expect(Array(sealed[(sealed.count - 14)..<(sealed.count - 10)]) == [0xCA, 0xFE, 0xF0, 0x0D])
        #expect(try receiver.decrypt(sealed) == frame)
        // Two frames never share an IV.
        let again = try sender.encrypt(frame, ssrc: 0xCAFE_F00D)
        #expect(Array(again.suffix(14).prefix(12)) != Array(sealed.suffix(14).prefix(12)))
    }

    @Test("an empty frame passes as it is both ways")
    func emptyFrame() throws {
        let cryptor = try FrameCryptor(codec: .opus, participant: nil, provider: sharedProvider)
        #expect(try cryptor.encrypt([], ssrc: 1) == [])
        #expect(try cryptor.decrypt([]) == [])
    }

    @Test("bad frames are refused by kind, never trapped on", arguments: [
        ("one byte", [UInt8]([0x10]), E2EEError.Kind.tooShort),
        ("a trailer and nothing", [UInt8]([12, 0]), E2EEError.Kind.tooShort),
        ("room for the trailer but not the tag and IV", [UInt8](repeating: 0, count: 20) + [12, 0], E2EEError.Kind.tooShort),
        ("a 16-byte IV", [UInt8](repeating: 1, count: 60) + [16, 0], E2EEError.Kind.badIVLength),
        ("IV length 0", [UInt8](repeating: 1, count: 60) + [0, 0], E2EEError.Kind.badIVLength),
        ("key index 16", [UInt8](repeating: 1, count: 60) + [12, 16], E2EEError.Kind.keyIndexOutOfRange),
        ("key index 255", [UInt8](repeating: 1, count: 60) + [12, 255], E2EEError.Kind.keyIndexOutOfRange),
        ("no key at index 5", [UInt8](repeating: 1, count: 60) + [12, 5], E2EEError.Kind.missingKey),
        ("zeros where the tag is", [UInt8](repeating: 1, count: 60) + [12, 0], E2EEError.Kind.authenticationFailed),
    ])
    func badFrames(name: String, frame: [UInt8], kind: E2EEError.Kind) throws {
        let provider = E2EEKeyProvider(options: .init(ratchetWindowSize: 0))
        try provider.setSharedKey(Array("k".utf8))
        let receiver = try FrameCryptor(codec: .vp8, participant: "bob", provider: provider)
        var caught: E2EEError?
        do { _ = try receiver.decrypt(frame) } catch { caught = error }
        #expect(caught?.kind == kind, "\(name): \(String(describing: caught))")
        #expect(receiver.state == (kind == .missingKey ? .missingKey : .decryptionFailed))
    }

    @Test("a changed clear byte (the additional data) or ciphertext byte fails authentication")
    func tampering() throws {
        let sender = try FrameCryptor(codec: .vp8, participant: nil, provider: sharedProvider)
        let provider = E2EEKeyProvider(options: .init(ratchetWindowSize: 0))
        try provider.setSharedKey(testKey)
        let receiver = try FrameCryptor(codec: .vp8, participant: nil, provider: provider)
        let frame: [UInt8] = [0x10, 0x02, 0x00, 0x9d, 0x01, 0x2a, 0x80, 0x02, 0x68, 0x01] + Array(repeating: 7, count: 64)
        let sealed = try sender.encrypt(frame, ssrc: 9)
        for position in [4, 12, sealed.count - 20] {
            var bent = sealed
            bent[position] ^= 0x01
            #expect(throws: E2EEError.self) { try receiver.decrypt(bent) }
        }
        #expect(try receiver.decrypt(sealed) == frame)
    }

    @Test("random bytes: thousands of frames, every one refused, none crashes")
    func randomBytes() throws {
        let receiver = try FrameCryptor(codec: .vp8, participant: nil, provider: sharedProvider)
        var generator = SystemRandomNumberGenerator()
        var refused = 0
        for _ in 0..<3000 {
            let count = Int.random(in: 1...200, using: &generator)
            var frame = (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
            if frame.count >= 2, Bool.random(using: &generator) { frame[frame.count - 2] = 12; frame[frame.count - 1] = 0 }
            if (try? receiver.decrypt(frame)) == nil { refused += 1 }
        }
        #expect(refused == 3000)
    }
}

@Suite("E2EE: key changes")
struct E2EEKeyChangeTests {
    @Test("a wrong key fails, fails fast after its ratchet window, and a right key set later recovers the stream")
    func wrongKeyThenRight() throws {
        let sender = try FrameCryptor(codec: .opus, participant: nil, provider: sharedProvider)
        let provider = E2EEKeyProvider(options: .init(ratchetWindowSize: 2))
        try provider.setSharedKey(Array("wrong".utf8))
        let receiver = try FrameCryptor(codec: .opus, participant: nil, provider: provider)
        let frames = try (0..<5).map { try sender.encrypt([0x78, UInt8($0), 1, 2, 3], ssrc: 7) }
        for frame in frames.prefix(3) {
            #expect(throws: E2EEError.self) { try receiver.decrypt(frame) }
            #expect(receiver.state == .decryptionFailed)
        }
        try provider.setSharedKey(testKey)
        #expect(try receiver.decrypt(frames[3]) == [0x78, 3, 1, 2, 3])
        #expect(receiver.state == .ok)
    }

    @Test("no key, then a key: missing key first, the stream once the key is set")
    func missingThenSet() throws {
        let sender = try FrameCryptor(codec: .vp8, participant: nil, provider: sharedProvider)
        let provider = E2EEKeyProvider()
        let receiver = try FrameCryptor(codec: .vp8, participant: "alice", provider: provider)
        let sealed = try sender.encrypt([0x31, 0, 0, 9, 9, 9], ssrc: 3)
        #expect(throws: E2EEError(.missingKey, "decrypting with key index 0")) { try receiver.decrypt(sealed) }
        #expect(receiver.state == .missingKey)
        try provider.setSharedKey(testKey)
        #expect(try receiver.decrypt(sealed) == [0x31, 0, 0, 9, 9, 9])
    }

    @Test("a sender that rotates to a new key index: the receiver holding both keys decrypts both, with no gap")
    func rotation() throws {
        let senderKeys = E2EEKeyProvider(), receiverKeys = E2EEKeyProvider()
        for provider in [senderKeys, receiverKeys] {
            try provider.setSharedKey(Array("first".utf8), index: 0)
        }
        let sender = try FrameCryptor(codec: .opus, participant: nil, provider: senderKeys)
        let receiver = try FrameCryptor(codec: .opus, participant: nil, provider: receiverKeys)
        let before = try sender.encrypt([0x78, 1], ssrc: 1)
        try receiverKeys.setSharedKey(Array("second".utf8), index: 1)  // the receiver learns it first
        try senderKeys.setSharedKey(Array("second".utf8), index: 1)
        let after = try sender.encrypt([0x78, 2], ssrc: 1)
        #expect(after.last == 1)
        #expect(try receiver.decrypt(before) == [0x78, 1])
        #expect(try receiver.decrypt(after) == [0x78, 2])
        #expect(try receiver.decrypt(before) == [0x78, 1])  // late frames of the old key still open
    }

    @Test("a sender that ratchets: the receiver finds the key within its window and keeps it")
    func ratchetFound() throws {
        let senderKeys = E2EEKeyProvider(), receiverKeys = E2EEKeyProvider(options: .init(ratchetWindowSize: 3))
        try senderKeys.setSharedKey(testKey)
        try receiverKeys.setSharedKey(testKey)
        try senderKeys.ratchet(index: 0)
        try senderKeys.ratchet(index: 0)
        let sender = try FrameCryptor(codec: .opus, participant: nil, provider: senderKeys)
        let receiver = try FrameCryptor(codec: .opus, participant: nil, provider: receiverKeys)
        #expect(try receiver.decrypt(try sender.encrypt([0x78, 5], ssrc: 2)) == [0x78, 5])
        #expect(receiver.state == .keyRatcheted)
        #expect(receiverKeys.ring(for: nil).keys[0] == senderKeys.ring(for: nil).keys[0])
        #expect(try receiver.decrypt(try sender.encrypt([0x78, 6], ssrc: 2)) == [0x78, 6])
        #expect(receiver.state == .ok)
    }

    @Test("per-participant keys: each sender's frames open only with its own identity's key")
    func perParticipant() throws {
        let keys = E2EEKeyProvider(options: .init(sharedKey: false, ratchetWindowSize: 0))
        try keys.setKey(Array("alice's".utf8), participant: "alice")
        try keys.setKey(Array("bob's".utf8), participant: "bob")
        let alice = try FrameCryptor(codec: .opus, participant: "alice", provider: keys)
        let fromAlice = try alice.encrypt([0x78, 1, 2], ssrc: 5)
        let asAlice = try FrameCryptor(codec: .opus, participant: "alice", provider: keys)
        let asBob = try FrameCryptor(codec: .opus, participant: "bob", provider: keys)
        let asCarol = try FrameCryptor(codec: .opus, participant: "carol", provider: keys)
        #expect(try asAlice.decrypt(fromAlice) == [0x78, 1, 2])
        #expect(throws: E2EEError.self) { try asBob.decrypt(fromAlice) }
        #expect(throws: E2EEError.self) { try asCarol.decrypt(fromAlice) }
        #expect(asCarol.state == .missingKey)
    }

    @Test("every committed e2ee fuzz input runs through the fuzz entry point")
    func corpus() throws {
        let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Fuzz/Corpus/e2ee")
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        #expect(files.count >= 8)
        for file in files { FuzzHarness.e2ee([UInt8](try Data(contentsOf: folder.appendingPathComponent(file)))) }
    }
}
