// transports.js: the protocol's two transports, one RTCPeerConnection each. The publisher: this
// side offers, the server answers. The subscriber: the server offers, this side answers. The
// server is ICE-lite and puts its one candidate in its SDP; the protocol has no trickle messages,
// so offers and answers are sent as soon as they are made (the server learns this side's address
// from its STUN checks).

/**
 * @typedef {{kind: string, direction: string, streamID: string | null, trackID: string | null, mid: string | null}} SDPSection
 * @typedef {(...args: unknown[]) => void} Logger
 */

/**
 * `{mid: {kind, direction, streamID, trackID}}` from an SDP (`a=msid:<stream> <track>` per m-section).
 * @param {string} sdp
 * @returns {Record<string, SDPSection>}
 */
export function parseSections(sdp) {
  /** @type {Record<string, SDPSection>} */
  const sections = {};
  /** @type {SDPSection | null} */
  let current = null;
  for (const raw of sdp.split(/\r?\n/)) {
    const line = raw.trim();
    if (line.startsWith("m=")) {
      current = {kind: line.slice(2).split(" ")[0], direction: "sendrecv", streamID: null, trackID: null, mid: null};
    } else if (current && line.startsWith("a=mid:")) {
      current.mid = line.slice(6);
      sections[current.mid] = current;
    } else if (current && line.startsWith("a=msid:")) {
      const [stream, track] = line.slice(7).split(" ");
      current.streamID = stream;
      current.trackID = track || null;
    } else if (current && /^a=(sendrecv|sendonly|recvonly|inactive)$/.test(line)) {
      current.direction = line.slice(2);
    }
  }
  return sections;
}

/**
 * Whether a subscriber section still carries `trackSid` (sends it, as the server's offer says).
 * @param {SDPSection | undefined} section
 * @param {string} trackSid
 */
export function sectionSends(section, trackSid) {
  return !!section && (section.direction === "sendonly" || section.direction === "sendrecv") && !!section.trackID
    && section.trackID === trackSid;
}

/**
 * The ICE servers of a `joined` payload in the RTCPeerConnection's form (no null fields).
 * @param {Array<{urls: string | string[], username?: string | null, credential?: string | null}>} [servers]
 * @returns {RTCIceServer[]}
 */
export function iceServersFrom(servers = []) {
  return servers.map((s) => {
    /** @type {RTCIceServer} */
    const server = {urls: s.urls};
    if (s.username != null) server.username = s.username;
    if (s.credential != null) server.credential = s.credential;
    return server;
  });
}

/**
 * Puts VP8 (+rtx) or Opus first, alone: the codecs the server takes.
 * @param {RTCRtpTransceiver} transceiver
 * @param {string} kind "audio" or "video"
 * @param {Logger} log
 */
export function preferCodecs(transceiver, kind, log) {
  if (typeof RTCRtpSender === "undefined" || !RTCRtpSender.getCapabilities || !transceiver.setCodecPreferences) return;
  const codecs = (RTCRtpSender.getCapabilities(kind) || {codecs: []}).codecs || [];
  const wanted = kind === "video" ? "video/vp8" : "audio/opus";
  const preferred = codecs.filter((c) => c.mimeType.toLowerCase() === wanted);
  const rtx = codecs.filter((c) => c.mimeType.toLowerCase() === "video/rtx");
  if (!preferred.length) return;
  try {
    transceiver.setCodecPreferences(kind === "video" ? [...preferred, ...rtx] : preferred);
  } catch (error) {
    // The browser's own order still offers VP8 and Opus, which the server picks: worth a note only.
    log(`setCodecPreferences(${kind}) refused; keeping the browser's codec order`, error);
  }
}

/**
 * The two peer connections of one session, made when first needed, with the ICE servers and
 * bundle policy of the session. `onSubscriberTrack` gets the subscriber's `track` events;
 * `onStateChange` each connection state; `onSubscriberFailed` a subscriber that failed (its
 * media path lost while signaling stays up).
 */
export class Transports {
  /**
   * @param {{iceServers?: RTCIceServer[], bundlePolicy?: RTCBundlePolicy,
   *          onSubscriberTrack?: (event: RTCTrackEvent) => void,
   *          onStateChange?: (transport: "publisher" | "subscriber", state: RTCPeerConnectionState) => void,
   *          onSubscriberFailed?: () => void}} options
   */
  constructor({iceServers = [], bundlePolicy = "max-bundle", onSubscriberTrack, onStateChange, onSubscriberFailed} = {}) {
    this.iceServers = iceServers;
    this.bundlePolicy = bundlePolicy;
    this.onSubscriberTrack = onSubscriberTrack || (() => {});
    this.onStateChange = onStateChange || (() => {});
    this.onSubscriberFailed = onSubscriberFailed || (() => {});
    /** @type {RTCPeerConnection | null} */
    this.publisher = null;
    /** @type {RTCPeerConnection | null} */
    this.subscriber = null;
  }

  /** @returns {RTCPeerConnection} */
  _make() {
    return new RTCPeerConnection({iceServers: this.iceServers, bundlePolicy: this.bundlePolicy, rtcpMuxPolicy: "require"});
  }

  /** The publisher connection (made on first use). */
  publisherPC() {
    if (this.publisher) return this.publisher;
    const pc = this._make();
    pc.onconnectionstatechange = () => this.onStateChange("publisher", pc.connectionState);
    this.publisher = pc;
    return pc;
  }

  /** The subscriber connection (made on first use). */
  subscriberPC() {
    if (this.subscriber) return this.subscriber;
    const pc = this._make();
    pc.ontrack = (event) => this.onSubscriberTrack(event);
    pc.onconnectionstatechange = () => {
      this.onStateChange("subscriber", pc.connectionState);
      if (pc.connectionState === "failed") this.onSubscriberFailed();
    };
    this.subscriber = pc;
    return pc;
  }

  /**
   * Applies the server's subscriber offer and makes the answer.
   * @param {string} sdp
   * @returns {Promise<string>} the answer's SDP
   */
  async answerSubscriberOffer(sdp) {
    const pc = this.subscriberPC();
    await pc.setRemoteDescription({type: "offer", sdp});
    const answer = await pc.createAnswer();
    await pc.setLocalDescription(answer);
    return /** @type {RTCSessionDescription} */ (pc.localDescription).sdp;
  }

  /**
   * Makes and applies a publisher offer.
   * @returns {Promise<string>} the offer's SDP
   */
  async createPublisherOffer() {
    const pc = this.publisherPC();
    const offer = await pc.createOffer();
    await pc.setLocalDescription(offer);
    return /** @type {RTCSessionDescription} */ (pc.localDescription).sdp;
  }

  /**
   * Applies the server's answer to the publisher offer.
   * @param {string} sdp
   */
  async applyPublisherAnswer(sdp) {
    await this.publisherPC().setRemoteDescription({type: "answer", sdp});
  }

  /** Closes both connections. */
  close() {
    for (const pc of [this.publisher, this.subscriber]) if (pc) pc.close();
    this.publisher = this.subscriber = null;
  }
}
