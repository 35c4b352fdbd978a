import NIOCore

/// One media section as negotiation sees it: a track (or a receive slot) with its codec.
public struct MediaSectionDescription: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable { case audio, video }
    public enum Direction: String, Sendable, Hashable {
        case sendrecv, sendonly, recvonly, inactive

        /// The direction as the other side sees it.
        public var reversed: Direction {
            switch self {
            case .sendonly: .recvonly
            case .recvonly: .sendonly
            default: self
            }
        }
    }

    public var mid: String
    public var kind: Kind
    public var direction: Direction
    public var payloadType: UInt8
    /// The sender's SSRC, for sections that send.
    public var ssrc: UInt32?
    /// `a=msid` stream and track ids.
    public var streamID: String?
    public var trackID: String?
    /// The RFC 4588 retransmission format (`rtx/90000` with `apt=` the codec), video only; nil
    /// when retransmissions travel as the original packets.
    public var rtxPayloadType: UInt8?
    /// The retransmission stream's SSRC (`a=ssrc-group:FID <ssrc> <rtxSSRC>`), for sections that send.
    public var rtxSSRC: UInt32?
    /// RFC 8851/8853 simulcast: the stream ids of the layers a sending section sends (`a=rid:<id> send`,
    /// `a=simulcast:send a;b;c`), in that order. Such a section lists no SSRCs: every packet carries
    /// its layer's stream id (and a repair its repaired stream id), as browsers do.
    public var simulcastRids: [String] = []
    /// The codec's `x-google-*` format parameters as an offer gave them (`x-google-start-bitrate=1000`:
    /// libwebrtc reads its sender's start bitrate from the remote description only, so an answer
    /// echoes them, as Pion does); written as the codec's `a=fmtp` of a video section. Nil: none.
    public var codecParameters: String?

    public init(mid: String, kind: Kind, direction: Direction, payloadType: UInt8? = nil, ssrc: UInt32? = nil,
                streamID: String? = nil, trackID: String? = nil, rtxPayloadType: UInt8? = nil, rtxSSRC: UInt32? = nil) {
        self.mid = mid
        self.kind = kind
        self.direction = direction
        self.payloadType = payloadType ?? (kind == .video ? SDPCodecs.vp8PayloadType : SDPCodecs.opusPayloadType)
        self.ssrc = ssrc
        self.streamID = streamID
        self.trackID = trackID
        self.rtxPayloadType = kind == .video ? rtxPayloadType : nil
        self.rtxSSRC = self.rtxPayloadType == nil ? nil : rtxSSRC
    }

    /// The direction as the other side sees it.
    public var reversed: Direction { direction.reversed }
}

/// The codecs and header extensions this SDK offers (DESIGN.md §3).
public enum SDPCodecs {
    public static let vp8PayloadType: UInt8 = 96
    /// RFC 4588 retransmissions of VP8 (`a=fmtp:97 apt=96`).
    public static let rtxPayloadType: UInt8 = 97
    public static let opusPayloadType: UInt8 = 111
    /// Header extension ids this SDK uses in what it offers (ids from ``RTPExtensionID``).
    public static let extensions: [(id: UInt8, uri: String, kinds: Set<MediaSectionDescription.Kind>)] = [
        (RTPExtensionID.audioLevel, RTPExtensionURI.audioLevel, [.audio]),
        (RTPExtensionID.absSendTime, RTPExtensionURI.absSendTime, [.audio, .video]),
        (RTPExtensionID.transportWideSequence, RTPExtensionURI.transportWideSequence, [.audio, .video]),
        (RTPExtensionID.mid, RTPExtensionURI.mid, [.audio, .video]),
        (RTPExtensionID.videoOrientation, RTPExtensionURI.videoOrientation, [.video]),
        (RTPExtensionID.rtpStreamID, RTPExtensionURI.rtpStreamID, [.video]),
        (RTPExtensionID.repairedRTPStreamID, RTPExtensionURI.repairedRTPStreamID, [.video]),
    ]
    /// ``extensions`` by URI.
    public static let extensionIDs: [String: UInt8] = Dictionary(uniqueKeysWithValues: extensions.map { ($0.uri, $0.id) })
    /// The extensions a forwarder carries from a publisher to its subscribers: what describes the
    /// media or the send time. A mid or a simulcast stream id names the publisher's own sections and
    /// means nothing on a subscriber's transport, so those stay behind.
    public static let forwardedExtensionURIs: Set<String> = [
        RTPExtensionURI.audioLevel, RTPExtensionURI.absSendTime, RTPExtensionURI.transportWideSequence, RTPExtensionURI.videoOrientation,
    ]
}

