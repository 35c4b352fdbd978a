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
}
