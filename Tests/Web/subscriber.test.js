// The subscriber side (Web/subscriber.js) with fake transports and a fake model: offers answered
// one at a time and in order, their sections kept for the model, failures as `error` events, offers
// with no transports dropped; and the updateSubscription payload, also as RTCClient sends it.
import {test, assert, assertEqual, sleep} from "./harness.js";
import {FakeWebSocket} from "./fake-websocket.js";
import {SubscriberOffers, subscriptionRequest} from "../../Web/subscriber.js";
import {RTCClient, RTCError} from "../../Web/rtc.js";

/** An offer of one video section, mid `mid`. */
function offer(/** @type {string} */ mid) {
  return ["v=0", "o=- 1 1 IN IP4 127.0.0.1", "s=-", "t=0 0", "m=video 9 UDP/TLS/RTP/SAVPF 96", "c=IN IP4 0.0.0.0",
          `a=mid:${mid}`, "a=sendonly", `a=msid:PA_${mid} TR_${mid}`, "a=rtpmap:96 VP8/90000", ""].join("\r\n");
}

/**
 * SubscriberOffers over fakes that record everything, in order; `answering` decides how each
 * answer goes (by the offer's sdp).
 * @param {(sdp: string) => Promise<string>} answering
 */
function offers(answering) {
  /** @type {string[]} */
  const steps = [];
  /** @type {[string, any][]} */
  const sent = [];
  /** @type {[string, any][]} */
  const emitted = [];
  /** @type {unknown[][]} */
  const logged = [];
  const transports = {
    answerSubscriberOffer: async (/** @type {string} */ sdp) => {
      steps.push(`answer ${sdp.match(/a=mid:(\S+)/)?.[1]}`);
      return answering(sdp);
    },
    subscriberPC: () => /** @type {RTCPeerConnection} */ (/** @type {unknown} */ ({getTransceivers: () => []})),
  };
  /** @type {{subscriberSections: Record<string, any>, syncRemoteTracks: (t: RTCRtpTransceiver[]) => void}} */
  const model = {subscriberSections: {}, syncRemoteTracks: () => steps.push(`sync ${Object.keys(model.subscriberSections)}`)};
  /** @type {typeof transports | null} */
  let current = transports;
  const subscriber = new SubscriberOffers({
    transports: () => current, model: () => model,
    send: (type, payload) => sent.push([type, payload]), emit: (type, detail) => emitted.push([type, detail]),
    log: (...args) => logged.push(args),
  });
  return {subscriber, steps, sent, emitted, logged, model, drop: () => { current = null; }};
}

test("subscriber: offers are answered one at a time, in order, each section matched after its answer", async () => {
  /** @type {(() => void)[]} */
  const holds = [];
  // The first answer waits until released: the second offer must not start meanwhile.
  const {subscriber, steps, sent} = offers(async (sdp) => {
    if (sdp.includes("a=mid:0")) await new Promise((resolve) => holds.push(() => resolve(undefined)));
    return `answer to ${sdp.match(/a=mid:(\S+)/)?.[1]}`;
  });
  const first = subscriber.answer({transport: "subscriber", sdp: offer("0")});
  const second = subscriber.answer({transport: "subscriber", sdp: offer("1")});
  await sleep(5);
  assertEqual(steps, ["answer 0"]);
  holds[0]();
  await first;
  await second;
  assertEqual(steps, ["answer 0", "sync 0", "answer 1", "sync 1"]);
  assertEqual(sent, [["answer", {transport: "subscriber", sdp: "answer to 0"}], ["answer", {transport: "subscriber", sdp: "answer to 1"}]]);
});

test("subscriber: a failed answer is an error event and the next offer still goes; a publisher offer is logged", async () => {
  const {subscriber, steps, sent, emitted, logged} = offers(async (sdp) => {
    if (sdp.includes("a=mid:0")) throw new DOMException("bad m-line", "InvalidAccessError");
    return "fine";
  });
  await subscriber.answer({transport: "publisher", sdp: offer("9")});
  assertEqual(logged, [["unexpected offer for", "publisher"]]);
  await subscriber.answer({transport: "subscriber", sdp: offer("0")});
  await subscriber.answer({transport: "subscriber", sdp: offer("1")});
  assertEqual(steps, ["answer 0", "answer 1", "sync 1"]);
  assertEqual(sent.length, 1);
  assertEqual(emitted.length, 1);
  const [type, error] = emitted[0];
  assert(type === "error" && error instanceof RTCError, "an error event with an RTCError");
  assertEqual([error.code, error.reason], [0, "subscriber negotiation failed: bad m-line"]);
});

test("subscriber: an offer with no transports (not joined, or gone) is dropped", async () => {
  const {subscriber, steps, sent, emitted, model, drop} = offers(async () => "fine");
  drop();
  await subscriber.answer({transport: "subscriber", sdp: offer("0")});
  assertEqual([steps, sent, emitted, model.subscriberSections], [[], [], [], {}]);
});

test("subscriber: updateSubscription's payload, and RTCClient sending it", async () => {
  assertEqual(subscriptionRequest(), {trackSids: [], subscribe: true});
  assertEqual(subscriptionRequest({trackSids: ["TR_a"], subscribe: false}), {trackSids: ["TR_a"], subscribe: false});
  assertEqual(subscriptionRequest({kind: "video", uids: ["1001_sub"]}), {trackSids: [], subscribe: true, kind: "video", uids: ["1001_sub"]});
  const client = new RTCClient({WebSocketImpl: /** @type {any} */ (FakeWebSocket)});
  const joining = client.join({url: "ws://test/rtc", channel: "c", uid: "me", token: "t", rejoin: false});
  const socket = FakeWebSocket.last;
  socket.open();
  await sleep(0);
  socket.reply("joined", {participant: {uid: "me", sid: "PA_me", version: 1}, iceServers: [], pingInterval: 30},
               socket.sentOf("join")[0].id);
  await joining;
  client.updateSubscription({trackSids: ["TR_a"], subscribe: false});
  client.subscribeUser("1001_sub");
  assertEqual(socket.sentOf("updateSubscription").map((m) => m.payload),
              [{trackSids: ["TR_a"], subscribe: false}, {trackSids: [], subscribe: true, uids: ["1001_sub"]}]);
  await client.leave();
});
