/// Adds up Prometheus text pages (exposition format 0.0.4) of processes that serve one server,
/// series by series: the front of `rtc-cli server --media-processes` answers `/metrics` for all
/// of its processes, so one scrape sees the whole server.
///
/// Every series the server exports is a count, a gauge of load (rooms, participants, tracks), a
/// histogram's buckets, sum and count, or the process CPU time: each of them adds up across
/// processes. Families keep the order in which they first appear, their samples grouped under
/// one `# TYPE` line as the format requires. A line that is not a sample with a number is left out.
public enum PrometheusSum {
    private struct Family {
        var comments: [String] = []
        var series: [String] = []
        var values: [String: Double] = [:]
    }

    public static func sum(_ pages: [String]) -> String {
        var order: [String] = []
        var families: [String: Family] = [:]
        for page in pages {
            var family = ""
            for line in page.split(separator: "\n", omittingEmptySubsequences: true) {
                if line.hasPrefix("#") {
                    // "# TYPE name kind" or "# HELP name text": the samples after it are that family's.
                    let words = line.split(separator: " ", maxSplits: 3)
                    guard words.count >= 3, words[1] == "TYPE" || words[1] == "HELP" else { continue }
                    family = String(words[2])
                    if families[family] == nil {
                        families[family] = Family()
                        order.append(family)
                    }
                    if !families[family]!.comments.contains(where: { $0.hasPrefix("# \(words[1]) ") }) {
                        families[family]!.comments.append(String(line))
                    }
                    continue
                }
                guard let (series, value) = sample(line) else { continue }
                if families[family] == nil {
                    families[family] = Family()
                    order.append(family)
                }
                if families[family]!.values[series] == nil { families[family]!.series.append(series) }
                families[family]!.values[series, default: 0] += value
            }
        }
        var text = ""
        for name in order {
            guard let family = families[name] else { continue }
            for comment in family.comments.sorted(by: { $0.hasPrefix("# HELP") && !$1.hasPrefix("# HELP") }) { text += comment + "\n" }
            for series in family.series { text += "\(series) \(format(family.values[series] ?? 0))\n" }
        }
        return text
    }

    /// `name{labels} value [timestamp]` → the series (name and labels as written) and the value.
    static func sample(_ line: Substring) -> (String, Double)? {
        // Label values may hold spaces: the series ends at the closing brace when there is one.
        let seriesEnd: Substring.Index
        if let open = line.firstIndex(of: "{"), line[..<open].firstIndex(of: " ") == nil {
            guard let close = line.lastIndex(of: "}") else { return nil }
            seriesEnd = line.index(after: close)
        } else {
            guard let space = line.firstIndex(of: " ") else { return nil }
            seriesEnd = space
        }
        let series = line[..<seriesEnd]
        let rest = line[seriesEnd...].split(separator: " ")
        guard let start = series.first, start != "{", let first = rest.first, let value = Double(first) else { return nil }
        return (String(series), value)
    }

    /// Whole numbers without a fraction, as the server writes its counters.
    static func format(_ value: Double) -> String {
        if value.isFinite, value == value.rounded(), abs(value) < 9.0e15 { return String(Int64(value)) }
        return "\(value)"
    }
}
