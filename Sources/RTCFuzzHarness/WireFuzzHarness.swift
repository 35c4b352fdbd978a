import NIOCore
import RTCTransport

/// Fuzz entry points for the parsers of network bytes. Each parses, serializes what it parsed,
/// parses that again and requires the same value: a parser/serializer mismatch traps here on purpose.
extension FuzzHarness {
    public static func rtp(_ bytes: [UInt8]) {
        guard let packet = try? RTPPacket(parsing: ByteBuffer(bytes: bytes)) else { return }
        let again = try! RTPPacket(parsing: packet.serialized)
        precondition(again == packet, "RTP round trip changed the packet")
        precondition(packet.serialized.readableBytes == packet.serializedSize)
        for element in packet.header.extensions {
            _ = try? AbsSendTime(parsing: element.data)
            _ = try? TransportSequenceNumber(parsing: element.data)
            _ = try? SDESMid(parsing: element.data)
            _ = try? VideoOrientation(parsing: element.data)
            _ = try? AudioLevel(parsing: element.data)
            // The in-place offset of each element agrees with the element's data.
            if let at = packet.header.extensionDataOffset(id: element.id), element.data.readableBytes == at.length,
               packet.header.extensions.first(where: { $0.id == element.id }) == element {
                let serialized = packet.serialized
                precondition(serialized.getSlice(at: serialized.readerIndex + at.offset, length: at.length) == element.data,
                             "extension offset points elsewhere")
            }
        }
        // The same bytes as an RFC 4588 retransmission: unwrapping and wrapping again gives it back.
        if let original = try? RTXPacket.unwrap(packet, ssrc: 1, payloadType: 96) {
            let rewrapped = RTXPacket.wrap(original, ssrc: packet.header.ssrc, payloadType: packet.header.payloadType,
                                           sequenceNumber: packet.header.sequenceNumber)
            precondition(rewrapped.payload == packet.payload && rewrapped.header == packet.header, "RTX round trip changed the packet")
        }
    }

    public static func rtcp(_ bytes: [UInt8]) {
        guard let packets = try? RTCPPacket.parseCompound(ByteBuffer(bytes: bytes)) else { return }
        let again = try! RTCPPacket.parseCompound(RTCPPacket.serializeCompound(packets))
        precondition(again == packets, "RTCP round trip changed a packet")
    }

    /// Treats the input as a run of RTP payloads, each prefixed by a 2-byte length, fed to the VP8
    /// descriptor parser and the frame assembler with sequence numbers and a marker taken from the bytes.
    public static func vp8(_ bytes: [UInt8]) {
        var assembler = VP8FrameAssembler(capacity: 64)
        var offset = 0
        var sequence: UInt16 = 65500
        while offset + 3 <= bytes.count {
            let length = Int(bytes[offset]) << 8 | Int(bytes[offset + 1])
            let flags = bytes[offset + 2]
            offset += 3
            let end = min(bytes.count, offset + length)
            let payload = ByteBuffer(bytes: bytes[offset..<end])
            offset = end
            var cursor = payload
            if let descriptor = try? VP8PayloadDescriptor(parsing: &cursor) {
                var out = ByteBuffer()
                descriptor.write(to: &out)
                var reread = out
                precondition(try! VP8PayloadDescriptor(parsing: &reread) == descriptor, "VP8 descriptor round trip")
            }
            // The SFU's in-place reader (simulcast switches) agrees with the parser, and its writes stay in bounds.
            if let layout = VP8DescriptorLayout(payload: payload) {
                var parsed = payload
                let descriptor = try! VP8PayloadDescriptor(parsing: &parsed)
                precondition(layout.pictureID(inPayload: payload) == descriptor.pictureID && layout.temporalLayer == descriptor.temporalLayer
                             && layout.tl0PictureIndex(inPayload: payload) == descriptor.tl0PictureIndex, "VP8 layout disagrees")
                var copy = payload
                layout.write(pictureID: 0x1234, tl0: 7, into: &copy, payloadStart: copy.readerIndex)
                precondition(copy.readableBytes == payload.readableBytes, "VP8 layout write grew the payload")
            }
            sequence &+= UInt16(flags & 0x03)  // 0 repeats, 2-3 leave gaps
            let frames = (try? assembler.insert(sequenceNumber: sequence, timestamp: UInt32(flags >> 4), marker: flags & 0x04 != 0,
                                                payload: payload)) ?? []
            for frame in frames { precondition(frame.partitionOffsets.first == 0 && frame.data.readableBytes >= 0) }
            _ = assembler.missingSequenceNumbers
            if flags & 0x08 != 0 { _ = assembler.skipMissing() }
        }
    }

