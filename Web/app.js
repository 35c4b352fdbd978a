// The demo page: /?channel=C&uid=U[&token=T]&mode=watch|publish|share
//   [&server=ws://host:port/rtc] [&shareToken=T] [&width=W&height=H&fps=F] [&suffix=_sub]
// watch: join and show what arrives; publish: also publish camera + microphone; share: join as
// <uid> (receiving nothing: the server takes a share only while its host is in the channel), then
// as <uid>_sub, and publish the screen (getDisplayMedia, else a 1280x720 canvas).
//   [&data=1] (a chat box over the data channels) [&sendData=TEXT&dataTopic=T&dataPeers=N&dataHear=N&dataCount=C]
// window.rtcTest is the state a test driver polls (Tests/Tools/browser_peer.py).
import {RTCClient, RTCError, screenShareUID, requireCaptureContext, DEFAULT_SCREEN_SHARE_SUFFIX} from "./rtc.js";

/**
 * @typedef {import("./participants.js").RemoteTrack} RemoteTrack
 * @typedef {import("./client.js").LocalTrack & {preview?: Preview}} LocalTrack
 * @typedef {import("./client.js").ClientOptions} ClientOptions
 * @typedef {{tile: HTMLElement, stats: HTMLElement}} Preview
 * @typedef {{uid: string | null, source: string | null, trackSid: string, frames?: number, width?: number, height?: number,
 *            firstFrameMs?: number | null, frameTimesMs?: number[], muted?: boolean, [field: string]: unknown}} MediaEntry
 * @typedef {{entry?: MediaEntry, tile?: HTMLElement, audio?: HTMLAudioElement, video?: HTMLVideoElement, stats: HTMLElement | null,
 *            remote?: RemoteTrack}} Tile
 * @typedef {{mode: string, channel: string | null, uid: string | null, joined: boolean, error: string | null,
 *            errorCode: number | null, left: string | null, status: string, participants: string[],
 *            published: {sid: string | null, kind: string, source: string, mid: string | null}[], videos: MediaEntry[],
 *            audios: MediaEntry[], ended: object[], outbound: any[], captureMethod: string | null, captureError: string | null,
 *            captureSize?: string, startedAt: number, joinStartMs: number | null, joinedMs: number | null,
 *            events: {ms: number, event: string}[], reconnecting: number, rejoins: number,
 *            data: {from: string, topic: string, text: string | null, reliable: boolean, ms: number}[], dataSent: string[],
 *            dataError: string | null, speakers: [number, string[]][], roomMetadata: string | null,
 *            mutedByServer: {trackSid: string, muted: boolean, kind: string | null}[], layers: Record<string, unknown>,
 *            metadata?: Record<string, unknown>, share?: {uid: string | null, captureMethod: string | null} | null}} RtcTestState
 *   What end-to-end tests read (window.rtcTest).
 */

/** The page's globals: the state tests read and the client they may drive. */
const page = /** @type {Window & typeof globalThis & {rtcTest: RtcTestState, rtcClient?: RTCClient}} */ (window);

const params = new URLSearchParams(location.search);
const mode = (params.get("mode") || "watch").toLowerCase();
const channel = params.get("channel");
const uid = params.get("uid");
const suffix = params.get("suffix") || DEFAULT_SCREEN_SHARE_SUFFIX;
/**
 * A positive number parameter, else `fallback`.
 * @param {string} name
 * @param {number} fallback
 */
const number = (name, fallback) => {
  const value = Number(params.get(name));
  return Number.isFinite(value) && value > 0 ? value : fallback;
};

