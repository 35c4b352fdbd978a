// data-envelope.js: the SDK's data stream messages on the `_reliable` and `_lossy` data channels
// (docs/data.md), the same rule as the Swift `DataEnvelope`: both are checked against one table,
// Tests/Fixtures/data-envelopes.json. Plain ES module, no dependencies.
//
//   version u8 = 1 | stream u8 | topic length u16 (<= 1024) | topic UTF-8 |
//   destination count u16 (<= 256) | (length u8, uid)* | sender length u8 | sender | payload (the rest)
// Integers big-endian. The sender is the server's to write: a client sends it empty.

export const RELIABLE_LABEL = "_reliable";
export const LOSSY_LABEL = "_lossy";
export const MAX_TOPIC_BYTES = 1024;
export const MAX_DESTINATIONS = 256;

const encoder = new TextEncoder();
const strictDecoder = new TextDecoder("utf-8", {fatal: true});

/** Why bytes are not an envelope (`kind` as the Swift ParseError's cases name them). */
export class EnvelopeError extends Error {
  /**
   * @param {"truncated" | "unknownVersion" | "topicTooLong" | "tooManyDestinations" | "emptyUID" | "notUTF8"} kind
   * @param {string} message
   */
  constructor(kind, message) {
    super(message);
    this.name = "EnvelopeError";
    this.kind = kind;
  }
}

/**
 * The UTF-8 bytes of `text`, cut to at most `limit` bytes at a character boundary.
 * @param {string} text
 * @param {number} limit
 */
function utf8Prefix(text, limit) {
  const bytes = encoder.encode(text);
  if (bytes.length <= limit) return bytes;
  // Cut at a character boundary at or below the limit (never inside a UTF-8 sequence).
  let end = limit;
  while (end > 0 && (bytes[end] & 0xC0) === 0x80) end -= 1;
  return bytes.slice(0, end);
}

/**
 * The envelope's bytes. `payload`: a Uint8Array or a string (sent as UTF-8).
 * @param {{topic?: string, destinations?: string[], sender?: string, stream?: number, payload?: Uint8Array | string}} fields
 * @returns {Uint8Array}
 */
export function encodeEnvelope({topic = "", destinations = [], sender = "", stream = 0, payload = new Uint8Array()} = {}) {
  const topicBytes = utf8Prefix(topic, MAX_TOPIC_BYTES);
  const uids = destinations.slice(0, MAX_DESTINATIONS).map((uid) => utf8Prefix(uid, 255)).filter((uid) => uid.length > 0);
  const from = utf8Prefix(sender, 255);
  const body = typeof payload === "string" ? encoder.encode(payload) : payload;
  const size = 4 + topicBytes.length + 2 + uids.reduce((n, uid) => n + 1 + uid.length, 0) + 1 + from.length + body.length;
  const out = new Uint8Array(size);
  let at = 0;
  out[at++] = 1;
  out[at++] = stream & 0xFF;
  out[at++] = topicBytes.length >> 8;
  out[at++] = topicBytes.length & 0xFF;
  out.set(topicBytes, at); at += topicBytes.length;
  out[at++] = uids.length >> 8;
  out[at++] = uids.length & 0xFF;
  for (const uid of uids) { out[at++] = uid.length; out.set(uid, at); at += uid.length; }
  out[at++] = from.length;
  out.set(from, at); at += from.length;
  out.set(body, at);
  return out;
}

/**
 * @typedef {{topic: string, destinations: string[], sender: string, stream: number, payload: Uint8Array}} Envelope
 */

/**
 * `{topic, destinations, sender, stream, payload}` from bytes; throws EnvelopeError.
 * @param {Uint8Array | ArrayBuffer | ArrayLike<number>} input
 * @returns {Envelope}
 */
export function decodeEnvelope(input) {
  const bytes = input instanceof Uint8Array ? input : new Uint8Array(input);
  let at = 0;
  /** @param {number} count */
  const take = (count) => {
    if (bytes.length - at < count) throw new EnvelopeError("truncated", `the envelope ends at byte ${bytes.length}, before its header does`);
    const slice = bytes.subarray(at, at + count);
    at += count;
    return slice;
  };
  /** @param {Uint8Array} slice */
  const text = (slice) => {
    try {
      return strictDecoder.decode(slice);
    } catch (error) {
      // A fatal TextDecoder throws (TypeError) exactly for bytes that are not UTF-8: that is this
      // envelope's notUTF8, the case Swift's parser names too.
      throw new EnvelopeError("notUTF8", "a topic or uid that is not UTF-8");
    }
  };
  const head = take(2);
  if (head[0] !== 1) throw new EnvelopeError("unknownVersion", `envelope version ${head[0]} (1 is known)`);
  const stream = head[1];
  const topicLength = (take(1)[0] << 8) | take(1)[0];
  if (topicLength > MAX_TOPIC_BYTES) throw new EnvelopeError("topicTooLong", `a topic of ${topicLength} bytes (at most ${MAX_TOPIC_BYTES})`);
  const topic = text(take(topicLength));
  const count = (take(1)[0] << 8) | take(1)[0];
  if (count > MAX_DESTINATIONS) throw new EnvelopeError("tooManyDestinations", `${count} destinations (at most ${MAX_DESTINATIONS})`);
  const destinations = [];
  for (let i = 0; i < count; i += 1) {
    const length = take(1)[0];
    if (length === 0) throw new EnvelopeError("emptyUID", "an empty destination uid");
    destinations.push(text(take(length)));
  }
  const sender = text(take(take(1)[0]));
  return {topic, destinations, sender, stream, payload: bytes.slice(at)};
}
