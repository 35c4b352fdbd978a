// errors.js: the one error type of the web client (docs/protocol.md's error codes).

/** A signaling error: `code` and `reason` as the server sent them; code 0 for local failures. */
export class RTCError extends Error {
  /**
   * @param {number} code the server's error code (docs/protocol.md), 0 for a local failure
   * @param {string} reason
   * @param {number | null} [requestID] the id of the request the server refused
   */
  constructor(code, reason, requestID = null) {
    super(code ? `${reason} (${code})` : reason);
    this.name = "RTCError";
    /** @type {number} */
    this.code = code;
    /** @type {string} */
    this.reason = reason;
    /** @type {number | null} */
    this.requestID = requestID;
  }
}

/**
 * The text of anything thrown: an Error's message, else its string form.
 * @param {unknown} error
 * @returns {string}
 */
export function describeError(error) {
  if (error instanceof Error) return error.message;
  return String(error);
}
