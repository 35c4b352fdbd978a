// client.js: RTCClient, one participant in one channel: joins over the signal client, publishes
// and receives over the two transports, keeps the room model, sends and receives data, and joins
// again by itself when the server goes away. The parts live in their own modules (joining again
// in rejoin.js, the subscriber's offers in subscriber.js, the screen share in share.js); this one
// ties them together and keeps the SDK's public surface (docs/web.md).

import {RTCError, describeError} from "./errors.js";
import {shareScreen} from "./share.js";
import {SignalClient, SDK_NAME, SDK_VERSION, PROTOCOL_VERSION_OBJECT, defaultSignalingURL} from "./signal-client.js";
import {Transports, iceServersFrom} from "./transports.js";
import {SerialQueue, sendTransceiver, capBitrate, negotiatePublisher} from "./publisher.js";
import {ParticipantModel} from "./participants.js";
import {MAX_DATA_MESSAGE_BYTES, createDataChannels, channelOpened, encodeDataMessage} from "./data.js";
import {RateTracker, inboundFigures, outboundFigures} from "./stats.js";
import {captureScreen, captureCamera} from "./capture.js";
import {DEFAULT_SCREEN_SHARE_SUFFIX} from "./screen-share-uid.js";
import {Rejoiner, publishAgain} from "./rejoin.js";
import {SubscriberOffers, subscriptionRequest} from "./subscriber.js";

/**
 * @typedef {import("./participants.js").ParticipantInfo} ParticipantInfo
 * @typedef {import("./participants.js").RemoteTrack} RemoteTrack
 * @typedef {import("./participants.js").TrackInfo} TrackInfo
 * @typedef {import("./signal-client.js").SignalMessage} SignalMessage
 * @typedef {import("./signal-client.js").WebSocketConstructor} WebSocketConstructor
 * @typedef {import("./data.js").DataChannels} DataChannels
 * @typedef {(...args: unknown[]) => void} Logger
 *
 * @typedef {import("./publisher.js").LocalTrack} LocalTrack
 * @typedef {{track: MediaStreamTrack, source: string, stream?: MediaStream | null}} TrackEntry
 *   A track to publish, with its source (camera, microphone, screen, screenAudio).
 * @typedef {{track: MediaStreamTrack, source: string, stream?: MediaStream | null, maxBitrateKbps: number | null}} PublishedEntry
 * @typedef {{url?: string | null, fallbackURLs?: string[], rejoin?: boolean, rejoinTimeoutMs?: number, channel: string,
 *            uid: string, token?: string, role?: string, autoSubscribe?: boolean, autoSubscribeAudio?: boolean,
 *            autoSubscribeVideo?: boolean, ignoreScreenShare?: boolean | null, pinnedUIDs?: string[],
 *            iceServers?: RTCIceServer[] | null, connectTimeoutMs?: number}} JoinOptions
 * @typedef {Required<Omit<JoinOptions, "autoSubscribeAudio" | "autoSubscribeVideo" | "ignoreScreenShare" | "pinnedUIDs">>
 *           & Pick<JoinOptions, "autoSubscribeAudio" | "autoSubscribeVideo" | "ignoreScreenShare" | "pinnedUIDs">
 *           & {url: string}} JoinArguments
 * @typedef {{log?: Logger | null, bundlePolicy?: RTCBundlePolicy, preferCodecs?: boolean,
 *            WebSocketImpl?: WebSocketConstructor}} ClientOptions
 */

/**
 * A client of one channel over one signaling connection. Events (all `CustomEvent`s, payload in `detail`):
 * - `joined` (JoinResponse), `participants` ({participants: [ParticipantInfo] that changed, all: Map uid→info}),
 *   `participantLeft` ({uid, reason, participant}), `track` (a RemoteTrack, see `remoteTracks`), `trackEnded` (RemoteTrack),
 *   `trackMuted` (RemoteTrack), `trackPublished` (TrackInfo), `published` ({tracks}), `error` (RTCError),
 *   `leave` ({reason}), `connectionState` ({transport, state}), `reconnecting` ({reason}), `rejoined` ({url, reason}),
 *   `activeSpeakers`, `roomUpdate`, `localTrackMuted` ({trackSid, muted, byServer}), `layerChanged`, `videoLayers`,
 *   `tokenWillExpire`, `tokenRefreshed`,
 *   `data` ({uid, topic, text, payload, reliable, stream}: a data message; `text` is null for binary payloads).
 */
