import NIOCore
import RTCMedia
import RTCTransport
import Synchronization

/// One encoded stream of a local video track: the track's only stream, or one simulcast layer
/// (``rid``) at 1/``divisor`` of the track's size. It owns its encoder, packetizer and sequence
/// (touched only on the track's encode thread) and, behind locks, what other threads ask of it:
/// its SSRCs and counters, the packets it sent (NACKs, probes), keyframe requests and whether it is
/// wanted (dynacast) and fed (the estimate's share).
final class VideoLayer: @unchecked Sendable {
    let rid: String?
    let divisor: Int
    let state: SenderState
    /// Its RFC 4588 stream's SSRC.
    let rtxSSRC: UInt32
    /// Its share of the track's bitrate, and the least it is encoded at.
    let bitrateShare: Double

    // Encode thread only.
    private var encoder: VP8Encoder?
    private var packetizer = VP8Packetizer(initialPictureID: UInt16.random(in: 0...0x7FFF))
    private var sequenceNumber = UInt16.random(in: 0...UInt16.max)

    private struct Control {
        var keyframeRequested = false
        /// Dynacast: some subscriber wants it (the server says so; true until it says otherwise).
        var wanted = true
        /// The estimate's share feeds it.
        var allocated = true
        /// Stopped on this side, whatever the server wants (tests: an encoder that gives a layer up).
        var held = false
    }

    private let control = Mutex(Control())
    /// The last packets sent, to answer NACKs (RFC 4585) and to probe with, and the RTX stream.
    private let history = Mutex(SentVideo())

    /// What was sent, by sequence number: 512 packets are 2-3 s of 720p at 1.5-2.5 Mbps, several
    /// times the NACK horizon, at ~0.7 MB. With the RTX stream's state.
    private struct SentVideo {
        var packets = PacketHistory<RTPPacket>(capacity: 512)
        var newest: UInt16?
        /// Set once the server's answer accepts RFC 4588 retransmissions.
        var rtxPayloadType: UInt8?
        var rtxSequence = UInt16.random(in: 0...UInt16.max)
        /// How far back from the newest packet the next padding packet is taken.
        var paddingOffset: UInt16 = 0

        /// An RFC 4588 copy of `packet`; a layer's copy names the layer in the repaired stream id
        /// (RFC 8852) instead of the stream id.
        mutating func rtx(of packet: RTPPacket, ssrc: UInt32) -> RTPPacket? {
            guard let payloadType = rtxPayloadType else { return nil }
            defer { rtxSequence &+= 1 }
            var repair = RTXPacket.wrap(packet, ssrc: ssrc, payloadType: payloadType, sequenceNumber: rtxSequence)
            for index in repair.header.extensions.indices where repair.header.extensions[index].id == RTPExtensionID.rtpStreamID {
                repair.header.extensions[index].id = RTPExtensionID.repairedRTPStreamID
            }
            return repair
        }
    }

    init(rid: String?, divisor: Int, bitrateShare: Double, ssrc: UInt32) {
        self.rid = rid
        self.divisor = divisor
        self.bitrateShare = bitrateShare
        state = SenderState(ssrc: ssrc, clockRate: 90000)
        rtxSSRC = UInt32.random(in: 1...UInt32.max)
    }

    /// The layers of a track, largest first: one without a stream id; two (dual stream: full and
    /// quarter size, `f` and `q`); three (`f`, `h`, `q`). The first takes `firstSSRC`.
    static func make(count: Int, firstSSRC: UInt32) -> [VideoLayer] {
        let plan: [(rid: String?, divisor: Int, share: Double)] = switch count {
        case 2: [("f", 1, 1.0), ("q", 4, 0.12)]
        case 3: [("f", 1, 1.0), ("h", 2, 0.3), ("q", 4, 0.1)]
        default: [(nil, 1, 1.0)]
        }
        return plan.enumerated().map { index, layer in
            VideoLayer(rid: layer.rid, divisor: layer.divisor, bitrateShare: layer.share,
                       ssrc: index == 0 ? firstSSRC : UInt32.random(in: 1...UInt32.max))
        }
    }

