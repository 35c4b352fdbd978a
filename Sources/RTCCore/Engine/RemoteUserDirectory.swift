import RTCTransport
import Signaling

/// The remote users this client is shown, and the events their changes make: a pure diff of the
/// server's participant lists, with no I/O and no lock of its own (its owner, the channel
/// session, holds it under its lock).
///
/// Who is a *user*: in a communication channel everyone; in a live broadcast only broadcasters
/// (the audience is invisible). Screen shares that the server lists are hidden here too when
/// `ignoreScreenShare` is set and the user is not pinned: the server applies the same filter, and
/// this keeps a share it already listed (before a pin was dropped, say) out of the user list.
struct RemoteUserDirectory {
    let localUID: String
    let profile: ChannelProfile
    let ignoreScreenShare: Bool
    private(set) var users: [String: ParticipantInfo] = [:]

    init(localUID: String, profile: ChannelProfile, ignoreScreenShare: Bool) {
        self.localUID = localUID
        self.profile = profile
        self.ignoreScreenShare = ignoreScreenShare
    }

    /// Uids of the listed users, sorted.
    var uids: [String] { users.keys.sorted() }

    func isVisible(_ participant: ParticipantInfo) -> Bool {
        profile == .communication || participant.role == .broadcaster
    }

    /// Takes in participants the server announced (a join's `others` or a `participantUpdate`) and
    /// returns the events they make, in order. Stale versions are ignored. `pinned`: users this
    /// client asked for by uid, which the screen-share filter lets through.
    mutating func apply(_ participants: [ParticipantInfo], pinned: Set<String>) -> [RTCEngineEvent] {
        var events: [RTCEngineEvent] = []
        for info in participants where info.uid != localUID {
            // The server tells what a participant is (its screen-share rule, with its configured suffix).
            if ignoreScreenShare, case .screenShare = info.kind, !pinned.contains(info.uid) { continue }
            let previous = users[info.uid]
            if let previous, previous.version >= info.version { continue }
            users[info.uid] = info
            let wasVisible = previous.map(isVisible) ?? false
            let visible = isVisible(info)
            if visible && !wasVisible { events.append(.userJoined(uid: info.uid)) }
            // Its name, metadata or attributes: when first seen with any, and at each change.
            let described = info.name != nil || info.metadata != nil || !(info.attributes ?? [:]).isEmpty
            if previous.map({ $0.name != info.name || $0.metadata != info.metadata || $0.attributes != info.attributes }) ?? described {
                events.append(.remoteUserInfoChanged(uid: info.uid, name: info.name, metadata: info.metadata, attributes: info.attributes ?? [:]))
            }
            let before = Dictionary((previous?.tracks ?? []).map { ($0.sid, $0) }, uniquingKeysWith: { a, _ in a })
            let after = Set(info.tracks.map(\.sid))
            func remote(_ track: TrackInfo) -> RemoteTrackInfo {
                RemoteTrackInfo(uid: info.uid, trackSid: track.sid, kind: track.kind, source: track.source,
                                encryption: track.encryption ?? .none)
            }
            for track in info.tracks {
                if let old = before[track.sid] {
                    if old.muted != track.muted { events.append(.remoteTrackMuted(remote(track), muted: track.muted)) }
                } else {
                    events.append(.remoteTrackPublished(remote(track)))
                    if track.muted { events.append(.remoteTrackMuted(remote(track), muted: true)) }
                }
            }
            for track in previous?.tracks ?? [] where !after.contains(track.sid) {
                events.append(.remoteTrackUnpublished(remote(track)))
            }
            if wasVisible && !visible && info.role == .audience { events.append(.userOffline(uid: info.uid, reason: .becameAudience)) }
        }
        return events
    }

    /// A participant left: `userOffline` if it was a visible user.
    mutating func remove(uid: String, reason: LeaveReason) -> [RTCEngineEvent] {
        guard let known = users.removeValue(forKey: uid), isVisible(known) else { return [] }
        return [.userOffline(uid: uid, reason: UserOfflineReason(reason))]
    }

    /// The track sids of one user's tracks of a kind.
    func trackSids(of uid: String, kind: TrackKind) -> [String] {
        users[uid]?.tracks.filter { $0.kind == kind }.map(\.sid) ?? []
    }

    /// Who publishes the stream of a subscriber offer's section (`msid` carries the participant
    /// sid and the track sid), as a remote track.
    func track(streamID: String?, trackID: String?, kind: TrackKind) -> RemoteTrackInfo {
        let owner = users.values.first { $0.sid == streamID }
        let track = owner?.tracks.first { $0.sid == trackID }
        return RemoteTrackInfo(uid: owner?.uid ?? streamID ?? "?", trackSid: trackID ?? "?", kind: kind,
                               source: track?.source ?? (kind == .video ? .camera : .microphone),
                               encryption: track?.encryption ?? .none)
    }

    /// A section's track when no directory is at hand: named by its msid alone.
    static func unknownTrack(_ section: MediaSectionDescription, _ kind: TrackKind) -> RemoteTrackInfo {
        RemoteUserDirectory(localUID: "", profile: .communication, ignoreScreenShare: false)
            .track(streamID: section.streamID, trackID: section.trackID, kind: kind)
    }
}
