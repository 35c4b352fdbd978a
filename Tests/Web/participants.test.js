// The room model: participants joining, changing and leaving, and remote tracks matched through
// the subscriber offer's a=msid to the server's TrackInfo, with the SDK's events.
import {test, assert, assertEqual} from "./harness.js";
import {ParticipantModel, screenShareOwnerOf} from "../../Web/participants.js";
import {parseSections} from "../../Web/transports.js";

/** A model and the events it emitted, as [type, detail]. */
function model() {
  /** @type {[string, any][]} */
  const events = [];
  const m = new ParticipantModel((type, detail) => events.push([type, detail]));
  return {m, events, types: () => events.map(([type]) => type)};
}

const OFFER = ["v=0", "m=video 9 UDP/TLS/RTP/SAVPF 96", "a=mid:0", "a=sendonly", "a=msid:PA_a TR_cam",
               "m=audio 9 UDP/TLS/RTP/SAVPF 111", "a=mid:1", "a=sendonly", "a=msid:PA_a TR_mic", ""].join("\r\n");

/**
 * What the subscriber connection's track event gives (only the fields the model reads).
 * @param {string} id
 * @param {string} kind
 * @param {string} mid
 * @param {string} streamID
 */
function trackEvent(id, kind, mid, streamID) {
  return /** @type {any} */ ({track: {id, kind}, streams: [{id: streamID}], receiver: {}, transceiver: {mid}});
}

const alice = {uid: "a", sid: "PA_a", version: 1, tracks: [{sid: "TR_cam", kind: "video", source: "camera", muted: false},
                                                              {sid: "TR_mic", kind: "audio", source: "microphone", muted: false}]};

test("participants: others join, change (newer versions only) and leave; own info is kept apart", () => {
  const {m, events, types} = model();
  m.self = {uid: "me", sid: "PA_me", version: 1};
  m.update([alice, {uid: "me", sid: "PA_me", version: 2, name: "Me"}]);
  assertEqual(types(), ["participants"]);
  assertEqual(events[0][1].participants.map((/** @type {any} */ p) => p.uid), ["a"]);
  assert(events[0][1].all === m.participants, "`all` is the live map");
  assertEqual([m.self && m.self.name, [...m.participants.keys()]], ["Me", ["a"]]);
  m.update([{...alice, version: 0, name: "old"}]);
  assertEqual(types().length, 1, "an older version of the same session is ignored");
  m.update([{...alice, sid: "PA_a2", version: 0}]);
  assertEqual(types().length, 2, "a new session of the uid is taken whatever its version");
  m.left("a", "clientRequest");
  assertEqual(events[2], ["participantLeft", {uid: "a", reason: "clientRequest", participant: {...alice, sid: "PA_a2", version: 0}}]);
  assertEqual(m.participants.size, 0);
});

test("participants: a remote track is announced once its participant is known, with uid and source", () => {
  const {m, events, types} = model();
  m.subscriberSections = parseSections(OFFER);
  m.addRemoteTrack(trackEvent("browser-id-1", "video", "0", "PA_a"));
  assertEqual(types(), [], "not yet: the participant is unknown");
  m.update([alice]);
  assertEqual(types(), ["track", "participants"]);
  const remote = events[0][1];
  assertEqual([remote.uid, remote.source, remote.trackSid, remote.participantSid, remote.kind, remote.mid, remote.muted],
              ["a", "camera", "TR_cam", "PA_a", "video", "0", false]);
  m.addRemoteTrack(trackEvent("browser-id-2", "audio", "1", "PA_a"));
  assertEqual(types(), ["track", "participants", "track"]);
  assertEqual(events[2][1].source, "microphone");
  assertEqual(m.lookupTrack("PA_a", "TR_mic"), {uid: "a", participantSid: "PA_a", info: alice.tracks[1], screenShareOwner: null});
});

test("participants: a mute in a newer ParticipantInfo fires trackMuted", () => {
  const {m, events, types} = model();
  m.subscriberSections = parseSections(OFFER);
  m.update([alice]);
  m.addRemoteTrack(trackEvent("x", "video", "0", "PA_a"));
  m.update([{...alice, version: 2, tracks: [{...alice.tracks[0], muted: true}, alice.tracks[1]]}]);
  assertEqual(types(), ["participants", "track", "trackMuted", "participants"]);
  assertEqual(events[2][1].muted, true);
});

test("participants: a section that stops sending ends its track; leaving ends the rest", () => {
  const {m, events, types} = model();
  m.subscriberSections = parseSections(OFFER);
  m.update([alice]);
  const cam = trackEvent("x", "video", "0", "PA_a"), mic = trackEvent("y", "audio", "1", "PA_a");
  m.addRemoteTrack(cam);
  m.addRemoteTrack(mic);
  m.subscriberSections = parseSections(OFFER.replace("a=sendonly\r\na=msid:PA_a TR_cam", "a=inactive"));
  m.syncRemoteTracks([cam.transceiver, mic.transceiver]);
  assertEqual(types().slice(3), ["trackEnded"]);
  assertEqual(events[3][1].trackSid, "TR_cam");
  m.left("a", "timeout");
  assertEqual(types().slice(4), ["trackEnded", "participantLeft"]);
  assertEqual([events[4][1].trackSid, m.remoteTracks.size], ["TR_mic", 0]);
});

test("participants: clear() leaves everyone with a reason and ends unmatched tracks", () => {
  const {m, events, types} = model();
  m.subscriberSections = parseSections(OFFER);
  m.update([alice]);
  m.addRemoteTrack(trackEvent("z", "video", "9", "PA_nobody"));
  m.clear("reconnecting");
  assertEqual(types().slice(1), ["participantLeft", "trackEnded"]);
  assertEqual(events[1][1].reason, "reconnecting");
  assertEqual(m.remoteTracks.size, 0);
});

test("participants: own trackPublished is kept in self.tracks, replacing the same sid", () => {
  const {m, types} = model();
  m.self = {uid: "me", sid: "PA_me", tracks: [{sid: "TR_1", source: "camera"}]};
  m.trackPublished({sid: "TR_1", source: "screen"});
  m.trackPublished({sid: "TR_2", source: "microphone"});
  assertEqual(m.self.tracks, [{sid: "TR_1", source: "screen"}, {sid: "TR_2", source: "microphone"}]);
  assertEqual(types(), ["trackPublished", "trackPublished"]);
});

test("participants: a screen share's owner comes from its kind", () => {
  assertEqual(screenShareOwnerOf({uid: "1001_sub", sid: "s", kind: {screenShare: {owner: "1001"}}}), "1001");
  assertEqual(screenShareOwnerOf({uid: "1001", sid: "s", kind: "standard"}), null);
  assertEqual(screenShareOwnerOf(null), null);
});