extension SessionDescription {
    /// An offer or answer for one BUNDLEd transport with the given sections, in the SDK's own
    /// numbering (``SDPCodecs``). `iceLite` marks the server; `setup` is `actpass` in offers,
    /// `active` or `passive` in answers. Answers to offers from other peers come from
    /// ``answer(to:sessionID:version:transport:iceLite:setup:direction:cname:)`` instead, which keeps the offer's numbering.
    /// `dataChannel`: a data channel section (mid ``dataChannelMid``) after the media ones.
    public static func make(sessionID: UInt64, version: Int = 1, transport: TransportParameters, iceLite: Bool, setup: String,
                            sections: [MediaSectionDescription], dataChannel: Bool = false, cname: String = "swift-rtc") -> SessionDescription {
        let mids = sections.map(\.mid) + (dataChannel ? [dataChannelMid] : [])
        let session = sessionLines(sessionID: sessionID, version: version, bundle: mids, iceLite: iceLite)
        var media = sections.enumerated().map { index, section in
            let extensions = SDPCodecs.extensions.filter { $0.kinds.contains(section.kind) }
                .map { ExtensionMap(id: $0.id, uri: $0.uri) }
            let feedback = section.kind == .video ? ["goog-remb", "transport-cc", "ccm fir", "nack", "nack pli"] : ["transport-cc"]
            return mediaDescription(for: section, transport: transport, setup: setup, extensions: extensions, feedback: feedback,
                                    candidate: index == 0, cname: cname)
        }
        if dataChannel {
            media.append(dataChannelDescription(mid: dataChannelMid, transport: transport, setup: setup, candidate: sections.isEmpty))
        }
        return SessionDescription(sessionLines: session, media: media)
    }

    /// The mid of the data channel section this SDK offers.
    public static let dataChannelMid = "data"

    /// The peer's SCTP port from an answer's data channel section, nil when it has none (or
    /// rejected it with port 0).
    public var dataChannelPort: UInt16? {
        guard let section = media.first(where: { $0.mediaLine.kind == "application" }), section.mediaLine.port != "0" else { return nil }
        return section.attributes("sctp-port").first.flatMap { UInt16($0) } ?? 5000
    }

    /// `v=`, `o=`, `s=`, `t=` and the session attributes: BUNDLE of `bundle` (none when empty),
    /// `ice-lite`, `msid-semantic`.
    static func sessionLines(sessionID: UInt64, version: Int, bundle: [String], iceLite: Bool) -> [SDPLine] {
        var session: [SDPLine] = [
            SDPLine(type: "v", value: "0"),
            // RFC 8866 §5.2 leaves the range open; Firefox takes ids up to 2^63 - 1 only, so 62 bits.
            SDPLine(type: "o", value: "- \(sessionID & 0x3FFF_FFFF_FFFF_FFFF) \(version) IN IP4 127.0.0.1"),
            SDPLine(type: "s", value: "-"),
            SDPLine(type: "t", value: "0 0"),
        ]
        if !bundle.isEmpty { session.append(.attribute("group", "BUNDLE " + bundle.joined(separator: " "))) }
        if iceLite { session.append(.attribute("ice-lite")) }
        session.append(.attribute("msid-semantic", " WMS *"))
        return session
    }

