/// Moves RTP header extension elements from one session's numbering to another's
/// ([RFC 8285](https://www.rfc-editor.org/rfc/rfc8285)): ids are per session, so a packet
/// forwarded from a publisher who numbered transport-cc 3 to a subscriber who numbered it 5 must
/// be renumbered, and an element the other side did not negotiate (or that means something only on
/// the first leg, such as a mid or a simulcast stream id) must be left out.
public struct ExtensionIDMap: Sendable, Hashable {
    /// The target id per source id (index); 0: the element is dropped.
    private var table: [UInt8]
    /// Every id, named by the source or not, keeps its number: nothing would ever change. (A map
    /// from a session drops the ids that session did not name, so only ``identity`` is one.)
    public let isIdentity: Bool

    /// Every id to itself: nothing changes.
    public static let identity = ExtensionIDMap()

    private init() {
        table = (0...255).map { UInt8($0) }
        isIdentity = true
    }

    /// Maps each of `source`'s ids to the id `target` gives its URI, for URIs in `carried`; other
    /// elements are dropped.
    public init(source: [UInt8: String], target: [String: UInt8], carried: Set<String>) {
        var table = [UInt8](repeating: 0, count: 256)
        for (id, uri) in source {
            table[Int(id)] = carried.contains(uri) ? target[uri] ?? 0 : 0
        }
        self.table = table
        isIdentity = table.indices.dropFirst().allSatisfy { table[$0] == UInt8($0) }
    }

    /// The id `source` id becomes, nil when dropped.
    public func target(of id: UInt8) -> UInt8? {
        let to = table[Int(id)]
        return to == 0 ? nil : to
    }

    /// Renumbers `header`'s elements, leaving out what the target does not take. Returns whether
    /// the header changed; a header that needs no change is left untouched (nothing allocated).
    @discardableResult
    public func apply(to header: inout RTPHeader) -> Bool {
        guard header.extensionProfile != nil else { return false }
        var unchanged = true
        header.forEachExtension { id, _ in
            unchanged = table[Int(id)] == id
            return unchanged
        }
        guard !unchanged else { return false }
        header.extensions = header.extensions.compactMap { element in
            let to = table[Int(element.id)]
            return to == 0 ? nil : RTPHeaderExtension(id: to, data: element.data)
        }
        return true
    }
}