/** @type {RtcTestState} */
const test = page.rtcTest = {
  mode, channel, uid, joined: false, error: null, errorCode: null, left: null, status: "starting",
  participants: [], published: [], videos: [], audios: [], ended: [], outbound: [], captureMethod: null, captureError: null,
  startedAt: Date.now(), joinStartMs: null, joinedMs: null, events: [], reconnecting: 0, rejoins: 0,
  data: [], dataSent: [], dataError: null, speakers: [], roomMetadata: null, mutedByServer: [], layers: {},
};
/**
 * An element of index.html, which has them all (typed loosely: the page's own ids, of several kinds).
 * @param {string} selector
 * @returns {any}
 */
const $ = (selector) => document.querySelector(selector);

/**
 * Listens to a client's event, with its detail.
 * @param {RTCClient} client
 * @param {string} type
 * @param {(detail: any) => void} handler
 */
function on(client, type, handler) {
  client.addEventListener(type, (event) => handler(/** @type {CustomEvent} */ (event).detail));
}

/** @param {string} event */
function note(event) {
  test.events.push({ms: Math.round(performance.now()), event});
  if (test.events.length > 50) test.events.shift();
}

/** @param {string} text */
function status(text) {
  test.status = text;
  $("#status").textContent = text;
}

/** @param {any} error */
function showError(error) {
  const reason = error instanceof RTCError ? error.reason : (error && error.message) || String(error);
  const code = error && error.code ? error.code : null;
  test.error = reason;
  test.errorCode = code;
  const box = $("#error");
  box.hidden = false;
  box.textContent = code ? `Error ${code}: ${reason}` : `Error: ${reason}`;
  status("failed");
  note(`error ${code || ""} ${reason}`);
}

/** @param {string} forUid */
async function fetchToken(forUid) {
  const url = `/dev-token?channel=${encodeURIComponent(channel || "")}&uid=${encodeURIComponent(forUid)}`;
  let response;
  try {
    response = await fetch(url, {cache: "no-store"});
  } catch (error) {
    throw new RTCError(0, `no token given and ${url} could not be fetched (${error instanceof Error ? error.message : error})`);
  }
  if (!response.ok) {
    throw new RTCError(0, `no token given and ${url} answered ${response.status}: the server mints tokens only in --dev mode; pass &token=`);
  }
  return (await response.text()).trim();
}

// MARK: remote media

/** @type {Map<string, Tile>} trackSid (or local:<mid>) -> its tile */
const tiles = new Map();

/** @param {RemoteTrack} remote */
function attachTrack(remote) {
  if (remote.kind === "audio") {
    const audio = document.createElement("audio");
    audio.autoplay = true;
    audio.dataset.uid = remote.uid || "";
    audio.dataset.source = remote.source || "";
    audio.srcObject = new MediaStream([remote.track]);
    audio.play().catch((error) => note(`audio play(): ${error.message}`));
    $("#audios").append(audio);
    const entry = {uid: remote.uid, source: remote.source, trackSid: remote.trackSid};
    test.audios.push(entry);
    tiles.set(remote.trackSid, {audio, entry, stats: null});
    note(`audio ${remote.uid}/${remote.source}`);
    return;
  }
  const screen = remote.source === "screen";
  const tile = document.createElement("div");
  tile.className = "tile " + (screen ? "screen" : "camera");
  const video = document.createElement("video");
  video.autoplay = true;
  video.playsInline = true;
  video.muted = true;
  video.setAttribute("playsinline", "");
  video.setAttribute("muted", "");
  video.dataset.uid = remote.uid || "";
  video.dataset.source = remote.source || "";
  video.dataset.trackSid = remote.trackSid;
  video.srcObject = new MediaStream([remote.track]);
  const label = document.createElement("div");
  label.className = "label";
  label.textContent = `${remote.uid} · ${remote.source}`;
  const stats = document.createElement("div");
  stats.className = "stats";
  stats.textContent = "…";
  tile.append(video, label, stats);
  (screen ? $("#screens") : $("#cameras")).append(tile);
  /** @type {MediaEntry & {frames: number, frameTimesMs: number[], firstFrameMs: number | null}} */
  const entry = {uid: remote.uid, source: remote.source, trackSid: remote.trackSid, frames: 0, width: 0, height: 0,
                 firstFrameMs: null, frameTimesMs: [], fps: 0, kbps: 0, lossPercent: 0, muted: remote.muted};
  test.videos.push(entry);
  tiles.set(remote.trackSid, {tile, video, entry, stats, remote});
  if (remote.muted) tile.classList.add("muted");
  /** @type {VideoFrameRequestCallback} */
  const onFrame = (now, meta) => {
    if (!tiles.has(remote.trackSid)) return;
    entry.frames++;
    if (entry.frameTimesMs.length < 2000) entry.frameTimesMs.push(Math.round(performance.now() * 10) / 10);
    if (entry.firstFrameMs === null) {
      entry.firstFrameMs = Math.round(performance.now());
      note(`first frame ${remote.uid}/${remote.source}`);
    }
    entry.width = meta.width;
    entry.height = meta.height;
    video.requestVideoFrameCallback(onFrame);
  };
  if (video.requestVideoFrameCallback) video.requestVideoFrameCallback(onFrame);
  video.play().catch((error) => note(`play(): ${error.message}`));
  note(`video ${remote.uid}/${remote.source}`);
}

