import NIOCore

/// One media section as negotiation sees it: a track (or a receive slot) with its codec.
public struct MediaSectionDescription: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable { case audio, video }
    public enum Direction: String, Sendable, Hashable { case sendrecv, sendonly, recvonly, inactive }

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
    public var reversed: Direction {
        switch direction {
        case .sendonly: .recvonly
        case .recvonly: .sendonly
        default: direction
        }
    }
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
    ]
}

extension SessionDescription {
    /// An offer or answer for one BUNDLEd transport with the given sections. `iceLite` marks the
    /// server; `setup` is `actpass` in offers, `active` or `passive` in answers.
    public static func make(sessionID: UInt64, version: Int = 1, transport: TransportParameters, iceLite: Bool, setup: String,
                            sections: [MediaSectionDescription], cname: String = "swift-rtc") -> SessionDescription {
        var session: [SDPLine] = [
            SDPLine(type: "v", value: "0"),
            SDPLine(type: "o", value: "- \(sessionID) \(version) IN IP4 127.0.0.1"),
            SDPLine(type: "s", value: "-"),
            SDPLine(type: "t", value: "0 0"),
        ]
        if !sections.isEmpty { session.append(.attribute("group", "BUNDLE " + sections.map(\.mid).joined(separator: " "))) }
        if iceLite { session.append(.attribute("ice-lite")) }
        session.append(.attribute("msid-semantic", " WMS *"))
        let candidate = transport.candidates.first
        let port = candidate?.port ?? 9
        let media = sections.enumerated().map { index, section -> MediaDescription in
            var lines: [SDPLine] = [SDPLine(type: "c", value: "IN IP4 \(candidate?.ipAddress ?? "0.0.0.0")")]
            lines.append(.attribute("mid", section.mid))
            lines.append(.attribute("ice-ufrag", transport.ice.ufrag))
            lines.append(.attribute("ice-pwd", transport.ice.pwd))
            lines.append(.attribute("fingerprint", transport.fingerprint.value))
            lines.append(.attribute("setup", setup))
            lines.append(.attribute(section.direction.rawValue))
            lines.append(.attribute("rtcp-mux"))
            lines.append(.attribute("rtcp-rsize"))
            for ext in SDPCodecs.extensions where ext.kinds.contains(section.kind) {
                lines.append(.attribute("extmap", "\(ext.id) \(ext.uri)"))
            }
            let pt = section.payloadType
            var formats = [String(pt)]
            if section.kind == .video {
                lines.append(.attribute("rtpmap", "\(pt) VP8/90000"))
                for feedback in ["goog-remb", "transport-cc", "ccm fir", "nack", "nack pli"] {
                    lines.append(.attribute("rtcp-fb", "\(pt) \(feedback)"))
                }
                if let rtx = section.rtxPayloadType {
                    formats.append(String(rtx))
                    lines.append(.attribute("rtpmap", "\(rtx) rtx/90000"))
                    lines.append(.attribute("fmtp", "\(rtx) apt=\(pt)"))
                }
            } else {
                lines.append(.attribute("rtpmap", "\(pt) opus/48000/2"))
                lines.append(.attribute("rtcp-fb", "\(pt) transport-cc"))
                lines.append(.attribute("fmtp", "\(pt) minptime=10;useinbandfec=1"))
            }
            if let ssrc = section.ssrc, section.direction == .sendonly || section.direction == .sendrecv {
                let stream = section.streamID ?? "-", track = section.trackID ?? "track-\(ssrc)"
                lines.append(.attribute("msid", "\(stream) \(track)"))
                if let rtx = section.rtxSSRC { lines.append(.attribute("ssrc-group", "FID \(ssrc) \(rtx)")) }
                lines.append(.attribute("ssrc", "\(ssrc) cname:\(cname)"))
                if let rtx = section.rtxSSRC { lines.append(.attribute("ssrc", "\(rtx) cname:\(cname)")) }
            }
            if index == 0, let candidate {
                let entry = ICECandidate(foundation: "1", priority: ICEPriority.candidate(), address: candidate.ipAddress ?? "127.0.0.1",
                                         port: UInt16(candidate.port ?? 9))
                lines.append(.attribute("candidate", entry.value))
                lines.append(.attribute("end-of-candidates"))
            }
            return MediaDescription(mediaLine: MediaLine(kind: section.kind.rawValue, port: String(port), proto: "UDP/TLS/RTP/SAVPF",
                                                         formats: formats), lines: lines)
        }
        return SessionDescription(sessionLines: session, media: media)
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
            return MediaSectionDescription(mid: mid, kind: kind, direction: MediaSectionDescription.Direction(rawValue: section.direction) ?? .sendrecv,
                                           payloadType: codec?.payloadType, ssrc: ssrc, streamID: msid?.first,
                                           trackID: msid.flatMap { $0.count > 1 ? $0[1] : nil }, rtxPayloadType: rtx, rtxSSRC: rtxSSRC)
        }
    }

    /// The `apt=` of an rtx format's parameters (`apt=96` or `apt=96;rtx-time=3000`).
    static func associatedPayloadType(_ parameters: String?) -> UInt8? {
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
        var candidates: [SocketAddress] = []
        for section in media {
            for candidate in section.candidates where candidate.transport.lowercased() == "udp" && candidate.component == 1 {
                if let address = try? SocketAddress(ipAddress: candidate.address, port: Int(candidate.port)),
                   !candidates.contains(address) {
                    candidates.append(address)
                }
            }
        }
        return TransportParameters(ice: ICECredentials(ufrag: ufrag, pwd: pwd), fingerprint: fingerprint, candidates: candidates,
                                   dtlsRole: role)
    }
}
