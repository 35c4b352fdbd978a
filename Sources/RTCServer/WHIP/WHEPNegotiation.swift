import RTCTransport

/// WHEP's one exchange on top of the core's subscriber transport, which the server offers: the
/// viewer's offer (recvonly sections) and the core's offer are matched section by section (by
/// kind, in order), and two answers are written from them: the one the core takes as if the
/// viewer had answered its offer (the viewer's ICE, fingerprint and extension ids), and the one
/// the viewer gets (the server's ICE, fingerprint and candidates; the viewer's mids and ids).
/// Payload types are the viewer's: both answers number each codec (and its RFC 4588 format) as the
/// viewer's offer does, and the core, taking its answer, sends the leg under those numbers (as
/// LiveKit and mediasoup rewrite them per leg). A viewer that does not offer the room's codec in a
/// section is refused; one without an rtx format for it gets no repairs.
struct WHEPNegotiation {
    /// For the core: an answer to its offer.
    let coreAnswer: String
    /// For the viewer: the answer to its offer.
    let viewerAnswer: String

    struct Failure: Error { let reason: String }

    init(viewerOffer: SessionDescription, coreOffer: SessionDescription) throws(Failure) {
        let viewer = viewerOffer.media
        guard let ufrag = viewer.first?.iceUfrag ?? Self.session(viewerOffer, "ice-ufrag"),
              let pwd = viewer.first?.icePwd ?? Self.session(viewerOffer, "ice-pwd"),
              let fingerprint = viewer.first?.attributes("fingerprint").first ?? Self.session(viewerOffer, "fingerprint")
        else { throw Failure(reason: "the offer has no ICE credentials or fingerprint") }
        // Each viewer section that receives, matched with the core's first unused sending section of its kind.
        var used = Set<Int>()
        var matches: [(viewer: MediaDescription, core: MediaDescription?)] = []
        for section in viewer {
            let receives = ["recvonly", "sendrecv"].contains(section.direction) && ["audio", "video"].contains(section.mediaLine.kind)
            let index = receives ? coreOffer.media.indices.first { !used.contains($0) && coreOffer.media[$0].mediaLine.kind == section.mediaLine.kind
                && coreOffer.media[$0].direction == "sendonly" } : nil
            if let index { used.insert(index) }
            matches.append((section, index.map { coreOffer.media[$0] }))
        }
        guard matches.contains(where: { $0.core != nil }) else { throw Failure(reason: "nothing in the room to send to the offer's sections") }
        // Each matched section's numbering: the core's payload type → the viewer's, per encoding.
        var numbering: [String: [UInt8: UInt8]] = [:]
        for (section, core) in matches {
            guard let core, let mid = core.mid else { continue }
            numbering[mid] = try Self.numbering(viewer: section, core: core)
        }

        // The core's answer, in its offer's order.
        var core: [String] = ["v=0", "o=- 1 1 IN IP4 0.0.0.0", "s=-", "t=0 0"]
        let coreMids = coreOffer.media.compactMap(\.mid)
        core.append("a=group:BUNDLE " + coreMids.joined(separator: " "))
        for section in coreOffer.media {
            let pair = matches.first { $0.core == section }
            let ids = Dictionary(pair?.viewer.extensionMaps.map { ($0.uri, $0.id) } ?? [], uniquingKeysWith: { first, _ in first })
            let map = section.mid.flatMap { numbering[$0] }
            core.append("m=\(section.mediaLine.kind) \(pair == nil ? 0 : 9) \(section.mediaLine.proto) \(Self.formats(section, map).joined(separator: " "))")
            core.append("c=IN IP4 0.0.0.0")
            if let mid = section.mid { core.append("a=mid:\(mid)") }
            core += ["a=ice-ufrag:\(ufrag)", "a=ice-pwd:\(pwd)", "a=fingerprint:\(fingerprint)", "a=setup:active"]
            core.append(pair == nil ? "a=inactive" : "a=recvonly")
            core.append("a=rtcp-mux")
            for ext in section.extensionMaps { if let id = ids[ext.uri] { core.append("a=extmap:\(id) \(ext.uri)") } }
            core += Self.codecLines(section, map)
        }

        // The viewer's answer, in its offer's order.
        var answer: [String] = ["v=0", "o=- \(UInt32.random(in: 1...UInt32.max)) 1 IN IP4 127.0.0.1", "s=-", "t=0 0"]
        for line in coreOffer.sessionLines where line.type == "a" && line.attribute?.name == "ice-lite" { answer.append("a=ice-lite") }
        let accepted = matches.filter { $0.core != nil }.compactMap(\.viewer.mid)
        answer.append("a=group:BUNDLE " + accepted.joined(separator: " "))
        answer.append("a=msid-semantic: WMS *")
        let candidates = coreOffer.media.flatMap { $0.lines.filter { $0.attribute?.name == "candidate" } }.map { "a=" + $0.value }
        var first = true
        for (section, coreSection) in matches {
            guard let coreSection else {
                answer.append("m=\(section.mediaLine.kind) 0 \(section.mediaLine.proto) \(section.mediaLine.formats.first ?? "0")")
                answer.append("c=IN IP4 0.0.0.0")
                if let mid = section.mid { answer.append("a=mid:\(mid)") }
                answer.append("a=inactive")
                continue
            }
            let ids = Dictionary(section.extensionMaps.map { ($0.uri, $0.id) }, uniquingKeysWith: { first, _ in first })
            let port = coreSection.mediaLine.port
            let map = coreSection.mid.flatMap { numbering[$0] }
            answer.append("m=\(section.mediaLine.kind) \(port) \(coreSection.mediaLine.proto) \(Self.formats(coreSection, map).joined(separator: " "))")
            answer += coreSection.lines.filter { $0.type == "c" }.map { "c=" + $0.value }
            if let mid = section.mid { answer.append("a=mid:\(mid)") }
            for name in ["ice-ufrag", "ice-pwd", "fingerprint"] { answer += coreSection.attributes(name).map { "a=\(name):\($0)" } }
            answer.append("a=setup:passive")
            answer.append("a=sendonly")
            answer.append("a=rtcp-mux")
            if coreSection.hasAttribute("rtcp-rsize") { answer.append("a=rtcp-rsize") }
            for ext in coreSection.extensionMaps { if let id = ids[ext.uri] { answer.append("a=extmap:\(id) \(ext.uri)") } }
            answer += Self.codecLines(coreSection, map)
            for name in ["msid", "ssrc-group", "ssrc"] { answer += coreSection.attributes(name).map { "a=\(name):\($0)" } }
            if first {
                answer += candidates
                answer.append("a=end-of-candidates")
                first = false
            }
        }
        coreAnswer = core.joined(separator: "\r\n") + "\r\n"
        viewerAnswer = answer.joined(separator: "\r\n") + "\r\n"
    }