/** @param {RemoteTrack} remote */
function detachTrack(remote) {
  const item = tiles.get(remote.trackSid);
  if (!item) return;
  tiles.delete(remote.trackSid);
  if (item.tile) item.tile.remove();
  if (item.audio) item.audio.remove();
  test.videos = test.videos.filter((v) => v !== item.entry);
  test.audios = test.audios.filter((a) => a !== item.entry);
  test.ended.push({...item.entry, kind: item.audio ? "audio" : "video", endedMs: Math.round(performance.now())});
  note(`ended ${remote.uid}/${remote.source}`);
}

/** @param {RTCClient} client */
function wire(client) {
  on(client, "track", (detail) => attachTrack(detail));
  on(client, "trackEnded", (detail) => detachTrack(detail));
  on(client, "trackMuted", (detail) => {
    const item = tiles.get(detail.trackSid);
    if (item && item.entry) item.entry.muted = detail.muted;
    if (item && item.tile) item.tile.classList.toggle("muted", detail.muted);
  });
  // Protocol 1.6: the room's metadata (set through the server's API), and this page's own tracks
  // muted by the API (the client stops sending them); 1.4: the layer this page gets of a track.
  on(client, "roomUpdate", (detail) => { test.roomMetadata = detail.metadata || ""; note(`room metadata ${test.roomMetadata}`); });
  on(client, "localTrackMuted", (detail) => {
    const local = client.localTracks.find((t) => t.sid === detail.trackSid);
    test.mutedByServer.push({trackSid: detail.trackSid, muted: detail.muted, kind: local ? local.kind : null});
    note(`${local ? local.kind : "track"} ${detail.muted ? "muted" : "unmuted"} by the server`);
  });
  on(client, "layerChanged", (detail) => { test.layers[detail.uid] = detail; });
  on(client, "participants", () => {
    test.participants = [...client.participants.keys()];
    // What the server's API set (docs/server-api.md): names, metadata, attributes by uid.
    test.metadata = Object.fromEntries([...client.participants].map(([uid, info]) =>
      [uid, {name: info.name ?? null, metadata: info.metadata ?? null, attributes: info.attributes ?? null}]));
  });
  // Who speaks: the tiles of the speakers are outlined; rtcTest keeps the changes with the wall clock.
  on(client, "activeSpeakers", (detail) => {
    const uids = (detail.speakers || []).map((/** @type {{uid: string}} */ s) => s.uid);
    test.speakers.push([Date.now(), uids]);
    for (const [, item] of tiles) {
      if (item.tile && item.remote) item.tile.classList.toggle("speaking", uids.includes(item.remote.uid));
    }
    status(uids.length ? `speaking: ${uids.join(", ")}` : "nobody speaking");
  });
  on(client, "participantLeft", (detail) => {
    test.participants = [...client.participants.keys()];
    note(`left ${detail.uid} (${detail.reason})`);
  });
  on(client, "error", (detail) => {
    note(`server error ${detail.code}: ${detail.reason}`);
    if (!test.error) { test.error = detail.reason; test.errorCode = detail.code || null; }
  });
  on(client, "leave", (detail) => {
    // The media is gone; rtcTest keeps the last counts.
    for (const [key, item] of [...tiles]) {
      if (!item.remote && !item.audio) continue;
      const element = item.tile || item.audio;
      if (element) element.remove();
      tiles.delete(key);
    }
    test.left = detail.reason;
    test.joined = false;
    status(`left (${detail.reason})`);
  });
  on(client, "connectionState", (detail) => note(`${detail.transport} ${detail.state}`));
  // The server went away: the client joins again by itself (rtc.js `join`), and publishes again.
  on(client, "reconnecting", (detail) => {
    test.joined = false;
    test.reconnecting++;
    status(`reconnecting (${detail.reason})`);
    note(`reconnecting (${detail.reason})`);
  });
  on(client, "rejoined", (detail) => {
    test.joined = true;
    test.rejoins++;
    test.published = client.localTracks.map((t) => ({sid: t.sid, kind: t.kind, source: t.source, mid: t.mid}));
    status(`rejoined at ${detail.url}`);
    note(`rejoined at ${detail.url}`);
  });
}

