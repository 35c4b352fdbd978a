// Joining again (Web/rejoin.js) with a fake clock, against the fake WebSocket: the test plays the
// servers, one socket per attempt (unreachable, refusing with an error, or joining). The waits the
// loop asks the clock for are the backoff's; the URLs it opens follow the unreachable ones.
import {test, assert, assertEqual, sleep} from "./harness.js";
import {FakeWebSocket} from "./fake-websocket.js";
import {Rejoiner, publishAgain} from "../../Web/rejoin.js";
import {SignalClient} from "../../Web/signal-client.js";
import {RTCClient, RTCError} from "../../Web/rtc.js";

/**
 * A clock whose sleeps take no time: they are recorded and move `now` on.
 * @param {(waits: number[]) => void} [onSleep] called after each sleep is recorded
 */
function fakeClock(onSleep = () => {}) {
  /** @type {number[]} */
  const waits = [];
  let now = 1_000_000;
  return {
    waits,
    now: () => now,
    /** @param {number} ms */
    sleep: async (ms) => { waits.push(ms); now += ms; onSleep(waits); },
  };
}

/**
 * Waits until a socket newer than the `seen` first ones is made, and returns it.
 * @param {number} seen
 */
async function socketAfter(seen) {
  const deadline = performance.now() + 2000;
  while (FakeWebSocket.made.length <= seen) {
    if (performance.now() > deadline) throw new Error(`no attempt after ${seen} sockets`);
    await sleep(0);
  }
  return FakeWebSocket.made[seen];
}

/**
 * @typedef {"unreachable" | "refused" | "joins"} Answer what the server does with one attempt
 */

/**
 * Plays the servers for the attempts from the `seen`th socket made on (counted before the attempts
 * start: the first one opens at once), one answer each, in order; returns the URLs opened.
 * @param {number} seen
 * @param {Answer[]} answers
 */
async function serve(seen, answers) {
  /** @type {string[]} */
  const urls = [];
  for (const answer of answers) {
    const socket = await socketAfter(seen);
    seen += 1;
    urls.push(socket.url);
    if (answer === "unreachable") { socket.fail(); continue; }
    socket.open();
    await sleep(0);
    const join = socket.sentOf("join")[0];
    if (answer === "refused") socket.reply("error", {code: 5001, reason: "shutting down"}, join.id);
    else socket.reply("joined", JOINED, join.id);
  }
  return urls;
}

const JOINED = {participant: {uid: "me", sid: "PA_me", version: 1}, others: [], iceServers: [], pingInterval: 30};

/**
 * A Rejoiner whose attempts are signal clients on the fake WebSocket, each sending `join`.
 * @param {{now: () => number, sleep: (ms: number) => Promise<void>}} clock
 * @param {() => boolean} [stopped]
 */
function rejoiner(clock, stopped = () => false) {
  /** @type {string[]} */
  const logged = [];
  const open = async (/** @type {string} */ url) => {
    const signal = new SignalClient({WebSocketImpl: /** @type {any} */ (FakeWebSocket)});
    try {
      await signal.connect(url);
      return await signal.request("join", {uid: "me"}, 1000);
    } finally {
      signal.close();
    }
  };
  return {rejoin: new Rejoiner({open, stopped, clock, log: (text) => logged.push(String(text))}), logged};
}

test("rejoin: unreachable servers: waits double from 100 ms to 2 s, each failure moves to the next URL", async () => {
  const clock = fakeClock();
  const {rejoin, logged} = rejoiner(clock);
  const urls = ["ws://a/rtc", "ws://b/rtc", "ws://c/rtc"];
  const mark = FakeWebSocket.made.length;
  const running = rejoin.run(urls, 60000);
  assert(rejoin.active, "active once started");
  const opened = await serve(mark, ["unreachable", "unreachable", "unreachable", "unreachable", "unreachable", "unreachable",
                              "unreachable", "joins"]);
  assertEqual(await running, {result: "rejoined", url: "ws://b/rtc", attempts: 8});
  assertEqual(clock.waits, [100, 200, 400, 800, 1600, 2000, 2000]);
  assertEqual(opened, [...urls, ...urls, "ws://a/rtc", "ws://b/rtc"]);
  assertEqual([rejoin.active, logged.length], [false, 7]);
  assertEqual(logged[0], "joining again at ws://a/rtc failed: cannot connect to ws://a/rtc");
});