    /// One m-section: transport lines (the candidates when `candidate`, on the BUNDLE's first
    /// section), direction, `extensions`, the codec with `feedback`, RTX, and for a sending
    /// section its msid and SSRCs.
    static func mediaDescription(for section: MediaSectionDescription, transport: TransportParameters, setup: String,
                                 extensions: [ExtensionMap], feedback: [String], candidate: Bool, cname: String) -> MediaDescription {
        let first = transport.candidates.first
        let address = first?.ipAddress ?? "0.0.0.0"
        var lines: [SDPLine] = [SDPLine(type: "c", value: "IN \(address.contains(":") ? "IP6" : "IP4") \(address)")]
        lines.append(.attribute("mid", section.mid))
        lines.append(.attribute("ice-ufrag", transport.ice.ufrag))
        lines.append(.attribute("ice-pwd", transport.ice.pwd))
        lines.append(.attribute("fingerprint", transport.fingerprint.value))
        lines.append(.attribute("setup", setup))
        lines.append(.attribute(section.direction.rawValue))
        lines.append(.attribute("rtcp-mux"))
        lines.append(.attribute("rtcp-rsize"))
        for var ext in extensions {
            ext.attributes = nil
            ext.direction = ext.direction.flatMap { MediaSectionDescription.Direction(rawValue: $0)?.reversed.rawValue }
            lines.append(.attribute("extmap", ext.value))
        }
        let pt = section.payloadType
        var formats = [String(pt)]
        if section.kind == .video {
            lines.append(.attribute("rtpmap", "\(pt) VP8/90000"))
            for value in feedback { lines.append(.attribute("rtcp-fb", "\(pt) \(value)")) }
            if let parameters = section.codecParameters, !parameters.isEmpty { lines.append(.attribute("fmtp", "\(pt) \(parameters)")) }
            if let rtx = section.rtxPayloadType {
                formats.append(String(rtx))
                lines.append(.attribute("rtpmap", "\(rtx) rtx/90000"))
                lines.append(.attribute("fmtp", "\(rtx) apt=\(pt)"))
            }
        } else {
            lines.append(.attribute("rtpmap", "\(pt) opus/48000/2"))
            for value in feedback { lines.append(.attribute("rtcp-fb", "\(pt) \(value)")) }
            lines.append(.attribute("fmtp", "\(pt) minptime=10;useinbandfec=1"))
        }
        let sends = section.direction == .sendonly || section.direction == .sendrecv
        if sends, !section.simulcastRids.isEmpty {
            lines.append(.attribute("msid", "\(section.streamID ?? "-") \(section.trackID ?? "track-\(section.mid)")"))
            for rid in section.simulcastRids { lines.append(.attribute("rid", "\(rid) send")) }
            lines.append(.attribute("simulcast", "send " + section.simulcastRids.joined(separator: ";")))
        } else if let ssrc = section.ssrc, sends {
            let stream = section.streamID ?? "-", track = section.trackID ?? "track-\(ssrc)"
            lines.append(.attribute("msid", "\(stream) \(track)"))
            if let rtx = section.rtxSSRC { lines.append(.attribute("ssrc-group", "FID \(ssrc) \(rtx)")) }
            lines.append(.attribute("ssrc", "\(ssrc) cname:\(cname)"))
            if let rtx = section.rtxSSRC { lines.append(.attribute("ssrc", "\(rtx) cname:\(cname)")) }
        }
        if candidate, !transport.candidates.isEmpty {
            // Host candidates, in the order given (the first preferred), each its own foundation.
            for (index, address) in transport.candidates.enumerated() {
                let entry = ICECandidate(foundation: String(index + 1),
                                         priority: ICEPriority.candidate(localPreference: UInt32(max(0, 65535 - index))),
                                         address: address.ipAddress ?? "127.0.0.1", port: UInt16(address.port ?? 9))
                lines.append(.attribute("candidate", entry.value))
            }
            // Server-reflexive candidates (type preference 100), after the host ones.
            for (index, reflexive) in transport.reflexiveCandidates.enumerated() {
                let entry = ICECandidate(foundation: String(transport.candidates.count + index + 1),
                                         priority: ICEPriority.candidate(typePreference: 100, localPreference: UInt32(max(0, 65535 - index))),
                                         address: reflexive.address.ipAddress ?? "0.0.0.0", port: UInt16(reflexive.address.port ?? 9),
                                         type: "srflx", relatedAddress: reflexive.base.ipAddress ?? "0.0.0.0",
                                         relatedPort: UInt16(reflexive.base.port ?? 9))
                lines.append(.attribute("candidate", entry.value))
            }
            // Passive ICE-TCP candidates, after (and below) every UDP one.
            for (index, address) in transport.tcpCandidates.enumerated() {
                let entry = ICECandidate(foundation: String(transport.candidates.count + transport.reflexiveCandidates.count + index + 1),
                                         transport: "tcp",
                                         priority: ICEPriority.candidate(localPreference: UInt32(max(0, 8191 - index))),
                                         address: address.ipAddress ?? "127.0.0.1", port: UInt16(address.port ?? 9),
                                         extensions: [("tcptype", "passive")])
                lines.append(.attribute("candidate", entry.value))
            }
            lines.append(.attribute("end-of-candidates"))
        }
        let port = first?.port ?? 9
        return MediaDescription(mediaLine: MediaLine(kind: section.kind.rawValue, port: String(port), proto: "UDP/TLS/RTP/SAVPF",
                                                     formats: formats), lines: lines)
    }