/** @param {{width?: number, height?: number, fps?: number, kbps?: number, lossPercent?: number}} s */
function format(s) {
  const size = s.width && s.height ? `${s.width}x${s.height}` : "-";
  return `${size} ${Math.round(s.fps || 0)} fps ${Math.round(s.kbps || 0)} kbps loss ${(s.lossPercent || 0).toFixed(1)}%`;
}

/** @param {RTCClient} client */
function startStats(client) {
  setInterval(async () => {
    if (!client.joined) return;
    try {
      for (const s of await client.remoteVideoStats()) {
        const item = tiles.get(s.trackSid);
        if (!item || !item.entry) continue;
        Object.assign(item.entry, {fps: s.fps, kbps: Math.round(s.kbps), lossPercent: s.lossPercent, packetsLost: s.packetsLost,
                                   framesDecoded: s.framesDecoded, statsWidth: s.width, statsHeight: s.height});
        if (item.stats) item.stats.textContent = format(s);
      }
      if (client.localTracks.length) {
        test.outbound = await client.localStats();
        for (const s of test.outbound) {
          const item = tiles.get("local:" + s.mid);
          if (item && item.stats) item.stats.textContent = format(s) + `\n${s.framesSent} frames sent`;
        }
      }
    } catch (error) {
      note(`stats: ${error instanceof Error ? error.message : error}`);
    }
  }, 1000);
}

/**
 * @param {MediaStream} stream
 * @param {string} label
 * @returns {Preview}
 */
function showLocal(stream, label) {
  const tile = document.createElement("div");
  tile.className = "tile local";
  const video = document.createElement("video");
  video.autoplay = true;
  video.muted = true;
  video.playsInline = true;
  video.dataset.local = "true";
  video.srcObject = new MediaStream(stream.getVideoTracks());
  const name = document.createElement("div");
  name.className = "label";
  name.textContent = label;
  const stats = document.createElement("div");
  stats.className = "stats";
  tile.append(video, name, stats);
  $("#local").append(tile);
  return {tile, stats};
}

/**
 * @param {RTCClient} client
 * @param {LocalTrack[]} local
 */
function recordPublished(client, local) {
  test.published = client.localTracks.map((t) => ({sid: t.sid, kind: t.kind, source: t.source, mid: t.mid}));
  for (const t of local) if (t.kind === "video" && t.preview) tiles.set("local:" + t.mid, t.preview);
}