export class RTCClient extends EventTarget {
  /** The largest data message the server relays by default (`--max-data-message-bytes`). */
  static maxDataMessageBytes = MAX_DATA_MESSAGE_BYTES;

  /**
   * `bundlePolicy`: both transports' (max-bundle: one ICE/DTLS transport each, as the server
   * expects). `preferCodecs`: publish with VP8 (+rtx) and Opus only (`setCodecPreferences`).
   * `WebSocketImpl`: the WebSocket constructor (tests pass a fake).
   * @param {ClientOptions} options
   */
  constructor({log = null, bundlePolicy = "max-bundle", preferCodecs = true, WebSocketImpl} = {}) {
    super();
    /** @type {Logger} */
    this.log = log || (() => {});
    this.bundlePolicy = bundlePolicy;
    this.preferCodecs = preferCodecs;
    this.WebSocketImpl = WebSocketImpl;
    /**
     * What the app published, kept across rejoins.
     * @type {PublishedEntry[]}
     */
    this._published = [];
    /** Whether the app opened the data channels (opened again after a rejoin). */
    this._dataWanted = false;
    this._leftByUser = false;
    /** Joins again after the session is lost (rejoin.js): while one is under way, `active`. */
    this._rejoiner = new Rejoiner({
      open: (url) => this._open(url),
      // The app left, or a session is there already (the app joined meanwhile).
      stopped: () => this._leftByUser || !!this.signal,
      log: (...args) => this.log(...args),
    });
    /** @type {JoinArguments | null} */
    this._joinArgs = null;
    /** @type {MediaStream | undefined} */
    this.cameraStream = undefined;
    /** @type {MediaStream | undefined} */
    this.screenStream = undefined;
    /**
     * The publisher's last offer and the server's answer to it (tests read them).
     * @type {string | undefined}
     */
    this.lastPublisherOffer = undefined;
    /** @type {string | undefined} */
    this.lastPublisherAnswer = undefined;
  }

  // The state of one session, made anew for each (re)join by `_reset`.
  /** @type {SignalClient | null} */
  signal = null;
  /** @type {Transports | null} */
  transports = null;
  /** @type {any} the `joined` payload (JoinResponse) */
  joinedInfo = null;
  /** The room as this client sees it. */
  model = new ParticipantModel((type, detail) => this._emit(type, detail));
  /** @type {LocalTrack[]} */
  localTracks = [];
  /** @type {DataChannels | null} on the publisher transport, once opened */
  _dataChannels = null;
  /** @type {Promise<DataChannels> | null} */
  _dataReady = null;
  screenShareSuffix = DEFAULT_SCREEN_SHARE_SUFFIX;
  /** The room's metadata (joined, then roomUpdate; protocol 1.6). */
  roomMetadata = "";
  /**
   * The layerChanged this client last got, by track sid (protocol 1.4).
   * @type {Map<string, any>}
   */
  layers = new Map();
  /**
   * Who speaks now, loudest first (uids).
   * @type {string[]}
   */
  activeSpeakers = [];
  /** @type {RTCIceServer[]} */
  iceServers = [];
  /** @type {{url: string, channel: string, uid: string, role: string, autoSubscribe: boolean} | null} */
  options = null;
  /** The server's subscriber offers, answered one at a time (subscriber.js). */
  _subscriberOffers = this._newSubscriberOffers();
  /** Publisher negotiations, one at a time. */
  _publisherQueue = new SerialQueue();
  /**
   * Transceivers of unpublished tracks, reused by the next track of their kind.
   * @type {RTCRtpTransceiver[]}
   */
  _spareTransceivers = [];
  _left = false;
  _stats = new RateTracker();