    /// Our SCTP port and the largest message we take, as data channel sections say them.
    public static let sctpPort: UInt16 = 5000
    public static let maxMessageSize = 262_144

    /// A data channel section (`m=application <port> UDP/DTLS/SCTP webrtc-datachannel`, RFC 8841):
    /// the transport lines (the candidates when `candidate`), its mid, our SCTP port and maximum
    /// message size.
    static func dataChannelDescription(mid: String, transport: TransportParameters, setup: String, candidate: Bool) -> MediaDescription {
        // The media section writer, for its transport and candidate lines.
        let carrier = mediaDescription(for: MediaSectionDescription(mid: mid, kind: .audio, direction: .inactive), transport: transport,
                                       setup: setup, extensions: [], feedback: [], candidate: candidate, cname: "")
        let kept: Set<String> = ["mid", "ice-ufrag", "ice-pwd", "fingerprint", "setup", "candidate", "end-of-candidates"]
        var lines = carrier.lines.filter { $0.type == "c" || kept.contains($0.attribute?.name ?? "") }
        lines.append(.attribute("sctp-port", String(sctpPort)))
        lines.append(.attribute("max-message-size", String(maxMessageSize)))
        return MediaDescription(mediaLine: MediaLine(kind: "application", port: carrier.mediaLine.port, proto: "UDP/DTLS/SCTP",
                                                     formats: ["webrtc-datachannel"]), lines: lines)
    }

    /// The sections of this description: each m-section's mid, kind, direction, first codec of
    /// ours (VP8 or Opus), the first SSRC that is not a retransmission (FID) SSRC, and for video
    /// the RFC 4588 format that retransmits that codec (`apt=`) with its FID SSRC.
    public var sections: [MediaSectionDescription] {
        media.compactMap { section -> MediaSectionDescription? in
            guard let kind = MediaSectionDescription.Kind(rawValue: section.mediaLine.kind), let mid = section.mid else { return nil }
            let wanted = kind == .video ? "VP8" : "opus"
            let codec = section.rtpMaps.first { $0.encoding.lowercased() == wanted.lowercased() }
            let groups = section.ssrcGroups.filter { $0.semantics == "FID" && $0.ssrcs.count >= 2 }
            let retransmission = Set(groups.flatMap { $0.ssrcs.dropFirst() })
            let ssrc = section.ssrcs.first { !retransmission.contains($0) }
            let msid = section.msid?.split(separator: " ").map(String.init)
            var rtx: UInt8?
            if kind == .video, let codec {
                let parameters = section.formatParameters
                rtx = section.rtpMaps.first { map in
                    map.encoding.lowercased() == "rtx" && Self.associatedPayloadType(parameters[map.payloadType]) == codec.payloadType
                }?.payloadType
            }
            let rtxSSRC = ssrc.flatMap { ssrc in groups.first { $0.ssrcs[0] == ssrc }?.ssrcs[1] }
            var described = MediaSectionDescription(mid: mid, kind: kind, direction: MediaSectionDescription.Direction(rawValue: section.direction) ?? .sendrecv,
                                                    payloadType: codec?.payloadType, ssrc: ssrc, streamID: msid?.first,
                                                    trackID: msid.flatMap { $0.count > 1 ? $0[1] : nil }, rtxPayloadType: rtx, rtxSSRC: rtxSSRC)
            if kind == .video, let codec {
                described.codecParameters = Self.senderParameters(section.formatParameters[codec.payloadType])
            }
            return described
        }
    }