// MARK: screen capture

/** A 1280x720 moving test card on a canvas, for when getDisplayMedia is not there (headless). */
/**
 * @param {number} width
 * @param {number} height
 * @param {number} fps
 */
function canvasScreen(width, height, fps) {
  const canvas = document.createElement("canvas");
  canvas.width = width;
  canvas.height = height;
  const g = canvas.getContext("2d");
  if (!g) throw new RTCError(0, "no 2d canvas context for the test card");
  let frame = 0;
  const draw = () => {
    frame++;
    g.fillStyle = "#f4f4f4";
    g.fillRect(0, 0, width, height);
    g.fillStyle = "#2a4d8f";
    g.fillRect(0, 0, width, 48);
    g.fillStyle = "#fff";
    g.font = "28px sans-serif";
    g.fillText(`screen share · ${uid} · frame ${frame}`, 16, 34);
    g.fillStyle = "#222";
    g.font = "18px monospace";
    for (let line = 0; line < 28; line++) {
      g.fillText(`${String(line + frame).padStart(5, "0")}  the quick brown fox jumps over the lazy dog  ${new Date().toISOString()}`,
                 24, 80 + line * 22);
    }
    g.fillStyle = "#c33";
    g.fillRect((frame * 8) % (width - 60), height - 60, 60, 40);
  };
  draw();
  const timer = setInterval(draw, 1000 / fps);
  const stream = canvas.captureStream(fps);
  stream.getVideoTracks()[0].addEventListener("ended", () => clearInterval(timer));
  return stream;
}

/**
 * @param {number} width
 * @param {number} height
 * @param {number} fps
 * @returns {Promise<MediaStream>}
 */
async function captureScreen(width, height, fps) {
  if (params.get("capture") !== "canvas") {
    try {
      const stream = await RTCClient.captureScreen({video: {width, height, frameRate: fps}});
      test.captureMethod = "getDisplayMedia";
      const settings = stream.getVideoTracks()[0].getSettings();
      test.captureSize = `${settings.width}x${settings.height}`;
      return stream;
    } catch (error) {
      test.captureError = error instanceof Error ? `${error.name || "Error"}: ${error.message}` : String(error);
      note(`getDisplayMedia failed: ${test.captureError}; using a canvas`);
    }
  }
  test.captureMethod = "canvas";
  test.captureSize = `${width}x${height}`;
  return canvasScreen(width, height, fps);
}

// MARK: start

