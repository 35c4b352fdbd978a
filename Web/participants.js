// participants.js: the room as this client sees it: the others (ParticipantInfo by uid, kept at
// their newest version), its own ParticipantInfo, and the remote tracks, each matched through the
// subscriber offer's `a=msid` to the server's TrackInfo. It makes no network calls: it is told
// what the server said and what the subscriber connection got, and emits the SDK's events.

import {sectionSends} from "./transports.js";

/**
 * @typedef {{sid: string, kind?: string, source?: string, mid?: string | null, muted?: boolean, [field: string]: any}} TrackInfo
 * @typedef {{uid: string, sid: string, version?: number, tracks?: TrackInfo[], kind?: any,
 *            name?: string, metadata?: string, attributes?: Record<string, string>, [field: string]: any}} ParticipantInfo
 * @typedef {{key: string, mid: string | null, trackSid: string, participantSid: string | null, kind: string,
 *            track: MediaStreamTrack, stream: MediaStream, receiver: RTCRtpReceiver | null,
 *            transceiver: RTCRtpTransceiver | null, uid: string | null, source: string | null, muted: boolean,
 *            screenShareOwner: string | null, announced: boolean}} RemoteTrack
 * @typedef {{uid: string, participantSid: string, info: TrackInfo | null, screenShareOwner: string | null}} TrackLookup
 * @typedef {(type: string, detail: unknown) => void} Emit
 * @typedef {import("./transports.js").SDPSection} SDPSection
 */

/**
 * The host of a screen-share participant (`kind: {screenShare: {owner}}`), or null.
 * @param {ParticipantInfo | null | undefined} participant
 * @returns {string | null}
 */
export function screenShareOwnerOf(participant) {
  return participant && participant.kind && typeof participant.kind === "object" && participant.kind.screenShare
    ? participant.kind.screenShare.owner : null;
}

/**
 * Events through `emit`: `participants` ({participants: changed, all}), `participantLeft`
 * ({uid, reason, participant}), `track` (a RemoteTrack, once its uid and source are known),
 * `trackEnded`, `trackMuted`, `trackPublished` (own TrackInfo).
 */
export class ParticipantModel {
  /** @param {Emit} emit */
  constructor(emit) {
    this.emit = emit;
    /**
     * This client's own ParticipantInfo.
     * @type {ParticipantInfo | null}
     */
    this.self = null;
    /**
     * The others this client sees, by uid.
     * @type {Map<string, ParticipantInfo>}
     */
    this.participants = new Map();
    /**
     * Remote tracks by track sid.
     * @type {Map<string, RemoteTrack>}
     */
    this.remoteTracks = new Map();
    /**
     * The last subscriber offer's sections, by mid.
     * @type {Record<string, SDPSection>}
     */
    this.subscriberSections = {};
  }

  /**
   * Takes participant infos (`joined.others`, `participantUpdate`): an older version of a known
   * session is ignored; this client's own info replaces `self`.
   * @param {ParticipantInfo[]} list
   */
  update(list) {
    const changed = [];
    for (const info of list) {
      if (this.self && info.uid === this.self.uid) {
        if ((info.version || 0) >= (this.self.version || 0)) this.self = info;
        continue;
      }
      const known = this.participants.get(info.uid);
      if (known && known.sid === info.sid && (known.version || 0) > (info.version || 0)) continue;
      this.participants.set(info.uid, info);
      changed.push(info);
    }
    if (changed.length) {
      this.resolveRemoteTracks();
      this.emit("participants", {participants: changed, all: this.participants});
    }
  }

  /**
   * A participant left: its tracks end, then `participantLeft`.
   * @param {string} uid
   * @param {string} reason
   */
  left(uid, reason) {
    const info = this.participants.get(uid);
    this.participants.delete(uid);
    for (const [key, remote] of this.remoteTracks) {
      if (remote.uid === uid || (info && remote.participantSid === info.sid)) {
        this.remoteTracks.delete(key);
        this.emit("trackEnded", remote);
      }
    }
    this.emit("participantLeft", {uid, reason, participant: info || null});
  }

