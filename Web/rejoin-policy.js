// How the web client joins again after losing its session: the same rule as Swift's
// `RejoinBackoff` (RTCConventions), both checked against Tests/Fixtures/rejoin-policy.json
// (RejoinBackoffTests, Tests/Tools/rejoin_vectors.mjs). The first attempt is at once; after each
// failure the wait doubles from 100 ms up to 2 s; a server that answered is tried again within 500 ms.

export const REJOIN_INITIAL_MS = 100;
export const REJOIN_MAXIMUM_MS = 2000;
export const REJOIN_ANSWERED_MAXIMUM_MS = 500;

export class RejoinBackoff {
  constructor() {
    this.delayMs = REJOIN_INITIAL_MS;
    /** Failures of servers that could not be reached: which URL to try next. */
    this.unreachable = 0;
  }

  /**
   * After a failed attempt: how long to wait (ms) before the next one.
   * @param {boolean} answered whether the server answered (with an error) rather than not being reached
   * @returns {number}
   */
  failed(answered) {
    if (!answered) this.unreachable += 1;
    const wait = answered ? Math.min(this.delayMs, REJOIN_ANSWERED_MAXIMUM_MS) : this.delayMs;
    this.delayMs = Math.min(this.delayMs * 2, REJOIN_MAXIMUM_MS);
    return wait;
  }
}
