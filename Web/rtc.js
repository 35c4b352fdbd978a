// rtc.js: a small browser SDK for the Swift RTC server's signaling protocol (docs/protocol.md).
// Plain ES module, no build step, no dependencies.
//
//   const client = new RTCClient();
//   client.addEventListener("track", (e) => attach(e.detail));      // {uid, source, kind, track, stream, trackSid, ...}
//   await client.join({channel: "demo", uid: "2001", token});        // resolves with the `joined` payload
//   await client.publishCamera({audio: true, video: {width: 640, height: 360}});
//   const share = await RTCClient.shareScreen({channel: "demo", hostUid: "1001", token: subToken});
//   client.addEventListener("data", (e) => show(e.detail));          // {uid, topic, text, payload, reliable, stream}
//   await client.publishData("hello", {topic: "chat"});              // to everyone; {destinations: ["2001"]} to some
//
// Two RTCPeerConnections, one per transport of the protocol: the publisher (this side offers, the
// server answers) and the subscriber (the server offers, this side answers). The server is
// ICE-lite and puts its one candidate in its SDP; the protocol has no trickle messages, so offers
// and answers are sent as soon as they are made (the server learns this side's address from its
// STUN checks).

import {encodeEnvelope, decodeEnvelope, RELIABLE_LABEL, LOSSY_LABEL} from "./data-envelope.js";

export const PROTOCOL_VERSION = "1.6";
/** The version as `join`'s `sdk.protocolVersion` carries it (an object, unlike the envelope's `v`). */
export const PROTOCOL_VERSION_OBJECT = {major: 1, minor: 6};
export const SDK_NAME = "rtc-js";
export const SDK_VERSION = "0.1";
import {DEFAULT_SCREEN_SHARE_SUFFIX, screenShareUID} from "./screen-share-uid.js";
import {RejoinBackoff} from "./rejoin-policy.js";
export {DEFAULT_SCREEN_SHARE_SUFFIX, screenShareUID, isScreenShareUID, screenShareHost} from "./screen-share-uid.js";

/**
 * Browsers give camera, microphone and screen capture only to secure contexts: https://, or
 * http://localhost. A page served over plain http from another host can watch but not publish.
 */
export function requireCaptureContext(what) {
  if (navigator.mediaDevices && navigator.mediaDevices[what]) return;
  const reason = window.isSecureContext === false
    ? `${what} needs a secure context: open the page over https (rtc-cli server --tls-cert/--tls-key) or from localhost; `
      + `${location.origin} can watch but not publish`
    : `${what} is not available in this browser`;
  throw new RTCError(0, reason);
}

/** A signaling error (`code` and `reason` as the server sent them; code 0 for local failures). */
export class RTCError extends Error {
  constructor(code, reason, requestID = null) {
    super(code ? `${reason} (${code})` : reason);
    this.name = "RTCError";
    this.code = code;
    this.reason = reason;
    this.requestID = requestID;
  }
}

/** The default signaling URL: `ws(s)://<this page's host>/rtc`. */
export function defaultSignalingURL() {
  const secure = typeof location !== "undefined" && location.protocol === "https:";
  const host = typeof location !== "undefined" && location.host ? location.host : "127.0.0.1:7880";
  return `${secure ? "wss" : "ws"}://${host}/rtc`;
}

