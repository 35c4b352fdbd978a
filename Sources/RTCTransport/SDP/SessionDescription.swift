/// One SDP line, `<type>=<value>` ([RFC 8866 §5](https://www.rfc-editor.org/rfc/rfc8866#section-5)).
public struct SDPLine: Sendable, Hashable {
    public var type: Character
    public var value: String

    public init(type: Character, value: String) {
        self.type = type
        self.value = value
    }

    /// An attribute line `a=name` or `a=name:value`.
    public static func attribute(_ name: String, _ value: String? = nil) -> SDPLine {
        SDPLine(type: "a", value: value.map { "\(name):\($0)" } ?? name)
    }

    /// For `a=` lines: the attribute name and its value (nil for a flag attribute).
    public var attribute: (name: String, value: String?)? {
        guard type == "a" else { return nil }
        guard let colon = value.firstIndex(of: ":") else { return (value, nil) }
        return (String(value[..<colon]), String(value[value.index(after: colon)...]))
    }
}

/// An SDP session description: session-level lines and media sections, each kept as an ordered
/// list of lines so that parsing then serializing gives back the same text, with typed accessors
/// for the parts WebRTC uses ([RFC 8866](https://www.rfc-editor.org/rfc/rfc8866),
/// [RFC 8829 (JSEP)](https://www.rfc-editor.org/rfc/rfc8829)).
public struct SessionDescription: Sendable, Hashable {
    /// Lines before the first `m=`.
    public var sessionLines: [SDPLine]
    public var media: [MediaDescription]

    public init(sessionLines: [SDPLine], media: [MediaDescription]) {
        self.sessionLines = sessionLines
        self.media = media
    }

    /// Longest description accepted, as a guard against hostile input.
    public static let maxLength = 256 * 1024

    /// Parses SDP text with CRLF or LF line endings.
    public init(parsing text: String) throws(ParseError) {
        guard text.utf8.count <= Self.maxLength else { throw ParseError(.invalid, "SDP longer than \(Self.maxLength) bytes") }
        var session: [SDPLine] = []
        var media: [MediaDescription] = []
        var number = 0
        // Split on LF bytes: Swift treats CR LF as one Character, so a Character split would not.
        for raw in text.utf8.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            number += 1
            let bytes = raw.last == UInt8(ascii: "\r") ? raw.dropLast() : raw[...]
            if bytes.isEmpty { continue }
            let line = Substring(String(decoding: bytes, as: UTF8.self))
            guard line.count >= 2, let type = line.first, type.isASCII, type.isLetter, type.isLowercase,
                  line[line.index(after: line.startIndex)] == "="
            else { throw ParseError(.invalid, "SDP line \(number) is not <letter>=<value>") }
            let parsed = SDPLine(type: type, value: String(line.dropFirst(2)))
            if type == "m" {
                media.append(MediaDescription(mediaLine: try MediaLine(parsing: parsed.value, line: number), lines: []))
            } else if media.isEmpty {
                session.append(parsed)
            } else {
                media[media.count - 1].lines.append(parsed)
            }
        }
        guard session.first?.type == "v", session.first?.value == "0" else {
            throw ParseError(.invalid, "SDP must start with v=0")
        }
        self.init(sessionLines: session, media: media)
    }

    /// The description as text with CRLF line endings.
    public var serialized: String {
        var text = ""
        for line in sessionLines { text += "\(line.type)=\(line.value)\r\n" }
        for section in media {
            text += "m=\(section.mediaLine.serialized)\r\n"
            for line in section.lines { text += "\(line.type)=\(line.value)\r\n" }
        }
        return text
    }

    /// Values of session-level `a=name` lines.
    public func sessionAttributes(_ name: String) -> [String] {
        sessionLines.compactMap { line in line.attribute.flatMap { $0.name == name ? ($0.value ?? "") : nil } }
    }

    /// `a=group:BUNDLE` mids.
    public var bundleGroups: [[String]] {
        sessionAttributes("group").compactMap { value in
            let parts = value.split(separator: " ").map(String.init)
            return parts.first == "BUNDLE" ? Array(parts.dropFirst()) : nil
        }
    }

    /// ICE credentials and DTLS parameters, from the session or else the first media section that has them.
    public var iceUfrag: String? { sessionAttributes("ice-ufrag").first ?? media.lazy.compactMap(\.iceUfrag).first }
    public var icePwd: String? { sessionAttributes("ice-pwd").first ?? media.lazy.compactMap(\.icePwd).first }
    public var fingerprint: SDPFingerprint? {
        sessionAttributes("fingerprint").first.flatMap(SDPFingerprint.init(parsing:)) ?? media.lazy.compactMap(\.fingerprint).first
    }
}

