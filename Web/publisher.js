// publisher.js: publishing on the publisher transport, where this side offers: sendonly
// transceivers (reusing those of unpublished tracks), bitrate caps, and one offer/answer at a
// time with each new track announced (`publishTrack`) under the mid the offer gave it.

import {RTCError, describeError} from "./errors.js";
import {preferCodecs} from "./transports.js";

/**
 * @typedef {import("./transports.js").Transports} Transports
 * @typedef {(...args: unknown[]) => void} Logger
 * @typedef {(type: string, payload: object) => Promise<any>} Request
 * @typedef {{sid: string | null, kind: string, source: string, mid: string | null, track: MediaStreamTrack,
 *            sender: RTCRtpSender, transceiver: RTCRtpTransceiver, muted: boolean}} LocalTrack
 *   A track this client publishes.
 */

/** Runs async jobs one at a time, in the order given (negotiations must not overlap). */
export class SerialQueue {
  /** @type {Promise<unknown>} */
  _tail = Promise.resolve();

  /**
   * @template T
   * @param {() => Promise<T>} job
   * @returns {Promise<T>} the job's own result or failure
   */
  run(job) {
    const result = this._tail.then(job, job);
    // The queue only orders the jobs: each failure reaches its caller through `result`.
    this._tail = result.catch(() => undefined);
    return result;
  }
}

/**
 * A sendonly transceiver for `track`: one left by an unpublished track of its kind (taken out of
 * `spare`), else a new one. A stopped transceiver would leave a rejected m-section behind, and the
 * server's answer may carry its one candidate there.
 * @param {RTCPeerConnection} pc
 * @param {RTCRtpTransceiver[]} spare the transceivers free for reuse; the one reused is removed
 * @param {MediaStreamTrack} track
 * @param {MediaStream | null | undefined} stream
 * @param {{preferCodecs: boolean, log: Logger}} options
 * @returns {Promise<RTCRtpTransceiver>}
 */
export async function sendTransceiver(pc, spare, track, stream, options) {
  const index = spare.findIndex((t) => t.receiver.track.kind === track.kind);
  if (index >= 0) {
    const [transceiver] = spare.splice(index, 1);
    transceiver.direction = "sendonly";
    await transceiver.sender.replaceTrack(track);
    if (stream && transceiver.sender.setStreams) transceiver.sender.setStreams(stream);
    return transceiver;
  }
  const transceiver = pc.addTransceiver(track, {direction: "sendonly", streams: stream ? [stream] : []});
  if (options.preferCodecs) preferCodecs(transceiver, track.kind, options.log);
  return transceiver;
}

/**
 * Caps a published video's bitrate (and keeps a screen's resolution when it must give).
 * @param {LocalTrack} local
 * @param {number} maxBitrateKbps
 * @param {Logger} log
 */
export async function capBitrate(local, maxBitrateKbps, log) {
  const params = local.sender.getParameters();
  if (!params.encodings || !params.encodings.length) return;
  params.encodings[0].maxBitrate = maxBitrateKbps * 1000;
  if (local.source === "screen") /** @type {any} */ (params).degradationPreference = "maintain-resolution";
  try {
    await local.sender.setParameters(params);
  } catch (error) {
    // The track is published and sends at the browser's own rate: a note, not a failure.
    log(`capping ${local.source} at ${maxBitrateKbps} kbps failed`, error);
  }
}

/**
 * One publisher offer/answer. The new tracks in `added` are announced with the mids the offer gave
 * them, so the server names their sources (it would otherwise make camera/microphone, or
 * screen/screenAudio for a screen share), and get their sids from the replies.
 * @param {Transports} transports
 * @param {Request} request
 * @param {LocalTrack[]} added
 * @param {{onOffer?: (sdp: string) => void, onAnswer?: (sdp: string) => void}} [seen] told the offer and the answer
 */
export async function negotiatePublisher(transports, request, added, seen = {}) {
  const offer = await transports.createPublisherOffer();
  const announced = added.map(async (local) => {
    local.mid = local.transceiver.mid;
    const info = await request("publishTrack", {kind: local.kind, source: local.source, mid: local.mid});
    local.sid = info.sid;
    return info;
  });
  if (seen.onOffer) seen.onOffer(offer);
  const answerPromise = request("offer", {transport: "publisher", sdp: offer});
  // Awaited below; a refused publishTrack may throw first, and then this one's failure is moot.
  answerPromise.catch(() => undefined);
  await Promise.all(announced);
  const answer = await answerPromise;
  if (seen.onAnswer) seen.onAnswer(answer.sdp);
  try {
    await transports.applyPublisherAnswer(answer.sdp);
  } catch (error) {
    throw new RTCError(4002, `the server's publisher answer was rejected: ${describeError(error)}`);
  }
}
