/// What an answerer of this SDK accepts in an offer (JSEP, [RFC 8829 §5.3](https://www.rfc-editor.org/rfc/rfc8829#section-5.3)):
/// VP8 and Opus, the header extensions it reads or writes, the feedback it acts on. Everything the
/// answer keeps takes the offer's values (payload types, extension ids, mids): an answer never
/// renumbers what the offerer chose (RFC 8285 §6, RFC 3264 §6.1).
public struct AnswerCapabilities: Sendable, Hashable {
    /// Header extension URIs accepted per kind.
    public var extensions: [MediaSectionDescription.Kind: Set<String>]
    /// `a=rtcp-fb` values accepted per kind.
    public var feedback: [MediaSectionDescription.Kind: [String]]

    public init(extensions: [MediaSectionDescription.Kind: Set<String>], feedback: [MediaSectionDescription.Kind: [String]]) {
        self.extensions = extensions
        self.feedback = feedback
    }

    /// What the SFU takes from publishers: the SDK's own extensions, and for video also the RFC 8852
    /// stream ids a simulcast offer needs.
    public static let sfu = AnswerCapabilities(
        extensions: [
            .audio: [RTPExtensionURI.audioLevel, RTPExtensionURI.absSendTime, RTPExtensionURI.transportWideSequence, RTPExtensionURI.mid],
            .video: [RTPExtensionURI.absSendTime, RTPExtensionURI.transportWideSequence, RTPExtensionURI.mid,
                     RTPExtensionURI.videoOrientation, RTPExtensionURI.rtpStreamID, RTPExtensionURI.repairedRTPStreamID],
        ],
        feedback: [.video: ["goog-remb", "transport-cc", "ccm fir", "nack", "nack pli"], .audio: ["transport-cc"]])
}

/// An offer's data channel section (`m=application … UDP/DTLS/SCTP webrtc-datachannel`,
/// [RFC 8841](https://www.rfc-editor.org/rfc/rfc8841)): the peer's SCTP port and the largest
/// message it takes.
public struct DataChannelOffer: Sendable, Hashable {
    /// `a=sctp-port` (5000 when absent, RFC 8841 §5.2).
    public var sctpPort: UInt16
    /// `a=max-message-size` (65536 when absent, RFC 8841 §6.1; 0 means no limit).
    public var maxMessageSize: Int
    public init(sctpPort: UInt16 = 5000, maxMessageSize: Int = 65536) {
        self.sctpPort = sctpPort
        self.maxMessageSize = maxMessageSize
    }
}

/// One m-section of an offer after negotiation: accepted with its codec, extensions, feedback and
/// simulcast layer, or rejected (port 0 in the answer) with the reason.
public struct NegotiatedSection: Sendable, Hashable {
    /// The offer's media type (`audio`, `video`, `application`, ...), mid and transport protocol.
    public var media: String
    public var mid: String?
    public var proto: String
    /// The offer's formats (a rejected section's answer repeats them).
    public var formats: [String]
    /// The accepted section as the offer describes it (its direction is the offerer's); nil when rejected.
    public var section: MediaSectionDescription?
    /// Accepted `a=extmap` entries, with the offer's ids.
    public var extensions: [ExtensionMap]
    /// Accepted `a=rtcp-fb` values for the codec.
    public var feedback: [String]
    /// The RFC 8851 stream ids of the simulcast layers received, in the offer's order (empty without simulcast).
    public var simulcastLayers: [String]
    /// Why the section is rejected; nil when accepted.
    public var rejection: String?
    /// An accepted data channel section (`section` is nil then).
    public var dataChannel: DataChannelOffer?

    public var isAccepted: Bool { section != nil || dataChannel != nil }
}

/// An offer negotiated against ``AnswerCapabilities``: what the answer says and what the answerer
/// must then use (the offer's extension ids, payload types, simulcast layer).
public struct NegotiatedOffer: Sendable, Hashable {
    public var sections: [NegotiatedSection]
    /// The offer allowed one-byte and two-byte extension elements in one stream (RFC 8285 §6).
    public var extmapAllowMixed: Bool
    /// The offer's BUNDLE group, in its order (empty when it had none).
    public var bundleOrder: [String] = []

    /// The answer's BUNDLE group: the accepted mids in the offer's group order (offer order
    /// without a group); its first is the tag.
    public var answerBundle: [String] {
        let accepted = sections.compactMap { $0.isAccepted ? $0.mid : nil }
        guard !bundleOrder.isEmpty else { return accepted }
        return bundleOrder.filter(accepted.contains)
    }

    /// The BUNDLE tag of the answer: the first accepted section's mid (RFC 8843 §7.2.1).
    public var bundleTag: String? { answerBundle.first }

    /// The accepted media sections, in offer order.
    public var accepted: [MediaSectionDescription] { sections.compactMap(\.section) }

    /// The accepted data channel section, if the offer has one.
    public var dataChannel: DataChannelOffer? { sections.lazy.compactMap(\.dataChannel).first }

