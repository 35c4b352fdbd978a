// data.js: the SDK's data messages (docs/data.md): envelopes (data-envelope.js) on the `_reliable`
// (ordered, retransmitted) and `_lossy` (unordered, never retransmitted) data channels of the
// publisher transport. The server relays a message on each receiver's channel of the sender's label.

import {encodeEnvelope, decodeEnvelope, RELIABLE_LABEL, LOSSY_LABEL} from "./data-envelope.js";
import {RTCError} from "./errors.js";

/** The largest data message the server relays by default (`--max-data-message-bytes`). */
export const MAX_DATA_MESSAGE_BYTES = 65536;

/**
 * @typedef {{uid: string, topic: string, text: string | null, payload: Uint8Array, reliable: boolean, stream: number}} DataMessage
 *   What a `data` event carries; `text` is null for a payload that is not UTF-8.
 * @typedef {{reliable: RTCDataChannel, lossy: RTCDataChannel}} DataChannels
 * @typedef {(...args: unknown[]) => void} Logger
 */

const strictDecoder = new TextDecoder("utf-8", {fatal: true});
const encoder = new TextEncoder();

/**
 * A payload as text when it is valid UTF-8, else null (binary).
 * @param {Uint8Array} payload
 * @returns {string | null}
 */
export function payloadText(payload) {
  try {
    return strictDecoder.decode(payload);
  } catch (error) {
    // A fatal TextDecoder throws (TypeError) exactly when the bytes are not UTF-8: the payload is
    // binary, which the `data` event says with a null `text`. Nothing failed.
    return null;
  }
}

/**
 * A received data channel message as the `data` event's detail; throws EnvelopeError when the
 * bytes are not an envelope.
 * @param {string | ArrayBuffer | Uint8Array} data the message event's data
 * @param {string} label the channel's label
 * @returns {DataMessage}
 */
export function decodeDataMessage(data, label) {
  const bytes = typeof data === "string" ? encoder.encode(data) : new Uint8Array(data);
  const envelope = decodeEnvelope(bytes);
  return {uid: envelope.sender, topic: envelope.topic, text: payloadText(envelope.payload), payload: envelope.payload,
          reliable: label === RELIABLE_LABEL, stream: envelope.stream};
}

/**
 * The bytes of one message to send; throws an RTCError over `maxBytes`.
 * @param {string | Uint8Array} payload
 * @param {{topic?: string, destinations?: string[], stream?: number}} options
 * @param {number} [maxBytes]
 * @returns {Uint8Array}
 */
export function encodeDataMessage(payload, {topic = "", destinations = [], stream = 0}, maxBytes = MAX_DATA_MESSAGE_BYTES) {
  const bytes = encodeEnvelope({topic, destinations, stream, payload});
  if (bytes.length > maxBytes) throw new RTCError(0, `a data message of ${bytes.length} bytes (at most ${maxBytes})`);
  return bytes;
}

/**
 * Whether a channel is one of the SDK's (the app may open others).
 * @param {RTCDataChannel} channel
 */
export function isSDKChannel(channel) {
  return channel.label === RELIABLE_LABEL || channel.label === LOSSY_LABEL;
}

/**
 * Delivers an SDK channel's messages to `onData`; messages that are not envelopes are logged and dropped.
 * @param {RTCDataChannel} channel
 * @param {(message: DataMessage) => void} onData
 * @param {Logger} log
 */
export function hookDataChannel(channel, onData, log) {
  if (!isSDKChannel(channel)) return;
  channel.binaryType = "arraybuffer";
  channel.onmessage = (event) => {
    /** @type {DataMessage} */
    let message;
    try {
      message = decodeDataMessage(event.data, channel.label);
    } catch (error) {
      log("a data message that is not an envelope", error);
      return;
    }
    onData(message);
  };
}

/**
 * Opens both SDK channels on `pc`, and hooks those the server opens.
 * @param {RTCPeerConnection} pc
 * @param {(message: DataMessage) => void} onData
 * @param {Logger} log
 * @returns {DataChannels}
 */
export function createDataChannels(pc, onData, log) {
  const reliable = pc.createDataChannel(RELIABLE_LABEL, {ordered: true});
  const lossy = pc.createDataChannel(LOSSY_LABEL, {ordered: false, maxRetransmits: 0});
  for (const channel of [reliable, lossy]) hookDataChannel(channel, onData, log);
  pc.ondatachannel = (event) => hookDataChannel(event.channel, onData, log);
  return {reliable, lossy};
}

/**
 * Resolves once `channel` is open; rejects when it closes first or after `timeoutMs`.
 * @param {RTCDataChannel} channel
 * @param {number} [timeoutMs]
 * @returns {Promise<void>}
 */
export function channelOpened(channel, timeoutMs = 10000) {
  if (channel.readyState === "open") return Promise.resolve();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new RTCError(0, `the ${channel.label} data channel did not open within ${timeoutMs / 1000} s`)),
                             timeoutMs);
    channel.addEventListener("open", () => { clearTimeout(timer); resolve(); }, {once: true});
    channel.addEventListener("close", () => { clearTimeout(timer); reject(new RTCError(0, `the ${channel.label} data channel closed`)); },
                             {once: true});
  });
}