  /** Starts the state of a new session (the fields above, as they begin). */
  _reset() {
    this.signal = null;
    this.transports = null;
    this.joinedInfo = null;
    this.model = new ParticipantModel((type, detail) => this._emit(type, detail));
    this.localTracks = [];
    this._dataChannels = null;
    this._dataReady = null;
    this.screenShareSuffix = DEFAULT_SCREEN_SHARE_SUFFIX;
    this.roomMetadata = "";
    this.layers = new Map();
    this.activeSpeakers = [];
    this.iceServers = [];
    this.options = null;
    this._subscriberOffers = this._newSubscriberOffers();
    this._publisherQueue = new SerialQueue();
    this._spareTransceivers = [];
    this._left = false;
    this._stats = new RateTracker();
  }

  get joined() { return !!this.joinedInfo && !this._left; }
  get uid() { return this.participant ? this.participant.uid : null; }
  /**
   * This client's own ParticipantInfo.
   * @type {ParticipantInfo | null}
   */
  get participant() { return this.model.self; }
  set participant(info) { this.model.self = info; }
  /** The others this client sees, by uid. */
  get participants() { return this.model.participants; }
  /** Remote tracks by track sid. */
  get remoteTracks() { return this.model.remoteTracks; }
  /** The signaling socket, while there is one. */
  get ws() { return this.signal ? this.signal.socket : null; }
  /** The publisher transport's connection, once made. */
  get publisher() { return this.transports ? this.transports.publisher : null; }
  /** The subscriber transport's connection, once made. */
  get subscriber() { return this.transports ? this.transports.subscriber : null; }

  /**
   * @param {string} type
   * @param {unknown} [detail]
   */
  _emit(type, detail) { this.dispatchEvent(new CustomEvent(type, {detail})); }

  /**
   * @param {string} type
   * @param {object} payload
   */
  _send(type, payload) {
    if (!this.signal) throw new RTCError(0, `not connected (sending ${type})`);
    this.signal.send(type, payload);
  }

  /**
   * @param {string} type
   * @param {object} payload
   * @param {number} [timeoutMs]
   * @returns {Promise<any>}
   */
  _request(type, payload, timeoutMs) {
    if (!this.signal) return Promise.reject(new RTCError(0, `not connected (sending ${type})`));
    return this.signal.request(type, payload, timeoutMs);
  }

  // MARK: joining

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
   * @param {JoinOptions} options
   * @returns {Promise<any>} the JoinResponse
   */
  join({url = null, fallbackURLs = [], rejoin = true, rejoinTimeoutMs = 60000, channel, uid, token = "", role = "broadcaster",
        autoSubscribe = true, autoSubscribeAudio, autoSubscribeVideo, ignoreScreenShare, pinnedUIDs, iceServers = null,
        connectTimeoutMs = 10000}) {
    if (this.signal) return Promise.reject(new RTCError(1006, "this client has already joined"));
    this._leftByUser = false;
    this._joinArgs = {url: url || defaultSignalingURL(), fallbackURLs, rejoin, rejoinTimeoutMs, channel, uid, token, role, autoSubscribe,
                      autoSubscribeAudio, autoSubscribeVideo, ignoreScreenShare, pinnedUIDs, iceServers, connectTimeoutMs};
    return this._open(this._joinArgs.url);
  }