    /// The id the accepted sections give extension `uri` (one id per URI on a BUNDLE transport).
    public func extensionID(for uri: String) -> UInt8? {
        sections.lazy.filter(\.isAccepted).flatMap(\.extensions).first { $0.uri == uri }?.id
    }

    /// Publisher extension id → URI, for every accepted extension.
    public var extensionURIs: [UInt8: String] {
        var map: [UInt8: String] = [:]
        for section in sections where section.isAccepted {
            for ext in section.extensions where map[ext.id] == nil { map[ext.id] = ext.uri }
        }
        return map
    }
}

/// Why an offer cannot be answered at all (every section rejected, or no media).
public struct NegotiationError: Error, Sendable, Hashable, CustomStringConvertible {
    public let reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { reason }
}

extension SessionDescription {
    /// Negotiates this offer: each m-section is accepted with its first VP8 (video) or Opus (audio)
    /// format, or rejected with a reason (other media such as data channels, no supported codec,
    /// port 0, no mid, a non-SRTP profile). Throws when no section is accepted.
    public func negotiate(_ capabilities: AnswerCapabilities = .sfu) throws(NegotiationError) -> NegotiatedOffer {
        guard !media.isEmpty else { throw NegotiationError("the offer has no media sections") }
        let parsed = sections
        // One transport: the offer's first BUNDLE group (RFC 8843). Sections outside it would need
        // transports of their own and are rejected; an offer without a group is answered as one.
        let group = bundleGroups.first
        let bundled = Set(group ?? media.compactMap(\.mid))
        var result: [NegotiatedSection] = []
        for description in media {
            var section = Self.negotiate(description, parsed: parsed, bundled: bundled, capabilities: capabilities)
            // One data channel section per transport.
            if section.dataChannel != nil, result.contains(where: { $0.dataChannel != nil }) {
                section.dataChannel = nil
                section.rejection = "a second data channel section (one SCTP association per transport)"
            }
            result.append(section)
        }
        guard result.contains(where: \.isAccepted) else {
            let reasons = result.map { "\($0.media) \($0.mid.map { "mid \($0)" } ?? "without mid"): \($0.rejection ?? "")" }
            throw NegotiationError("no section of the offer can be received (the server takes VP8, Opus and data channels): "
                                   + reasons.joined(separator: "; "))
        }
        let allowMixed = !sessionAttributes("extmap-allow-mixed").isEmpty || media.contains { $0.hasAttribute("extmap-allow-mixed") }
        return NegotiatedOffer(sections: result, extmapAllowMixed: allowMixed, bundleOrder: group ?? [])
    }

    private static func negotiate(_ description: MediaDescription, parsed: [MediaSectionDescription], bundled: Set<String>,
                                  capabilities: AnswerCapabilities) -> NegotiatedSection {
        let line = description.mediaLine
        var negotiated = NegotiatedSection(media: line.kind, mid: description.mid, proto: line.proto, formats: line.formats,
                                           section: nil, extensions: [], feedback: [], simulcastLayers: [], rejection: nil)
        func reject(_ reason: String) -> NegotiatedSection {
            negotiated.rejection = reason
            return negotiated
        }
        // Port 0 disables a section, except one marked bundle-only inside the BUNDLE group (RFC 8843
        // §6: Firefox's and Chromium's max-bundle offers send every section but the first that way).
        let bundleOnly = description.hasAttribute("bundle-only") && description.mid.map(bundled.contains) == true
        if line.kind == "application" {
            guard line.port.split(separator: "/").first != "0" || bundleOnly else { return reject("the offer disabled it (port 0)") }
            guard line.proto.uppercased().hasSuffix("DTLS/SCTP"), line.formats.contains("webrtc-datachannel") else {
                return reject("profile \(line.proto) \(line.formats.joined(separator: " ")) (wanted UDP/DTLS/SCTP webrtc-datachannel)")
            }
            guard let mid = description.mid else { return reject("no a=mid (BUNDLE needs one)") }
            guard bundled.contains(mid) else { return reject("not in the offer's BUNDLE group (the server takes one transport)") }
            var offer = DataChannelOffer()
            if let text = description.attributes("sctp-port").first {
                guard let port = UInt16(text.filter { $0 != " " }), port > 0 else { return reject("a=sctp-port:\(text) is not a port") }
                offer.sctpPort = port
            }
            if let text = description.attributes("max-message-size").first {
                guard let size = Int(text.filter { $0 != " " }), size >= 0 else {
                    return reject("a=max-message-size:\(text) is not a size")
                }
                offer.maxMessageSize = size
            }
            negotiated.dataChannel = offer
            return negotiated
        }
        guard let kind = MediaSectionDescription.Kind(rawValue: line.kind) else { return reject("\(line.kind) media is not supported") }
        guard line.port.split(separator: "/").first != "0" || bundleOnly else { return reject("the offer disabled it (port 0)") }
        guard line.proto.uppercased().contains("RTP/SAVPF") else { return reject("profile \(line.proto) (wanted UDP/TLS/RTP/SAVPF)") }
        guard let mid = description.mid else { return reject("no a=mid (BUNDLE needs one)") }
        guard bundled.contains(mid) else { return reject("not in the offer's BUNDLE group (the server takes one transport)") }
        let wanted = kind == .video ? "VP8" : "opus"
        let maps = description.rtpMaps
        guard let codec = maps.first(where: { $0.encoding.lowercased() == wanted.lowercased() }) else {
            let offered = Set(maps.map(\.encoding)).sorted()
            return reject("no \(wanted) (offered: \(offered.isEmpty ? "nothing" : offered.joined(separator: ", ")))")
        }
        guard var section = parsed.first(where: { $0.mid == mid }), section.payloadType == codec.payloadType else {
            return reject("unreadable section")
        }
        let supported = capabilities.extensions[kind] ?? []
        negotiated.extensions = description.extensionMaps.filter { supported.contains($0.uri) }
        let accepts = { (uri: String) in negotiated.extensions.contains { $0.uri == uri } }
        if kind == .video, accepts(RTPExtensionURI.rtpStreamID) {
            negotiated.simulcastLayers = Self.receivedLayers(of: description)
        }
        // RFC 4588 only with what says which stream repairs which: the FID SSRC, or for simulcast
        // layers the repaired stream id each repair carries.
        let repairsNamed = !negotiated.simulcastLayers.isEmpty && accepts(RTPExtensionURI.repairedRTPStreamID)
        if section.rtxSSRC == nil, !repairsNamed { section.rtxPayloadType = nil }
        let offeredFeedback = description.rtcpFeedback.filter { $0.payloadType == "*" || UInt8($0.payloadType) == codec.payloadType }
            .map(\.feedback)
        negotiated.feedback = (capabilities.feedback[kind] ?? []).filter(offeredFeedback.contains)
        negotiated.section = section
        return negotiated
    }

