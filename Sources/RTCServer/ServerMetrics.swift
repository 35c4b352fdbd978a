import CoreMetrics
import Prometheus

#if canImport(Glibc)
import Glibc
#endif

/// The server's metrics through swift-metrics, backed by a Prometheus registry of its own (no
/// global bootstrap, so an app embedding the server keeps its own metrics system).
///
/// Packet counters live in the SFU's plain counters on the packet path; each scrape adds what
/// changed since the previous one to the swift-metrics counters, and sets the gauges. The
/// forwarding-latency histogram is kept per media thread in its counters too (no lock on the
/// packet path) and written from their sum at each scrape.
final class ServerMetrics: @unchecked Sendable {
    let registry = PrometheusCollectorRegistry()
    private let factory: PrometheusMetricsFactory
    private let rooms, participants, tracks: CoreMetrics.Gauge
    private let packetsIn, bytesIn, packetsOut, bytesOut, nacks, retransmissions, keyframeRequests, keyframeThrottled,
                signalingErrors, dropped, rtxRepairs, rtxDropped, iceRestarts, downstreamFeedback, publisherLimits,
                limitRefusals, permissionRefusals, duplicateIdentities, closedUnjoined, switchesUp, switchesDown, legProbes, legPacings,
                layerPauses, dataIn, dataOut, dataBytesIn, dataDropped, udpSendRefused, udpSendDropped: CoreMetrics.Counter
    private var last = ServerCounters()

    init() {
        let factory = PrometheusMetricsFactory(registry: registry)
        self.factory = factory
        func counter(_ label: String) -> CoreMetrics.Counter { CoreMetrics.Counter(label: label, dimensions: [], factory: factory) }
        func gauge(_ label: String) -> CoreMetrics.Gauge { CoreMetrics.Gauge(label: label, dimensions: [], factory: factory) }
        rooms = gauge("rtc_rooms")
        participants = gauge("rtc_participants")
        tracks = gauge("rtc_tracks")
        packetsIn = counter("rtc_packets_in_total")
        bytesIn = counter("rtc_bytes_in_total")
        packetsOut = counter("rtc_packets_out_total")
        bytesOut = counter("rtc_bytes_out_total")
        nacks = counter("rtc_nacks_total")
        retransmissions = counter("rtc_retransmissions_total")
        keyframeRequests = counter("rtc_keyframe_requests_total")
        keyframeThrottled = counter("rtc_keyframe_requests_throttled_total")
        signalingErrors = counter("rtc_signaling_errors_total")
        dropped = counter("rtc_packets_dropped_total")
        rtxRepairs = counter("rtc_rtx_repairs_total")
        rtxDropped = counter("rtc_rtx_dropped_total")
        iceRestarts = counter("rtc_ice_restarts_total")
        downstreamFeedback = counter("rtc_downstream_feedback_total")
        publisherLimits = counter("rtc_publisher_limits_total")
        limitRefusals = counter("rtc_limit_refusals_total")
        permissionRefusals = counter("rtc_permission_refusals_total")
        duplicateIdentities = counter("rtc_duplicate_identities_total")
        closedUnjoined = counter("rtc_connections_closed_unjoined_total")
        switchesUp = CoreMetrics.Counter(label: "rtc_layer_switches_total", dimensions: [("direction", "up")], factory: factory)
        switchesDown = CoreMetrics.Counter(label: "rtc_layer_switches_total", dimensions: [("direction", "down")], factory: factory)
        legProbes = counter("rtc_leg_probes_total")
        legPacings = counter("rtc_leg_pacings_total")
        layerPauses = counter("rtc_layer_requests_total")
        dataIn = counter("rtc_data_messages_in_total")
        dataOut = counter("rtc_data_messages_out_total")
        dataBytesIn = counter("rtc_data_bytes_in_total")
        dataDropped = counter("rtc_data_messages_dropped_total")
        udpSendRefused = counter("rtc_udp_send_refused_total")
        udpSendDropped = counter("rtc_udp_send_dropped_total")
    }