async function start() {
  if (!channel || !uid) {
    const form = $("#start");
    form.hidden = false;
    for (const [key, value] of params) if (form.elements[key]) form.elements[key].value = value;
    status("enter a channel and uid");
    form.addEventListener("submit", (/** @type {Event} */ event) => {
      event.preventDefault();
      const next = new URLSearchParams(params);
      for (const key of ["channel", "uid", "mode", "token"]) {
        const value = form.elements[key].value.trim();
        if (value) next.set(key, value); else next.delete(key);
      }
      location.search = next.toString();
    });
    return;
  }
  const url = params.get("server") || null;
  // Other nodes to join again at if this one is lost: &fallback=ws://b:7880/rtc,ws://c:7880/rtc
  const fallbackURLs = (params.get("fallback") || "").split(",").filter(Boolean);
  /** @type {ClientOptions} */
  const clientOptions = {log: (...args) => note(args.map(String).join(" "))};
  const bundlePolicy = params.get("bundlePolicy");
  if (bundlePolicy) clientOptions.bundlePolicy = /** @type {RTCBundlePolicy} */ (bundlePolicy);
  if (params.get("preferCodecs") === "false") clientOptions.preferCodecs = false;
  const client = new RTCClient(clientOptions);
  page.rtcClient = client;
  wire(client);
  startStats(client);
  $("#leave").hidden = false;
  $("#leave").onclick = () => client.leave();

  if (mode === "share") {
    const width = number("width", 1280), height = number("height", 720), fps = number("fps", 15);
    const joinUid = screenShareUID(uid, suffix);
    test.uid = joinUid;
    $("#who").textContent = `${joinUid} in ${channel} (screen share)`;
    status("capturing the screen");
    const stream = await captureScreen(width, height, fps);
    const token = params.get("shareToken") || await fetchToken(joinUid);
    status("joining");
    test.joinStartMs = Math.round(performance.now());
    // The host first, receiving nothing (the page is its own host).
    await client.join({url, fallbackURLs, channel, uid, token: params.get("token") || await fetchToken(uid), role: "audience",
                       autoSubscribe: false, autoSubscribeAudio: false, autoSubscribeVideo: false});
    const share = await RTCClient.shareScreen({url, fallbackURLs, channel, hostUid: uid, token, suffix, stream,
                                               video: {width, height, frameRate: fps}, clientOptions});
    page.rtcClient = share;
    wire(share);
    startStats(share);
    $("#leave").onclick = async () => { await share.leave(); await client.leave(); };
    test.joined = true;
    test.joinedMs = Math.round(performance.now());
    test.participants = [...share.participants.keys()];
    const preview = showLocal(stream, `${joinUid} · screen (${test.captureMethod})`);
    for (const t of /** @type {LocalTrack[]} */ (share.localTracks)) if (t.kind === "video") t.preview = preview;
    recordPublished(share, share.localTracks);
    status("sharing");
    return;
  }

  test.uid = uid;
  $("#who").textContent = `${uid} in ${channel} (${mode})`;
  const token = params.get("token") || await fetchToken(uid);
  status("joining");
  test.joinStartMs = Math.round(performance.now());
  await client.join({url, fallbackURLs, channel, uid, token, role: mode === "publish" ? "broadcaster" : (params.get("role") || "broadcaster"),
                     autoSubscribe: params.get("autoSubscribe") !== "false",
                     ignoreScreenShare: params.has("ignoreScreenShare") ? params.get("ignoreScreenShare") === "true" : undefined});
  test.joined = true;
  test.joinedMs = Math.round(performance.now());
  test.participants = [...client.participants.keys()];
  test.roomMetadata = client.roomMetadata;
  status("joined");
  note("joined");
  if (params.get("data") === "1" || params.has("sendData")) {
    setUpChat(client).catch((error) => { test.dataError = String(error.reason || error); });
  }

  if (mode === "publish") {
    const width = number("width", 640), height = number("height", 360), fps = number("fps", 15);
    status("publishing");
    requireCaptureContext("getUserMedia");
    const stream = await navigator.mediaDevices.getUserMedia({
      audio: true, video: {width: {ideal: width}, height: {ideal: height}, frameRate: {ideal: fps}},
    });
    const preview = showLocal(stream, `${uid} · camera (local)`);
    /** @type {LocalTrack[]} */
    let local;
    try {
      local = await client.publishCamera({stream});
    } finally {
      test.published = client.localTracks.map((t) => ({sid: t.sid, kind: t.kind, source: t.source, mid: t.mid}));
    }
    for (const t of local) if (t.kind === "video") t.preview = preview;
    recordPublished(client, local);
    const audio = local.find((t) => t.kind === "audio"), video = local.find((t) => t.kind === "video");
    if (audio) {
      const button = $("#mute-audio");
      button.hidden = false;
      button.onclick = () => { if (audio.sid) client.mute(audio.sid, !audio.muted); button.textContent = audio.muted ? "Unmute mic" : "Mute mic"; };
    }
    if (video) {
      const button = $("#mute-video");
      button.hidden = false;
      button.onclick = () => { if (video.sid) client.mute(video.sid, !video.muted); button.textContent = video.muted ? "Start camera" : "Stop camera"; };
    }
    status("publishing");
    setUpShareButton(url, clientOptions);
  }
}

