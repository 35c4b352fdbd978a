import Foundation
import RTCTestSupport
import Testing

/// `rtc-cli bench janus-load`: the same aiortc peers (`Tests/Tools/sfu_load.py`) against
/// `rtc-cli server` and Janus 1.1.2's videoroom (Debian's `janus`), one after the other. The CPU
/// figures are the bench's to report; here both servers must carry the load the tool describes.
@Suite("rtc-cli bench janus-load", .serialized)
struct JanusLoadTests {
    @Test("one room of 1 aiortc publisher + 2 counting aiortc viewers, against rtc-cli server then Janus: both viewers receive from each, loss < 2 %, server CPU per packet measured")
    func sideBySide() throws {
        let result = try cli(["bench", "janus-load", "--shapes", "1x2", "--seconds", "4", "--warmup", "6", "--workers", "1",
                              "--size", "640x360", "--kbps", "500", "--json"])
        #expect(result.status == 0, "\(result.out)\n\(result.err)")
        let reports = result.out.split(separator: "\n").compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
        }
        #expect(reports.map { $0["target"] as? String } == ["ours", "janus"], "\(result.out)")
        for report in reports {
            func number(_ key: String) -> Double { (report[key] as? NSNumber)?.doubleValue ?? -1 }
            #expect((report["server"] as? String)?.isEmpty == false)
            #expect(number("viewers") == 2 && number("viewersReceiving") == 2, "\(report)")
            // 500 kbit/s of 720p-shaped packets is ≥ 40 packets/s per viewer.
            #expect(number("packetsPerSecond") >= 80, "\(report)")
            #expect(number("lossPercent") >= 0 && number("lossPercent") < 2, "\(report)")
            #expect(number("serverCpuSeconds") > 0 && number("cpuMicrosecondsPerPacket") > 0, "\(report)")
            #expect((report["errors"] as? [Any])?.isEmpty == true, "\(report)")
        }
    }

    @Test("bad input is a clear error before any server starts",
          arguments: [
              (["--shapes", "10"], "ROOMSxVIEWERS"),
              (["--shapes", "0x5"], "ROOMSxVIEWERS"),
              (["--size", "big"], "--size"),
              (["--seconds", "0"], "--seconds"),
              (["--rounds", "0"], "--rounds"),
          ])
    func badInput(arguments: [String], message: String) throws {
        let result = try cli(["bench", "janus-load"] + arguments)
        #expect(result.status != 0)
        #expect((result.err + result.out).contains(message), "\(result.out)\n\(result.err)")
    }
}
