// RTCClient's signaling side against a fake WebSocket: the join request, the events the app and
// the end-to-end tests rely on (names and payloads), refusals, leaving, and joining again after
// the connection drops. No media: no peer connection is made unless something is published.
import {test, assert, assertEqual, rejection, sleep} from "./harness.js";
import {FakeWebSocket} from "./fake-websocket.js";
import {RTCClient, RTCError, PROTOCOL_VERSION} from "../../Web/rtc.js";

/** A client whose events are recorded as [type, detail]. */
function recorded() {
  const client = new RTCClient({WebSocketImpl: /** @type {any} */ (FakeWebSocket)});
  /** @type {[string, any][]} */
  const events = [];
  for (const type of ["joined", "participants", "participantLeft", "error", "leave", "roomUpdate", "activeSpeakers",
                      "layerChanged", "videoLayers", "localTrackMuted", "reconnecting", "rejoined", "tokenWillExpire"]) {
    client.addEventListener(type, (event) => events.push([type, /** @type {CustomEvent} */ (event).detail]));
  }
  return {client, events, types: () => events.map(([type]) => type)};
}

const JOINED = {participant: {uid: "me", sid: "PA_me", version: 1}, others: [{uid: "a", sid: "PA_a", version: 1}],
                iceServers: [{urls: ["stun:x"], username: null, credential: null}], pingInterval: 5, roomMetadata: "room"};

/**
 * Joins `client`, answering as the server; returns the socket and the join's result.
 * @param {RTCClient} client
 * @param {object} [options]
 */
async function join(client, options = {}) {
  const joining = client.join({url: "ws://test/rtc", channel: "c", uid: "me", token: "tok", rejoinTimeoutMs: 2000, ...options});
  const socket = FakeWebSocket.last;
  socket.open();
  await sleep(0);
  const request = socket.sentOf("join")[0];
  socket.reply("joined", JOINED, request.id);
  return {socket, request, joined: await joining};
}

test("client: join sends the version, the sdk and the options; joined and participants follow", async () => {
  const {client, events, types} = recorded();
  const {request, joined} = await join(client, {autoSubscribe: false, pinnedUIDs: ["b"]});
  assertEqual(request.v, PROTOCOL_VERSION);
  assertEqual(request.payload, {token: "tok", channel: "c", uid: "me", role: "broadcaster", autoSubscribe: false,
                                sdk: {name: "rtc-js", version: "0.1", protocolVersion: {major: 1, minor: 6}}, pinnedUIDs: ["b"]});
  assertEqual(joined, JOINED);
  assertEqual(types(), ["joined", "participants"]);
  assertEqual([client.joined, client.uid, client.roomMetadata, [...client.participants.keys()]], [true, "me", "room", ["a"]]);
  assertEqual(client.iceServers, [{urls: ["stun:x"]}]);
  assert(events[1][1].all === client.participants, "participants' `all` is the client's map");
  await client.leave();
});

test("client: a refused join rejects with the server's code and emits error", async () => {
  const {client, types} = recorded();
  const joining = client.join({url: "ws://test/rtc", channel: "c", uid: "me", token: "forged"});
  const socket = FakeWebSocket.last;
  socket.open();
  await sleep(0);
  socket.reply("error", {code: 2002, reason: "not a JWT (three base64url parts)", requestID: 1});
  const error = await rejection(joining);
  assert(error instanceof RTCError, "an RTCError");
  assertEqual([error.code, error.reason], [2002, "not a JWT (three base64url parts)"]);
  assertEqual([types(), client.joined, client.ws], [["error"], false, null]);
  assertEqual(socket.readyState, FakeWebSocket.CLOSED);
});

test("client: joining twice is refused with 1006", async () => {
  const {client} = recorded();
  await join(client);
  const error = await rejection(client.join({channel: "c", uid: "me"}));
  assertEqual(error.code, 1006);
  await client.leave();
});

