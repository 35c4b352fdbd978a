import RTCTransport
import Signaling

/// Who speaks in each room (docs/server-api.md), every ``SpeakerDetector/tickUs``: a participant
/// whose audio tracks said voice in at least half their packets of the tick, at more than
/// ``threshold`` (−50 dBov), speaks now and for ``holdUs`` after (pauses between words do not
/// end it); its level is smoothed over ticks. The room is told the speakers, loudest first,
/// when the set changes, and when only the order does at most once a second.
enum SpeakerDetector {
    static let tickUs: Int64 = 100_000
    static let holdUs: Int64 = 500_000
    static let threshold = 0.00316
    static let reorderIntervalUs: Int64 = 1_000_000
}

extension SFU {
    func detectSpeakers(nowUs: Int64) {
        for room in directory.allRooms {
            var speakers: [Participant] = []
            for participant in room.participants.values {
                // Its loudest audio track this tick (a microphone and a screen's audio are one participant).
                var loudest = AudioLevelWindow()
                for track in participant.tracks where track.info.kind == .audio {
                    if track.levels.mostlyVoiced, track.levels.meanAmplitude > loudest.meanAmplitude { loudest = track.levels }
                    track.levels = AudioLevelWindow()
                }
                if loudest.mostlyVoiced {
                    let level = loudest.meanAmplitude
                    if level >= SpeakerDetector.threshold {
                        participant.speakingLevel = nowUs < participant.speakingUntilUs ? (participant.speakingLevel + level) / 2 : level
                        participant.speakingUntilUs = nowUs + SpeakerDetector.holdUs
                    }
                }
                if nowUs < participant.speakingUntilUs { speakers.append(participant) }
            }
            speakers.sort { $0.speakingLevel > $1.speakingLevel }
            let uids = speakers.map(\.uid)
            guard uids != room.announcedSpeakers else { continue }
            let setChanged = Set(uids) != Set(room.announcedSpeakers)
            guard setChanged || nowUs - room.speakersAnnouncedUs >= SpeakerDetector.reorderIntervalUs else { continue }
            room.announcedSpeakers = uids
            room.speakersAnnouncedUs = nowUs
            for receiver in room.participants.values {
                let seen = speakers.filter { receiver.sees($0) || $0 === receiver }
                    .map { ActiveSpeakers.Speaker(uid: $0.uid, sid: $0.sid, level: min(1, $0.speakingLevel)) }
                receiver.send(.activeSpeakers(ActiveSpeakers(speakers: seen)))
            }
        }
    }
}
