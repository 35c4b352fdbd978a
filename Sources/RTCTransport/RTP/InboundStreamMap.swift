/// What a receiver does to every RTP packet a transport brings before it is media: it records the
/// packet's transport-wide sequence number for congestion-control feedback (every packet counts:
/// probes, padding and repairs too), and takes RFC 4588 repairs out of their retransmission stream.
///
/// One per receiving transport: the client engine's subscriber transport, the SFU's publisher
/// transport of each participant. A plain value with no clock and no lock: the owner passes the
/// arrival time and confines the value to its own thread or lock. Receiving allocates nothing.
public struct InboundStreamMap: Sendable {
    /// An RFC 4588 retransmission stream (`a=ssrc-group:FID <media> <rtx>`, `a=fmtp:<rtx> apt=<media>`).
    public struct RepairStream: Sendable, Hashable {
        /// The SSRC and payload type of the stream it repairs.
        public var mediaSSRC: UInt32
        public var payloadType: UInt8
        /// The payload type of the retransmission stream itself.
        public var rtxPayloadType: UInt8

        public init(mediaSSRC: UInt32, payloadType: UInt8, rtxPayloadType: UInt8) {
            self.mediaSSRC = mediaSSRC
            self.payloadType = payloadType
            self.rtxPayloadType = rtxPayloadType
        }
    }

    /// Why a packet was not handed on.
    public enum Discard: Sendable, Hashable {
        /// A padding-only packet on a retransmission stream (a bandwidth probe): no media in it.
        case padding
        /// A retransmission payload too short for its original sequence number.
        case malformed
        /// A packet on a retransmission stream's SSRC with another payload type than negotiated.
        case unexpectedPayloadType
    }

    /// What ``receive(_:arrivalUs:)`` made of a packet.
    public enum Outcome: Sendable, Hashable {
        /// A packet of a media stream (or of an SSRC this map does not know), untouched.
        case media
        /// A repair: the packet now is the original it carried (media SSRC, payload type and
        /// sequence number restored; the repair stream's timestamp, marker and extensions kept).
        case repair
        /// Not media; its arrival was still recorded for feedback.
        case discarded(Discard)
    }

    /// The header extension id of the transport-wide sequence number on this transport (from the
    /// negotiated session, ``SessionDescription/extensionID(for:)``); nil: no transport-wide CC.
    public var transportWideSequenceID: UInt8?
    /// Arrivals recorded since the last feedback.
    public private(set) var feedback: TransportFeedbackBuilder
    /// Retransmission streams by their own SSRC.
    public private(set) var repairStreams: [UInt32: RepairStream] = [:]

    public init(transportWideSequenceID: UInt8? = nil, feedback: TransportFeedbackBuilder = TransportFeedbackBuilder()) {
        self.transportWideSequenceID = transportWideSequenceID
        self.feedback = feedback
    }

    /// Sets (or with nil, removes) the retransmission stream `rtxSSRC`.
    public mutating func setRepairStream(_ stream: RepairStream?, rtxSSRC: UInt32) {
        repairStreams[rtxSSRC] = stream
    }

    /// Replaces every retransmission stream at once (after a negotiation).
    public mutating func replaceRepairStreams(_ streams: [UInt32: RepairStream]) {
        repairStreams = streams
    }

    /// Records `packet`'s arrival for feedback and unwraps it in place when it is a repair.
    public mutating func receive(_ packet: inout RTPPacket, arrivalUs: Int64) -> Outcome {
        if let id = transportWideSequenceID, let data = packet.header.extensionData(id: id),
           let sequence = try? TransportSequenceNumber(parsing: data) {
            feedback.record(sequence: sequence.value, arrivalUs: arrivalUs)
        }
        guard let stream = repairStreams[packet.header.ssrc] else { return .media }
        guard packet.header.payloadType == stream.rtxPayloadType else { return .discarded(.unexpectedPayloadType) }
        let original: RTPPacket?
        do {
            original = try RTXPacket.unwrap(packet, ssrc: stream.mediaSSRC, payloadType: stream.payloadType)
        } catch {
            return .discarded(.malformed)
        }
        guard let original else { return .discarded(.padding) }
        packet = original
        return .repair
    }

    /// True when arrivals wait to be reported.
    public var hasPendingFeedback: Bool { feedback.hasPending }

    /// Transport-wide feedback for the arrivals since the last call (nil when none).
    public mutating func makeFeedback(senderSSRC: UInt32, mediaSSRC: UInt32) -> TransportFeedback? {
        feedback.makeFeedback(senderSSRC: senderSSRC, mediaSSRC: mediaSSRC)
    }
}