test("rejoin: a server that refuses (an error) is tried again at the same URL, within 500 ms", async () => {
  const clock = fakeClock();
  const {rejoin, logged} = rejoiner(clock);
  const mark = FakeWebSocket.made.length;
  const running = rejoin.run(["ws://a/rtc", "ws://b/rtc"], 60000);
  const opened = await serve(mark, ["refused", "refused", "refused", "refused", "refused", "joins"]);
  assertEqual(await running, {result: "rejoined", url: "ws://a/rtc", attempts: 6});
  assertEqual(clock.waits, [100, 200, 400, 500, 500]);
  assertEqual(new Set(opened).size, 1);
  assertEqual(logged[0], "joining again at ws://a/rtc failed: 5001 shutting down");
});

test("rejoin: refused vs unreachable: only the unreachable move on; the backoff grows across both", async () => {
  const clock = fakeClock();
  const {rejoin} = rejoiner(clock);
  const mark = FakeWebSocket.made.length;
  const running = rejoin.run(["ws://a/rtc", "ws://b/rtc", "ws://c/rtc"], 60000);
  const opened = await serve(mark, ["unreachable", "refused", "refused", "unreachable", "refused", "joins"]);
  assertEqual(await running, {result: "rejoined", url: "ws://c/rtc", attempts: 6});
  assertEqual(clock.waits, [100, 200, 400, 800, 500]);
  assertEqual(opened, ["ws://a/rtc", "ws://b/rtc", "ws://b/rtc", "ws://b/rtc", "ws://c/rtc", "ws://c/rtc"]);
});

test("rejoin: out of time it gives up (an attempt whose wait ends past the deadline is still made)", async () => {
  const clock = fakeClock();
  const {rejoin} = rejoiner(clock);
  const mark = FakeWebSocket.made.length;
  const running = rejoin.run(["ws://a/rtc"], 1000);
  await serve(mark, ["unreachable", "unreachable", "unreachable", "unreachable", "unreachable"]);
  // Attempts at 0, 100, 300, 700 and 1500 ms: after the fifth failure the deadline is past.
  assertEqual(await running, {result: "gaveUp", attempts: 5});
  assertEqual(clock.waits, [100, 200, 400, 800]);
  assertEqual(rejoin.active, false);
});

test("rejoin: stops when told, before the next attempt; a second run at once is refused", async () => {
  let stop = false;
  const clock = fakeClock((waits) => { if (waits.length === 2) stop = true; });
  const {rejoin} = rejoiner(clock, () => stop);
  const mark = FakeWebSocket.made.length;
  const running = rejoin.run(["ws://a/rtc"], 60000);
  const second = await rejoin.run(["ws://a/rtc"], 60000).then(() => null, (/** @type {unknown} */ error) => error);
  assert(second instanceof RTCError && second.reason === "already rejoining", `a second run: ${second}`);
  await serve(mark, ["unreachable", "refused"]);
  assertEqual(await running, {result: "stopped", attempts: 2});
  await sleep(10);
  assertEqual(FakeWebSocket.made.length - mark, 2);
});

test("rejoin: publishAgain publishes the live tracks again, by bitrate cap, and goes on after a failure", async () => {
  const track = (/** @type {string} */ id, /** @type {string} */ readyState) => /** @type {any} */ ({id, readyState});
  const published = [
    {track: track("cam", "live"), maxBitrateKbps: 800}, {track: track("mic", "live"), maxBitrateKbps: 800},
    {track: track("old", "ended"), maxBitrateKbps: 800}, {track: track("screen", "live"), maxBitrateKbps: 1500},
    {track: track("canvas", "live"), maxBitrateKbps: null},
  ];
  /** @type {[string[], number | null][]} */
  const calls = [];
  /** @type {unknown[][]} */
  const logged = [];
  await publishAgain(published, async (entries, maxBitrateKbps) => {
    calls.push([entries.map((e) => e.track.id), maxBitrateKbps]);
    if (maxBitrateKbps === 1500) throw new RTCError(1004, "join first");
  }, (...args) => logged.push(args));
  assertEqual(calls, [[["cam", "mic"], 800], [["screen"], 1500], [["canvas"], null]]);
  assertEqual(logged.length, 1);
  assertEqual(logged[0][0], "publishing again failed");
});

