import NIOCore
import RTCTransport

/// The RTCP the SFU originates towards publishers: the server terminates RTCP rather than relay
/// it, so it reports on, asks of and limits each publisher itself. Driven by the SFU's timers (and
/// by a leg's falling estimate, through ``Consumer``); every function takes the time, none reads a
/// clock. Sends:
/// - receiver reports (RFC 3550 statistics of each track), once a second;
/// - transport-wide CC feedback to publishers that map the sequence number, every 100 ms;
/// - NACKs for the video packets a publisher's uplink lost, every 20 ms (one repair upstream serves
///   every subscriber; each leg has its own NACK loop downstream);
/// - REMB limits that hold a publisher's video to its slowest subscriber's share, once a second.
final class RTCPTerminator: @unchecked Sendable {
    private let context: SFUContext
    private let directory: RoomDirectory

    init(context: SFUContext, directory: RoomDirectory) {
        self.context = context
        self.directory = directory
    }

    private var serverSSRC: UInt32 { context.serverSSRC }

    /// Receiver reports to every publisher.
    func sendReceiverReports(nowUs: Int64) {
        for participant in directory.allParticipants {
            guard let session = participant.publisher else { continue }
            var reports: [ReceptionReport] = []
            for track in participant.tracks {
                for stream in track.streams {
                    guard var statistics = stream.statistics else { continue }
                    reports.append(statistics.makeReport(nowUs: nowUs))
                    stream.statistics = statistics
                }
            }
            guard !reports.isEmpty else { continue }
            session.sendRTCP(RTCPCompound.receiverReports(ssrc: serverSSRC, reports))
        }
    }

    /// Transport-wide CC feedback to every publisher with arrivals since the last.
    func sendTransportFeedback() {
        directory.forEachParticipant { participant in
            guard participant.inbound.hasPendingFeedback, let session = participant.publisher else { return }
            // libwebrtc drops transport feedback whose media SSRC is none of its send streams' SSRCs:
            // name one that has arrived (a simulcast track's first layer may not have been sent yet).
            var mediaSSRC: UInt32 = 0
            search: for track in participant.tracks {
                for stream in track.streams {
                    if let ssrc = stream.ssrc {
                        mediaSSRC = ssrc
                        break search
                    }
                }
            }
            guard let feedback = participant.inbound.makeFeedback(senderSSRC: serverSSRC, mediaSSRC: mediaSSRC) else { return }
            session.sendRTCP(RTCPCompound.transportFeedback(sender: serverSSRC, feedback))
        }
    }

    /// Asks publishers again for the video packets that are due (``NackGenerator``).
    /// Walks the rooms only while a gap is open somewhere (``SFUContext/upstreamGapsOpen``): on a
    /// clean network this 20 ms job costs nothing.
    func sendUpstreamNacks(nowUs: Int64) {
        guard context.upstreamGapsOpen else { return }
        var stillOpen = false
        directory.forEachParticipant { participant in
            guard let session = participant.publisher else { return }
            for track in participant.tracks where track.info.kind == .video {
                for stream in track.streams {
                    guard let ssrc = stream.ssrc else { continue }
                    let lost = stream.nack.due(nowUs: nowUs)
                    if stream.nack.missingCount > 0 { stillOpen = true }
                    guard !lost.isEmpty else { continue }
                    context.counters.nacksSent += 1
                    session.sendRTCP(RTCPCompound.nack(sender: serverSSRC, media: ssrc, lost: lost))
                }
            }
        }
        context.upstreamGapsOpen = stillOpen
    }

    /// Holds each publisher's video to what its slowest subscriber's downstream leg carries, with
    /// REMB (never below `publisherLimitFloorKbps`; nothing when that is nil). A leg's estimate is
    /// shared among the video it receives, after what its audio needs. Without simulcast layers
    /// this is the only lever the server has on a leg that cannot carry a track; a layered track
    /// or temporally layered track is never limited (each subscriber gets the layer its leg carries).
    func sendPublisherLimits(nowUs: Int64) {
        guard let floorKbps = context.configuration.publisherLimitFloorKbps else { return }
        let participants = directory.allParticipants
        for participant in participants {
            participant.downstream.reportedBps = participant.downstream.estimateBps(nowUs: nowUs)
        }
        for participant in participants {
            guard let session = participant.publisher else { continue }
            for track in participant.tracks where track.info.kind == .video && !track.hasLayers {
                guard let ssrc = track.info.ssrc,
                      let limit = track.subscriptions.compactMap({ Self.videoShare(of: $0.subscriber, nowUs: nowUs) }).min()
                else { continue }
                context.counters.publisherLimitsSent += 1
                let bitrate = UInt64(max(limit, Double(floorKbps) * 1000))
                session.sendRTCP(RTCPCompound.remb(sender: serverSSRC, bitrate: bitrate, ssrcs: [ssrc]))
            }
        }
    }

    /// What one video track may take of a subscriber's downstream estimate: the estimate less
    /// 48 kbps per audio track it receives, split evenly among its video tracks.
    static func videoShare(of subscriber: Participant, nowUs: Int64) -> Double? {
        share(of: subscriber.downstream.estimateBps(nowUs: nowUs), for: subscriber)
    }

    /// `bps` of a subscriber's leg shared out as ``videoShare(of:nowUs:)`` does.
    static func share(of bps: Double?, for subscriber: Participant) -> Double? {
        guard let estimate = bps else { return nil }
        let videos = subscriber.subscriptions.filter { $0.track.info.kind == .video }.count
        let audios = subscriber.subscriptions.count - videos
        return (estimate - 48_000 * Double(audios)) / Double(max(1, videos))
    }
}