/// `m=<media> <port> <proto> <fmt> ...`.
public struct MediaLine: Sendable, Hashable {
    public var kind: String
    /// The port, with `/<count>` kept if present.
    public var port: String
    public var proto: String
    public var formats: [String]

    public init(kind: String, port: String, proto: String, formats: [String]) {
        self.kind = kind
        self.port = port
        self.proto = proto
        self.formats = formats
    }

    init(parsing value: String, line: Int) throws(ParseError) {
        let parts = value.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
        guard parts.count >= 3, !parts[0].isEmpty else { throw ParseError(.invalid, "SDP line \(line): m= needs media, port and proto") }
        self.init(kind: parts[0], port: parts[1], proto: parts[2], formats: Array(parts.dropFirst(3)))
    }

    var serialized: String { ([kind, port, proto] + formats).joined(separator: " ") }

    /// RTP payload types, for RTP profiles.
    public var payloadTypes: [UInt8] { formats.compactMap { UInt8($0) } }
}

/// One media section (`m=` and the lines after it).
public struct MediaDescription: Sendable, Hashable {
    public var mediaLine: MediaLine
    public var lines: [SDPLine]

    public init(mediaLine: MediaLine, lines: [SDPLine]) {
        self.mediaLine = mediaLine
        self.lines = lines
    }

    /// Values of `a=name` lines (empty string for flags).
    public func attributes(_ name: String) -> [String] {
        lines.compactMap { line in line.attribute.flatMap { $0.name == name ? ($0.value ?? "") : nil } }
    }

    public func hasAttribute(_ name: String) -> Bool { !attributes(name).isEmpty }

    /// Appends an attribute line.
    public mutating func addAttribute(_ name: String, _ value: String? = nil) { lines.append(.attribute(name, value)) }

    public var mid: String? { attributes("mid").first }
    public var rtcpMux: Bool { hasAttribute("rtcp-mux") }
    public var iceUfrag: String? { attributes("ice-ufrag").first }
    public var icePwd: String? { attributes("ice-pwd").first }
    public var iceOptions: [String] { attributes("ice-options").flatMap { $0.split(separator: " ").map(String.init) } }
    public var setup: String? { attributes("setup").first }
    public var fingerprint: SDPFingerprint? { attributes("fingerprint").first.flatMap(SDPFingerprint.init(parsing:)) }
    public var msid: String? { attributes("msid").first }

    /// `sendrecv`, `sendonly`, `recvonly` or `inactive`; `sendrecv` when none is given (RFC 8866 §6.7).
    public var direction: String {
        lines.compactMap { line -> String? in
            guard let name = line.attribute?.name, line.attribute?.value == nil else { return nil }
            return ["sendrecv", "sendonly", "recvonly", "inactive"].contains(name) ? name : nil
        }.last ?? "sendrecv"
    }

