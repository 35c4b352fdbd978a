import Signaling

/// Subscription permissions (protocol 1.8, LiveKit's `UpdateSubscriptionPermission`): a publisher
/// says who may subscribe to its tracks, and the SFU holds everyone to it. ``subscribe(_:to:)``
/// refuses what the publisher's permission does not allow (the subscriber is told once and the
/// track remembered); a change here unsubscribes whoever lost a track (told, with a new subscriber
/// offer) and subscribes whoever gained one it had wanted (told).
extension SFU {
    func setSubscriptionPermission(_ permission: SubscriptionPermission, participant owner: Participant, fail: Fail) {
        let limit = configuration.limits.maxParticipantsPerRoom
        guard permission.allowed.count <= limit, permission.allowed.allSatisfy({ !$0.uid.isEmpty && $0.uid.utf8.count <= 128 && ($0.trackSids?.count ?? 0) <= 64 })
        else { return fail(.malformedMessage, "a permission names at most \(limit) uids of 1 to 128 bytes, each with at most 64 tracks") }
        owner.subscriptionPermission = permission
        for other in owner.room.participants.values where other !== owner {
            var lost = false
            var gained: [PublishedTrack] = []
            for track in owner.tracks {
                let allowed = permission.permits(uid: other.uid, trackSid: track.info.sid)
                if !allowed, let subscription = other.subscriptions.first(where: { $0.track === track }) {
                    unsubscribe(subscription)
                    other.refusedTrackSids.insert(track.info.sid)
                    tellPermission(other, track, allowed: false)
                    lost = true
                } else if allowed, other.refusedTrackSids.remove(track.info.sid) != nil {
                    tellPermission(other, track, allowed: true)
                    if other.grants.subscribe && other.sees(owner) { gained.append(track) }
                }
            }
            if lost { offerSubscriber(other) }
            if !gained.isEmpty { subscribe(other, to: gained) }
        }
        context.logger.debug("subscription permission", metadata: ["uid": "\(owner.uid)", "allowAll": "\(permission.allowAll)",
                                                                  "allowed": "\(permission.allowed.map(\.uid))"])
    }

    /// Tells `subscriber` (a client that speaks protocol 1.8) that `track` is now allowed or not.
    func tellPermission(_ subscriber: Participant, _ track: PublishedTrack, allowed: Bool) {
        guard subscriber.speaksPermissionsAndQuality else { return }
        subscriber.send(.subscriptionPermission(SubscriptionPermissionUpdate(uid: track.owner.uid, trackSid: track.info.sid, allowed: allowed)))
    }
}
