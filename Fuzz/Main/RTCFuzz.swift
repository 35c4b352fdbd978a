import RTCFuzzHarness

/// Every libFuzzer target, one per parser of untrusted bytes, in one executable: `rtc-fuzz NAME
/// [libFuzzer's flags and corpus folders]`, or without `-DFUZZING` `rtc-fuzz NAME FILE...` to replay
/// inputs (`make fuzz`, `make fuzz-replay`; docs/testing.md). One executable, not one per target:
/// the test build links it once.
@main
struct RTCFuzz {
    static func main() {
        let targets: [String: ([UInt8]) -> Void] = [
            "dcep": FuzzHarness.dcep,
            "dtls": FuzzHarness.dtls,
            "e2ee": FuzzHarness.e2ee,
            "ice": FuzzHarness.ice,
            "ivf": FuzzHarness.ivf,
            "link": FuzzHarness.link,
            "livekit": FuzzHarness.liveKit,
            "ogg": FuzzHarness.ogg,
            "opus": FuzzHarness.opus,
            "resp": FuzzHarness.resp,
            "rtcp": FuzzHarness.rtcp,
            "rtp": FuzzHarness.rtp,
            "sdp": FuzzHarness.sdp,
            "srtp": FuzzHarness.srtp,
            "stun": FuzzHarness.stun,
            "signaling": FuzzHarness.signaling,
            "vp8": FuzzHarness.vp8,
            "wav": FuzzHarness.wav,
            "y4m": FuzzHarness.y4m,
        ]
        FuzzDriver.run(targets: targets)
    }
}