/**
 * The chat box: data messages (topic `dataTopic`, default chat) over the SDK's data channels, each
 * line its sender as the server wrote it. `sendData` sends one message once `dataPeers` others are in
 * (and, with `dataHear`, once that many others have been heard).
 * @param {RTCClient} client
 */
async function setUpChat(client) {
  const topic = params.get("dataTopic") || "chat";
  const log = $("#chat-log");
  /**
   * @param {string} who
   * @param {string} text
   */
  const show = (who, text) => {
    const item = document.createElement("li");
    item.textContent = `${who}: ${text}`;
    log.append(item);
  };
  on(client, "data", (detail) => {
    const {uid: from, topic: got, text, reliable} = detail;
    test.data.push({from, topic: got, text, reliable, ms: Math.round(performance.now())});
    show(`${from}${got && got !== topic ? " [" + got + "]" : ""}`, text === null ? `(${detail.payload.length} bytes)` : text);
  });
  $("#chat").hidden = false;
  await client.openData();
  note("data open");
  $("#chat-form").addEventListener("submit", async (/** @type {Event} */ event) => {
    event.preventDefault();
    const input = $("#chat-text");
    if (!input.value) return;
    try {
      await client.publishData(input.value, {topic});
      show(`${uid} (me)`, input.value);
      input.value = "";
    } catch (error) { showError(error); }
  });
  const text = params.get("sendData");
  if (text) {
    const peers = number("dataPeers", 0), hear = number("dataHear", 0), count = number("dataCount", 1);
    while (client.participants.size < peers) await new Promise((resolve) => setTimeout(resolve, 100));
    if (hear > 0) {
      // "<uid> hello" until `hear` others are heard on data (the server relays only to those whose
      // channels are up), then three more for those still waiting on this page.
      const heard = () => new Set(test.data.map((m) => m.from).filter((from) => from && from !== uid)).size;
      for (let extra = 3; extra > 0;) {
        if (heard() >= hear) extra -= 1;
        await client.publishData(`${uid} hello`, {topic});
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    }
    for (let n = 0; n < count; n += 1) {
      const line = count > 1 ? `${text} ${n}` : text;
      await client.publishData(line, {topic});
      test.dataSent.push(line);
      show(`${uid} (me)`, line);
      if (n + 1 < count) await new Promise((resolve) => setTimeout(resolve, 500));
    }
  }
}

/**
 * Publish mode: share the screen as <uid>_sub from this page (a second connection).
 * @param {string | null} url
 * @param {ClientOptions} clientOptions
 */
function setUpShareButton(url, clientOptions) {
  // Set up only after joining, so the page's uid is there.
  const hostUid = /** @type {string} */ (uid);
  const button = $("#share");
  button.hidden = false;
  /** @type {RTCClient | null} */
  let share = null;
  button.onclick = async () => {
    button.disabled = true;
    try {
      if (share) {
        await share.leave();
        share = null;
        test.share = null;
        button.textContent = "Share screen";
        return;
      }
      const fps = number("fps", 15);
      const stream = await captureScreen(1280, 720, fps); // in the click: browsers want the gesture
      const token = params.get("shareToken") || await fetchToken(screenShareUID(hostUid, suffix));
      share = await RTCClient.shareScreen({url, channel: /** @type {string} */ (channel), hostUid, token, suffix, stream, clientOptions});
      share.addEventListener("leave", () => { share = null; test.share = null; button.textContent = "Share screen"; });
      test.share = {uid: share.uid, captureMethod: test.captureMethod};
      button.textContent = "Stop sharing";
    } catch (error) {
      showError(error);
    } finally {
      button.disabled = false;
    }
  };
}

// Leave at once when the page goes away, instead of the server holding the user for its resume window.
window.addEventListener("pagehide", () => { if (page.rtcClient) page.rtcClient.leave(); });
window.addEventListener("unhandledrejection", (event) => showError(event.reason));
start().catch(showError);
