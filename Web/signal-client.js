// signal-client.js: the signaling connection of docs/protocol.md: JSON envelopes over one
// WebSocket, request ids matched to their replies (or to the server's error about them), and
// keepalive pings. It knows nothing of rooms or media: RTCClient (client.js) routes the messages.

import {RTCError} from "./errors.js";

/** The protocol version this client speaks, as the envelope's `v` carries it. */
export const PROTOCOL_VERSION = "1.6";
/** The version as `join`'s `sdk.protocolVersion` carries it (an object, unlike the envelope's `v`). */
export const PROTOCOL_VERSION_OBJECT = Object.freeze({major: 1, minor: 6});
export const SDK_NAME = "rtc-js";
export const SDK_VERSION = "0.1";
/** How long a request waits for its reply unless told otherwise. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 15000;

/** The socket states of the WebSocket API (also what a fake socket in tests must use). */
const CONNECTING = 0;
const OPEN = 1;

/**
 * @typedef {{type: string, payload: any, id?: number}} SignalMessage
 *   One envelope from the server, without its `v`.
 * @typedef {(...args: unknown[]) => void} Logger
 * @typedef {{new (url: string): WebSocket}} WebSocketConstructor
 */

/** The default signaling URL: `ws(s)://<this page's host>/rtc`. */
export function defaultSignalingURL() {
  const secure = typeof location !== "undefined" && location.protocol === "https:";
  const host = typeof location !== "undefined" && location.host ? location.host : "127.0.0.1:7880";
  return `${secure ? "wss" : "ws"}://${host}/rtc`;
}

/**
 * One signaling connection. Set `onmessage` (every server message that is not only a reply),
 * `onerror` (the server's `error` messages, with the type of the request they answer, if any) and
 * `onclose` before `connect`.
 */
export class SignalClient {
  /** @param {{WebSocketImpl?: WebSocketConstructor, log?: Logger}} options */
  constructor({WebSocketImpl, log} = {}) {
    /** @type {WebSocketConstructor} */
    this.WebSocketImpl = WebSocketImpl || globalThis.WebSocket;
    /** @type {Logger} */
    this.log = log || (() => {});
    /** @type {WebSocket | null} */
    this.socket = null;
    /** @type {(message: SignalMessage) => void} */
    this.onmessage = () => {};
    /** @type {(error: RTCError, requestType: string | null) => void} */
    this.onerror = () => {};
    /** @type {(event: CloseEvent) => void} */
    this.onclose = () => {};
    this._nextID = 1;
    /** @type {Map<number, {type: string, resolve: (payload: any) => void, reject: (error: Error) => void}>} */
    this._pending = new Map();
    /** @type {ReturnType<typeof setInterval> | null} */
    this._pingTimer = null;
  }

  /** Whether the socket is open (messages can be sent). */
  get connected() { return !!this.socket && this.socket.readyState === OPEN; }

  /** How many requests wait for their reply. */
  get pendingCount() { return this._pending.size; }

  /**
   * Opens the WebSocket. Resolves once it is open; rejects (RTCError, code 0) when it cannot be
   * opened, fails, or closes first. A close after opening goes to `onclose`.
   * @param {string} url
   * @returns {Promise<void>}
   */
  connect(url) {
    return new Promise((resolve, reject) => {
      /** @type {WebSocket} */
      let socket;
      try {
        socket = new this.WebSocketImpl(url);
      } catch (error) {
        // A malformed URL (SyntaxError) or a forbidden port: this connection cannot start.
        reject(new RTCError(0, `cannot open ${url}: ${error instanceof Error ? error.message : error}`));
        return;
      }
      this.socket = socket;
      let opened = false;
      socket.onopen = () => { opened = true; resolve(); };
      socket.onerror = () => { if (!opened) reject(new RTCError(0, `cannot connect to ${url}`)); };
      socket.onmessage = (event) => this.receive(event.data);
      socket.onclose = (event) => {
        if (!opened) {
          reject(new RTCError(0, `connection closed before joining (${event.code}${event.reason ? " " + event.reason : ""})`));
          return;
        }
        this.onclose(event);
      };
    });
  }

