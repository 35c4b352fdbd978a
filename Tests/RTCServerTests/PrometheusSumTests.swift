@testable import RTCServer
import Testing

/// `PrometheusSum`: the front of `--media-processes` adds up its processes' `/metrics` pages.
@Suite("Prometheus pages added up")
struct PrometheusSumTests {
    static let front = """
        # TYPE rtc_rooms gauge
        rtc_rooms 1
        # HELP rtc_packets_out_total Packets sent.
        # TYPE rtc_packets_out_total counter
        rtc_packets_out_total 1000
        # TYPE rtc_layer_switches_total counter
        rtc_layer_switches_total{direction="up"} 2
        rtc_layer_switches_total{direction="down"} 1
        # TYPE rtc_forward_latency_seconds histogram
        rtc_forward_latency_seconds_bucket{le="5e-06"} 10
        rtc_forward_latency_seconds_bucket{le="+Inf"} 12
        rtc_forward_latency_seconds_sum 0.125
        rtc_forward_latency_seconds_count 12
        # TYPE process_cpu_seconds_total counter
        process_cpu_seconds_total 1.5

        """
    static let child = """
        # TYPE rtc_rooms gauge
        rtc_rooms 2
        # HELP rtc_packets_out_total Packets sent.
        # TYPE rtc_packets_out_total counter
        rtc_packets_out_total 500
        # TYPE rtc_layer_switches_total counter
        rtc_layer_switches_total{direction="down"} 4
        # TYPE rtc_forward_latency_seconds histogram
        rtc_forward_latency_seconds_bucket{le="5e-06"} 1
        rtc_forward_latency_seconds_bucket{le="+Inf"} 3
        rtc_forward_latency_seconds_sum 0.0625
        rtc_forward_latency_seconds_count 3
        # TYPE rtc_child_only counter
        rtc_child_only{note="a b"} 7
        # TYPE process_cpu_seconds_total counter
        process_cpu_seconds_total 0.25
        not a sample
        rtc_bad_value abc

        """

    @Test("series add up by name and labels; families stay grouped under one TYPE (and HELP) line, in first-seen order")
    func sums() {
        let text = PrometheusSum.sum([Self.front, Self.child])
        #expect(text == """
            # TYPE rtc_rooms gauge
            rtc_rooms 3
            # HELP rtc_packets_out_total Packets sent.
            # TYPE rtc_packets_out_total counter
            rtc_packets_out_total 1500
            # TYPE rtc_layer_switches_total counter
            rtc_layer_switches_total{direction="up"} 2
            rtc_layer_switches_total{direction="down"} 5
            # TYPE rtc_forward_latency_seconds histogram
            rtc_forward_latency_seconds_bucket{le="5e-06"} 11
            rtc_forward_latency_seconds_bucket{le="+Inf"} 15
            rtc_forward_latency_seconds_sum 0.1875
            rtc_forward_latency_seconds_count 15
            # TYPE process_cpu_seconds_total counter
            process_cpu_seconds_total 1.75
            # TYPE rtc_child_only counter
            rtc_child_only{note="a b"} 7

            """)
    }

    @Test("one page comes back as it was; no pages, nothing")
    func identity() {
        #expect(PrometheusSum.sum([Self.front]) == Self.front)
        #expect(PrometheusSum.sum([]) == "")
    }

    @Test("a sample line: the series as written and its value, or nil", arguments: [
        ("rtc_rooms 3", "rtc_rooms", 3.0),
        ("x{a=\"1 2\",b=\"}\"} 2.5 1700000000", "x{a=\"1 2\",b=\"}\"}", 2.5),
        ("x{le=\"+Inf\"} 4", "x{le=\"+Inf\"}", 4.0),
    ] as [(String, String, Double)])
    func samples(line: String, series: String, value: Double) {
        let parsed = PrometheusSum.sample(Substring(line))
        #expect(parsed?.0 == series && parsed?.1 == value)
    }

    @Test("lines that are not samples are nil", arguments: ["", "x", "x{a=\"1\" 2", "x abc", "{} 1"])
    func notSamples(line: String) {
        #expect(PrometheusSum.sample(Substring(line)) == nil)
    }
}
