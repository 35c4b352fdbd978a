// Data messages: what a `data` event carries, text versus binary payloads, the size limit, and
// the SDK's channels' labels.
import {test, assert, assertEqual} from "./harness.js";
import {decodeDataMessage, encodeDataMessage, payloadText, isSDKChannel, MAX_DATA_MESSAGE_BYTES} from "../../Web/data.js";
import {encodeEnvelope, RELIABLE_LABEL, LOSSY_LABEL} from "../../Web/data-envelope.js";
import {RTCError} from "../../Web/errors.js";

test("data: a received envelope becomes the data event's detail", () => {
  const wire = encodeEnvelope({topic: "chat", sender: "1001", stream: 2, payload: "héllo"});
  const message = decodeDataMessage(wire.buffer, RELIABLE_LABEL);
  assertEqual({...message, payload: [...message.payload]},
              {uid: "1001", topic: "chat", text: "héllo", payload: [...new TextEncoder().encode("héllo")], reliable: true, stream: 2});
  assertEqual(decodeDataMessage(wire, LOSSY_LABEL).reliable, false);
});

test("data: a payload that is not UTF-8 has null text (binary), not an error", () => {
  assertEqual(payloadText(Uint8Array.of(0xff, 0x00, 0xfe)), null);
  assertEqual(payloadText(new Uint8Array()), "");
  const message = decodeDataMessage(encodeEnvelope({payload: Uint8Array.of(0xc3, 0x28)}), RELIABLE_LABEL);
  assertEqual([message.text, [...message.payload]], [null, [0xc3, 0x28]]);
});

test("data: bytes that are not an envelope throw (the channel hook logs and drops them)", () => {
  let threw = null;
  try { decodeDataMessage(Uint8Array.of(2, 0, 0, 0, 0, 0, 0), RELIABLE_LABEL); } catch (error) { threw = error; }
  assert(threw !== null, "threw");
});

test("data: messages over the limit are refused before sending", () => {
  assertEqual(MAX_DATA_MESSAGE_BYTES, 65536);
  assertEqual(encodeDataMessage("hi", {topic: "t", destinations: ["2001"]}).length, 4 + 1 + 2 + 5 + 1 + 2);
  let refused = null;
  try { encodeDataMessage(new Uint8Array(100), {}, 50); } catch (error) { refused = error; }
  assert(refused instanceof RTCError, "an RTCError");
  assertEqual(refused.reason, "a data message of 107 bytes (at most 50)");
});

test("data: only the SDK's two labels are its channels", () => {
  const channel = (/** @type {string} */ label) => /** @type {RTCDataChannel} */ (/** @type {unknown} */ ({label}));
  assertEqual([isSDKChannel(channel("_reliable")), isSDKChannel(channel("_lossy")), isSDKChannel(channel("app"))], [true, true, false]);
});
