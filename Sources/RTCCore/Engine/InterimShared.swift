import NIOCore
import RTCTransport

// Interim: replaced by the shared RTCTransport types of the SFU split.

enum InboundOutcome { case media, repaired, dropped }

struct InboundStreamMap {
    private var twccID: UInt8?
    private var feedback = TransportFeedbackBuilder()
    private var repairs: [UInt32: (ssrc: UInt32, payloadType: UInt8, rtxPayloadType: UInt8)] = [:]

    mutating func configure(from description: SessionDescription) {
        twccID = description.media.lazy.flatMap(\.extensionMaps).first { $0.uri == RTPExtensionURI.transportWideSequence }?.id
        repairs = [:]
        for section in description.sections where section.direction == .sendonly {
            if let ssrc = section.ssrc, let rtx = section.rtxSSRC, let rtxPayloadType = section.rtxPayloadType {
                repairs[rtx] = (ssrc, section.payloadType, rtxPayloadType)
            }
        }
    }

    mutating func receive(_ packet: inout RTPPacket, arrivalUs: Int64) -> InboundOutcome {
        if let id = twccID, let data = packet.header.extensionData(id: id), let sequence = try? TransportSequenceNumber(parsing: data) {
            feedback.record(sequence: sequence.value, arrivalUs: arrivalUs)
        }
        guard let stream = repairs[packet.header.ssrc] else { return .media }
        guard packet.header.payloadType == stream.rtxPayloadType,
              let original = try? RTXPacket.unwrap(packet, ssrc: stream.ssrc, payloadType: stream.payloadType)
        else { return .dropped }
        packet = original
        return .repaired
    }

    mutating func makeFeedback(senderSSRC: UInt32, mediaSSRC: UInt32) -> TransportFeedback? {
        guard feedback.hasPending else { return nil }
        return feedback.makeFeedback(senderSSRC: senderSSRC, mediaSSRC: mediaSSRC)
    }
}

enum RTCPCompound {
    static func pictureLoss(sender: UInt32, media: UInt32) -> ByteBuffer {
        RTCPPacket.serializeCompound([.receiverReport(ReceiverReport(ssrc: sender)),
                                      .pictureLossIndication(PictureLossIndication(senderSSRC: sender, mediaSSRC: media))])
    }

    static func nack(sender: UInt32, media: UInt32, lost: [UInt16]) -> ByteBuffer {
        RTCPPacket.serializeCompound([.receiverReport(ReceiverReport(ssrc: sender)),
                                      .nack(GenericNACK(senderSSRC: sender, mediaSSRC: media, lost: lost))])
    }

    static func transportFeedback(sender: UInt32, _ feedback: TransportFeedback) -> ByteBuffer {
        RTCPPacket.serializeCompound([.receiverReport(ReceiverReport(ssrc: sender)), .transportFeedback(feedback)])
    }

    static func receiverReports(sender: UInt32, _ blocks: [ReceptionReport]) -> ByteBuffer {
        RTCPPacket.serializeCompound([.receiverReport(ReceiverReport(ssrc: sender, reports: blocks))])
    }
}