    /// The most this layer sends at `configuration`.
    func maximumKbps(of configuration: VideoEncoderConfiguration) -> Int {
        max(SendSideCongestion.minimumVideoKbps, Int(Double(configuration.bitrateKbps) * bitrateShare))
    }

    /// The least this layer is worth encoding at.
    func minimumKbps(of configuration: VideoEncoderConfiguration) -> Int {
        min(maximumKbps(of: configuration),
            SendSideCongestion.encoderFloorKbps(size: configuration.dimensions.scaled(down: divisor), frameRate: configuration.frameRate))
    }

    /// Shares `targetKbps` out among `layers` (largest first), smallest layer first, each up to its
    /// maximum (libwebrtc's simulcast allocation): nil for a layer the rest cannot feed at its
    /// minimum, and for every layer above it. The smallest layer always gets what there is.
    static func allocate(targetKbps: Int, layers: [VideoLayer], configuration: VideoEncoderConfiguration) -> [Int?] {
        var remaining = targetKbps
        var result = [Int?](repeating: nil, count: layers.count)
        for index in layers.indices.reversed() {
            let layer = layers[index]
            let minimum = layer.minimumKbps(of: configuration)
            if index != layers.count - 1, remaining < minimum { break }
            let share = max(1, min(remaining, layer.maximumKbps(of: configuration)))
            result[index] = share
            remaining -= share
        }
        return result
    }

    // MARK: Control (any thread)

    func requestKeyframe() { control.withLock { $0.keyframeRequested = true } }

    /// Whether a keyframe was asked for since the last call (the encode thread takes it).
    func takeKeyframeRequest() -> Bool {
        control.withLock { control in
            defer { control.keyframeRequested = false }
            return control.keyframeRequested
        }
    }

    /// Dynacast: wanted again opens with a keyframe.
    func setWanted(_ wanted: Bool) {
        control.withLock { control in
            if wanted && !control.wanted { control.keyframeRequested = true }
            control.wanted = wanted
        }
    }

    var isWanted: Bool { control.withLock { $0.wanted } }

    /// Whether it is encoded when fed: wanted and not held.
    var isEncoded: Bool { control.withLock { $0.wanted && !$0.held } }

    /// Whether it is being sent now: wanted, fed and not held.
    var isSending: Bool { control.withLock { $0.wanted && $0.allocated && !$0.held } }

    /// Stops (or restarts, with a keyframe) the layer on this side alone, as an encoder that gives
    /// a layer up would: the server sees it stop without having asked.
    func hold(_ held: Bool) {
        control.withLock { control in
            if !held && control.held { control.keyframeRequested = true }
            control.held = held
        }
    }

    /// The estimate's share feeds it (or not); fed again opens with a keyframe.
    func setAllocated(_ allocated: Bool) {
        control.withLock { control in
            if allocated && !control.allocated { control.keyframeRequested = true }
            control.allocated = allocated
        }
    }

    func enableRTX(payloadType: UInt8) { history.withLock { $0.rtxPayloadType = payloadType } }
    func disableRTX() { history.withLock { $0.rtxPayloadType = nil } }

    /// A recent packet sent again on the RTX stream, to fill a bandwidth probe: the newest first,
    /// then further back (up to 32 packets), so the receiver either drops it as a duplicate or
    /// gains a packet it lost. Nil without RTX or before anything was sent.
    func paddingPacket() -> RTPPacket? {
        history.withLock { sent in
            guard sent.rtxPayloadType != nil, let newest = sent.newest else { return nil }
            for _ in 0..<32 {
                let sequence = newest &- sent.paddingOffset
                sent.paddingOffset = (sent.paddingOffset + 1) % 32
                if let packet = sent.packets.packet(sequence) { return sent.rtx(of: packet, ssrc: rtxSSRC) }
            }
            return nil
        }
    }

