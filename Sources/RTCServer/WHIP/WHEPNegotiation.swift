import RTCTransport

/// WHEP's one exchange on top of the core's subscriber transport, which the server offers: the
/// viewer's offer (recvonly sections) and the core's offer are matched section by section (by
/// kind, in order), and two answers are written from them: the one the core takes as if the
/// viewer had answered its offer (the viewer's ICE, fingerprint and extension ids), and the one
/// the viewer gets (the server's ICE, fingerprint and candidates; the viewer's mids and ids).
/// Payload types are the core's: a viewer that offers another number for the codec is refused.
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
        for (section, core) in matches {
            guard let core else { continue }
            let offered = Dictionary(section.rtpMaps.map { ($0.payloadType, $0.encoding.lowercased()) }, uniquingKeysWith: { first, _ in first })
            for map in core.rtpMaps where offered[map.payloadType] != map.encoding.lowercased() {
                if map.encoding.lowercased() == "rtx" { continue }
                throw Failure(reason: "the offer numbers \(map.encoding) otherwise than the room's \(map.payloadType): offer it as \(map.payloadType)")
            }
        }

        // The core's answer, in its offer's order.
        var core: [String] = ["v=0", "o=- 1 1 IN IP4 0.0.0.0", "s=-", "t=0 0"]
        let coreMids = coreOffer.media.compactMap(\.mid)
        core.append("a=group:BUNDLE " + coreMids.joined(separator: " "))
        for section in coreOffer.media {
            let pair = matches.first { $0.core == section }
            let ids = Dictionary(pair?.viewer.extensionMaps.map { ($0.uri, $0.id) } ?? [], uniquingKeysWith: { first, _ in first })
            core.append("m=\(section.mediaLine.kind) \(pair == nil ? 0 : 9) \(section.mediaLine.proto) \(section.mediaLine.formats.joined(separator: " "))")
            core.append("c=IN IP4 0.0.0.0")
            if let mid = section.mid { core.append("a=mid:\(mid)") }
            core += ["a=ice-ufrag:\(ufrag)", "a=ice-pwd:\(pwd)", "a=fingerprint:\(fingerprint)", "a=setup:active"]
            core.append(pair == nil ? "a=inactive" : "a=recvonly")
            core.append("a=rtcp-mux")
            for ext in section.extensionMaps { if let id = ids[ext.uri] { core.append("a=extmap:\(id) \(ext.uri)") } }
            core += Self.codecLines(section)
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
            answer.append("m=\(section.mediaLine.kind) \(port) \(coreSection.mediaLine.proto) \(coreSection.mediaLine.formats.joined(separator: " "))")
            answer += coreSection.lines.filter { $0.type == "c" }.map { "c=" + $0.value }
            if let mid = section.mid { answer.append("a=mid:\(mid)") }
            for name in ["ice-ufrag", "ice-pwd", "fingerprint"] { answer += coreSection.attributes(name).map { "a=\(name):\($0)" } }
            answer.append("a=setup:passive")
            answer.append("a=sendonly")
            answer.append("a=rtcp-mux")
            if coreSection.hasAttribute("rtcp-rsize") { answer.append("a=rtcp-rsize") }
            for ext in coreSection.extensionMaps { if let id = ids[ext.uri] { answer.append("a=extmap:\(id) \(ext.uri)") } }
            answer += Self.codecLines(coreSection)
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

    private static func codecLines(_ section: MediaDescription) -> [String] {
        ["rtpmap", "rtcp-fb", "fmtp"].flatMap { name in section.attributes(name).map { "a=\(name):\($0)" } }
    }

    private static func session(_ description: SessionDescription, _ name: String) -> String? {
        description.sessionLines.compactMap { line in line.attribute.flatMap { $0.name == name ? $0.value : nil } }.first
    }
}
