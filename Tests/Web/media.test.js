// RTCClient's media paths in this browser, with the test as the server: a fake WebSocket carries
// the signaling, and a local RTCPeerConnection makes the server's offers and answers.
import {test, assert, assertEqual, sleep} from "./harness.js";
import {FakeWebSocket} from "./fake-websocket.js";
import {RTCClient} from "../../Web/rtc.js";

/** A joined client (with one other participant, `a`) and its socket. */
async function joinedClient() {
  const client = new RTCClient({WebSocketImpl: /** @type {any} */ (FakeWebSocket)});
  const joining = client.join({url: "ws://test/rtc", channel: "c", uid: "me", token: "t", rejoin: false});
  const socket = FakeWebSocket.last;
  socket.open();
  await sleep(0);
  socket.reply("joined", {participant: {uid: "me", sid: "PA_me", version: 1}, iceServers: [], pingInterval: 30,
                          others: [{uid: "a", sid: "PA_a", version: 1, tracks: [{sid: "TR_cam", kind: "video", source: "camera"}]}]},
               socket.sentOf("join")[0].id);
  await joining;
  return {client, socket};
}

/**
 * Waits until `condition` holds (checked every 5 ms), up to `ms`.
 * @param {() => boolean} condition
 * @param {number} [ms]
 */
async function until(condition, ms = 3000) {
  const deadline = performance.now() + ms;
  while (!condition()) {
    if (performance.now() > deadline) throw new Error("timed out waiting");
    await sleep(5);
  }
}

/** A canvas's video track (no camera needed). */
function canvasTrack() {
  const canvas = document.createElement("canvas");
  canvas.width = 160;
  canvas.height = 90;
  const context = canvas.getContext("2d");
  if (context) context.fillRect(0, 0, 10, 10);
  return canvas.captureStream(5).getVideoTracks()[0];
}

test("media: publishTracks announces the track with the offer's mid, offers, and applies the answer", async () => {
  const {client, socket} = await joinedClient();
  const server = new RTCPeerConnection();
  try {
    const track = canvasTrack();
    const publishing = client.publishTracks([{track, source: "screen"}], {maxBitrateKbps: 300});
    await until(() => socket.sentOf("offer").length === 1 && socket.sentOf("publishTrack").length === 1);
    const announce = socket.sentOf("publishTrack")[0], offer = socket.sentOf("offer")[0];
    assertEqual([announce.payload.kind, announce.payload.source, typeof announce.payload.mid], ["video", "screen", "string"]);
    assertEqual(offer.payload.transport, "publisher");
    assert(offer.payload.sdp.includes(`a=mid:${announce.payload.mid}`), "the announced mid is in the offer");
    assertEqual(client.lastPublisherOffer, offer.payload.sdp);
    socket.reply("trackPublished", {sid: "TR_mine", kind: "video", source: "screen", mid: announce.payload.mid}, announce.id);
    await server.setRemoteDescription({type: "offer", sdp: offer.payload.sdp});
    const answer = await server.createAnswer();
    socket.reply("answer", {transport: "publisher", sdp: answer.sdp}, offer.id);
    const [local] = await publishing;
    assertEqual([local.sid, local.source, local.mid, client.localTracks.length], ["TR_mine", "screen", announce.payload.mid, 1]);
    assertEqual(client.publisher && client.publisher.signalingState, "stable");
    assertEqual(client.lastPublisherAnswer, answer.sdp);
    client.mute("TR_mine", true);
    assertEqual([socket.sentOf("mute")[0].payload, track.enabled], [{trackSid: "TR_mine", muted: true}, false]);
    // Unpublishing tells the server at once, then offers the transceiver inactive, kept for reuse.
    const unpublishing = client.unpublish("TR_mine");
    assertEqual(socket.sentOf("unpublishTrack")[0].payload, {trackSid: "TR_mine"});
    await until(() => socket.sentOf("offer").length === 2);
    const again = socket.sentOf("offer")[1];
    assert(/a=inactive/.test(again.payload.sdp), "the section goes inactive");
    await server.setRemoteDescription({type: "offer", sdp: again.payload.sdp});
    socket.reply("answer", {transport: "publisher", sdp: (await server.createAnswer()).sdp}, again.id);
    await unpublishing;
    assertEqual([client.localTracks.length, client._spareTransceivers.length, track.readyState], [0, 1, "ended"]);
  } finally {
    server.close();
    await client.leave();
  }
});

test("media: the server's subscriber offer is answered, and its track is announced with the publisher's uid", async () => {
  const {client, socket} = await joinedClient();
  /** @type {any[]} */
  const tracks = [];
  client.addEventListener("track", (event) => tracks.push(/** @type {CustomEvent} */ (event).detail));
  const server = new RTCPeerConnection();
  try {
    const track = canvasTrack();
    server.addTransceiver(track, {direction: "sendonly", streams: [new MediaStream([track])]});
    const offer = await server.createOffer();
    await server.setLocalDescription(offer);
    // The server names the stream and track after the participant and track sids (a=msid).
    const sdp = /** @type {string} */ (offer.sdp).replace(/a=msid:\S+ \S+/, "a=msid:PA_a TR_cam");
    socket.reply("offer", {transport: "subscriber", sdp});
    await until(() => socket.sentOf("answer").length === 1 && tracks.length === 1);
    assertEqual(socket.sentOf("answer")[0].payload.transport, "subscriber");
    assertEqual([tracks[0].uid, tracks[0].source, tracks[0].trackSid, tracks[0].kind], ["a", "camera", "TR_cam", "video"]);
    assert(client.remoteTracks.get("TR_cam") === tracks[0], "kept by track sid");
  } finally {
    server.close();
    await client.leave();
  }
});
