// fake-websocket.js: a WebSocket stand-in for the signaling tests: it records what the client
// sends, and the test plays the server (open, messages, close) by hand.

export class FakeWebSocket {
  static CONNECTING = 0;
  static OPEN = 1;
  static CLOSING = 2;
  static CLOSED = 3;
  /**
   * Every socket made, newest last.
   * @type {FakeWebSocket[]}
   */
  static made = [];

  /** @param {string} url */
  constructor(url) {
    this.url = url;
    this.readyState = FakeWebSocket.CONNECTING;
    /**
     * The envelopes sent, parsed.
     * @type {any[]}
     */
    this.sent = [];
    /** @type {((event: any) => void) | null} */
    this.onopen = null;
    /** @type {((event: any) => void) | null} */
    this.onmessage = null;
    /** @type {((event: any) => void) | null} */
    this.onerror = null;
    /** @type {((event: any) => void) | null} */
    this.onclose = null;
    FakeWebSocket.made.push(this);
  }

  /** The newest socket. */
  static get last() { return FakeWebSocket.made[FakeWebSocket.made.length - 1]; }

  /** @param {string} text */
  send(text) {
    if (this.readyState !== FakeWebSocket.OPEN) throw new Error("InvalidStateError: not open");
    this.sent.push(JSON.parse(text));
  }

  close() {
    if (this.readyState === FakeWebSocket.CLOSED) return;
    this.readyState = FakeWebSocket.CLOSED;
  }

  // The server's side.

  open() {
    this.readyState = FakeWebSocket.OPEN;
    if (this.onopen) this.onopen({});
  }

  /**
   * @param {string} type
   * @param {object} payload
   * @param {number} [id]
   */
  reply(type, payload, id) {
    this.message(JSON.stringify(id === undefined ? {v: "1.6", type, payload} : {v: "1.6", id, type, payload}));
  }

  /** @param {string} data */
  message(data) { if (this.onmessage) this.onmessage({data}); }

  fail() { if (this.onerror) this.onerror({}); }

  /**
   * @param {number} [code]
   * @param {string} [reason]
   */
  serverClose(code = 1000, reason = "") {
    this.readyState = FakeWebSocket.CLOSED;
    if (this.onclose) this.onclose({code, reason});
  }

  /**
   * The sent envelopes of `type`.
   * @param {string} type
   */
  sentOf(type) { return this.sent.filter((m) => m.type === type); }
}
