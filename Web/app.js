// The demo page: /?channel=C&uid=U[&token=T]&mode=watch|publish|share
//   [&server=ws://host:port/rtc] [&shareToken=T] [&width=W&height=H&fps=F] [&suffix=_sub]
// watch: join and show what arrives; publish: also publish camera + microphone; share: join as
// <uid> (receiving nothing: the server takes a share only while its host is in the channel), then
// as <uid>_sub, and publish the screen (getDisplayMedia, else a 1280x720 canvas).
//   [&data=1] (a chat box over the data channels) [&sendData=TEXT&dataTopic=T&dataPeers=N&dataHear=N&dataCount=C]
// window.rtcTest is the state a test driver polls (Tests/Tools/browser_peer.py).
import {RTCClient, RTCError, screenShareUID, requireCaptureContext, DEFAULT_SCREEN_SHARE_SUFFIX} from "./rtc.js";

const params = new URLSearchParams(location.search);
const mode = (params.get("mode") || "watch").toLowerCase();
const channel = params.get("channel");
const uid = params.get("uid");
const suffix = params.get("suffix") || DEFAULT_SCREEN_SHARE_SUFFIX;
const number = (name, fallback) => {
  const value = Number(params.get(name));
  return Number.isFinite(value) && value > 0 ? value : fallback;
};

const test = window.rtcTest = {
  mode, channel, uid, joined: false, error: null, errorCode: null, left: null, status: "starting",
  participants: [], published: [], videos: [], audios: [], ended: [], outbound: [], captureMethod: null, captureError: null,
  startedAt: Date.now(), joinStartMs: null, joinedMs: null, events: [], reconnecting: 0, rejoins: 0,
  data: [], dataSent: [], dataError: null, speakers: [], roomMetadata: null, mutedByServer: [], layers: {},
};
const $ = (selector) => document.querySelector(selector);

function note(event) {
  test.events.push({ms: Math.round(performance.now()), event});
  if (test.events.length > 50) test.events.shift();
}

function status(text) {
  test.status = text;
  $("#status").textContent = text;
}

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

async function fetchToken(forUid) {
  const url = `/dev-token?channel=${encodeURIComponent(channel)}&uid=${encodeURIComponent(forUid)}`;
  let response;
  try {
    response = await fetch(url, {cache: "no-store"});
  } catch (error) {
    throw new RTCError(0, `no token given and ${url} could not be fetched (${error.message})`);
  }
  if (!response.ok) {
    throw new RTCError(0, `no token given and ${url} answered ${response.status}: the server mints tokens only in --dev mode; pass &token=`);
  }
  return (await response.text()).trim();
}

// MARK: remote media

const tiles = new Map(); // trackSid -> {tile, video, entry, stats}