    public var rtpMaps: [RTPMap] { attributes("rtpmap").compactMap(RTPMap.init(parsing:)) }
    /// `a=fmtp` parameters by payload type.
    public var formatParameters: [UInt8: String] {
        var result: [UInt8: String] = [:]
        for value in attributes("fmtp") {
            let parts = value.split(separator: " ", maxSplits: 1)
            if parts.count == 2, let pt = UInt8(parts[0]) { result[pt] = String(parts[1]) }
        }
        return result
    }
    /// `a=rtcp-fb` entries as (payload type or "*", feedback such as "nack pli").
    public var rtcpFeedback: [(payloadType: String, feedback: String)] {
        attributes("rtcp-fb").compactMap { value in
            let parts = value.split(separator: " ", maxSplits: 1)
            return parts.count == 2 ? (String(parts[0]), String(parts[1])) : nil
        }
    }
    public var extensionMaps: [ExtensionMap] { attributes("extmap").compactMap(ExtensionMap.init(parsing:)) }
    /// `a=ssrc:<ssrc> <attribute>[:<value>]` entries.
    public var ssrcAttributes: [(ssrc: UInt32, attribute: String, value: String?)] {
        attributes("ssrc").compactMap { value in
            let parts = value.split(separator: " ", maxSplits: 1)
            guard parts.count == 2, let ssrc = UInt32(parts[0]) else { return nil }
            let pair = parts[1].split(separator: ":", maxSplits: 1)
            return (ssrc, String(pair[0]), pair.count == 2 ? String(pair[1]) : nil)
        }
    }
    /// SSRCs in order of first mention.
    public var ssrcs: [UInt32] {
        var seen: [UInt32] = []
        for entry in ssrcAttributes where !seen.contains(entry.ssrc) { seen.append(entry.ssrc) }
        return seen
    }
    /// `a=ssrc-group:<semantics> <ssrc> ...`.
    public var ssrcGroups: [(semantics: String, ssrcs: [UInt32])] {
        attributes("ssrc-group").compactMap { value in
            let parts = value.split(separator: " ")
            guard let semantics = parts.first else { return nil }
            return (String(semantics), parts.dropFirst().compactMap { UInt32($0) })
        }
    }
    public var candidates: [ICECandidate] { attributes("candidate").compactMap { try? ICECandidate(parsing: $0) } }
    /// `a=rid:<id> <direction> ...` identifiers (simulcast, RFC 8851).
    public var rids: [(id: String, direction: String)] {
        attributes("rid").compactMap { value in
            let parts = value.split(separator: " ")
            return parts.count >= 2 ? (String(parts[0]), String(parts[1])) : nil
        }
    }
    /// `a=simulcast:` value (RFC 8853).
    public var simulcast: String? { attributes("simulcast").first }
}

/// `a=rtpmap:<pt> <name>/<clock>[/<channels>]`.
public struct RTPMap: Sendable, Hashable {
    public var payloadType: UInt8
    public var encoding: String
    public var clockRate: Int
    public var channels: Int?

    public init(payloadType: UInt8, encoding: String, clockRate: Int, channels: Int? = nil) {
        self.payloadType = payloadType
        self.encoding = encoding
        self.clockRate = clockRate
        self.channels = channels
    }

    public init?(parsing value: String) {
        let parts = value.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, let pt = UInt8(parts[0]) else { return nil }
        let codec = parts[1].split(separator: "/")
        guard codec.count >= 2, let clock = Int(codec[1]) else { return nil }
        self.init(payloadType: pt, encoding: String(codec[0]), clockRate: clock, channels: codec.count > 2 ? Int(codec[2]) : nil)
    }

    public var value: String { "\(payloadType) \(encoding)/\(clockRate)" + (channels.map { "/\($0)" } ?? "") }
}

/// `a=extmap:<id>[/<direction>] <uri> [<attributes>]` (RFC 8285 §8).
public struct ExtensionMap: Sendable, Hashable {
    public var id: UInt8
    public var direction: String?
    public var uri: String
    public var attributes: String?

    public init(id: UInt8, direction: String? = nil, uri: String, attributes: String? = nil) {
        self.id = id
        self.direction = direction
        self.uri = uri
        self.attributes = attributes
    }

    public init?(parsing value: String) {
        let parts = value.split(separator: " ", maxSplits: 2).map(String.init)
        guard parts.count >= 2 else { return nil }
        let head = parts[0].split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let first = head.first, let id = UInt8(first) else { return nil }
        self.init(id: id, direction: head.count == 2 ? String(head[1]) : nil, uri: parts[1],
                  attributes: parts.count == 3 ? parts[2] : nil)
    }

    public var value: String {
        "\(id)" + (direction.map { "/\($0)" } ?? "") + " \(uri)" + (attributes.map { " \($0)" } ?? "")
    }
}