test("client: server messages become state and events", async () => {
  const {client, events, types} = recorded();
  const {socket} = await join(client);
  socket.reply("participantUpdate", {participants: [{uid: "b", sid: "PA_b", version: 1, name: "Bea"}]});
  socket.reply("participantLeft", {uid: "a", reason: "clientRequest"});
  socket.reply("roomUpdate", {metadata: "new"});
  socket.reply("activeSpeakers", {speakers: [{uid: "b", sid: "PA_b", level: 0.5}]});
  socket.reply("layerChanged", {uid: "b", trackSid: "TR_b", layer: 1, reason: "request"});
  socket.reply("videoLayers", {trackSid: "TR_me", activeLayers: [0]});
  socket.reply("trackMuted", {trackSid: "TR_me", muted: true});
  socket.reply("tokenWillExpire", {expiresAt: 5});
  assertEqual(types().slice(2), ["participants", "participantLeft", "roomUpdate", "activeSpeakers", "layerChanged", "videoLayers",
                                 "localTrackMuted", "tokenWillExpire"]);
  assertEqual(events[3][1], {uid: "a", reason: "clientRequest", participant: {uid: "a", sid: "PA_a", version: 1}});
  assertEqual(events[8][1], {trackSid: "TR_me", muted: true, byServer: true});
  assertEqual([client.roomMetadata, client.activeSpeakers, client.layers.get("TR_b").layer, [...client.participants.keys()]],
              ["new", ["b"], 1, ["b"]]);
  await client.leave();
});

test("client: a kick from the server ends the session with leave", async () => {
  const {client, events, types} = recorded();
  const {socket} = await join(client);
  socket.reply("leave", {reason: "roomDeleted"});
  assertEqual(types().slice(2), ["leave"]);
  assertEqual(events[2][1], {reason: "roomDeleted"});
  assertEqual([client.joined, socket.readyState], [false, FakeWebSocket.CLOSED]);
});

test("client: leave() tells the server, then emits leave once", async () => {
  const {client, events} = recorded();
  const {socket} = await join(client);
  await client.leave();
  assertEqual(socket.sentOf("leave").map((m) => m.payload), [{reason: "clientRequest"}]);
  assertEqual(events.filter(([type]) => type === "leave").map(([, detail]) => detail), [{reason: "clientRequest"}]);
  assertEqual(client.joined, false);
});

test("client: a dropped connection rejoins as the same uid: reconnecting, participants leave, rejoined", async () => {
  const {client, events, types} = recorded();
  const {socket} = await join(client);
  socket.serverClose(1006);
  assertEqual(types().slice(2), ["participantLeft", "reconnecting"]);
  assertEqual([events[2][1].reason, events[3][1]], ["reconnecting", {reason: "connectionClosed"}]);
  await sleep(0);
  const again = FakeWebSocket.last;
  assert(again !== socket, "a new connection");
  again.open();
  await sleep(0);
  const request = again.sentOf("join")[0];
  assertEqual([request.payload.uid, request.payload.token], ["me", "tok"]);
  again.reply("joined", JOINED, request.id);
  await sleep(10);
  assertEqual(types().slice(4), ["joined", "participants", "rejoined"]);
  assertEqual(events[6][1], {url: "ws://test/rtc", reason: "connectionClosed"});
  assert(client.joined, "joined again");
  await client.leave();
});

test("client: while rejoining, a refused join is the loop's (no error event); it tries again", async () => {
  const {client, types} = recorded();
  const {socket} = await join(client);
  socket.reply("leave", {reason: "serverShutdown"});
  await sleep(0);
  const first = FakeWebSocket.last;
  first.open();
  await sleep(0);
  first.reply("error", {code: 5001, reason: "shutting down", requestID: first.sentOf("join")[0].id});
  await sleep(150); // an answering server is tried again within 100 ms first
  const second = FakeWebSocket.last;
  assert(second !== first, "tried again");
  second.open();
  await sleep(0);
  second.reply("joined", JOINED, second.sentOf("join")[0].id);
  await sleep(10);
  assertEqual(types().slice(2), ["participantLeft", "reconnecting", "joined", "participants", "rejoined"]);
  await client.leave();
});
