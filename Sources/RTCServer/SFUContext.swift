import Logging
import NIOCore
import RTCConventions
import RTCTransport

#if canImport(Glibc)
import Glibc
#endif

/// What the SFU's parts share: the configuration, the media port and its event loop, the
/// server's RTCP SSRC, the counters and the two clocks. One per ``SFU``, confined to its loop like
/// everything else there.
///
/// The clocks are the only time sources of the SFU: the wall clock (seconds since 1970) for
/// tokens, keepalive and resume windows; the monotonic clock (nanoseconds) for the packet path,
/// RTCP, estimates and throttles. Both are replaceable in tests.
final class SFUContext: @unchecked Sendable {
    let configuration: ServerConfiguration
    let port: SharedMediaPort
    let loop: EventLoop
    /// The SSRC the server's own RTCP (reports, feedback, requests) is sent as.
    let serverSSRC: UInt32
    /// The screen-share uid rule under the configured suffix.
    let screenShare: ScreenShareUID
    var counters = ServerCounters()
    /// The server's log (negotiation outcomes at info level).
    var logger = Logger(label: "rtc.sfu")
    /// Seconds since 1970.
    var wallClock: @Sendable () -> Int64 = { Int64(time(nil)) }
    /// Monotonic nanoseconds (any origin).
    var monotonicClock: @Sendable () -> UInt64 = { NIODeadline.now().uptimeNanoseconds }

    init(configuration: ServerConfiguration, port: SharedMediaPort) {
        self.configuration = configuration
        self.port = port
        loop = port.channel.eventLoop
        screenShare = ScreenShareUID(suffix: configuration.screenShareSuffix)
        var random = SystemRandomNumberGenerator()
        serverSSRC = UInt32.random(in: 1...UInt32.max, using: &random)
    }

    /// The monotonic clock in microseconds.
    var nowUs: Int64 { Int64(monotonicClock() / 1000) }
}
