import NIOCore
import NIOPosix
import RTCTransport
import Testing
@testable import RTCCore

@Suite("Data streams: messages that wait for the data channels")
struct DataStreamsQueueTests {
    /// A session attached whose association is not up: its channels cannot open.
    static func attached() throws -> (DataStreams, Int, EventLoop) {
        let streams = DataStreams(emit: { _ in })
        let id = try streams.create(reliable: true, ordered: true)
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let endpoint = DataChannelEndpoint(association: try SCTPAssociation(), dtlsClient: true) { work in loop.execute(work) }
        streams.attach(endpoint, loop: loop)
        return (streams, id, loop)
    }

    @Test("channels still opening (10 % loss delays DTLS and SCTP by seconds): 256 messages are taken, the rest refused with messageRateExceeded, none taken and then dropped on the loop")
    func limitWhileOpening() throws {
        let (streams, id, loop) = try Self.attached()
        var taken = 0, refused = 0
        for number in 0..<300 {
            do {
                try streams.send(streamID: id, Array("m \(number)".utf8), topic: "", destinations: [])
                taken += 1
            } catch {
                #expect(error.code == .messageRateExceeded, "\(error)")
                refused += 1
            }
        }
        try loop.submit {}.wait()  // the hops to the loop have run: what was taken is queued there
        #expect(taken == DataStreams.queueLimit)
        #expect(refused == 300 - DataStreams.queueLimit)
        #expect(streams.waitingCount == taken, "every message taken still waits for the channels")
    }

    @Test("once the loop has queued what was taken, 256 still wait and the next message is still refused: the limit counts what waits, wherever it is")
    func refusedThenTaken() throws {
        let (streams, id, loop) = try Self.attached()
        for number in 0..<DataStreams.queueLimit {
            try streams.send(streamID: id, Array("m \(number)".utf8), topic: "", destinations: [])
        }
        #expect(throws: RTCEngineError.self) { try streams.send(streamID: id, Array("over".utf8), topic: "", destinations: []) }
        try loop.submit {}.wait()
        #expect(streams.waitingCount == DataStreams.queueLimit)
        #expect(throws: RTCEngineError.self) { try streams.send(streamID: id, Array("still over".utf8), topic: "", destinations: []) }
    }
}