  /**
   * One connection and join at `url` with the arguments `join` was given.
   * @param {string} url
   * @returns {Promise<any>}
   */
  _open(url) {
    const args = /** @type {JoinArguments} */ (this._joinArgs);
    const {channel, uid, token, role, autoSubscribe, autoSubscribeAudio, autoSubscribeVideo, ignoreScreenShare, pinnedUIDs,
           iceServers, connectTimeoutMs} = args;
    this._left = false;
    this.options = {url, channel, uid, role, autoSubscribe};
    const signal = new SignalClient({WebSocketImpl: this.WebSocketImpl, log: this.log});
    this.signal = signal;
    return new Promise((resolve, reject) => {
      let settled = false;
      /** @param {unknown} error */
      const fail = (error) => {
        clearTimeout(timer);
        if (settled) return;
        settled = true;
        this._teardown();
        reject(error);
      };
      const timer = setTimeout(() => fail(new RTCError(0, `no answer from ${url} within ${connectTimeoutMs} ms`)), connectTimeoutMs);
      signal.onmessage = (message) => this._onMessage(message);
      signal.onerror = (error, requestType) => this._onServerError(error, requestType);
      signal.onclose = (event) => {
        if (!settled) {
          fail(new RTCError(0, `connection closed before joining (${event.code}${event.reason ? " " + event.reason : ""})`));
          return;
        }
        this._onClose(event);
      };
      /** @type {Record<string, unknown>} */
      const request = {token: token || "", channel, uid, role, autoSubscribe: !!autoSubscribe,
                       sdk: {name: SDK_NAME, version: SDK_VERSION, protocolVersion: PROTOCOL_VERSION_OBJECT}};
      if (autoSubscribeAudio !== undefined) request.autoSubscribeAudio = autoSubscribeAudio;
      if (autoSubscribeVideo !== undefined) request.autoSubscribeVideo = autoSubscribeVideo;
      if (ignoreScreenShare !== undefined && ignoreScreenShare !== null) request.ignoreScreenShare = ignoreScreenShare;
      if (pinnedUIDs && pinnedUIDs.length) request.pinnedUIDs = pinnedUIDs;
      signal.connect(url)
        .then(() => signal.request("join", request, connectTimeoutMs))
        .then((joined) => {
          clearTimeout(timer);
          if (settled) return;
          settled = true;
          this._onJoined(joined, iceServers);
          resolve(joined);
        }, fail);
    });
  }

  /**
   * @param {any} joined the JoinResponse
   * @param {RTCIceServer[] | null} iceServersOverride
   */
  _onJoined(joined, iceServersOverride) {
    this.joinedInfo = joined;
    this.participant = joined.participant;
    this.roomMetadata = joined.roomMetadata || "";
    if (joined.screenShareSuffix) this.screenShareSuffix = joined.screenShareSuffix;
    this.iceServers = iceServersOverride || iceServersFrom(joined.iceServers || []);
    this.transports = new Transports({
      iceServers: this.iceServers, bundlePolicy: this.bundlePolicy,
      onSubscriberTrack: (event) => this.model.addRemoteTrack(event),
      onStateChange: (transport, state) => this._emit("connectionState", {transport, state}),
      onSubscriberFailed: () => this._onSubscriberFailed(),
    });
    if (this.signal) this.signal.startPings(Math.max(1, joined.pingInterval || 5) * 1000);
    this._emit("joined", joined);
    this.model.update(joined.others || []);
  }

  /**
   * The server's `error` messages. A join refused again while rejoining (a server still shutting
   * down, an owner not back yet) is the rejoin loop's to handle, not the app's.
   * @param {RTCError} error
   * @param {string | null} requestType
   */
  _onServerError(error, requestType) {
    if (this._rejoiner.active && requestType === "join") return;
    this._emit("error", error);
  }

