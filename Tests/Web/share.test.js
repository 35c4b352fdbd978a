// Sharing a screen as `<host>_sub` (Web/share.js) with a fake client and fake captures: the join
// and publish it makes, what a failure stops and leaves, the end of the share from the browser's
// UI; and RTCClient.shareScreen, delegating, refused on the fake WebSocket.
import {test, assert, assertEqual, rejection, sleep} from "./harness.js";
import {FakeWebSocket} from "./fake-websocket.js";
import {shareScreen} from "../../Web/share.js";
import {RTCClient, RTCError} from "../../Web/rtc.js";

/** A track that records `stop()` and can end, as the browser's UI ends a share. */
class FakeTrack extends EventTarget {
  /** @param {string} kind */
  constructor(kind) {
    super();
    this.kind = kind;
    this.readyState = "live";
  }
  stop() { this.readyState = "ended"; }
  end() { this.stop(); this.dispatchEvent(new Event("ended")); }
}

/** A stream of one video and one audio track (fake). */
function fakeMedia() {
  const video = new FakeTrack("video"), audio = new FakeTrack("audio");
  const media = {getTracks: () => [video, audio], getVideoTracks: () => [video], getAudioTracks: () => [audio]};
  return {media: /** @type {MediaStream} */ (/** @type {unknown} */ (media)), video, audio};
}

/** A client that records the calls sharing makes, failing the one named. */
class FakeClient {
  /**
   * @param {any} options
   * @param {string | null} failing
   */
  constructor(options, failing) {
    this.options = options;
    this.failing = failing;
    /** @type {[string, any][]} */
    this.calls = [];
  }
  /** @param {any} options */
  async join(options) {
    this.calls.push(["join", options]);
    if (this.failing === "join") throw new RTCError(3003, "the host is not in the channel");
  }
  /** @param {any} options */
  async publishScreen(options) {
    this.calls.push(["publishScreen", options]);
    if (this.failing === "publishScreen") throw new RTCError(0, "no answer");
  }
  async leave() { this.calls.push(["leave", null]); }
}

/**
 * `shareScreen` with fake clients (the last one made is returned) and a fake capture.
 * @param {any} options
 * @param {string | null} [failing]
 */
function sharing(options, failing = null) {
  /** @type {FakeClient[]} */
  const made = [];
  /** @type {any[]} */
  const captures = [];
  const captured = fakeMedia();
  const capture = async (/** @type {any} */ wanted) => { captures.push(wanted); return captured.media; };
  const result = shareScreen((clientOptions) => {
    const client = new FakeClient(clientOptions, failing);
    made.push(client);
    return client;
  }, options, capture);
  return {result, made, captures, captured};
}

test("share: captures, then joins as <host>_sub subscribed to nothing, and publishes the screen", async () => {
  const log = () => {};
  const {result, made, captures, captured} = sharing({url: "ws://a/rtc", fallbackURLs: ["ws://b/rtc"], channel: "c", hostUid: "1001",
                                                      token: "t", log, clientOptions: {preferCodecs: false}});
  const client = await result;
  assert(client === made[0] && made.length === 1, "resolves with the one client it made");
  assertEqual(captures, [{video: {width: 1280, height: 720, frameRate: 15}, audio: false}]);
  assertEqual(client.options, {log, preferCodecs: false});
  assertEqual(client.calls.map(([name]) => name), ["join", "publishScreen"]);
  assertEqual(client.calls[0][1], {url: "ws://a/rtc", fallbackURLs: ["ws://b/rtc"], channel: "c", uid: "1001_sub", token: "t",
                                   role: "broadcaster", autoSubscribe: false, autoSubscribeAudio: false, autoSubscribeVideo: false});
  assert(client.calls[1][1].stream === captured.media && client.calls[1][1].maxBitrateKbps === 1500, "the capture, at 1500 kbps");
  // The user stopping the share in the browser's UI leaves.
  captured.video.end();
  assertEqual(client.calls.map(([name]) => name), ["join", "publishScreen", "leave"]);
});

test("share: a given stream is not captured; the suffix, size and cap are the caller's", async () => {
  const given = fakeMedia();
  const {result, captures} = sharing({channel: "c", hostUid: "7", token: "t", suffix: "-screen", stream: given.media,
                                      maxBitrateKbps: 900, video: {width: 640, height: 360}});
  const client = await result;
  assertEqual(captures, []);
  assertEqual([client.calls[0][1].uid, client.calls[0][1].url, client.calls[1][1].maxBitrateKbps], ["7-screen", null, 900]);
  assert(client.calls[1][1].stream === given.media, "publishes the given stream");
});

test("share: a refused join leaves, stops its own capture and rejects with the server's error", async () => {
  const {result, made, captured} = sharing({channel: "c", hostUid: "1001", token: "t"}, "join");
  const error = await rejection(result);
  assertEqual([error instanceof RTCError, error.code], [true, 3003]);
  assertEqual(made[0].calls.map(([name]) => name), ["join", "leave"]);
  assertEqual([captured.video.readyState, captured.audio.readyState], ["ended", "ended"]);
});

test("share: a failed publish leaves, and never stops a stream it was given", async () => {
  const given = fakeMedia();
  const {result, made} = sharing({channel: "c", hostUid: "1001", token: "t", stream: given.media}, "publishScreen");
  const error = await rejection(result);
  assertEqual(error.reason, "no answer");
  assertEqual(made[0].calls.map(([name]) => name), ["join", "publishScreen", "leave"]);
  assertEqual([given.video.readyState, given.audio.readyState], ["live", "live"]);
});

test("share: RTCClient.shareScreen delegates: joins as <host>_sub on its own socket; a refusal rejects", async () => {
  const given = fakeMedia();
  const pending = RTCClient.shareScreen({url: "ws://test/rtc", channel: "c", hostUid: "1001", token: "t", stream: given.media,
                                         clientOptions: {WebSocketImpl: /** @type {any} */ (FakeWebSocket)}});
  await sleep(0);
  const socket = FakeWebSocket.last;
  socket.open();
  await sleep(0);
  const join = socket.sentOf("join")[0];
  assertEqual([join.payload.uid, join.payload.role, join.payload.autoSubscribe, join.payload.autoSubscribeAudio,
               join.payload.autoSubscribeVideo], ["1001_sub", "broadcaster", false, false, false]);
  socket.reply("error", {code: 3003, reason: "the host is not in the channel"}, join.id);
  const error = await rejection(pending);
  assertEqual([error instanceof RTCError, error.code, socket.readyState], [true, 3003, FakeWebSocket.CLOSED]);
  assertEqual(given.video.readyState, "live");
});