/** A client on the fake WebSocket with a fake rejoin clock, its events recorded; joined. */
async function joinedClient(/** @type {object} */ options = {}) {
  const client = new RTCClient({WebSocketImpl: /** @type {any} */ (FakeWebSocket)});
  const clock = fakeClock();
  client._rejoiner.clock = clock;
  /** @type {[string, any][]} */
  const events = [];
  for (const type of ["error", "leave", "reconnecting", "rejoined", "joined"]) {
    client.addEventListener(type, (event) => events.push([type, /** @type {CustomEvent} */ (event).detail]));
  }
  const mark = FakeWebSocket.made.length;
  const joining = client.join({url: "ws://a/rtc", fallbackURLs: ["ws://b/rtc"], channel: "c", uid: "me", token: "t",
                               rejoinTimeoutMs: 1000, ...options});
  await serve(mark, ["joins"]);
  await joining;
  return {client, clock, events, types: () => events.map(([type]) => type)};
}

test("rejoin: the client gives up after rejoinTimeoutMs: leave with the reason; no error events", async () => {
  const {client, clock, events, types} = await joinedClient();
  const mark = FakeWebSocket.made.length;
  FakeWebSocket.last.serverClose(1006);
  const opened = await serve(mark, ["unreachable", "refused", "unreachable", "refused", "unreachable"]);
  await sleep(10);
  assertEqual(opened, ["ws://a/rtc", "ws://b/rtc", "ws://b/rtc", "ws://a/rtc", "ws://a/rtc"]);
  assertEqual(clock.waits, [100, 200, 400, 500]);
  assertEqual(types(), ["joined", "reconnecting", "leave"]);
  assertEqual(events[2][1], {reason: "connectionClosed"});
  assertEqual([client.joined, client._rejoiner.active, client.ws], [false, false, null]);
});

test("rejoin: the client joins again at a fallback after a server shutdown: rejoined with its URL", async () => {
  const {client, events, types} = await joinedClient({rejoinTimeoutMs: 60000});
  const mark = FakeWebSocket.made.length;
  FakeWebSocket.last.reply("leave", {reason: "serverShutdown"});
  await serve(mark, ["unreachable", "joins"]);
  await sleep(10);
  assertEqual(types(), ["joined", "reconnecting", "joined", "rejoined"]);
  assertEqual(events[3][1], {url: "ws://b/rtc", reason: "serverShutdown"});
  assert(client.joined && !client._rejoiner.active, "joined, no longer rejoining");
  await client.leave();
});

test("rejoin: leaving while the client waits to join again stops it: leave once, no more attempts", async () => {
  const {client, clock, types} = await joinedClient({rejoinTimeoutMs: 60000});
  /** @type {() => void} */
  let release = () => {};
  // The wait after the first failure lasts until the test releases it.
  clock.sleep = (ms) => {
    clock.waits.push(ms);
    return /** @type {Promise<void>} */ (new Promise((resolve) => { release = () => resolve(undefined); }));
  };
  const mark = FakeWebSocket.made.length;
  FakeWebSocket.last.serverClose(1006);
  await serve(mark, ["unreachable"]);
  await sleep(10);
  assertEqual(clock.waits, [100]);
  const before = FakeWebSocket.made.length;
  await client.leave();
  release();
  await sleep(20);
  assertEqual([FakeWebSocket.made.length, client._rejoiner.active], [before, false]);
  assertEqual(types(), ["joined", "reconnecting", "leave"]);
});