  /** @param {SignalMessage} message */
  _onMessage({type, payload}) {
    switch (type) {
      case "offer": this._onSubscriberOffer(payload); break;
      case "trackPublished": this._onTrackPublished(payload); break;
      case "participantUpdate": this.model.update(payload.participants || []); break;
      case "participantLeft": this.model.left(payload.uid, payload.reason); break;
      case "leave":
        // A server going away asks its clients to join again (elsewhere, or once it is back).
        if (payload.reason === "serverShutdown" && this._joinArgs && this._joinArgs.rejoin) { this._startRejoin(payload.reason); break; }
        this._left = true; this._emit("leave", {reason: payload.reason}); this._teardown(); break;
      case "tokenWillExpire": case "tokenRefreshed": this._emit(type, payload); break;
      // Who speaks now, loudest first (the server's audio levels; docs/server-api.md).
      case "activeSpeakers":
        this.activeSpeakers = (payload.speakers || []).map((/** @type {{uid: string}} */ s) => s.uid);
        this._emit("activeSpeakers", payload);
        break;
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

  /** @param {CloseEvent} event */
  _onClose(event) {
    const wasJoined = this.joined;
    if (wasJoined && this._joinArgs && this._joinArgs.rejoin && !this._leftByUser) return this._startRejoin("connectionClosed");
    if (this.signal) this.signal.rejectPending("connection closed");
    if (wasJoined) {
      this._left = true;
      this._emit("leave", {reason: "connectionClosed", code: event.code});
    }
    this._teardown();
  }

  /**
   * The server went away: the remote media and participants go (their events fire), both
   * transports close, the local tracks stay, and the client joins again (`_rejoin`).
   * @param {string} reason
   */
  _startRejoin(reason) {
    if (this.signal) this.signal.rejectPending("connection lost");
    this.model.clear("reconnecting");
    this._teardown({keepLocal: true});
    this._reset();
    this._emit("reconnecting", {reason});
    this.log("rejoining after", reason);
    if (!this._rejoiner.active) this._rejoin(reason).catch((error) => this.log("rejoining failed", error));
  }

  /**
   * Joins again (rejoin.js: backoff, fallback URLs, `rejoinTimeoutMs`); then publishes again what
   * the app published and still has live, and opens the data channels again if it had them. Out
   * of time, it ends the session: the published tracks stop, `leave` ({reason}).
   * @param {string} reason
   */
  async _rejoin(reason) {
    const args = /** @type {JoinArguments} */ (this._joinArgs);
    const outcome = await this._rejoiner.run([args.url, ...(args.fallbackURLs || [])], args.rejoinTimeoutMs);
    if (outcome.result === "stopped") return;
    if (outcome.result === "rejoined") {
      await publishAgain(this._published, (entries, maxBitrateKbps) => this.publishTracks(entries, {maxBitrateKbps}), this.log);
      if (this._dataWanted && this.joined) {
        try { await this.openData(); } catch (error) { this.log("opening the data channels again failed", error); }
      }
      if (this.joined) this._emit("rejoined", {url: outcome.url, reason});
      return;
    }
    for (const {track} of this._published) track.stop();
    this._published = [];
    this._left = true;
    this._emit("leave", {reason});
  }

  /** Closes the connection and both transports; the local tracks stop unless `keepLocal`. */
  _teardown({keepLocal = false} = {}) {
    if (this.signal) this.signal.close();
    this.signal = null;
    if (this.transports) this.transports.close();
    this.transports = null;
    if (!keepLocal) for (const local of this.localTracks) if (local.track) local.track.stop();
  }

  /**
   * Leaves the channel and closes both transports.
   * @param {string} [reason]
   */
  async leave(reason = "clientRequest") {
    this._leftByUser = true;
    // Tell the server when the connection is up (no need otherwise: it sees the close).
    if (this.signal && this.signal.connected && this.joinedInfo) this.signal.send("leave", {reason});
    const wasJoined = this.joined || this._rejoiner.active;
    this._left = true;
    for (const {track} of this._published) track.stop();
    this._published = [];
    this._teardown();
    if (wasJoined) this._emit("leave", {reason});
  }

  // MARK: participants

  /**
   * `{uid, participantSid, info: TrackInfo, screenShareOwner}` for a participant sid and track sid.
   * @param {string | null} participantSid
   * @param {string} trackSid
   */
  lookupTrack(participantSid, trackSid) { return this.model.lookupTrack(participantSid, trackSid); }

  /** @param {TrackInfo} info */
  _onTrackPublished(info) {
    const local = this.localTracks.find((t) => t.sid === info.sid || (t.sid == null && t.mid != null && t.mid === info.mid));
    if (local) { local.sid = info.sid; local.source = info.source || local.source; }
    this.model.trackPublished(info);
  }

  // MARK: subscriber transport (the server offers)

  /** The subscriber's media path was lost while signaling stayed up: ask for new ICE credentials. */
  _onSubscriberFailed() {
    if (!this.joined) return;
    if (this.signal && this.signal.connected) this.restartSubscriberICE();
    else this.log("the subscriber transport failed with signaling down: the rejoin restores both");
  }

  /** One session's subscriber offers, answered in order against its transports and model. */
  _newSubscriberOffers() {
    return new SubscriberOffers({
      transports: () => this.transports, model: () => this.model,
      send: (type, payload) => this._send(type, payload), emit: (type, detail) => this._emit(type, detail),
      log: (...args) => this.log(...args), // (made before the constructor sets `log`)
    });
  }

  /**
   * The server's offer: answered after the ones before it (subscriber.js).
   * @param {{transport: string, sdp: string}} message
   */
  _onSubscriberOffer(message) { return this._subscriberOffers.answer(message); }

  /**
   * Subscribes or unsubscribes: track sids, a whole kind (`"audio"`/`"video"`), or whole users (`uids`).
   * @param {{trackSids?: string[], subscribe?: boolean, kind?: string, uids?: string[]}} options
   */
  updateSubscription(options = {}) { this._send("updateSubscription", subscriptionRequest(options)); }

  /**
   * Pins a user (e.g. a screen share the filter hides): all its tracks, now and later.
   * @param {string} uid
   * @param {boolean} [subscribe]
   */
  subscribeUser(uid, subscribe = true) { this.updateSubscription({subscribe, uids: [uid]}); }

  /** Asks the server for a new subscriber offer with new ICE credentials (media path lost). */
  restartSubscriberICE() { this._send("restartICE", {transport: "subscriber"}); }

  /** @param {string} role "broadcaster" or "audience" */
  setRole(role) { this._send("setRole", {role}); }

  /**
   * @param {string} token
   * @returns {Promise<any>}
   */
  refreshToken(token) { return this._request("refreshToken", {token}); }

  // MARK: publisher transport (this side offers)

  /** The publisher connection (after joining). */
  _publisherPC() {
    if (!this.transports) throw new RTCError(1004, "join first");
    return this.transports.publisherPC();
  }

  /**
   * Publishes tracks: `[{track, source}]` with source camera/microphone/screen/screenAudio. Adds a
   * sendonly transceiver per track, offers, announces each new track with `publishTrack` (with the
   * mid the offer gave it) and applies the server's answer. Resolves with the local track records.
   * @param {TrackEntry[]} entries
   * @param {{maxBitrateKbps?: number | null}} options
   * @returns {Promise<LocalTrack[]>}
   */
  publishTracks(entries, {maxBitrateKbps = null} = {}) {
    return this._publisherQueue.run(async () => {
      if (!this.joined) throw new RTCError(1004, "join first");
      const pc = this._publisherPC();
      /** @type {LocalTrack[]} */
      const added = [];
      for (const {track, source, stream} of entries) {
        const transceiver = await sendTransceiver(pc, this._spareTransceivers, track, stream,
                                                  {preferCodecs: this.preferCodecs, log: this.log});
        /** @type {LocalTrack} */
        const local = {sid: null, kind: track.kind, source, mid: null, track, sender: transceiver.sender, transceiver, muted: false};
        if (!this._published.some((entry) => entry.track === track)) this._published.push({track, source, stream, maxBitrateKbps});
        this.localTracks.push(local);
        added.push(local);
      }
      await this._negotiatePublisher(added);
      for (const local of added) {
        if (local.kind === "video" && maxBitrateKbps) await capBitrate(local, maxBitrateKbps, this.log);
      }
      this._emit("published", {tracks: added});
      return added;
    });
  }

  /**
   * One publisher offer/answer: announces `added` (with the mids the offer gave them) first.
   * @param {LocalTrack[]} [added]
   */
  async _negotiatePublisher(added = []) {
    if (!this.transports) throw new RTCError(1004, "join first");
    await negotiatePublisher(this.transports, (type, payload) => this._request(type, payload), added, {
      onOffer: (sdp) => { this.lastPublisherOffer = sdp; },
      onAnswer: (sdp) => { this.lastPublisherAnswer = sdp; },
    });
  }

  /**
   * getUserMedia, then publishes the camera (source camera) and microphone (source microphone).
   * @param {{audio?: boolean | MediaTrackConstraints, video?: boolean | {width?: number, height?: number, frameRate?: number},
   *          stream?: MediaStream | null, maxBitrateKbps?: number}} options
   */
  async publishCamera({audio = true, video = {width: 640, height: 360, frameRate: 15}, stream = null, maxBitrateKbps = 800} = {}) {
    const media = stream || await captureCamera({audio, video});
    /** @type {TrackEntry[]} */
    const entries = [];
    for (const track of media.getAudioTracks()) entries.push({track, source: "microphone", stream: media});
    for (const track of media.getVideoTracks()) entries.push({track, source: "camera", stream: media});
    this.cameraStream = media;
    return this.publishTracks(entries, {maxBitrateKbps});
  }

  /**
   * getDisplayMedia (or a given stream, e.g. a canvas's), then publishes it as source screen (and screenAudio).
   * @param {{video?: {width: number, height: number, frameRate?: number}, audio?: boolean, stream?: MediaStream | null,
   *          maxBitrateKbps?: number}} options
   */
  async publishScreen({video = {width: 1280, height: 720, frameRate: 15}, audio = false, stream = null, maxBitrateKbps = 1500} = {}) {
    const media = stream || await RTCClient.captureScreen({video, audio});
    /** @type {TrackEntry[]} */
    const entries = [];
    for (const track of media.getVideoTracks()) {
      if ("contentHint" in track) track.contentHint = "detail";
      entries.push({track, source: "screen", stream: media});
    }
    for (const track of media.getAudioTracks()) entries.push({track, source: "screenAudio", stream: media});
    this.screenStream = media;
    return this.publishTracks(entries, {maxBitrateKbps});
  }

  /**
   * getDisplayMedia with a size and rate wanted (the capture is scaled down to fit, never up).
   * @param {{video?: {width: number, height: number, frameRate?: number}, audio?: boolean}} options
   */
  static captureScreen(options = {}) { return captureScreen(options); }

  /**
   * @param {string} trackSid
   * @param {boolean} muted
   */
  _onServerMute(trackSid, muted) {
    const local = this.localTracks.find((t) => t.sid === trackSid);
    if (local) { local.muted = muted; if (local.track) local.track.enabled = !muted; }
    this._emit("localTrackMuted", {trackSid, muted, byServer: true});
  }

  /**
   * Sets this participant's own name, metadata or attributes (an attribute set to "" is removed),
   * when its token grants `updateMetadata`; resolves with its updated ParticipantInfo (1.6).
   * @param {{name?: string, metadata?: string, attributes?: Record<string, string>}} fields
   * @returns {Promise<ParticipantInfo | null>}
   */
  updateMetadata({name, metadata, attributes} = {}) {
    /** @type {Record<string, unknown>} */
    const payload = {};
    if (name !== undefined) payload.name = name;
    if (metadata !== undefined) payload.metadata = metadata;
    if (attributes !== undefined) payload.attributes = attributes;
    return this._request("updateMetadata", payload).then((reply) => {
      /** @type {ParticipantInfo[]} */
      const participants = reply.participants || [];
      this.model.update(participants);
      const own = this.participant;
      return participants.find((p) => own && p.uid === own.uid) || this.participant;
    });
  }

  /**
   * Mutes or unmutes a published track (the sender stops sending, the server tells the others).
   * @param {string} trackSid
   * @param {boolean} [muted]
   */
  mute(trackSid, muted = true) {
    const local = this.localTracks.find((t) => t.sid === trackSid);
    if (local) { local.muted = muted; if (local.track) local.track.enabled = !muted; }
    this._send("mute", {trackSid, muted});
  }

  /**
   * Stops publishing a track: the server unpublishes it at once; its transceiver goes inactive (an
   * offer says so) and is reused by the next track of its kind.
   * @param {string} trackSid
   * @returns {Promise<void>}
   */
  unpublish(trackSid) {
    const index = this.localTracks.findIndex((t) => t.sid === trackSid);
    this._send("unpublishTrack", {trackSid});
    if (index < 0) return Promise.resolve();
    const [local] = this.localTracks.splice(index, 1);
    this._published = this._published.filter((entry) => entry.track !== local.track);
    if (local.track) local.track.stop();
    return this._publisherQueue.run(async () => {
      await local.sender.replaceTrack(null);
      local.transceiver.direction = "inactive";
      this._spareTransceivers.push(local.transceiver);
      if (this.joined) await this._negotiatePublisher([]);
    });
  }

  // MARK: data (docs/data.md): the SDK's envelopes on `_reliable` and `_lossy`

  /**
   * Opens the `_reliable` (ordered, retransmitted) and `_lossy` (unordered, never retransmitted)
   * data channels on the publisher transport, negotiating it (a data-only offer when nothing is
   * published). `publishData` calls it; call it early to receive before sending. Kept across rejoins.
   * @returns {Promise<DataChannels>}
   */
  openData() {
    this._dataWanted = true;
    if (this._dataReady) return this._dataReady;
    const run = async () => {
      if (!this.joined) throw new RTCError(1004, "join first");
      const channels = createDataChannels(this._publisherPC(), (message) => this._emit("data", message), this.log);
      this._dataChannels = channels;
      await this._negotiatePublisher([]);
      await Promise.all([channels.reliable, channels.lossy].map((channel) => channelOpened(channel)));
      return channels;
    };
    const ready = this._publisherQueue.run(run);
    this._dataReady = ready;
    // A failed open is reported to its caller; forgetting it lets the next call try again.
    ready.catch(() => { if (this._dataReady === ready) this._dataReady = null; });
    return ready;
  }

  /**
   * Sends `payload` (a string, as UTF-8, or a Uint8Array) to everyone in the channel, or to the
   * uids in `destinations`, under `topic`: reliable (ordered, retransmitted) or not. The server
   * writes the sender; receivers get a `data` event.
   * @param {string | Uint8Array} payload
   * @param {{reliable?: boolean, topic?: string, destinations?: string[], stream?: number}} options
   */
  async publishData(payload, {reliable = true, topic = "", destinations = [], stream = 0} = {}) {
    const channels = await this.openData();
    const bytes = encodeDataMessage(payload, {topic, destinations, stream}, RTCClient.maxDataMessageBytes);
    const channel = reliable ? channels.reliable : channels.lossy;
    if (channel.readyState !== "open") throw new RTCError(0, `the ${channel.label} data channel is ${channel.readyState}`);
    channel.send(bytes);
  }

  // MARK: screen share (the `<host>_sub` auxiliary user, share.js)

  /**
   * Shares a screen as `<hostUid><suffix>` on a connection of its own: role broadcaster,
   * auto-subscription off (it receives nothing), one `screen` track. Captures first (a browser wants
   * the user gesture for getDisplayMedia), then joins and publishes. Resolves with the client.
   * @param {import("./share.js").ShareOptions} options
   * @returns {Promise<RTCClient>}
   */
  static shareScreen(options) {
    return shareScreen((clientOptions) => new RTCClient(clientOptions), options, (capture) => RTCClient.captureScreen(capture));
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

  /**
   * One remote track's inbound figures.
   * @param {RemoteTrack} remote
   */
  async receiverStats(remote) {
    if (!remote.receiver) throw new RTCError(0, `no receiver for ${remote.trackSid}`);
    return inboundFigures(remote, await remote.receiver.getStats(), this._stats);
  }

  /** Per published track: outbound-rtp stats (`framesSent`, `framesEncoded`, `bytesSent`, `packetsSent`, size, fps, kbps). */
  async localStats() {
    const out = [];
    for (const local of this.localTracks) {
      if (!local.sender) continue;
      out.push(outboundFigures(local, await local.sender.getStats(), this._stats));
    }
    return out;
  }
}
