import Testing
import RTCMedia

@Suite("Screen-share uids")
struct ScreenShareUIDTests {
    @Test("a sharer's uid is the host's plus _sub, and back", arguments: ["1001", "alice", "a_sub"])
    func roundTrip(host: String) {
        let sharer = ScreenShareUID.sharer(of: host)
        #expect(sharer == host + "_sub")
        #expect(ScreenShareUID.isScreenShare(sharer))
        #expect(ScreenShareUID.host(of: sharer) == host)
    }

    @Test("plain uids are not screen shares", arguments: ["1001", "_sub", "", "1001_su", "sub"])
    func notScreenShare(uid: String) {
        #expect(!ScreenShareUID.isScreenShare(uid))
        #expect(ScreenShareUID.host(of: uid) == nil)
    }
}
