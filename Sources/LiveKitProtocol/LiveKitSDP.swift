/// The SDP changes LiveKit's clients need in the server's offers.
public enum LiveKitSDP {
    /// A subscriber offer with each track's stream id written as LiveKit's clients read it:
    /// `a=msid:<participant sid>|<track sid> <track sid>`, from ours (`a=msid:<participant sid>
    /// <track sid>`). The rest of the text is unchanged; lines end in CRLF (RFC 8866).
    public static func subscriberOffer(_ sdp: String) -> String {
        let prefix = "a=msid:"
        var changed = false
        // "\r\n" is one Character in Swift: both line ends are separators.
        let lines = sdp.split(omittingEmptySubsequences: false) { $0 == "\r\n" || $0 == "\n" }.map { line -> Substring in
            guard line.hasPrefix(prefix) else { return line }
            let ids = line.dropFirst(prefix.count).split(separator: " ")
            guard ids.count == 2, !ids[0].contains("|"), ids[0] != "-" else { return line }
            changed = true
            return Substring(prefix + ids[0] + "|" + ids[1] + " " + ids[1])
        }
        return changed ? lines.joined(separator: "\r\n") : sdp
    }

    /// A server offer as our engine reads it: `a=msid:<participant sid>|<track sid> …` back to
    /// ours, `a=msid:<participant sid> <track sid>` (the inverse of ``subscriberOffer(_:)``).
    public static func ourStreamIDs(_ sdp: String) -> String {
        let prefix = "a=msid:"
        var changed = false
        let lines = lines(of: sdp).map { line -> Substring in
            guard line.hasPrefix(prefix) else { return line }
            let ids = line.dropFirst(prefix.count).split(separator: " ")
            guard let first = ids.first, let bar = first.firstIndex(of: "|") else { return line }
            changed = true
            let participant = first[..<bar], track = first[first.index(after: bar)...]
            return Substring(prefix + participant + " " + (ids.count > 1 ? ids[1] : track))
        }
        return changed ? lines.joined(separator: "\r\n") : sdp
    }

    /// A client offer whose sections carry LiveKit's track ids: the `cid` its AddTrack announced
    /// (by mid) as the `a=msid` track id, which is how a LiveKit server binds a section to its
    /// track. Sections with no cid are left as they are.
    public static func withTrackIDs(_ sdp: String, _ cids: [String: String]) -> String {
        guard !cids.isEmpty else { return sdp }
        var mid: String?
        var sections: [[Substring]] = [[]]
        for line in lines(of: sdp) {
            if line.hasPrefix("m=") { sections.append([]) }
            sections[sections.count - 1].append(line)
        }
        var out: [Substring] = sections[0]
        for section in sections.dropFirst() {
            mid = section.first { $0.hasPrefix("a=mid:") }.map { String($0.dropFirst("a=mid:".count)) }
            guard let mid, let cid = cids[mid] else {
                out += section
                continue
            }
            out += section.map { line -> Substring in
                guard line.hasPrefix("a=msid:") else { return line }
                let stream = line.dropFirst("a=msid:".count).split(separator: " ").first ?? "-"
                return Substring("a=msid:" + stream + " " + cid)
            }
        }
        return out.joined(separator: "\r\n")
    }

    /// "\r\n" is one Character in Swift: both line ends are separators.
    private static func lines(of sdp: String) -> [Substring] {
        sdp.split(omittingEmptySubsequences: false) { $0 == "\r\n" || $0 == "\n" }
    }
}