    /// Brings the metrics up to `counters` and returns the Prometheus text exposition.
    func scrape(_ counters: ServerCounters) -> String {
        rooms.record(counters.rooms)
        participants.record(counters.participants)
        tracks.record(counters.tracks)
        func add(_ counter: CoreMetrics.Counter, _ now: Int, _ before: Int) { if now > before { counter.increment(by: now - before) } }
        add(packetsIn, counters.packetsIn, last.packetsIn)
        add(bytesIn, counters.bytesIn, last.bytesIn)
        add(packetsOut, counters.packetsOut, last.packetsOut)
        add(bytesOut, counters.bytesOut, last.bytesOut)
        add(nacks, counters.nacksReceived, last.nacksReceived)
        add(retransmissions, counters.retransmissions, last.retransmissions)
        add(keyframeRequests, counters.keyframeRequestsForwarded, last.keyframeRequestsForwarded)
        add(keyframeThrottled, counters.keyframeRequestsThrottled, last.keyframeRequestsThrottled)
        add(signalingErrors, counters.signalingErrors, last.signalingErrors)
        add(dropped, counters.packetsDropped, last.packetsDropped)
        add(rtxRepairs, counters.rtxRepairs, last.rtxRepairs)
        add(rtxDropped, counters.rtxDropped, last.rtxDropped)
        add(iceRestarts, counters.iceRestarts, last.iceRestarts)
        add(downstreamFeedback, counters.downstreamFeedback, last.downstreamFeedback)
        add(publisherLimits, counters.publisherLimitsSent, last.publisherLimitsSent)
        add(limitRefusals, counters.limitRefusals, last.limitRefusals)
        add(permissionRefusals, counters.permissionRefusals, last.permissionRefusals)
        add(duplicateIdentities, counters.duplicateIdentities, last.duplicateIdentities)
        add(closedUnjoined, counters.connectionsClosedUnjoined, last.connectionsClosedUnjoined)
        add(switchesUp, counters.layerSwitchesUp, last.layerSwitchesUp)
        add(switchesDown, counters.layerSwitchesDown, last.layerSwitchesDown)
        add(legProbes, counters.legProbes, last.legProbes)
        add(legPacings, counters.legPacings, last.legPacings)
        add(layerPauses, counters.layerPauses, last.layerPauses)
        add(dataIn, counters.dataMessagesIn, last.dataMessagesIn)
        add(dataOut, counters.dataMessagesOut, last.dataMessagesOut)
        add(dataBytesIn, counters.dataBytesIn, last.dataBytesIn)
        add(dataDropped, counters.dataMessagesDropped, last.dataMessagesDropped)
        add(udpSendRefused, counters.udpSendRefused, last.udpSendRefused)
        add(udpSendDropped, counters.udpSendDropped, last.udpSendDropped)
        last = counters
        var text: [UInt8] = []
        registry.emit(into: &text)
        return String(decoding: text, as: UTF8.self) + Self.forwardLatency(counters) + Self.processCPU()
    }

    /// Forwarding latency per packet (time on the media thread from receipt to the last send), as
    /// a Prometheus histogram from the counters' cumulative buckets.
    static func forwardLatency(_ counters: ServerCounters) -> String {
        var text = "# TYPE rtc_forward_latency_seconds histogram\n"
        for (bound, count) in zip(ServerCounters.latencyBoundsUs, counters.forwardLatencyBuckets) {
            text += "rtc_forward_latency_seconds_bucket{le=\"\(bound / 1e6)\"} \(count)\n"
        }
        text += "rtc_forward_latency_seconds_bucket{le=\"+Inf\"} \(counters.forwardLatencyCount)\n"
        text += "rtc_forward_latency_seconds_sum \(counters.forwardLatencySumUs / 1e6)\n"
        text += "rtc_forward_latency_seconds_count \(counters.forwardLatencyCount)\n"
        return text
    }

    /// The process's CPU time (user + system), as Prometheus's client libraries export it: what
    /// a load test divides by the packets forwarded.
    static func processCPU() -> String {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        let seconds = Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
        return "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total \(seconds)\n"
    }
}
