/// The parts of a request target the HTTP front ends read (LiveKit's `/rtc?…`, WHIP's
/// `/whip/<room>/<id>`): the path's segments and the query's pairs, percent-decoded (RFC 3986;
/// `+` is a space in a query).
public enum URLQuery {
    /// The path before `?`.
    public static func path(of uri: String) -> Substring {
        uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? Substring(uri)
    }

    /// The path's segments, percent-decoded (empty segments left out).
    public static func segments(of uri: String) -> [String] {
        path(of: uri).split(separator: "/").map { decode($0, plusIsSpace: false) }
    }

    /// The `name=value` pairs of the query, in order, percent-decoded.
    public static func pairs(of uri: String) -> [(name: String, value: String)] {
        guard let mark = uri.firstIndex(of: "?") else { return [] }
        return uri[uri.index(after: mark)...].split(separator: "&").map { pair in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            return (decode(parts[0]), parts.count > 1 ? decode(parts[1]) : "")
        }
    }

    /// The first value of each name.
    public static func values(of uri: String) -> [String: String] {
        var values: [String: String] = [:]
        for (name, value) in pairs(of: uri) where values[name] == nil { values[name] = value }
        return values
    }

    /// Percent-encoding for a query value: everything but RFC 3986's unreserved characters.
    public static func escape(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let hex = Array("0123456789ABCDEF".unicodeScalars)
                out.unicodeScalars.append("%")
                out.unicodeScalars.append(hex[Int(byte >> 4)])
                out.unicodeScalars.append(hex[Int(byte & 0x0F)])
            }
        }
        return out
    }

    /// Percent-decoding; a broken escape ends the text there (never a trap), bytes that are not
    /// UTF-8 become U+FFFD.
    public static func decode(_ text: Substring, plusIsSpace: Bool = true) -> String {
        var bytes: [UInt8] = []
        var iterator = Array(text.utf8).makeIterator()
        while let byte = iterator.next() {
            switch byte {
            case UInt8(ascii: "+") where plusIsSpace: bytes.append(UInt8(ascii: " "))
            case UInt8(ascii: "%"):
                guard let high = iterator.next(), let low = iterator.next(),
                      let value = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16)
                else { return String(decoding: bytes, as: UTF8.self) }
                bytes.append(value)
            default: bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
