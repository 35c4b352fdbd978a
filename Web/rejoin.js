// rejoin.js: joining again after the session is lost (a server that shut down, a connection that
// dropped). `Rejoiner` runs the attempts: the first at once, then with the backoff of
// rejoin-policy.js (one table with Swift), at the first URL and, after each server that could not
// be reached, at the next of the fallbacks (the other nodes of a cluster), until one joins, the
// client says stop (the app left), or the time allowed is over. It knows nothing of sessions:
// RTCClient (client.js) gives it `open` (one connection and join) and `stopped`, tears the lost
// session down before, and publishes again after (`publishAgain`).

import {RTCError, describeError} from "./errors.js";
import {RejoinBackoff} from "./rejoin-policy.js";

/**
 * @typedef {(...args: unknown[]) => void} Logger
 * @typedef {{now: () => number, sleep: (ms: number) => Promise<void>}} Clock
 *   Time as the rejoin loop sees it (tests pass a fake one).
 * @typedef {{result: "rejoined", url: string, attempts: number}
 *         | {result: "stopped" | "gaveUp", attempts: number}} RejoinOutcome
 *   How a run ended: joined at `url`; stopped (`stopped()` said so); or out of time.
 * @typedef {{open: (url: string) => Promise<unknown>, stopped: () => boolean, log?: Logger | null, clock?: Clock}} RejoinHooks
 */

/** The real clock: `Date.now` and `setTimeout`. */
export const systemClock = Object.freeze({
  now: () => Date.now(),
  /** @param {number} ms */
  sleep: (ms) => /** @type {Promise<void>} */ (new Promise((resolve) => setTimeout(resolve, ms))),
});

export class Rejoiner {
  /**
   * `open(url)`: one connection and join, resolving once joined, rejecting with an RTCError (the
   * server's code when it answered, 0 when it could not be reached). `stopped()`: whether to give
   * up at once (the app left, or a session is there already); checked before each attempt.
   * @param {RejoinHooks} hooks
   */
  constructor({open, stopped, log = null, clock = systemClock}) {
    this.open = open;
    this.stopped = stopped;
    /** @type {Logger} */
    this.log = log || (() => {});
    /** @type {Clock} */
    this.clock = clock;
    /** Whether a run is under way (until it joins, stops or gives up). */
    this.active = false;
  }

  /**
   * Tries to join again until one attempt joins, `stopped()`, or `timeoutMs` is over (an attempt
   * whose wait ends past it is still made). A server that answered with an error is up (a node
   * still shutting down, one whose room's owner just died): the same URL again, within 500 ms. One
   * that could not be reached may be gone for good: the next URL, after the growing backoff.
   * @param {string[]} urls the first URL, then the fallbacks
   * @param {number} timeoutMs
   * @returns {Promise<RejoinOutcome>}
   */
  async run(urls, timeoutMs) {
    if (this.active) throw new RTCError(0, "already rejoining");
    if (!urls.length) throw new RTCError(0, "no URL to join again at");
    this.active = true;
    try {
      const deadline = this.clock.now() + timeoutMs;
      const backoff = new RejoinBackoff();
      let wait = 0;
      let attempts = 0;
      while (this.clock.now() < deadline && !this.stopped()) {
        if (wait > 0) await this.clock.sleep(wait);
        if (this.stopped()) break;
        const url = urls[backoff.unreachable % urls.length];
        attempts += 1;
        try {
          await this.open(url);
        } catch (error) {
          const code = error instanceof RTCError ? error.code : 0;
          const text = error instanceof RTCError ? error.reason : describeError(error);
          this.log(`joining again at ${url} failed: ${code ? code + " " : ""}${text}`);
          wait = backoff.failed(!!code);
          continue;
        }
        return {result: "rejoined", url, attempts};
      }
      return {result: this.stopped() ? "stopped" : "gaveUp", attempts};
    } finally {
      this.active = false;
    }
  }
}

/**
 * @typedef {{track: MediaStreamTrack, maxBitrateKbps: number | null}} Republishable
 */

/**
 * After joining again: publishes anew what the app published and has not ended, one call of
 * `publish` per bitrate cap (in the order the caps first appear). A failure is logged and the
 * rest go on: the session lost again before a publish starts the next rejoin, which publishes them.
 * @template {Republishable} T
 * @param {T[]} published
 * @param {(entries: T[], maxBitrateKbps: number | null) => Promise<unknown>} publish
 * @param {Logger} log
 */
export async function publishAgain(published, publish, log) {
  /** @type {Map<number, T[]>} */
  const byBitrate = new Map();
  for (const entry of published.filter((e) => e.track.readyState === "live")) {
    const key = entry.maxBitrateKbps || 0;
    byBitrate.set(key, [...(byBitrate.get(key) || []), entry]);
  }
  for (const [maxBitrateKbps, entries] of byBitrate) {
    try {
      await publish(entries, maxBitrateKbps || null);
    } catch (error) {
      log("publishing again failed", error);
    }
  }
}