  /**
   * Everyone leaves (a lost session), with `reason`; remote tracks not yet matched end too.
   * @param {string} reason
   */
  clear(reason) {
    for (const uid of [...this.participants.keys()]) this.left(uid, reason);
    for (const [, remote] of this.remoteTracks) this.emit("trackEnded", remote);
    this.remoteTracks.clear();
  }

  /**
   * The participant and TrackInfo of a participant sid and track sid.
   * @param {string | null} participantSid
   * @param {string} trackSid
   * @returns {TrackLookup | null}
   */
  lookupTrack(participantSid, trackSid) {
    for (const info of this.participants.values()) {
      const track = (info.tracks || []).find((t) => t.sid === trackSid);
      if (info.sid === participantSid || track) {
        return {uid: info.uid, participantSid: info.sid, info: track || null, screenShareOwner: screenShareOwnerOf(info)};
      }
    }
    return null;
  }

  /** Names the remote tracks whose participant is now known; announces each once (`track`). */
  resolveRemoteTracks() {
    for (const remote of this.remoteTracks.values()) {
      const found = this.lookupTrack(remote.participantSid, remote.trackSid);
      if (!found) continue;
      remote.uid = found.uid;
      remote.screenShareOwner = found.screenShareOwner;
      if (found.info) {
        remote.source = found.info.source || null;
        if (remote.announced && remote.muted !== !!found.info.muted) {
          remote.muted = !!found.info.muted;
          this.emit("trackMuted", remote);
        }
        remote.muted = !!found.info.muted;
      }
      if (remote.uid && remote.source && !remote.announced) { remote.announced = true; this.emit("track", remote); }
    }
  }

  /**
   * A track the subscriber connection got (its `track` event's fields).
   * @param {{track: MediaStreamTrack, streams?: readonly MediaStream[], receiver?: RTCRtpReceiver | null,
   *          transceiver?: RTCRtpTransceiver | null}} event
   */
  addRemoteTrack(event) {
    const mid = (event.transceiver && event.transceiver.mid) ?? null;
    const section = (mid != null && this.subscriberSections[mid]) || null;
    const stream = event.streams && event.streams[0];
    const participantSid = (section && section.streamID) || (stream && stream.id) || null;
    const trackSid = (section && section.trackID) || event.track.id;
    const key = trackSid;
    const previous = this.remoteTracks.get(key);
    if (previous && previous.track === event.track) return;
    /** @type {RemoteTrack} */
    const remote = {
      key, mid, trackSid, participantSid, kind: event.track.kind, track: event.track,
      stream: stream || new MediaStream([event.track]), receiver: event.receiver || null, transceiver: event.transceiver || null,
      uid: null, source: null, muted: false, screenShareOwner: null, announced: false,
    };
    this.remoteTracks.set(key, remote);
    this.resolveRemoteTracks();
  }

  /**
   * After each subscriber offer: tracks whose section no longer sends them (unsubscribed) end.
   * @param {readonly RTCRtpTransceiver[]} transceivers the subscriber connection's
   */
  syncRemoteTracks(transceivers) {
    for (const transceiver of transceivers) {
      const section = transceiver.mid != null ? this.subscriberSections[transceiver.mid] : undefined;
      for (const [key, remote] of this.remoteTracks) {
        if (remote.transceiver !== transceiver) continue;
        if (!sectionSends(section, remote.trackSid)) {
          this.remoteTracks.delete(key);
          this.emit("trackEnded", remote);
        }
      }
    }
  }

  /**
   * One of this client's own tracks was published (`trackPublished`): kept in `self.tracks`.
   * @param {TrackInfo} info
   */
  trackPublished(info) {
    if (this.self) {
      const tracks = (this.self.tracks || []).filter((t) => t.sid !== info.sid);
      this.self = {...this.self, tracks: [...tracks, info]};
    }
    this.emit("trackPublished", info);
  }
}