  /**
   * Sends one envelope; throws an RTCError when the socket is not open.
   * @param {string} type
   * @param {object} payload
   * @param {number} [id]
   */
  send(type, payload, id = undefined) {
    if (!this.socket || this.socket.readyState !== OPEN) throw new RTCError(0, `not connected (sending ${type})`);
    /** @type {{v: string, type: string, payload: object, id?: number}} */
    const envelope = {v: PROTOCOL_VERSION, type, payload};
    if (id !== undefined) envelope.id = id;
    this.socket.send(JSON.stringify(envelope));
  }

  /**
   * Sends a request and waits for the reply carrying its id, or the server's error about it
   * (rejected with its RTCError), or `timeoutMs`.
   * @param {string} type
   * @param {object} payload
   * @param {number} [timeoutMs]
   * @returns {Promise<any>} the reply's payload
   */
  request(type, payload, timeoutMs = DEFAULT_REQUEST_TIMEOUT_MS) {
    const id = this._nextID++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this._pending.delete(id);
        reject(new RTCError(0, `no reply to ${type} within ${timeoutMs} ms`, id));
      }, timeoutMs);
      this._pending.set(id, {
        type,
        resolve: (value) => { clearTimeout(timer); resolve(value); },
        reject: (error) => { clearTimeout(timer); reject(error); },
      });
      try {
        this.send(type, payload, id);
      } catch (error) {
        // Not connected: the request fails at once, as its caller's promise.
        this._pending.delete(id);
        clearTimeout(timer);
        reject(error);
      }
    });
  }

  /**
   * One message from the socket: a reply settles its request; the rest goes to `onmessage`
   * (replies that are also state, all but `joined` and `answer`, too); errors go to `onerror`.
   * @param {unknown} data
   */
  receive(data) {
    /** @type {any} */
    let envelope;
    try {
      envelope = JSON.parse(String(data));
    } catch (error) {
      this.log("unreadable message", data, error);
      return;
    }
    if (!envelope || typeof envelope !== "object" || typeof envelope.type !== "string") {
      this.log("not an envelope", data);
      return;
    }
    const {type, payload = {}, id} = envelope;
    if (type === "error") {
      const requestID = id ?? payload.requestID ?? null;
      const error = new RTCError(payload.code, payload.reason, requestID);
      const pending = requestID != null ? this._pending.get(requestID) : undefined;
      if (pending) { this._pending.delete(requestID); pending.reject(error); }
      this.onerror(error, pending ? pending.type : null);
      return;
    }
    // The server's offers are its own (it may send one while a request waits); never a reply.
    const pending = id != null && type !== "offer" ? this._pending.get(id) : undefined;
    if (pending) {
      this._pending.delete(id);
      pending.resolve(payload);
      if (type === "joined" || type === "answer") return;
    }
    this.onmessage({type, payload, id});
  }

  /**
   * Pings every `intervalMs` while the socket is open (the server's pingInterval).
   * @param {number} intervalMs
   */
  startPings(intervalMs) {
    this.stopPings();
    this._pingTimer = setInterval(() => {
      // A closed socket is reported by its close event; the next ping would be pointless.
      if (this.connected) this.send("ping", {timestamp: Date.now()});
    }, intervalMs);
  }

  stopPings() {
    if (this._pingTimer !== null) clearInterval(this._pingTimer);
    this._pingTimer = null;
  }

  /**
   * Rejects every request still waiting, with `reason`.
   * @param {string} reason
   */
  rejectPending(reason) {
    const pending = [...this._pending.values()];
    this._pending.clear();
    for (const entry of pending) entry.reject(new RTCError(0, reason));
  }

  /** Stops pinging and closes the socket without telling `onclose` (the caller knows). */
  close() {
    this.stopPings();
    const socket = this.socket;
    this.socket = null;
    if (!socket) return;
    socket.onopen = socket.onmessage = socket.onerror = socket.onclose = null;
    if (socket.readyState === OPEN || socket.readyState === CONNECTING) socket.close();
  }
}
