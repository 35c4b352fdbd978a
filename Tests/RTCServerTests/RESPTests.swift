import Foundation
import RedisWire
@testable import RTCServer
import RTCFuzzHarness
import Testing

@Suite("RESP: Redis replies and commands")
struct RESPTests {
    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    @Test("replies parse to their values and end where they end", arguments: [
        ("+OK\r\n", RESPValue.simpleString("OK")),
        ("-ERR wrong type\r\n", .error("ERR wrong type")),
        (":-42\r\n", .integer(-42)),
        ("$5\r\nhe\r\no\r\n", .bulkString(Array("he\r\no".utf8))),
        ("$0\r\n\r\n", .bulkString([])),
        ("$-1\r\n", .bulkString(nil)),
        ("*-1\r\n", .array(nil)),
        ("*2\r\n$1\r\nA\r\n:7\r\n", .array([.bulkString(Array("A".utf8)), .integer(7)])),
        ("*1\r\n*0\r\n", .array([.array([])])),
    ])
    func parses(text: String, value: RESPValue) throws {
        let parsed = try #require(try RESP.parse(Self.bytes(text)))
        #expect(parsed.0 == value)
        #expect(parsed.1 == text.utf8.count)
    }

    @Test("a reply cut anywhere is incomplete (nil), never an error", arguments: ["*2\r\n$1\r\nA\r\n:7\r\n", "$5\r\nhello\r\n", "+OK\r\n"])
    func incomplete(text: String) throws {
        let bytes = Self.bytes(text)
        for cut in 0..<bytes.count { #expect(try RESP.parse(Array(bytes[0..<cut])) == nil, "cut at \(cut)") }
    }

    @Test("bytes that are not RESP are refused with a reason", arguments: [
        "?what\r\n", ":12x\r\n", "$3\r\nabcd\r\n", "+OK\rX", "$99999999999\r\n", "*99999999\r\n",
        String(repeating: "*1\r\n", count: 12) + ":1\r\n",
    ])
    func refused(text: String) {
        #expect(throws: RESPError.self) { try RESP.parse(Self.bytes(text)) }
    }

    @Test("commands go out as arrays of bulk strings")
    func command() {
        #expect(RESP.command(["SET", "k", "v é"]) == Self.bytes("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\nv é\r\n"))
    }

    @Test("Redis URLs: host, port, database; wrong ones are refused", arguments: [
        ("redis://127.0.0.1:6379", "127.0.0.1", 6379, 0), ("redis://redis.local:7000/3", "redis.local", 7000, 3),
        ("redis://[::1]:6379/1", "::1", 6379, 1), ("redis://user:pw@10.0.0.5:6380", "10.0.0.5", 6380, 0),
    ])
    func urls(text: String, host: String, port: Int, database: Int) throws {
        let url = try RedisURL(parsing: text)
        #expect(url.host == host && url.port == port && url.database == database)
    }

    @Test("wrong Redis URLs are refused", arguments: ["http://x:1", "redis://host", "redis://:6379", "redis://h:0", "redis://h:6379/x", "redis://h:6379/999"])
    func badURLs(text: String) {
        #expect(throws: RedisError.self) { try RedisURL(parsing: text) }
    }

    @Test("the committed RESP corpus runs through the fuzz entry point")
    func corpus() throws {
        let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fuzz/Corpus/resp")
        let files = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        #expect(files.count >= 5)
        for file in files { FuzzHarness.resp(Array(try Data(contentsOf: directory.appendingPathComponent(file)))) }
    }
}