    /// The simulcast layers an offer sends (`a=simulcast:send f;h;q`, RFC 8853): each layer's
    /// first alternative, in order, without paused ones (`~`) and only those with an `a=rid:<id> send`
    /// line (RFC 8851 §4). Empty without simulcast.
    static func receivedLayers(of description: MediaDescription) -> [String] {
        guard let value = description.simulcast else { return [] }
        let parts = value.split(separator: " ")
        guard let sendAt = parts.firstIndex(of: "send"), sendAt + 1 < parts.count else { return [] }
        let declared = Set(description.rids.filter { $0.direction == "send" }.map(\.id))
        var layers: [String] = []
        for layer in parts[sendAt + 1].split(separator: ";") {
            guard let first = layer.split(separator: ",").first, !first.hasPrefix("~") else { continue }
            let id = String(first)
            if declared.contains(id), !layers.contains(id), layers.count < 3 { layers.append(id) }
        }
        return layers
    }

    /// The answer to `offer` as `negotiated`: accepted sections with the offer's payload types and
    /// extension ids, `direction` mapping the offer's direction to ours, one BUNDLE group of them;
    /// rejected sections with port 0 and their mid. `iceLite` marks the server.
    public static func answer(to negotiated: NegotiatedOffer, sessionID: UInt64, version: Int = 1, transport: TransportParameters,
                              iceLite: Bool, setup: String,
                              direction: (MediaSectionDescription.Direction) -> MediaSectionDescription.Direction,
                              cname: String = "swift-rtc") -> SessionDescription {
        var session = sessionLines(sessionID: sessionID, version: version, bundle: negotiated.answerBundle, iceLite: iceLite)
        if negotiated.extmapAllowMixed { session.append(.attribute("extmap-allow-mixed")) }
        var media: [MediaDescription] = []
        var wroteCandidate = false
        for entry in negotiated.sections {
            if entry.dataChannel != nil, let mid = entry.mid {
                media.append(dataChannelDescription(mid: mid, transport: transport, setup: setup, candidate: !wroteCandidate))
                wroteCandidate = true
                continue
            }
            guard var section = entry.section else {
                var lines: [SDPLine] = [SDPLine(type: "c", value: "IN IP4 0.0.0.0")]
                if let mid = entry.mid { lines.append(.attribute("mid", mid)) }
                let formats = entry.formats.isEmpty ? ["0"] : entry.formats
                media.append(MediaDescription(mediaLine: MediaLine(kind: entry.media, port: "0", proto: entry.proto, formats: formats),
                                              lines: lines))
                continue
            }
            section.direction = direction(section.direction)
            section.ssrc = nil
            section.rtxSSRC = nil
            var description = mediaDescription(for: section, transport: transport, setup: setup, extensions: entry.extensions,
                                               feedback: entry.feedback, candidate: !wroteCandidate, cname: cname)
            wroteCandidate = true
            if !entry.simulcastLayers.isEmpty {
                for layer in entry.simulcastLayers { description.lines.append(.attribute("rid", "\(layer) recv")) }
                description.lines.append(.attribute("simulcast", "recv " + entry.simulcastLayers.joined(separator: ";")))
            }
            media.append(description)
        }
        return SessionDescription(sessionLines: session, media: media)
    }
}