/** `{mid: {kind, direction, streamID, trackID}}` from an SDP (`a=msid:<stream> <track>` per m-section). */
export function parseSections(sdp) {
  const sections = {};
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

function sourceOf(participant) {
  return participant && participant.kind && typeof participant.kind === "object" && participant.kind.screenShare
    ? participant.kind.screenShare.owner : null;
}

/**
 * A client of one channel over one signaling connection. Events (all `CustomEvent`s, payload in `detail`):
 * - `joined` (JoinResponse), `participants` ({participants: [ParticipantInfo] that changed, all: Map uid→info}),
 *   `participantLeft` ({uid, reason}), `track` (a RemoteTrack, see `remoteTracks`), `trackEnded` (RemoteTrack),
 *   `trackPublished` (TrackInfo), `error` (RTCError), `leave` ({reason}), `connectionState` ({transport, state}),
 *   `data` ({uid, topic, text, payload, reliable, stream}: a data message; `text` is null for binary payloads).
 */
export class RTCClient extends EventTarget {
  /** The largest data message the server relays by default (`--max-data-message-bytes`). */
  static maxDataMessageBytes = 65536;

  /**
   * `bundlePolicy`: both transports' (max-bundle: one ICE/DTLS transport each, as the server
   * expects). `preferCodecs`: publish with VP8 (+rtx) and Opus only (`setCodecPreferences`).
   */
  constructor({log = null, bundlePolicy = "max-bundle", preferCodecs = true} = {}) {
    super();
    this.log = log || (() => {});
    this.bundlePolicy = bundlePolicy;
    this.preferCodecs = preferCodecs;
    // What the app published ({track, source, stream, maxBitrateKbps}), kept across rejoins.
    this._published = [];
    // Whether the app opened the data channels (opened again after a rejoin).
    this._dataWanted = false;
    this._reset();
  }

  _reset() {
    this.ws = null;
    this.joinedInfo = null;
    this.participant = null;        // own ParticipantInfo
    this.participants = new Map();  // uid -> ParticipantInfo (others this client sees)
    this.remoteTracks = new Map();  // trackSid (or mid key) -> RemoteTrack
    this.localTracks = [];          // {sid, kind, source, mid, track, sender, transceiver, muted}
    this.publisher = null;
    this.subscriber = null;
    this._dataChannels = null;      // {reliable, lossy} on the publisher transport, once opened
    this._dataReady = null;
    this.screenShareSuffix = DEFAULT_SCREEN_SHARE_SUFFIX;
    this.roomMetadata = "";         // the room's metadata (joined, then roomUpdate; protocol 1.6)
    this.layers = new Map();        // trackSid -> the layerChanged this client last got (protocol 1.4)
    this._nextID = 1;
    this._pending = new Map();      // request id -> {resolve, reject, type}
    this._pingTimer = null;
    this._subscriberQueue = Promise.resolve();
    this._publisherQueue = Promise.resolve();
    this._spareTransceivers = [];
    this._subscriberSections = {};
    this._left = false;
    this._statsPrev = new Map();
  }

  get joined() { return !!this.joinedInfo && !this._left; }
  get uid() { return this.participant ? this.participant.uid : null; }

  // MARK: signaling

  _emit(type, detail) { this.dispatchEvent(new CustomEvent(type, {detail})); }

  _send(type, payload, id = undefined) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) throw new RTCError(0, `not connected (sending ${type})`);
    const envelope = {v: PROTOCOL_VERSION, type, payload};
    if (id !== undefined) envelope.id = id;
    this.ws.send(JSON.stringify(envelope));
  }

  /** Sends a request and waits for the reply carrying its id (or the error about it). */
  _request(type, payload, timeoutMs = 15000) {
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
      try { this._send(type, payload, id); } catch (error) { this._pending.get(id)?.reject(error); this._pending.delete(id); }
    });
  }

  /**
   * Opens the signaling connection and joins. Resolves with the `joined` payload; rejects with an
   * RTCError carrying the server's `code` and `reason` (e.g. 2002 for a forged token).
   *
   * Once joined, a server that shuts down (`leave{serverShutdown}`) or a connection that drops is
   * not the end: with `rejoin` (the default) the client joins again as the same uid with backoff
   * (100 ms doubling to 2 s), at `url` and then, after a server that cannot be reached, at each of
   * `fallbackURLs` in turn (the other nodes of a cluster), for up to `rejoinTimeoutMs`; then it
   * publishes its live tracks again. Events: `reconnecting` ({reason}), `rejoined` ({url, reason});
   * `leave` only when it gives up (or for a reason that is not a server going away).
   */
  join({url = null, fallbackURLs = [], rejoin = true, rejoinTimeoutMs = 60000, channel, uid, token, role = "broadcaster",
        autoSubscribe = true, autoSubscribeAudio, autoSubscribeVideo, ignoreScreenShare, pinnedUIDs, iceServers = null,
        connectTimeoutMs = 10000} = {}) {
    if (this.ws) return Promise.reject(new RTCError(1006, "this client has already joined"));
    this._leftByUser = false;
    this._joinArgs = {url: url || defaultSignalingURL(), fallbackURLs, rejoin, rejoinTimeoutMs, channel, uid, token, role, autoSubscribe,
                      autoSubscribeAudio, autoSubscribeVideo, ignoreScreenShare, pinnedUIDs, iceServers, connectTimeoutMs};
    return this._open(this._joinArgs.url);
  }

  /** One connection and join at `url` with the arguments `join` was given. */
  _open(url) {
    const {channel, uid, token, role, autoSubscribe, autoSubscribeAudio, autoSubscribeVideo, ignoreScreenShare, pinnedUIDs, iceServers,
           connectTimeoutMs} = this._joinArgs;
    this._left = false;
    this.options = {url, channel, uid, role, autoSubscribe};
    return new Promise((resolve, reject) => {
      let settled = false;
      const fail = (error) => {
        if (settled) return;
        settled = true;
        this._teardown();
        reject(error);
      };
      let ws;
      try { ws = new WebSocket(this.options.url); } catch (error) { return fail(new RTCError(0, `cannot open ${this.options.url}: ${error.message}`)); }
      this.ws = ws;
      const timer = setTimeout(() => fail(new RTCError(0, `no answer from ${this.options.url} within ${connectTimeoutMs} ms`)), connectTimeoutMs);
      ws.onerror = () => { clearTimeout(timer); fail(new RTCError(0, `cannot connect to ${this.options.url}`)); };
      ws.onmessage = (event) => this._onMessage(event.data);
      ws.onclose = (event) => {
        clearTimeout(timer);
        if (!settled) return fail(new RTCError(0, `connection closed before joining (${event.code}${event.reason ? " " + event.reason : ""})`));
        this._onClose(event);
      };
      ws.onopen = () => {
        const request = {token: token || "", channel, uid, role, autoSubscribe: !!autoSubscribe,
                         sdk: {name: SDK_NAME, version: SDK_VERSION, protocolVersion: PROTOCOL_VERSION_OBJECT}};
        if (autoSubscribeAudio !== undefined) request.autoSubscribeAudio = autoSubscribeAudio;
        if (autoSubscribeVideo !== undefined) request.autoSubscribeVideo = autoSubscribeVideo;
        if (ignoreScreenShare !== undefined && ignoreScreenShare !== null) request.ignoreScreenShare = ignoreScreenShare;
        if (pinnedUIDs && pinnedUIDs.length) request.pinnedUIDs = pinnedUIDs;
        this._request("join", request, connectTimeoutMs).then((joined) => {
          clearTimeout(timer);
          if (settled) return;
          settled = true;
          this._onJoined(joined, iceServers);
          resolve(joined);
        }, (error) => { clearTimeout(timer); fail(error); });
      };
    });
  }

  _onJoined(joined, iceServersOverride) {
    this.joinedInfo = joined;
    this.participant = joined.participant;
    this.roomMetadata = joined.roomMetadata || "";
    if (joined.screenShareSuffix) this.screenShareSuffix = joined.screenShareSuffix;
    const iceServers = iceServersOverride || (joined.iceServers || []).map((s) => {
      const server = {urls: s.urls};
      if (s.username != null) server.username = s.username;
      if (s.credential != null) server.credential = s.credential;
      return server;
    });
    this.iceServers = iceServers;
    const interval = Math.max(1, joined.pingInterval || 5) * 1000;
    this._pingTimer = setInterval(() => {
      try { this._send("ping", {timestamp: Date.now()}); } catch (_) { /* closed: onclose reports */ }
    }, interval);
    this._emit("joined", joined);
    this._updateParticipants(joined.others || []);
  }

  _onMessage(data) {
    let envelope;
    try { envelope = JSON.parse(data); } catch (_) { return this.log("unreadable message", data); }
    const {type, payload = {}, id} = envelope;
    if (type === "error") {
      const requestID = id ?? payload.requestID ?? null;
      const error = new RTCError(payload.code, payload.reason, requestID);
      const pending = requestID != null ? this._pending.get(requestID) : null;
      if (pending) { this._pending.delete(requestID); pending.reject(error); }
      // A join again refused while rejoining (a server still shutting down, an owner not back
      // yet) is the rejoin loop's to handle, not the app's.
      if (!(this._rejoining && pending && pending.type === "join")) this._emit("error", error);
      return;
    }
    if (id != null && this._pending.has(id) && type !== "offer") {
      const pending = this._pending.get(id);
      this._pending.delete(id);
      pending.resolve(payload);
      // Replies are also state: fall through for the few that change it.
      if (type === "joined" || type === "answer") return;
    }
    switch (type) {
      case "offer": this._onSubscriberOffer(payload); break;
      case "trackPublished": this._onTrackPublished(payload); break;
      case "participantUpdate": this._updateParticipants(payload.participants || []); break;
      case "participantLeft": this._onParticipantLeft(payload.uid, payload.reason); break;
      case "leave":
        // A server going away asks its clients to join again (elsewhere, or once it is back).
        if (payload.reason === "serverShutdown" && this._joinArgs && this._joinArgs.rejoin) { this._startRejoin(payload.reason); break; }
        this._left = true; this._emit("leave", {reason: payload.reason}); this._teardown(); break;
      case "tokenWillExpire": case "tokenRefreshed": this._emit(type, payload); break;
      // Who speaks now, loudest first (the server's audio levels; docs/server-api.md).
      case "activeSpeakers": this.activeSpeakers = (payload.speakers || []).map((s) => s.uid); this._emit("activeSpeakers", payload); break;
      // The room's metadata, changed through the server's API (1.6).
      case "roomUpdate": this.roomMetadata = payload.metadata || ""; this._emit("roomUpdate", payload); break;
      // The server's API muted or unmuted one of this client's own tracks: nothing of it is
      // forwarded meanwhile, so it stops sending too (1.6).
      case "trackMuted": this._onServerMute(payload.trackSid, !!payload.muted); break;
      // The layer of a layered track this client now gets, and why (1.4).
      case "layerChanged": this.layers.set(payload.trackSid, payload); this._emit("layerChanged", payload); break;
      // Which layers of its own simulcast track to send (1.4): this client publishes one layer.
      case "videoLayers": this._emit("videoLayers", payload); break;
      case "pong": break;
      default: this.log("unhandled", type, payload);
    }
  }

  _onClose(event) {
    const wasJoined = this.joined;
    if (wasJoined && this._joinArgs && this._joinArgs.rejoin && !this._leftByUser) return this._startRejoin("connectionClosed");
    for (const [, pending] of this._pending) pending.reject(new RTCError(0, "connection closed"));
    this._pending.clear();
    if (wasJoined) {
      this._left = true;
      this._emit("leave", {reason: "connectionClosed", code: event.code});
    }
    this._teardown();
  }

  /**
   * The server went away: the remote media and participants go (their events fire), both
   * transports close, the local tracks stay, and the client joins again (``join``).
   */
  _startRejoin(reason) {
    for (const [, pending] of this._pending) pending.reject(new RTCError(0, "connection lost"));
    this._pending.clear();
    for (const uid of [...this.participants.keys()]) this._onParticipantLeft(uid, "reconnecting");
    for (const [, remote] of this.remoteTracks) this._emit("trackEnded", remote);
    this._teardown({keepLocal: true});
    const joinArgs = this._joinArgs;
    this._reset();
    this._joinArgs = joinArgs;
    this._emit("reconnecting", {reason});
    this.log("rejoining after", reason);
    if (!this._rejoining) { this._rejoining = true; this._rejoinLoop(reason); }
  }

  async _rejoinLoop(reason) {
    const args = this._joinArgs;
    const urls = [args.url, ...(args.fallbackURLs || [])];
    const deadline = Date.now() + args.rejoinTimeoutMs;
    // The same backoff as the Swift engine's (Web/rejoin-policy.js): the first attempt at once.
    const backoff = new RejoinBackoff();
    let wait = 0;
    while (Date.now() < deadline && !this._leftByUser) {
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      if (this._leftByUser || this.ws) break;
      const url = urls[backoff.unreachable % urls.length];
      try {
        await this._open(url);
      } catch (error) {
        // A server that answered (an error code) is up: again soon (at most 500 ms: a node waiting
        // for a dead owner's key to expire answers so for up to 2 s). One that could not be
        // reached may be gone for good: the next URL, after the growing backoff.
        const answered = !!(error && error.code);
        this.log(`joining again at ${url} failed: ${error && error.code ? error.code + " " : ""}${error && (error.reason || error.message)}`);
        wait = backoff.failed(answered);
        continue;
      }
      this._rejoining = false;
      // What the app published and has not ended, again (in groups of one bitrate cap).
      const byBitrate = new Map();
      for (const entry of this._published.filter((e) => e.track.readyState === "live")) {
        const key = entry.maxBitrateKbps || 0;
        byBitrate.set(key, [...(byBitrate.get(key) || []), entry]);
      }
      for (const [maxBitrateKbps, entries] of byBitrate) {
        try {
          await this.publishTracks(entries, {maxBitrateKbps: maxBitrateKbps || null});
        } catch (error) {
          // Gone again before the publish: that loss starts the next rejoin, which publishes them.
          this.log("publishing again failed", error);
        }
      }
      if (this._dataWanted && this.joined) {
        try { await this.openData(); } catch (error) { this.log("opening the data channels again failed", error); }
      }
      if (this.joined) this._emit("rejoined", {url, reason});
      return;
    }
    this._rejoining = false;
    if (this._leftByUser) return;
    for (const {track} of this._published) track.stop();
    this._published = [];
    this._left = true;
    this._emit("leave", {reason});
  }

  _teardown({keepLocal = false} = {}) {
    clearInterval(this._pingTimer);
    this._pingTimer = null;
    if (this.ws) {
      const ws = this.ws;
      ws.onopen = ws.onmessage = ws.onerror = ws.onclose = null;
      if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.close();
    }
    this.ws = null;
    for (const pc of [this.publisher, this.subscriber]) if (pc) pc.close();
    this.publisher = this.subscriber = null;
    if (!keepLocal) for (const local of this.localTracks) if (local.track) local.track.stop();
  }

  /** Leaves the channel and closes both transports. */
  async leave(reason = "clientRequest") {
    this._leftByUser = true;
    if (this.ws && this.ws.readyState === WebSocket.OPEN && this.joinedInfo) {
      try { this._send("leave", {reason}); } catch (_) { /* already gone */ }
    }
    const wasJoined = this.joined || this._rejoining;
    this._left = true;
    for (const {track} of this._published) track.stop();
    this._published = [];
    this._teardown();
    if (wasJoined) this._emit("leave", {reason});
  }

  // MARK: participants

  _updateParticipants(list) {
    const changed = [];
    for (const info of list) {
      if (this.participant && info.uid === this.participant.uid) {
        if (info.version >= (this.participant.version || 0)) this.participant = info;
        continue;
      }
      const known = this.participants.get(info.uid);
      if (known && known.sid === info.sid && (known.version || 0) > (info.version || 0)) continue;
      this.participants.set(info.uid, info);
      changed.push(info);
    }
    if (changed.length) {
      this._resolveRemoteTracks();
      this._emit("participants", {participants: changed, all: this.participants});
    }
  }

  _onParticipantLeft(uid, reason) {
    const info = this.participants.get(uid);
    this.participants.delete(uid);
    for (const [key, remote] of this.remoteTracks) {
      if (remote.uid === uid || (info && remote.participantSid === info.sid)) {
        this.remoteTracks.delete(key);
        this._emit("trackEnded", remote);
      }
    }
    this._emit("participantLeft", {uid, reason, participant: info || null});
  }

  /** `{uid, participantSid, info: TrackInfo, screenShareOwner}` for a participant sid and track sid. */
  lookupTrack(participantSid, trackSid) {
    for (const info of this.participants.values()) {
      const track = (info.tracks || []).find((t) => t.sid === trackSid);
      if (info.sid === participantSid || track) {
        return {uid: info.uid, participantSid: info.sid, info: track || null, screenShareOwner: sourceOf(info)};
      }
    }
    return null;
  }

  _resolveRemoteTracks() {
    for (const remote of this.remoteTracks.values()) {
      const found = this.lookupTrack(remote.participantSid, remote.trackSid);
      if (!found) continue;
      remote.uid = found.uid;
      remote.screenShareOwner = found.screenShareOwner;
      if (found.info) {
        remote.source = found.info.source;
        if (remote.announced && remote.muted !== !!found.info.muted) {
          remote.muted = !!found.info.muted;
          this._emit("trackMuted", remote);
        }
        remote.muted = !!found.info.muted;
      }
      if (remote.uid && remote.source && !remote.announced) { remote.announced = true; this._emit("track", remote); }
    }
  }

  _onTrackPublished(info) {
    const local = this.localTracks.find((t) => t.sid === info.sid || (t.sid == null && t.mid != null && t.mid === info.mid));
    if (local) { local.sid = info.sid; local.source = info.source; }
    if (this.participant) {
      const tracks = (this.participant.tracks || []).filter((t) => t.sid !== info.sid);
      this.participant = {...this.participant, tracks: [...tracks, info]};
    }
    this._emit("trackPublished", info);
  }

  // MARK: subscriber transport (the server offers)

  _subscriberPC() {
    if (this.subscriber) return this.subscriber;
    const pc = new RTCPeerConnection({iceServers: this.iceServers || [], bundlePolicy: this.bundlePolicy, rtcpMuxPolicy: "require"});
    pc.ontrack = (event) => this._onRemoteTrack(event);
    pc.onconnectionstatechange = () => {
      this._emit("connectionState", {transport: "subscriber", state: pc.connectionState});
      // The media path was lost while signaling stayed up: ask for an offer with new ICE credentials.
      if (pc.connectionState === "failed" && this.joined) {
        try { this.restartSubscriberICE(); } catch (_) { /* signaling is gone too */ }
      }
    };
    this.subscriber = pc;
    return pc;
  }

  _onSubscriberOffer(message) {
    if (message.transport !== "subscriber") return this.log("unexpected offer for", message.transport);
    // One offer at a time, in order.
    this._subscriberQueue = this._subscriberQueue.then(async () => {
      const pc = this._subscriberPC();
      this._subscriberSections = parseSections(message.sdp);
      try {
        await pc.setRemoteDescription({type: "offer", sdp: message.sdp});
        const answer = await pc.createAnswer();
        await pc.setLocalDescription(answer);
        this._send("answer", {transport: "subscriber", sdp: pc.localDescription.sdp});
      } catch (error) {
        const wrapped = new RTCError(0, `subscriber negotiation failed: ${error.message || error}`);
        this._emit("error", wrapped);
        return;
      }
      this._syncRemoteTracks(pc);
    });
    return this._subscriberQueue;
  }

  _onRemoteTrack(event) {
    const mid = event.transceiver && event.transceiver.mid;
    const section = (mid != null && this._subscriberSections[mid]) || {};
    const stream = event.streams && event.streams[0];
    const participantSid = section.streamID || (stream && stream.id) || null;
    const trackSid = section.trackID || event.track.id;
    const key = trackSid;
    const previous = this.remoteTracks.get(key);
    if (previous && previous.track === event.track) return;
    const remote = {
      key, mid, trackSid, participantSid, kind: event.track.kind, track: event.track,
      stream: stream || new MediaStream([event.track]), receiver: event.receiver, transceiver: event.transceiver,
      uid: null, source: null, muted: false, screenShareOwner: null, announced: false,
    };
    this.remoteTracks.set(key, remote);
    this._resolveRemoteTracks();
  }

  /** After each subscriber offer: sections that no longer send (unsubscribed) end their tracks. */
  _syncRemoteTracks(pc) {
    for (const transceiver of pc.getTransceivers()) {
      const section = this._subscriberSections[transceiver.mid];
      const sending = section && (section.direction === "sendonly" || section.direction === "sendrecv") && section.trackID;
      for (const [key, remote] of this.remoteTracks) {
        if (remote.transceiver !== transceiver) continue;
        if (!sending || section.trackID !== remote.trackSid) {
          this.remoteTracks.delete(key);
          this._emit("trackEnded", remote);
        }
      }
    }
  }

  /** Subscribes or unsubscribes: track sids, a whole kind (`"audio"`/`"video"`), or whole users (`uids`). */
  updateSubscription({trackSids = [], subscribe = true, kind, uids} = {}) {
    const payload = {trackSids, subscribe};
    if (kind) payload.kind = kind;
    if (uids) payload.uids = uids;
    this._send("updateSubscription", payload);
  }

  /** Pins a user (e.g. a screen share the filter hides): all its tracks, now and later. */
  subscribeUser(uid, subscribe = true) { this.updateSubscription({subscribe, uids: [uid]}); }

  /** Asks the server for a new subscriber offer with new ICE credentials (media path lost). */
  restartSubscriberICE() { this._send("restartICE", {transport: "subscriber"}); }

  setRole(role) { this._send("setRole", {role}); }

  refreshToken(token) { return this._request("refreshToken", {token}); }

  // MARK: publisher transport (this side offers)

  _publisherPC() {
    if (this.publisher) return this.publisher;
    const pc = new RTCPeerConnection({iceServers: this.iceServers || [], bundlePolicy: this.bundlePolicy, rtcpMuxPolicy: "require"});
    pc.onconnectionstatechange = () => this._emit("connectionState", {transport: "publisher", state: pc.connectionState});
    this.publisher = pc;
    return pc;
  }

  static _preferCodecs(transceiver, kind) {
    if (!RTCRtpSender.getCapabilities || !transceiver.setCodecPreferences) return;
    const codecs = (RTCRtpSender.getCapabilities(kind) || {}).codecs || [];
    const wanted = kind === "video" ? "video/vp8" : "audio/opus";
    const preferred = codecs.filter((c) => c.mimeType.toLowerCase() === wanted);
    const rtx = codecs.filter((c) => c.mimeType.toLowerCase() === "video/rtx");
    if (!preferred.length) return;
    try { transceiver.setCodecPreferences(kind === "video" ? [...preferred, ...rtx] : preferred); } catch (_) { /* keep defaults */ }
  }

  /**
   * Publishes tracks: `[{track, source}]` with source camera/microphone/screen/screenAudio. Adds a
   * sendonly transceiver per track, offers, announces each new track with `publishTrack` (with the
   * mid the offer gave it) and applies the server's answer. Resolves with the local track records.
   */
  publishTracks(entries, {maxBitrateKbps = null} = {}) {
    const run = async () => {
      if (!this.joined) throw new RTCError(1004, "join first");
      const pc = this._publisherPC();
      const added = [];
      for (const {track, source, stream} of entries) {
        // A transceiver left by an unpublished track of the kind is reused: a stopped one would
        // leave a rejected m-section behind, and the server's answer may carry its one candidate there.
        let transceiver = this._spareTransceivers.find((t) => t.receiver.track.kind === track.kind);
        if (transceiver) {
          this._spareTransceivers = this._spareTransceivers.filter((t) => t !== transceiver);
          transceiver.direction = "sendonly";
          await transceiver.sender.replaceTrack(track);
          if (stream && transceiver.sender.setStreams) transceiver.sender.setStreams(stream);
        } else {
          transceiver = pc.addTransceiver(track, {direction: "sendonly", streams: stream ? [stream] : []});
          if (this.preferCodecs) RTCClient._preferCodecs(transceiver, track.kind);
        }
        const local = {sid: null, kind: track.kind, source, mid: null, track, sender: transceiver.sender, transceiver, muted: false};
        if (!this._published.some((entry) => entry.track === track)) this._published.push({track, source, stream, maxBitrateKbps});
        this.localTracks.push(local);
        added.push(local);
      }
      await this._negotiatePublisher(added);
      for (const local of added) {
        if (local.kind === "video" && maxBitrateKbps) {
          const params = local.sender.getParameters();
          if (params.encodings && params.encodings.length) {
            params.encodings[0].maxBitrate = maxBitrateKbps * 1000;
            if (local.source === "screen") params.degradationPreference = "maintain-resolution";
            try { await local.sender.setParameters(params); } catch (_) { /* not fatal */ }
          }
        }
      }
      this._emit("published", {tracks: added});
      return added;
    };
    return this._enqueuePublisher(run);
  }

  _enqueuePublisher(run) {
    const result = this._publisherQueue.then(run, run);
    this._publisherQueue = result.catch(() => {});
    return result;
  }

  // MARK: data (docs/data.md): the SDK's envelopes on `_reliable` and `_lossy`

  /**
   * Opens the `_reliable` (ordered, retransmitted) and `_lossy` (unordered, never retransmitted)
   * data channels on the publisher transport, negotiating it (a data-only offer when nothing is
   * published). `publishData` calls it; call it early to receive before sending. Kept across rejoins.
   */
  openData() {
    this._dataWanted = true;
    if (this._dataReady) return this._dataReady;
    const run = async () => {
      if (!this.joined) throw new RTCError(1004, "join first");
      const pc = this._publisherPC();
      const reliable = pc.createDataChannel(RELIABLE_LABEL, {ordered: true});
      const lossy = pc.createDataChannel(LOSSY_LABEL, {ordered: false, maxRetransmits: 0});
      for (const channel of [reliable, lossy]) this._hookDataChannel(channel);
      // Channels the server opens (it relays on the receiver's channel of the sender's label).
      pc.ondatachannel = (event) => this._hookDataChannel(event.channel);
      this._dataChannels = {reliable, lossy};
      await this._negotiatePublisher([]);
      await Promise.all([reliable, lossy].map((channel) => RTCClient._opened(channel)));
      return this._dataChannels;
    };
    const ready = this._enqueuePublisher(run);
    this._dataReady = ready;
    ready.catch(() => { if (this._dataReady === ready) this._dataReady = null; });
    return ready;
  }

  /**
   * Sends `payload` (a string, as UTF-8, or a Uint8Array) to everyone in the channel, or to the
   * uids in `destinations`, under `topic`: reliable (ordered, retransmitted) or not. The server
   * writes the sender; receivers get a `data` event.
   */
  async publishData(payload, {reliable = true, topic = "", destinations = [], stream = 0} = {}) {
    const channels = await this.openData();
    const bytes = encodeEnvelope({topic, destinations, stream, payload});
    if (bytes.length > RTCClient.maxDataMessageBytes) {
      throw new RTCError(0, `a data message of ${bytes.length} bytes (at most ${RTCClient.maxDataMessageBytes})`);
    }
    const channel = reliable ? channels.reliable : channels.lossy;
    if (channel.readyState !== "open") throw new RTCError(0, `the ${channel.label} data channel is ${channel.readyState}`);
    channel.send(bytes);
  }

  _hookDataChannel(channel) {
    if (channel.label !== RELIABLE_LABEL && channel.label !== LOSSY_LABEL) return;
    channel.binaryType = "arraybuffer";
    channel.onmessage = (event) => {
      let envelope;
      try {
        envelope = decodeEnvelope(typeof event.data === "string" ? new TextEncoder().encode(event.data) : new Uint8Array(event.data));
      } catch (error) {
        this.log("a data message that is not an envelope", error);
        return;
      }
      let text = null;
      try { text = new TextDecoder("utf-8", {fatal: true}).decode(envelope.payload); } catch (_) { /* binary */ }
      this._emit("data", {uid: envelope.sender, topic: envelope.topic, text, payload: envelope.payload,
                          reliable: channel.label === RELIABLE_LABEL, stream: envelope.stream});
    };
  }

  static _opened(channel, timeoutMs = 10000) {
    if (channel.readyState === "open") return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new RTCError(0, `the ${channel.label} data channel did not open within ${timeoutMs / 1000} s`)),
                               timeoutMs);
      channel.addEventListener("open", () => { clearTimeout(timer); resolve(); }, {once: true});
      channel.addEventListener("close", () => { clearTimeout(timer); reject(new RTCError(0, `the ${channel.label} data channel closed`)); },
                               {once: true});
    });
  }

  /** One publisher offer/answer: announces `added` (with the mids the offer gave them) first. */
  async _negotiatePublisher(added = []) {
    const pc = this._publisherPC();
    const offer = await pc.createOffer();
    await pc.setLocalDescription(offer);
    // Announce the new tracks with their mids so the server names their sources (it would
    // otherwise make camera/microphone, or screen/screenAudio for a screen share).
    const announced = added.map(async (local) => {
      local.mid = local.transceiver.mid;
      const info = await this._request("publishTrack", {kind: local.kind, source: local.source, mid: local.mid});
      local.sid = info.sid;
      return info;
    });
    this.lastPublisherOffer = pc.localDescription.sdp;
    const answerPromise = this._request("offer", {transport: "publisher", sdp: pc.localDescription.sdp});
    answerPromise.catch(() => {}); // awaited below; a refused publishTrack may throw first
    await Promise.all(announced);
    const answer = await answerPromise;
    this.lastPublisherAnswer = answer.sdp;
    try {
      await pc.setRemoteDescription({type: "answer", sdp: answer.sdp});
    } catch (error) {
      throw new RTCError(4002, `the server's publisher answer was rejected: ${error.message || error}`);
    }
  }

  /** getUserMedia, then publishes the camera (source camera) and microphone (source microphone). */
  async publishCamera({audio = true, video = {width: 640, height: 360, frameRate: 15}, stream = null, maxBitrateKbps = 800} = {}) {
    if (!stream) requireCaptureContext("getUserMedia");
    const media = stream || await navigator.mediaDevices.getUserMedia({
      audio: !!audio && (audio === true ? {echoCancellation: true} : audio),
      video: !!video && (video === true ? {} : {width: {ideal: video.width}, height: {ideal: video.height},
                                                  frameRate: video.frameRate ? {ideal: video.frameRate} : undefined}),
    });
    const entries = [];
    for (const track of media.getAudioTracks()) entries.push({track, source: "microphone", stream: media});
    for (const track of media.getVideoTracks()) entries.push({track, source: "camera", stream: media});
    this.cameraStream = media;
    return this.publishTracks(entries, {maxBitrateKbps});
  }

  /** getDisplayMedia (or a given stream, e.g. a canvas's), then publishes it as source screen (and screenAudio). */
  async publishScreen({video = {width: 1280, height: 720, frameRate: 15}, audio = false, stream = null, maxBitrateKbps = 1500} = {}) {
    const media = stream || await RTCClient.captureScreen({video, audio});
    const entries = [];
    for (const track of media.getVideoTracks()) {
      if ("contentHint" in track) track.contentHint = "detail";
      entries.push({track, source: "screen", stream: media});
    }
    for (const track of media.getAudioTracks()) entries.push({track, source: "screenAudio", stream: media});
    this.screenStream = media;
    return this.publishTracks(entries, {maxBitrateKbps});
  }

  /** getDisplayMedia with a size and rate wanted (the capture is scaled down to fit, never up). */
  static captureScreen({video = {width: 1280, height: 720, frameRate: 15}, audio = false} = {}) {
    try {
      requireCaptureContext("getDisplayMedia");
    } catch (error) {
      return Promise.reject(error);
    }
    return navigator.mediaDevices.getDisplayMedia({
      video: {width: {max: video.width, ideal: video.width}, height: {max: video.height, ideal: video.height},
              frameRate: {ideal: video.frameRate || 15}},
      audio: !!audio,
    });
  }

  _onServerMute(trackSid, muted) {
    const local = this.localTracks.find((t) => t.sid === trackSid);
    if (local) { local.muted = muted; if (local.track) local.track.enabled = !muted; }
    this._emit("localTrackMuted", {trackSid, muted, byServer: true});
  }

  /**
   * Sets this participant's own name, metadata or attributes (an attribute set to "" is removed),
   * when its token grants `updateMetadata`; resolves with its updated ParticipantInfo (1.6).
   */
  updateMetadata({name, metadata, attributes} = {}) {
    const payload = {};
    if (name !== undefined) payload.name = name;
    if (metadata !== undefined) payload.metadata = metadata;
    if (attributes !== undefined) payload.attributes = attributes;
    return this._request("updateMetadata", payload).then((reply) => {
      const participants = reply.participants || [];
      this._updateParticipants(participants);
      return participants.find((p) => this.participant && p.uid === this.participant.uid) || this.participant;
    });
  }

  /** Mutes or unmutes a published track (the sender stops sending, the server tells the others). */
  mute(trackSid, muted = true) {
    const local = this.localTracks.find((t) => t.sid === trackSid);
    if (local) { local.muted = muted; if (local.track) local.track.enabled = !muted; }
    this._send("mute", {trackSid, muted});
  }

  /** Stops publishing a track: the server unpublishes it; the transceiver stops on the next offer. */
  /**
   * Stops publishing a track: the server unpublishes it at once; its transceiver goes inactive (an
   * offer says so) and is reused by the next track of its kind.
   */
  unpublish(trackSid) {
    const index = this.localTracks.findIndex((t) => t.sid === trackSid);
    this._send("unpublishTrack", {trackSid});
    if (index < 0) return Promise.resolve();
    const [local] = this.localTracks.splice(index, 1);
    this._published = this._published.filter((entry) => entry.track !== local.track);
    if (local.track) local.track.stop();
    return this._enqueuePublisher(async () => {
      await local.sender.replaceTrack(null);
      local.transceiver.direction = "inactive";
      this._spareTransceivers.push(local.transceiver);
      if (this.joined) await this._negotiatePublisher([]);
    });
  }

  // MARK: screen share (the `<host>_sub` auxiliary user)

  /**
   * Shares a screen as `<hostUid><suffix>` on a connection of its own: role broadcaster,
   * auto-subscription off (it receives nothing), one `screen` track. Captures first (a browser wants
   * the user gesture for getDisplayMedia), then joins and publishes. Resolves with the client.
   */
  static async shareScreen({url = null, fallbackURLs = [], channel, hostUid, token, suffix = DEFAULT_SCREEN_SHARE_SUFFIX,
                            video = {width: 1280, height: 720, frameRate: 15}, audio = false, stream = null,
                            maxBitrateKbps = 1500, log = null, clientOptions = {}} = {}) {
    const media = stream || await RTCClient.captureScreen({video, audio});
    const client = new RTCClient({log, ...clientOptions});
    try {
      await client.join({url, fallbackURLs, channel, uid: screenShareUID(hostUid, suffix), token, role: "broadcaster",
                         autoSubscribe: false, autoSubscribeAudio: false, autoSubscribeVideo: false});
      await client.publishScreen({stream: media, maxBitrateKbps});
    } catch (error) {
      if (!stream) for (const track of media.getTracks()) track.stop();
      await client.leave();
      throw error;
    }
    // The user stopping the share in the browser's UI ends it.
    for (const track of media.getVideoTracks()) track.addEventListener("ended", () => client.leave());
    return client;
  }

  // MARK: stats

  /**
   * Per remote video: `{uid, source, trackSid, width, height, fps, kbps, packetsLost, packetsReceived,
   * lossPercent, framesDecoded, framesDropped}` from its receiver's inbound-rtp stats (kbps and loss
   * over the time since the previous call).
   */
  async remoteVideoStats() {
    const out = [];
    for (const remote of this.remoteTracks.values()) {
      if (remote.kind !== "video" || !remote.receiver) continue;
      out.push(await this.receiverStats(remote));
    }
    return out;
  }

  async receiverStats(remote) {
    const report = await remote.receiver.getStats();
    let inbound = null;
    report.forEach((s) => { if (s.type === "inbound-rtp" && (s.kind || s.mediaType) === remote.kind) inbound = s; });
    const base = {uid: remote.uid, source: remote.source, trackSid: remote.trackSid, kind: remote.kind};
    if (!inbound) return {...base, width: 0, height: 0, fps: 0, kbps: 0, lossPercent: 0, packetsLost: 0, packetsReceived: 0};
    return {...base, ...this._rates(`in:${remote.trackSid}`, inbound, inbound.bytesReceived, inbound.packetsReceived, inbound.packetsLost),
            width: inbound.frameWidth || 0, height: inbound.frameHeight || 0, fps: inbound.framesPerSecond || 0,
            framesDecoded: inbound.framesDecoded || 0, framesDropped: inbound.framesDropped || 0,
            framesReceived: inbound.framesReceived || 0, nackCount: inbound.nackCount || 0, pliCount: inbound.pliCount || 0,
            jitter: inbound.jitter || 0, bytesReceived: inbound.bytesReceived || 0};
  }

  _rates(key, stat, bytes = 0, packets = 0, lost = 0) {
    const previous = this._statsPrev.get(key);
    this._statsPrev.set(key, {t: stat.timestamp, bytes, packets, lost});
    if (!previous || stat.timestamp <= previous.t) {
      const total = packets + Math.max(0, lost);
      return {kbps: 0, packetsLost: lost, packetsReceived: packets, lossPercent: total ? (100 * Math.max(0, lost)) / total : 0};
    }
    const seconds = (stat.timestamp - previous.t) / 1000;
    const dPackets = packets - previous.packets, dLost = Math.max(0, lost - previous.lost);
    return {kbps: (8 * (bytes - previous.bytes)) / 1000 / seconds, packetsLost: lost, packetsReceived: packets,
            lossPercent: dPackets + dLost > 0 ? (100 * dLost) / (dPackets + dLost) : 0};
  }

  /** Per published track: outbound-rtp stats (`framesSent`, `framesEncoded`, `bytesSent`, `packetsSent`, size, fps, kbps). */
  async localStats() {
    const out = [];
    for (const local of this.localTracks) {
      if (!local.sender) continue;
      const report = await local.sender.getStats();
      let outbound = null;
      report.forEach((s) => { if (s.type === "outbound-rtp") outbound = s; });
      const base = {sid: local.sid, kind: local.kind, source: local.source, mid: local.mid};
      if (!outbound) { out.push({...base, bytesSent: 0, packetsSent: 0, framesSent: 0, framesEncoded: 0}); continue; }
      const rates = this._rates(`out:${local.mid}`, outbound, outbound.bytesSent, outbound.packetsSent, 0);
      out.push({...base, kbps: rates.kbps, bytesSent: outbound.bytesSent || 0, packetsSent: outbound.packetsSent || 0,
                framesSent: outbound.framesSent || 0, framesEncoded: outbound.framesEncoded || 0,
                width: outbound.frameWidth || 0, height: outbound.frameHeight || 0, fps: outbound.framesPerSecond || 0,
                qualityLimitationReason: outbound.qualityLimitationReason || null});
    }
    return out;
  }
}
