// The signal client against a fake WebSocket: envelopes at the current protocol version, request
// ids matched to replies, the server's errors rejecting their requests, pings, and closes.
import {test, assert, assertEqual, rejection, sleep} from "./harness.js";
import {FakeWebSocket} from "./fake-websocket.js";
import {SignalClient, PROTOCOL_VERSION, PROTOCOL_VERSION_OBJECT} from "../../Web/signal-client.js";
import {RTCError} from "../../Web/errors.js";

/** A connected client and its socket. */
async function connected() {
  /** @type {unknown[][]} */
  const logged = [];
  const client = new SignalClient({WebSocketImpl: /** @type {any} */ (FakeWebSocket), log: (...args) => logged.push(args)});
  const opening = client.connect("ws://test/rtc");
  const socket = FakeWebSocket.last;
  socket.open();
  await opening;
  return {client, socket, logged};
}

test("signal: the protocol version is 1.6, in both forms", () => {
  assertEqual(PROTOCOL_VERSION, "1.6");
  assertEqual(PROTOCOL_VERSION_OBJECT, {major: 1, minor: 6});
});

test("signal: requests carry increasing ids and the version; replies resolve by id, out of order", async () => {
  const {client, socket} = await connected();
  const first = client.request("publishTrack", {kind: "video"});
  const second = client.request("refreshToken", {token: "t"});
  assertEqual(socket.sent.map((m) => [m.v, m.id, m.type]), [["1.6", 1, "publishTrack"], ["1.6", 2, "refreshToken"]]);
  socket.reply("tokenRefreshed", {expiresAt: 9}, 2);
  socket.reply("trackPublished", {sid: "TR_1"}, 1);
  assertEqual(await first, {sid: "TR_1"});
  assertEqual(await second, {expiresAt: 9});
  assertEqual(client.pendingCount, 0);
});

test("signal: an error about a request rejects it with the server's code and reason", async () => {
  const {client, socket} = await connected();
  /** @type {[RTCError, string | null][]} */
  const errors = [];
  client.onerror = (error, type) => errors.push([error, type]);
  const join = client.request("join", {uid: "1"});
  socket.reply("error", {code: 2002, reason: "not a JWT", requestID: 1});
  const error = await rejection(join);
  assert(error instanceof RTCError, "an RTCError");
  assertEqual([error.code, error.reason, error.requestID, error.message], [2002, "not a JWT", 1, "not a JWT (2002)"]);
  assertEqual(errors.map(([e, type]) => [e.code, type]), [[2002, "join"]]);
});

test("signal: an error with the request id in the envelope, and one about no request", async () => {
  const {client, socket} = await connected();
  /** @type {(string | null)[]} */
  const types = [];
  client.onerror = (_, type) => types.push(type);
  const mute = client.request("updateMetadata", {});
  socket.reply("error", {code: 2007, reason: "permission denied"}, 1);
  assertEqual((await rejection(mute)).code, 2007);
  socket.reply("error", {code: 1001, reason: "malformed"});
  assertEqual(types, ["updateMetadata", null]);
});

test("signal: server messages and replies that are state reach onmessage; joined and answer replies do not", async () => {
  const {client, socket} = await connected();
  /** @type {string[]} */
  const seen = [];
  client.onmessage = (message) => seen.push(message.type);
  const join = client.request("join", {});
  socket.reply("joined", {participant: {uid: "1"}}, 1);
  await join;
  const offer = client.request("offer", {transport: "publisher"});
  socket.reply("offer", {transport: "subscriber", sdp: ""}, 2); // the server's own offer, never a reply
  socket.reply("answer", {sdp: "a"}, 2);
  assertEqual(await offer, {sdp: "a"});
  const update = client.request("updateMetadata", {name: "n"});
  socket.reply("participantUpdate", {participants: []}, 3);
  await update;
  socket.reply("roomUpdate", {metadata: "m"});
  assertEqual(seen, ["offer", "participantUpdate", "roomUpdate"]);
});

test("signal: unreadable messages are logged, not thrown", async () => {
  const {client, socket, logged} = await connected();
  /** @type {string[]} */
  const seen = [];
  client.onmessage = (message) => seen.push(message.type);
  socket.message("{not json");
  socket.message("[1, 2]");
  assertEqual(seen, []);
  assertEqual(logged.map((entry) => entry[0]), ["unreadable message", "not an envelope"]);
});

test("signal: a request times out, and one sent while closed fails at once", async () => {
  const {client} = await connected();
  const slow = await rejection(client.request("refreshToken", {}, 30));
  assertEqual([slow.code, slow.reason], [0, "no reply to refreshToken within 30 ms"]);
  client.close();
  const closed = await rejection(client.request("mute", {}));
  assertEqual(closed.reason, "not connected (sending mute)");
  assertEqual(client.pendingCount, 0);
});

test("signal: pings at the interval while open, with a timestamp, and stop when closed", async () => {
  const {client, socket} = await connected();
  client.startPings(20);
  await sleep(75);
  const pings = socket.sentOf("ping");
  assert(pings.length >= 2 && pings.length <= 4, `${pings.length} pings in 75 ms at 20 ms`);
  assert(pings.every((p) => typeof p.payload.timestamp === "number" && p.id === undefined), "timestamps, no ids");
  socket.readyState = FakeWebSocket.CLOSED; // closed under it: no more pings, no throw
  await sleep(45);
  assertEqual(socket.sentOf("ping").length, pings.length);
  client.close();
});

test("signal: connect fails on an error or a close before opening; a later close goes to onclose", async () => {
  const a = new SignalClient({WebSocketImpl: /** @type {any} */ (FakeWebSocket)});
  const failing = a.connect("ws://down/rtc");
  FakeWebSocket.last.fail();
  assertEqual((await rejection(failing)).reason, "cannot connect to ws://down/rtc");
  const b = new SignalClient({WebSocketImpl: /** @type {any} */ (FakeWebSocket)});
  const closing = b.connect("ws://x/rtc");
  FakeWebSocket.last.serverClose(1006);
  assertEqual((await rejection(closing)).reason, "connection closed before joining (1006)");
  const {client, socket} = await connected();
  /** @type {number[]} */
  const closes = [];
  client.onclose = (event) => closes.push(event.code);
  const waiting = client.request("refreshToken", {});
  socket.serverClose(1001);
  client.rejectPending("connection closed");
  assertEqual(closes, [1001]);
  assertEqual((await rejection(waiting)).reason, "connection closed");
});

test("signal: a URL the WebSocket constructor refuses rejects connect", async () => {
  class Refusing { constructor() { throw new SyntaxError("bad URL"); } }
  const client = new SignalClient({WebSocketImpl: /** @type {any} */ (Refusing)});
  assertEqual((await rejection(client.connect("nope"))).reason, "cannot open nope: bad URL");
});
