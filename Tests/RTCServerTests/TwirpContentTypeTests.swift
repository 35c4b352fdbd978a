@testable import RTCServer
import Testing

/// How a Twirp request's Content-Type is read (`RoomServiceAPI.isJSON(contentType:)`): the media
/// type before any parameters, case-insensitive; anything else is no Twirp encoding.
@Suite("Twirp content types")
struct TwirpContentTypeTests {
    @Test("JSON, protobuf, or none", arguments: [
        ("application/json", true), ("application/json; charset=utf-8", true), ("Application/JSON", true), (" application/json ;x=y", true),
        ("application/protobuf", false), ("APPLICATION/PROTOBUF", false),
        ("text/plain", nil), ("application/x-protobuf", nil), ("", nil), ("application/jsonx", nil), (";", nil),
    ] as [(String, Bool?)])
    func contentTypes(contentType: String, json: Bool?) {
        #expect(RoomServiceAPI.isJSON(contentType: contentType) == json)
    }

    @Test("no Content-Type at all is no encoding")
    func missing() { #expect(RoomServiceAPI.isJSON(contentType: nil) == nil) }
}