    /// Treats the input as a run of Opus packets, each prefixed by a 1-byte length: the TOC and
    /// frame-count parser and the FEC probe the playout asks before recovering a loss.
    public static func opus(_ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let length = Int(bytes[offset])
            offset += 1
            let end = min(bytes.count, offset + length)
            let packet = ByteBuffer(bytes: bytes[offset..<end])
            offset = end
            guard let info = try? OpusPacketInfo(parsing: packet) else { continue }
            precondition(info.samples > 0 && info.samples <= 5760, "Opus packet of \(info.samples) samples")
            precondition(!(info.firstFrameHasFEC && info.mode == .celt), "FEC claimed for a CELT packet")
        }
    }

    public static func stun(_ bytes: [UInt8]) {
        _ = STUNMessage.verifyFingerprint(bytes)
        _ = STUNMessage.verifyIntegrity(bytes, key: [0x6B])
        // The same bytes as a TURN TCP stream (RFC 8656 §12.5): whole messages only, never more
        // than arrived.
        var stream = ByteBuffer(bytes: bytes)
        var taken = 0
        while let message = TURNStream.nextMessage(from: &stream) {
            taken += message.readableBytes
            precondition(taken + stream.readableBytes <= bytes.count, "TURN stream framing took more than arrived")
        }
        guard let message = try? STUNMessage(parsing: bytes) else { return }
        precondition(message.serialized == bytes, "STUN re-serialization differs")
        _ = (message.username, message.priority, message.errorCode, message.xorMappedAddress, message.iceControlling)
        _ = (message.xorPeerAddress, message.xorRelayedAddress, message.data, message.realm, message.nonce, message.lifetime)
        let signed = message.serialized(integrityKey: [1, 2, 3], fingerprint: true)
        precondition(STUNMessage.verifyIntegrity(signed, key: [1, 2, 3]) && STUNMessage.verifyFingerprint(signed))
        precondition(try! STUNMessage(parsing: signed).transactionID == message.transactionID)
    }

    public static func sdp(_ bytes: [UInt8]) {
        guard let description = try? SessionDescription(parsing: String(decoding: bytes, as: UTF8.self)) else { return }
        let again = try! SessionDescription(parsing: description.serialized)
        precondition(again == description, "SDP round trip changed the description")
        for section in description.media {
            _ = (section.rtpMaps, section.extensionMaps, section.candidates, section.ssrcAttributes, section.rids,
                 section.formatParameters, section.rtcpFeedback, section.fingerprint, section.direction)
        }
        // Negotiated as the SFU negotiates a publisher's offer; the answer must parse and keep one
        // m-line per offered one, every accepted one with the offer's payload type.
        guard let negotiated = try? description.negotiate(.sfu) else { return }
        let transport = TransportParameters(ice: ICECredentials(ufrag: "fuzz", pwd: "fuzzfuzzfuzzfuzzfuzzfuzz"),
                                            fingerprint: SDPFingerprint(algorithm: "sha-256", digest: [UInt8](repeating: 1, count: 32)),
                                            candidates: [], dtlsRole: .server)
        let answer = SessionDescription.answer(to: negotiated, sessionID: 1, transport: transport, iceLite: true, setup: "passive",
                                               direction: { $0 == .sendonly || $0 == .sendrecv ? .recvonly : .inactive })
        let parsed = try! SessionDescription(parsing: answer.serialized)
        precondition(parsed.media.count == description.media.count, "the answer lost or added m-lines")
        for (section, entry) in zip(parsed.media, negotiated.sections) {
            if let accepted = entry.section {
                precondition(section.mediaLine.payloadTypes.first == accepted.payloadType, "the answer renumbered a payload type")
            } else if entry.dataChannel != nil {
                precondition(section.mediaLine.proto == "UDP/DTLS/SCTP" && section.mediaLine.port != "0", "an accepted data section was not answered")
            } else {
                precondition(section.mediaLine.port == "0", "a rejected section kept a port")
            }
        }
    }
}