function attachTrack(remote) {
  if (remote.kind === "audio") {
    const audio = document.createElement("audio");
    audio.autoplay = true;
    audio.dataset.uid = remote.uid;
    audio.dataset.source = remote.source;
    audio.srcObject = new MediaStream([remote.track]);
    audio.play().catch(() => {});
    $("#audios").append(audio);
    const entry = {uid: remote.uid, source: remote.source, trackSid: remote.trackSid};
    test.audios.push(entry);
    tiles.set(remote.trackSid, {audio, entry});
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
  video.dataset.uid = remote.uid;
  video.dataset.source = remote.source;
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
  const entry = {uid: remote.uid, source: remote.source, trackSid: remote.trackSid, frames: 0, width: 0, height: 0,
                 firstFrameMs: null, frameTimesMs: [], fps: 0, kbps: 0, lossPercent: 0, muted: remote.muted};
  test.videos.push(entry);
  tiles.set(remote.trackSid, {tile, video, entry, stats, remote});
  if (remote.muted) tile.classList.add("muted");
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

function wire(client) {
  client.addEventListener("track", (e) => attachTrack(e.detail));
  client.addEventListener("trackEnded", (e) => detachTrack(e.detail));
  client.addEventListener("trackMuted", (e) => {
    const item = tiles.get(e.detail.trackSid);
    if (item && item.entry) item.entry.muted = e.detail.muted;
    if (item && item.tile) item.tile.classList.toggle("muted", e.detail.muted);
  });
  // Protocol 1.6: the room's metadata (set through the server's API), and this page's own tracks
  // muted by the API (the client stops sending them); 1.4: the layer this page gets of a track.
  client.addEventListener("roomUpdate", (e) => { test.roomMetadata = e.detail.metadata || ""; note(`room metadata ${test.roomMetadata}`); });
  client.addEventListener("localTrackMuted", (e) => {
    const local = client.localTracks.find((t) => t.sid === e.detail.trackSid);
    test.mutedByServer.push({trackSid: e.detail.trackSid, muted: e.detail.muted, kind: local ? local.kind : null});
    note(`${local ? local.kind : "track"} ${e.detail.muted ? "muted" : "unmuted"} by the server`);
  });
  client.addEventListener("layerChanged", (e) => { test.layers[e.detail.uid] = e.detail; });
  client.addEventListener("participants", () => {
    test.participants = [...client.participants.keys()];
    // What the server's API set (docs/server-api.md): names, metadata, attributes by uid.
    test.metadata = Object.fromEntries([...client.participants].map(([uid, info]) =>
      [uid, {name: info.name ?? null, metadata: info.metadata ?? null, attributes: info.attributes ?? null}]));
  });
  // Who speaks: the tiles of the speakers are outlined; rtcTest keeps the changes with the wall clock.
  client.addEventListener("activeSpeakers", (e) => {
    const uids = (e.detail.speakers || []).map((s) => s.uid);
    test.speakers.push([Date.now(), uids]);
    for (const [, item] of tiles) {
      if (item.tile && item.remote) item.tile.classList.toggle("speaking", uids.includes(item.remote.uid));
    }
    status(uids.length ? `speaking: ${uids.join(", ")}` : "nobody speaking");
  });
  client.addEventListener("participantLeft", (e) => {
    test.participants = [...client.participants.keys()];
    note(`left ${e.detail.uid} (${e.detail.reason})`);
  });
  client.addEventListener("error", (e) => {
    note(`server error ${e.detail.code}: ${e.detail.reason}`);
    if (!test.error) { test.error = e.detail.reason; test.errorCode = e.detail.code || null; }
  });
  client.addEventListener("leave", (e) => {
    // The media is gone; rtcTest keeps the last counts.
    for (const [key, item] of [...tiles]) {
      if (!item.remote && !item.audio) continue;
      (item.tile || item.audio).remove();
      tiles.delete(key);
    }
    test.left = e.detail.reason;
    test.joined = false;
    status(`left (${e.detail.reason})`);
  });
  client.addEventListener("connectionState", (e) => note(`${e.detail.transport} ${e.detail.state}`));
  // The server went away: the client joins again by itself (rtc.js `join`), and publishes again.
  client.addEventListener("reconnecting", (e) => {
    test.joined = false;
    test.reconnecting++;
    status(`reconnecting (${e.detail.reason})`);
    note(`reconnecting (${e.detail.reason})`);
  });
  client.addEventListener("rejoined", (e) => {
    test.joined = true;
    test.rejoins++;
    test.published = client.localTracks.map((t) => ({sid: t.sid, kind: t.kind, source: t.source, mid: t.mid}));
    status(`rejoined at ${e.detail.url}`);
    note(`rejoined at ${e.detail.url}`);
  });
}

function format(s) {
  const size = s.width && s.height ? `${s.width}x${s.height}` : "-";
  return `${size} ${Math.round(s.fps || 0)} fps ${Math.round(s.kbps || 0)} kbps loss ${(s.lossPercent || 0).toFixed(1)}%`;
}

function startStats(client) {
  setInterval(async () => {
    if (!client.joined) return;
    try {
      for (const s of await client.remoteVideoStats()) {
        const item = tiles.get(s.trackSid);
        if (!item || !item.entry) continue;
        Object.assign(item.entry, {fps: s.fps, kbps: Math.round(s.kbps), lossPercent: s.lossPercent, packetsLost: s.packetsLost,
                                   framesDecoded: s.framesDecoded, statsWidth: s.width, statsHeight: s.height});
        item.stats.textContent = format(s);
      }
      if (client.localTracks.length) {
        test.outbound = await client.localStats();
        for (const s of test.outbound) {
          const item = tiles.get("local:" + s.mid);
          if (item) item.stats.textContent = format(s) + `\n${s.framesSent} frames sent`;
        }
      }
    } catch (error) {
      note(`stats: ${error.message}`);
    }
  }, 1000);
}

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

function recordPublished(client, local) {
  test.published = client.localTracks.map((t) => ({sid: t.sid, kind: t.kind, source: t.source, mid: t.mid}));
  for (const t of local) if (t.kind === "video" && t.preview) tiles.set("local:" + t.mid, t.preview);
}

// MARK: screen capture

/** A 1280x720 moving test card on a canvas, for when getDisplayMedia is not there (headless). */
function canvasScreen(width, height, fps) {
  const canvas = document.createElement("canvas");
  canvas.width = width;
  canvas.height = height;
  const g = canvas.getContext("2d");
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

async function captureScreen(width, height, fps) {
  if (params.get("capture") !== "canvas") {
    try {
      const stream = await RTCClient.captureScreen({video: {width, height, frameRate: fps}});
      test.captureMethod = "getDisplayMedia";
      const settings = stream.getVideoTracks()[0].getSettings();
      test.captureSize = `${settings.width}x${settings.height}`;
      return stream;
    } catch (error) {
      test.captureError = `${error.name || "Error"}: ${error.message}`;
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
    form.addEventListener("submit", (event) => {
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
  const url = params.get("server") || undefined;
  // Other nodes to join again at if this one is lost: &fallback=ws://b:7880/rtc,ws://c:7880/rtc
  const fallbackURLs = (params.get("fallback") || "").split(",").filter(Boolean);
  const clientOptions = {log: (...args) => note(args.map(String).join(" "))};
  if (params.get("bundlePolicy")) clientOptions.bundlePolicy = params.get("bundlePolicy");
  if (params.get("preferCodecs") === "false") clientOptions.preferCodecs = false;
  const client = new RTCClient(clientOptions);
  window.rtcClient = client;
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
    window.rtcClient = share;
    wire(share);
    startStats(share);
    $("#leave").onclick = async () => { await share.leave(); await client.leave(); };
    test.joined = true;
    test.joinedMs = Math.round(performance.now());
    test.participants = [...share.participants.keys()];
    const preview = showLocal(stream, `${joinUid} · screen (${test.captureMethod})`);
    for (const t of share.localTracks) if (t.kind === "video") t.preview = preview;
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
  if (params.get("data") === "1" || params.has("sendData")) setUpChat(client).catch((error) => { test.dataError = String(error.reason || error); });

  if (mode === "publish") {
    const width = number("width", 640), height = number("height", 360), fps = number("fps", 15);
    status("publishing");
    requireCaptureContext("getUserMedia");
    const stream = await navigator.mediaDevices.getUserMedia({
      audio: true, video: {width: {ideal: width}, height: {ideal: height}, frameRate: {ideal: fps}},
    });
    const preview = showLocal(stream, `${uid} · camera (local)`);
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
      button.onclick = () => { client.mute(audio.sid, !audio.muted); button.textContent = audio.muted ? "Unmute mic" : "Mute mic"; };
    }
    if (video) {
      const button = $("#mute-video");
      button.hidden = false;
      button.onclick = () => { client.mute(video.sid, !video.muted); button.textContent = video.muted ? "Start camera" : "Stop camera"; };
    }
    status("publishing");
    setUpShareButton(url, clientOptions);
  }
}

/**
 * The chat box: data messages (topic `dataTopic`, default chat) over the SDK's data channels, each
 * line its sender as the server wrote it. `sendData` sends one message once `dataPeers` others are in
 * (and, with `dataHear`, once that many others have been heard).
 */
async function setUpChat(client) {
  const topic = params.get("dataTopic") || "chat";
  const log = $("#chat-log");
  const show = (who, text) => {
    const item = document.createElement("li");
    item.textContent = `${who}: ${text}`;
    log.append(item);
  };
  client.addEventListener("data", (e) => {
    const {uid: from, topic: got, text, reliable} = e.detail;
    test.data.push({from, topic: got, text, reliable, ms: Math.round(performance.now())});
    show(`${from}${got && got !== topic ? " [" + got + "]" : ""}`, text === null ? `(${e.detail.payload.length} bytes)` : text);
  });
  $("#chat").hidden = false;
  await client.openData();
  note("data open");
  $("#chat-form").addEventListener("submit", async (event) => {
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

/** Publish mode: share the screen as <uid>_sub from this page (a second connection). */
function setUpShareButton(url, clientOptions) {
  const button = $("#share");
  button.hidden = false;
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
      const token = params.get("shareToken") || await fetchToken(screenShareUID(uid, suffix));
      share = await RTCClient.shareScreen({url, channel, hostUid: uid, token, suffix, stream, clientOptions});
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
window.addEventListener("pagehide", () => { if (window.rtcClient) window.rtcClient.leave(); });
window.addEventListener("unhandledrejection", (event) => showError(event.reason));
start().catch(showError);