    /// The viewer's number for each of the core section's formats: the codec's by its encoding
    /// (the first the viewer offers), an rtx format's by the viewer's rtx whose `apt` names the
    /// viewer's number for the codec. Formats the viewer has no number for are left out; the
    /// codec itself missing refuses the offer.
    static func numbering(viewer: MediaDescription, core: MediaDescription) throws(Failure) -> [UInt8: UInt8] {
        let viewerParameters = viewer.formatParameters
        let coreParameters = core.formatParameters
        var map: [UInt8: UInt8] = [:]
        for entry in core.rtpMaps where entry.encoding.lowercased() != "rtx" {
            guard let theirs = viewer.rtpMaps.first(where: { $0.encoding.lowercased() == entry.encoding.lowercased() && $0.clockRate == entry.clockRate })
            else { throw Failure(reason: "the offer's \(viewer.mediaLine.kind) section does not receive \(entry.encoding)/\(entry.clockRate), which the room sends") }
            map[entry.payloadType] = theirs.payloadType
        }
        for entry in core.rtpMaps where entry.encoding.lowercased() == "rtx" {
            guard let apt = SessionDescription.associatedPayloadType(coreParameters[entry.payloadType]), let codec = map[apt],
                  let theirs = viewer.rtpMaps.first(where: { $0.encoding.lowercased() == "rtx"
                      && SessionDescription.associatedPayloadType(viewerParameters[$0.payloadType]) == codec }) else { continue }
            map[entry.payloadType] = theirs.payloadType
        }
        return map
    }

    /// The m-line's formats under `map` (unmapped ones left out); as they are without one.
    private static func formats(_ section: MediaDescription, _ map: [UInt8: UInt8]?) -> [String] {
        guard let map else { return section.mediaLine.formats }
        return section.mediaLine.formats.compactMap { UInt8($0).flatMap { map[$0] }.map(String.init) }
    }

    /// The section's rtpmap, rtcp-fb and fmtp lines under `map`: each renumbered (an rtx format's
    /// `apt` too), those of unmapped formats left out.
    private static func codecLines(_ section: MediaDescription, _ map: [UInt8: UInt8]? = nil) -> [String] {
        ["rtpmap", "rtcp-fb", "fmtp"].flatMap { name in
            section.attributes(name).compactMap { value -> String? in
                guard let map else { return "a=\(name):\(value)" }
                let parts = value.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: false)
                if parts.first == "*" { return "a=\(name):\(value)" }
                guard let first = parts.first, let number = UInt8(first), let mapped = map[number] else { return nil }
                var rest = parts.count > 1 ? String(parts[1]) : ""
                if name == "fmtp", let apt = SessionDescription.associatedPayloadType(rest), let aptMapped = map[apt] {
                    rest = rest.replacingOccurrences(of: "apt=\(apt)", with: "apt=\(aptMapped)")
                }
                return "a=\(name):\(mapped)" + (parts.count > 1 ? " " + rest : "")
            }
        }
    }

    private static func session(_ description: SessionDescription, _ name: String) -> String? {
        description.sessionLines.compactMap { line in line.attribute.flatMap { $0.name == name ? $0.value : nil } }.first
    }
}
