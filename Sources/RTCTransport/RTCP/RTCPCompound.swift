import NIOCore

/// The compound RTCP packets a receiver sends, serialized: each begins with a receiver report
/// (RFC 3550 §6.1: every compound packet starts with a report; here an empty one unless blocks
/// are given) followed by one feedback message. `sender` is the SSRC the sender reports as (its
/// RTCP SSRC); `media` the SSRC the feedback is about.
public enum RTCPCompound {
    /// Sender reports of one instant (RFC 3550 §6.4.1) and the CNAME that ties their streams
    /// together (§6.5.1): what a sender, or a translator passing reports on, sends once a second.
    /// `reports` must not be empty.
    public static func senderReports(_ reports: [SenderReport], cname: String) -> ByteBuffer {
        RTCPPacket.serializeCompound(reports.map { .senderReport($0) } + [
            .sourceDescription(SourceDescription(chunks: [SourceDescription.Chunk(ssrc: reports.first?.ssrc ?? 0, items: [.cname(cname)])])),
        ])
    }

    /// A receiver report carrying `blocks` (RFC 3550 §6.4.2).
    public static func receiverReports(ssrc: UInt32, _ blocks: [ReceptionReport] = []) -> ByteBuffer {
        RTCPPacket.serializeCompound([.receiverReport(ReceiverReport(ssrc: ssrc, reports: blocks))])
    }

    /// A picture loss indication: asks `media`'s sender for a keyframe (RFC 4585 §6.3.1).
    public static func pictureLoss(sender: UInt32, media: UInt32) -> ByteBuffer {
        RTCPPacket.serializeCompound([
            .receiverReport(ReceiverReport(ssrc: sender)),
            .pictureLossIndication(PictureLossIndication(senderSSRC: sender, mediaSSRC: media)),
        ])
    }

    /// A generic NACK for the sequence numbers `lost` of `media` (RFC 4585 §6.2.1).
    public static func nack(sender: UInt32, media: UInt32, lost: [UInt16]) -> ByteBuffer {
        RTCPPacket.serializeCompound([
            .receiverReport(ReceiverReport(ssrc: sender)),
            .nack(GenericNACK(senderSSRC: sender, mediaSSRC: media, lost: lost)),
        ])
    }

    /// Transport-wide congestion-control feedback (draft-holmer-rmcat-transport-wide-cc-extensions-01 §3.1).
    public static func transportFeedback(sender: UInt32, _ feedback: TransportFeedback) -> ByteBuffer {
        RTCPPacket.serializeCompound([.receiverReport(ReceiverReport(ssrc: sender)), .transportFeedback(feedback)])
    }

    /// A receiver estimated maximum bitrate for the streams `ssrcs` (draft-alvestrand-rmcat-remb-03).
    public static func remb(sender: UInt32, bitrate: UInt64, ssrcs: [UInt32]) -> ByteBuffer {
        RTCPPacket.serializeCompound([
            .receiverReport(ReceiverReport(ssrc: sender)),
            .remb(ReceiverEstimatedMaximumBitrate(senderSSRC: sender, bitrate: bitrate, ssrcs: ssrcs)),
        ])
    }
}
