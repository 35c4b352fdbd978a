import RedisWire

extension FuzzHarness {
    /// Redis replies as a cluster node reads them: parse reply after reply until the bytes end or
    /// are refused; every reply ends past where it started and within the bytes.
    public static func resp(_ bytes: [UInt8]) {
        var index = 0
        while let (_, next) = try? RESP.parse(bytes, from: index) {
            precondition(next > index && next <= bytes.count, "RESP reply did not advance within the bytes")
            index = next
        }
    }
}
