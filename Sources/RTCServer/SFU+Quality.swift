import RTCConventions
import Signaling

/// Connection quality (protocol 1.8; LiveKit's `ConnectionQualityUpdate`): every 2 s the SFU
/// judges each participant's two paths by ``NetworkQuality``'s rule and tells everyone in the room
/// the levels of those they see and their own.
/// - Up (participant → server): the loss and jitter of what it publishes, from the reception
///   statistics the server keeps for its receiver reports (packets expected and received since
///   the last tick, the largest jitter of its streams). Unknown when it sent nothing.
/// - Down (server → participant): the loss its transport-wide feedback reports for what the server
///   sent it, and the standing queue the feedback shows as the jitter; down when media was sent
///   and no feedback came back at all, unknown when nothing was sent.
/// The server sees no round trip on either path (it terminates RTCP and its reports are not
/// answered with its own clock), so the rule is given loss and jitter here; the engine adds its own
/// round trip for its local view.
extension SFU {
    static let connectionQualityPeriodTicks = 2

    func reportConnectionQuality() {
        for room in directory.allRooms {
            // Measured once per participant (the marks move on), sorted once; each recipient gets
            // the entries of those it sees and its own.
            let members = room.participants.values.sorted { $0.uid < $1.uid }
            let entries = members.map { ConnectionQuality.Entry(uid: $0.uid, up: upQuality($0), down: downQuality($0)) }
            for participant in members where participant.speaksPermissionsAndQuality && participant.peer != nil {
                let seen = zip(members, entries).filter { $0.0 === participant || participant.sees($0.0) }.map(\.1)
                participant.send(.connectionQuality(ConnectionQuality(participants: seen)))
            }
        }
    }

    private func upQuality(_ participant: Participant) -> Int {
        var expected: UInt64 = 0, received: UInt64 = 0, jitterMs = 0.0
        for track in participant.tracks {
            for stream in track.streams {
                guard let statistics = stream.statistics else { continue }
                let mark = stream.qualityMark
                expected += UInt64(statistics.expected &- mark.expected)
                received += statistics.packetsReceived &- min(mark.received, statistics.packetsReceived)
                jitterMs = max(jitterMs, Double(statistics.jitter) * 1000 / Double(statistics.clockRate))
                stream.qualityMark = (statistics.expected, statistics.packetsReceived)
            }
        }
        guard expected > 0 else { return NetworkQuality.unknown }
        let lost = expected > received ? Double(expected - received) / Double(expected) : 0
        return NetworkQuality.level(lossFraction: lost, jitterMs: jitterMs)
    }

    private func downQuality(_ participant: Participant) -> Int {
        let window = participant.downstream.qualityWindow
        participant.downstream.qualityWindow = (0, 0)
        let sent = participant.subscriptions.reduce(0) { $0 + $1.packetsForwarded }
        defer { participant.qualitySentMark = sent }
        guard window.packets > 0 else {
            // Media went out and the leg, which answered before, answered nothing: nothing arrives.
            return sent > participant.qualitySentMark && participant.downstream.feedbackReports > 0 ? NetworkQuality.down : NetworkQuality.unknown
        }
        return NetworkQuality.level(lossFraction: Double(window.lost) / Double(window.packets), jitterMs: participant.downstream.estimator.queueDelayMs)
    }
}
