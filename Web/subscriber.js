// subscriber.js: the subscriber transport's side of signaling, where the server offers: its
// offers answered one at a time, in order (the offer's sections kept for the room model, which
// matches remote tracks through them), and the `updateSubscription` request. RTCClient
// (client.js) makes one `SubscriberOffers` per session.

import {RTCError, describeError} from "./errors.js";
import {parseSections} from "./transports.js";

/**
 * @typedef {(...args: unknown[]) => void} Logger
 * @typedef {{answerSubscriberOffer: (sdp: string) => Promise<string>, subscriberPC: () => RTCPeerConnection}} SubscriberTransport
 *   What answering needs of the transports (`Transports` has it).
 * @typedef {{subscriberSections: Record<string, any>, syncRemoteTracks: (transceivers: RTCRtpTransceiver[]) => void}} SubscriberModel
 *   What answering needs of the room model (`ParticipantModel` has it).
 * @typedef {{transports: () => SubscriberTransport | null, model: () => SubscriberModel, send: (type: string, payload: object) => void,
 *            emit: (type: string, detail?: unknown) => void, log: Logger}} SubscriberHooks
 */

/** One session's subscriber offers, answered one at a time, in order. */
export class SubscriberOffers {
  /**
   * `transports()`: the session's transports, once joined (an offer before, or after they closed,
   * is dropped); `model()`: the room model. `send`: a message to the server. `emit`: an event of
   * the client's.
   * @param {SubscriberHooks} hooks
   */
  constructor({transports, model, send, emit, log}) {
    this.transports = transports;
    this.model = model;
    this.send = send;
    this.emit = emit;
    this.log = log;
    /**
     * The offers' chain: each waits for the one before it.
     * @type {Promise<void>}
     */
    this.queue = Promise.resolve();
  }

  /**
   * The server's `offer`: after the offers before it, keeps its sections for the model, answers
   * (`answer`), and matches the remote tracks to the new transceivers. A failed negotiation is an
   * `error` event (RTCError, code 0). Resolves once this offer is done.
   * @param {{transport: string, sdp: string}} message
   * @returns {Promise<void>}
   */
  answer(message) {
    if (message.transport !== "subscriber") {
      this.log("unexpected offer for", message.transport);
      return this.queue;
    }
    this.queue = this.queue.then(async () => {
      const transports = this.transports();
      if (!transports) return;
      const model = this.model();
      model.subscriberSections = parseSections(message.sdp);
      try {
        const answer = await transports.answerSubscriberOffer(message.sdp);
        this.send("answer", {transport: "subscriber", sdp: answer});
      } catch (error) {
        this.emit("error", new RTCError(0, `subscriber negotiation failed: ${describeError(error)}`));
        return;
      }
      model.syncRemoteTracks(transports.subscriberPC().getTransceivers());
    });
    return this.queue;
  }
}

/**
 * The `updateSubscription` request's payload: track sids, a whole kind (`"audio"`/`"video"`), or
 * whole users (`uids`); `kind` and `uids` only when given.
 * @param {{trackSids?: string[], subscribe?: boolean, kind?: string, uids?: string[]}} options
 * @returns {Record<string, unknown>}
 */
export function subscriptionRequest({trackSids = [], subscribe = true, kind, uids} = {}) {
  /** @type {Record<string, unknown>} */
  const payload = {trackSids, subscribe};
  if (kind) payload.kind = kind;
  if (uids) payload.uids = uids;
  return payload;
}