/// `a=fingerprint:<hash> <hex:pairs>` (RFC 8122 §5).
public struct SDPFingerprint: Sendable, Hashable {
    public var algorithm: String
    /// Bytes of the certificate digest.
    public var digest: [UInt8]

    public init(algorithm: String, digest: [UInt8]) {
        self.algorithm = algorithm
        self.digest = digest
    }

    public init?(parsing value: String) {
        let parts = value.split(separator: " ")
        guard parts.count == 2 else { return nil }
        var bytes: [UInt8] = []
        for pair in parts[1].split(separator: ":", omittingEmptySubsequences: false) {
            guard pair.count == 2, let byte = UInt8(pair, radix: 16) else { return nil }
            bytes.append(byte)
        }
        self.init(algorithm: parts[0].lowercased(), digest: bytes)
    }

    public var value: String {
        algorithm + " " + digest.map { byte in
            let hex = String(byte, radix: 16, uppercase: true)
            return hex.count == 1 ? "0" + hex : hex
        }.joined(separator: ":")
    }
}

/// An ICE candidate (`a=candidate:` value, [RFC 8839 §5.1](https://www.rfc-editor.org/rfc/rfc8839#section-5.1)).
///
/// `<foundation> <component> <transport> <priority> <address> <port> typ <type> [raddr <a>] [rport <p>] *(<name> <value>)`
public struct ICECandidate: Sendable, Hashable {
    public var foundation: String
    public var component: Int
    public var transport: String
    public var priority: UInt32
    public var address: String
    public var port: UInt16
    public var type: String
    public var relatedAddress: String?
    public var relatedPort: UInt16?
    /// Further name/value pairs (e.g. `generation 0`, `network-id 1`), in order.
    public var extensions: [(String, String)]

    public init(foundation: String, component: Int = 1, transport: String = "udp", priority: UInt32, address: String,
                port: UInt16, type: String = "host", relatedAddress: String? = nil, relatedPort: UInt16? = nil,
                extensions: [(String, String)] = []) {
        self.foundation = foundation
        self.component = component
        self.transport = transport
        self.priority = priority
        self.address = address
        self.port = port
        self.type = type
        self.relatedAddress = relatedAddress
        self.relatedPort = relatedPort
        self.extensions = extensions
    }

    public init(parsing value: String) throws(ParseError) {
        var text = Substring(value)
        if text.hasPrefix("candidate:") { text = text.dropFirst("candidate:".count) }
        let parts = text.split(separator: " ").map(String.init)
        guard parts.count >= 8, parts[6] == "typ", let component = Int(parts[1]), let priority = UInt32(parts[3]),
              let port = UInt16(parts[5])
        else { throw ParseError(.invalid, "ICE candidate '\(value.prefix(80))'") }
        var relatedAddress: String?, relatedPort: UInt16?, extensions: [(String, String)] = []
        var index = 8
        while index + 1 < parts.count {
            let (name, item) = (parts[index], parts[index + 1])
            switch name {
            case "raddr": relatedAddress = item
            case "rport": relatedPort = UInt16(item)
            default: extensions.append((name, item))
            }
            index += 2
        }
        guard index == parts.count else { throw ParseError(.invalid, "ICE candidate with an unpaired field") }
        self.init(foundation: parts[0], component: component, transport: parts[2], priority: priority, address: parts[4],
                  port: port, type: parts[7], relatedAddress: relatedAddress, relatedPort: relatedPort, extensions: extensions)
    }

    /// The `a=candidate:` value.
    public var value: String {
        var parts = [foundation, String(component), transport, String(priority), address, String(port), "typ", type]
        if let relatedAddress { parts += ["raddr", relatedAddress] }
        if let relatedPort { parts += ["rport", String(relatedPort)] }
        for (name, item) in extensions { parts += [name, item] }
        return parts.joined(separator: " ")
    }

    public static func == (lhs: ICECandidate, rhs: ICECandidate) -> Bool { lhs.value == rhs.value }
    public func hash(into hasher: inout Hasher) { hasher.combine(value) }
}
