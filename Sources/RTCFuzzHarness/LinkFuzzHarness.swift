import ScreenCapture

extension FuzzHarness {
    /// A host ↔ sharer link message as either process receives it: decode, and a message that
    /// decodes encodes back to the same bytes (the encoding is canonical).
    public static func link(_ bytes: [UInt8]) {
        guard let message = try? LinkCodec.decode(bytes) else { return }
        precondition(LinkCodec.encode(message) == bytes, "link message round trip changed the bytes")
    }
}
