/// Counters the server exports as Prometheus metrics.
public struct ServerCounters: Sendable, Hashable {
    public var rooms = 0
    public var participants = 0
    public var tracks = 0
    public var packetsIn = 0
    public var bytesIn = 0
    public var packetsOut = 0
    public var bytesOut = 0
    public var nacksReceived = 0
    /// NACKs the server sent upstream to publishers.
    public var nacksSent = 0
    public var retransmissions = 0
    /// Repairs not sent because the subscriber's leg had spent its retransmission budget.
    public var retransmissionsSkipped = 0
    /// ICE restarts (RFC 8445 §9) on either transport.
    public var iceRestarts = 0
    /// Transport-wide feedback reports from subscribers, and REMB limits sent to publishers for
    /// their slowest subscriber.
    public var downstreamFeedback = 0
    public var publisherLimitsSent = 0
    /// RFC 4588 packets publishers sent: repairs forwarded, and copies of packets already here or
    /// padding (bandwidth probes) dropped after their arrival was recorded for feedback.
    public var rtxRepairs = 0
    public var rtxDropped = 0
    public var keyframeRequestsForwarded = 0
    /// Padding-only packets sent in the place of late packets left out for a subscriber.
    public var fillersSent = 0
    public var keyframeRequestsThrottled = 0
    public var signalingErrors = 0
    /// Requests refused at a `ServerLimits` bound or by a grant, by what was refused.
    public var limitRefusals = 0
    public var permissionRefusals = 0
    /// Participants replaced by a newer join with the same uid (`duplicateIdentity`).
    public var duplicateIdentities = 0
    /// Connections closed for not joining within `ServerLimits.joinDeadlineSeconds`.
    public var connectionsClosedUnjoined = 0
    public var packetsDropped = 0
    /// UDP datagrams the media sockets' kernel refused (a firewall's EPERM, no route, too big:
    /// each skipped) and dropped (a full send buffer or device queue), read from the sockets.
    public var udpSendRefused = 0
    public var udpSendDropped = 0
    /// Data channel messages received from participants and sent to them, their bytes, and those
    /// dropped (too large, past the rate, no channel to send on).
    public var dataMessagesIn = 0
    public var dataMessagesOut = 0
    public var dataBytesIn = 0
    public var dataMessagesDropped = 0
    /// Simulcast: subscriptions moved to a larger or a smaller layer; probes sent on legs for more capacity;
    /// dynacast messages telling publishers which layers to send.
    public var layerSwitchesUp = 0
    public var layerSwitchesDown = 0
    public var legProbes = 0
    /// Legs paced after their link collapsed (``LegPacer``).
    public var legPacings = 0
    public var layerPauses = 0
    /// Forwarding latency histogram: counts of packets forwarded within each bound (µs), and the sum.
    public var forwardLatencyBuckets: [Int] = Array(repeating: 0, count: ServerCounters.latencyBoundsUs.count)
    public var forwardLatencySumUs: Double = 0
    public var forwardLatencyCount = 0

    public static let latencyBoundsUs: [Double] = [5, 10, 25, 50, 100, 250, 500, 1000, 5000]

    /// Adds another shard's counters (the histogram bucket by bucket).
    mutating func add(_ other: ServerCounters) {
        rooms += other.rooms
        participants += other.participants
        tracks += other.tracks
        packetsIn += other.packetsIn
        bytesIn += other.bytesIn
        packetsOut += other.packetsOut
        bytesOut += other.bytesOut
        nacksReceived += other.nacksReceived
        nacksSent += other.nacksSent
        retransmissions += other.retransmissions
        retransmissionsSkipped += other.retransmissionsSkipped
        iceRestarts += other.iceRestarts
        downstreamFeedback += other.downstreamFeedback
        publisherLimitsSent += other.publisherLimitsSent
        rtxRepairs += other.rtxRepairs
        rtxDropped += other.rtxDropped
        keyframeRequestsForwarded += other.keyframeRequestsForwarded
        fillersSent += other.fillersSent
        keyframeRequestsThrottled += other.keyframeRequestsThrottled
        signalingErrors += other.signalingErrors
        limitRefusals += other.limitRefusals
        permissionRefusals += other.permissionRefusals
        duplicateIdentities += other.duplicateIdentities
        connectionsClosedUnjoined += other.connectionsClosedUnjoined
        packetsDropped += other.packetsDropped
        udpSendRefused += other.udpSendRefused
        udpSendDropped += other.udpSendDropped
        dataMessagesIn += other.dataMessagesIn
        dataMessagesOut += other.dataMessagesOut
        dataBytesIn += other.dataBytesIn
        dataMessagesDropped += other.dataMessagesDropped
        layerSwitchesUp += other.layerSwitchesUp
        layerSwitchesDown += other.layerSwitchesDown
        legProbes += other.legProbes
        legPacings += other.legPacings
        layerPauses += other.layerPauses
        forwardLatencyCount += other.forwardLatencyCount
        forwardLatencySumUs += other.forwardLatencySumUs
        for index in forwardLatencyBuckets.indices where index < other.forwardLatencyBuckets.count {
            forwardLatencyBuckets[index] += other.forwardLatencyBuckets[index]
        }
    }

    mutating func recordLayerSwitch(up: Bool) {
        if up { layerSwitchesUp += 1 } else { layerSwitchesDown += 1 }
    }

    mutating func recordForward(microseconds: Double) {
        forwardLatencyCount += 1
        forwardLatencySumUs += microseconds
        for (index, bound) in Self.latencyBoundsUs.enumerated() where microseconds <= bound { forwardLatencyBuckets[index] += 1 }
    }
}