    /// The packets of `sequences` still in the history.
    func sentPackets(_ sequences: [UInt16]) -> [RTPPacket] {
        history.withLock { sent in sequences.compactMap { sent.packets.packet($0) } }
    }

    /// What goes out to repair `packets`: RFC 4588 copies once negotiated (true), else the packets.
    func repairs(of packets: [RTPPacket]) -> ([RTPPacket], Bool) {
        history.withLock { sent in
            guard sent.rtxPayloadType != nil else { return (packets, false) }
            return (packets.compactMap { sent.rtx(of: $0, ssrc: rtxSSRC) }, true)
        }
    }

    func remember(_ packets: [RTPPacket]) {
        history.withLock { sent in
            for packet in packets { sent.packets.insert(packet, sequence: packet.header.sequenceNumber) }
            sent.newest = packets.last?.header.sequenceNumber ?? sent.newest
            sent.paddingOffset = 0
        }
    }

    // MARK: Encode thread

    func resetEncoder() { encoder = nil }

    /// Encodes `frame` at `kbps` (a keyframe when one was asked for), making the encoder for the
    /// frame's size with `settings` when there is none or the size changed. `temporalLayers`: how
    /// many of the encoder's configured temporal layers to encode.
    func encode(_ frame: VideoFrame, kbps: Int, temporalLayers: Int = 1,
                settings: (Int, Int) -> VP8EncoderConfiguration) throws -> [EncodedVideoFrame] {
        if encoder == nil || encoder!.configuration.width != frame.width || encoder!.configuration.height != frame.height {
            encoder = try VP8Encoder(configuration: settings(frame.width, frame.height))
        }
        guard let encoder else { return [] }
        let temporal = min(temporalLayers, encoder.configuration.temporalLayers)
        if temporal != encoder.activeTemporalLayers { try encoder.setActiveTemporalLayers(temporal) }
        if kbps != encoder.configuration.bitrateKbps { try encoder.setBitrate(kbps: kbps) }
        if takeKeyframeRequest() { encoder.requestKeyframe() }
        return try encoder.encode(frame)
    }

    /// RTP packets of one encoded frame: VP8 payloads with the paced extensions' placeholders, the
    /// layer's stream id on every packet (a simulcast layer), CVO on the last. `temporal`: the
    /// descriptor carries the frame's temporal layer and TL0PICIDX (an upper-layer frame, which
    /// refers to the base layer alone, is a layer sync point).
    func packetize(_ encoded: EncodedVideoFrame, rtpTimestamp: UInt32, rotation: VideoRotation, temporal: Bool = false) -> [RTPPacket] {
        let payloads = temporal
            ? packetizer.packetize(ByteBuffer(bytes: encoded.data), temporalLayer: UInt8(clamping: encoded.temporalLayer),
                                   layerSync: encoded.temporalLayer > 0)
            : packetizer.packetize(ByteBuffer(bytes: encoded.data))
        var packets: [RTPPacket] = []
        packets.reserveCapacity(payloads.count)
        // The same for every packet of the frame: built once. The pacer fills in the placeholders.
        var common = RTPHeader.pacedExtensions
        if let rid { common.append(RTPHeaderExtension(id: RTPExtensionID.rtpStreamID, data: ByteBuffer(string: rid))) }
        let orientation = RTPHeaderExtension(id: RTPExtensionID.videoOrientation, data: VideoOrientation(rotation: rotation.rawValue).data)
        for (index, payload) in payloads.enumerated() {
            let last = index == payloads.count - 1
            // CVO on the last packet of every frame (as libwebrtc does), so a receiver always has it.
            let header = RTPHeader(marker: last, payloadType: SDPCodecs.vp8PayloadType, sequenceNumber: sequenceNumber,
                                   timestamp: rtpTimestamp, ssrc: state.ssrc, extensions: last ? common + [orientation] : common)
            sequenceNumber &+= 1
            packets.append(RTPPacket(header: header, payload: payload))
        }
        return packets
    }
}
