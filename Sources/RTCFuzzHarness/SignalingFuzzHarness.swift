import Signaling

extension FuzzHarness {
    /// Signaling text as a server and a client receive it: decode, re-encode, decode again; and the
    /// same bytes as a token.
    public static func signaling(_ bytes: [UInt8]) {
        if let envelope = try? ClientEnvelope.decode(bytes) {
            precondition(try! ClientEnvelope.decode(envelope.encoded()) == envelope, "client message round trip")
        }
        if let envelope = try? ServerEnvelope.decode(bytes) {
            precondition(try! ServerEnvelope.decode(envelope.encoded()) == envelope, "server message round trip")
        }
        _ = try? AccessToken.verify(String(decoding: bytes, as: UTF8.self), secret: "fuzz", now: 1000)
    }
}
