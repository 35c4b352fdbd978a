import Foundation
import SwiftProtobuf

/// One signal message as a conformance transcript records it (docs/livekit.md, "Conformance"):
/// which way it went, its kind (the `SignalRequest`/`SignalResponse` case, as protobuf JSON names
/// it) and the paths of the fields it set (non-default, nested with `.`, repeated with `[]`).
/// The server's LiveKit front end writes these for every connection when asked
/// (`--livekit-transcript DIR`), for LiveKit's own SDKs and ours alike, so the two are compared
/// message by message.
public struct LiveKitTranscriptEntry: Codable, Sendable, Hashable {
    /// `in`: the client sent it; `out`: the server did.
    public var direction: String
    public var kind: String
    public var fields: [String]

    public init(direction: String, kind: String, fields: [String]) {
        self.direction = direction
        self.kind = kind
        self.fields = fields
    }

    public init?(request: LKSignalRequest) {
        guard let (kind, fields) = Self.summary(request) else { return nil }
        self.init(direction: "in", kind: kind, fields: fields)
    }

    public init?(response: LKSignalResponse) {
        guard let (kind, fields) = Self.summary(response) else { return nil }
        self.init(direction: "out", kind: kind, fields: fields)
    }

    /// The one top-level case and its set fields, from the message's protobuf JSON.
    static func summary(_ message: some SwiftProtobuf.Message) -> (String, [String])? {
        guard let data = try? message.jsonUTF8Data(), let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
              let (kind, value) = object.first else { return nil }
        var paths = Set<String>()
        collect(value, prefix: "", into: &paths)
        return (kind, paths.sorted())
    }

    private static func collect(_ value: Any, prefix: String, into paths: inout Set<String>) {
        switch value {
        case let object as [String: Any]:
            if object.isEmpty, !prefix.isEmpty { paths.insert(prefix) }
            for (key, inner) in object { collect(inner, prefix: prefix.isEmpty ? key : prefix + "." + key, into: &paths) }
        case let array as [Any]:
            if array.allSatisfy({ $0 is [String: Any] || $0 is [Any] }), !array.isEmpty {
                for element in array { collect(element, prefix: prefix + "[]", into: &paths) }
            } else if !prefix.isEmpty {
                paths.insert(prefix + "[]")
            }
        default:
            if !prefix.isEmpty { paths.insert(prefix) }
        }
    }

    /// One JSON line.
    public var line: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return String(decoding: (try? encoder.encode(self)) ?? Data(), as: UTF8.self)
    }
}