    /// The `x-google-*` parameters of a codec's `a=fmtp` (`;`-separated, as given; at most 8 of at
    /// most 64 bytes each), nil when there are none: what a sender asks its peer's description to
    /// carry back (its start, minimum and maximum bitrate).
    static func senderParameters(_ parameters: String?) -> String? {
        guard let parameters else { return nil }
        let kept = parameters.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { $0.lowercased().hasPrefix("x-google-") && $0.utf8.count <= 64 && $0.allSatisfy { !$0.isWhitespace && $0 != "\r" && $0 != "\n" } }
            .prefix(8)
        return kept.isEmpty ? nil : kept.joined(separator: ";")
    }

    /// The `apt=` of an rtx format's parameters (`apt=96` or `apt=96;rtx-time=3000`).
    public static func associatedPayloadType(_ parameters: String?) -> UInt8? {
        guard let parameters else { return nil }
        for pair in parameters.split(separator: ";") {
            let parts = pair.split(separator: "=", maxSplits: 1).map { $0.filter { $0 != " " } }
            if parts.count == 2, parts[0].lowercased() == "apt" { return UInt8(parts[1]) }
        }
        return nil
    }

    /// The transport parameters this description gives: ICE credentials, fingerprint, loopback or
    /// other IPv4 host candidates, and the DTLS role its `a=setup` implies for its author.
    public func transportParameters(offererRole: DTLSEndpoint.Role = .client) throws(ParseError) -> TransportParameters {
        guard let ufrag = iceUfrag, let pwd = icePwd else { throw ParseError(.invalid, "SDP without ice-ufrag/ice-pwd") }
        guard let fingerprint else { throw ParseError(.invalid, "SDP without a fingerprint") }
        let setup = media.first?.setup ?? sessionAttributes("setup").first ?? "actpass"
        let role: DTLSEndpoint.Role = switch setup {
        case "active": .client
        case "passive": .server
        default: offererRole
        }
        var candidates: [SocketAddress] = [], tcpCandidates: [SocketAddress] = [], reflexive: [ReflexiveCandidate] = []
        for section in media {
            for candidate in section.candidates where candidate.component == 1 {
                guard let address = try? SocketAddress(ipAddress: candidate.address, port: Int(candidate.port)) else { continue }
                // A server-reflexive one is also an address to check (as before); its base is kept.
                if candidate.type == "srflx", let raddr = candidate.relatedAddress, let rport = candidate.relatedPort,
                   let base = try? SocketAddress(ipAddress: raddr, port: Int(rport)),
                   !reflexive.contains(where: { $0.address == address }) {
                    reflexive.append(ReflexiveCandidate(address: address, base: base))
                }
                switch candidate.transport.lowercased() {
                case "udp" where !candidates.contains(address):
                    candidates.append(address)
                case "tcp" where candidate.extensions.contains(where: { $0.0 == "tcptype" && $0.1 == "passive" })
                    && candidate.port != 9 && !tcpCandidates.contains(address):
                    tcpCandidates.append(address)
                default:
                    break
                }
            }
        }
        var parameters = TransportParameters(ice: ICECredentials(ufrag: ufrag, pwd: pwd), fingerprint: fingerprint, candidates: candidates,
                                             tcpCandidates: tcpCandidates, dtlsRole: role)
        parameters.reflexiveCandidates = reflexive
        return parameters
    }
}
