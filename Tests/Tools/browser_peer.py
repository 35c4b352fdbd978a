#!/usr/bin/python3
"""Drives headless Chromium as a peer of the RTC server and prints one line of JSON about it.

Usage:
  browser_peer.py URL [--seconds S] [--expect-videos N] [--min-frames F] [--expect-sent F] [--expect-error TEXT] [--hold H]
  browser_peer.py [URL] --raw-publish WSURL --channel C --uid U --token T [--seconds S]
  browser_peer.py [URL] --raw-data WSURL --channel C --uid U --token T [--data-label L] [--data-count N] [--data-expect M]

Page mode opens URL (the web client, Web/index.html: /?channel=C&uid=U&token=T&mode=watch|publish|share)
and polls its `window.rtcTest` until the goal is met or S seconds passed. The goal: joined, no error, and
at least N remote videos with F decoded frames each (--expect-videos, --min-frames); with --expect-sent,
also a published video that sent F frames; with --expect-error, an error whose text contains TEXT (the
goal is then that error, not media); with --hold H, the page stays open H seconds after the goal is met
(a publisher others watch) and the goal must still hold then. Prints the final rtcTest state plus "ok" (and "reason" when not).

Raw mode (--raw-publish) does not use Web/rtc.js: on a page of the server's origin (URL, default
http://<WSURL's host>/healthz) it runs a few lines of plain JS with a WebSocket and one RTCPeerConnection
that joins, takes getUserMedia (audio + video), offers Chrome's default offer unchanged as the publisher
transport, applies the answer and reports the outbound-rtp stats after S seconds. "ok" when
setRemoteDescription took the answer and video frames were sent; its error text, if any, is in
"setRemoteDescriptionError".

Exits 0 when ok, 1 when not, 2 when Chromium or chromedriver could not start.
Needs Debian's python3-selenium, chromium and chromium-driver.
"""
import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from urllib.parse import urlsplit

import chromium  # noqa: E402 (next to this script)

webdriver = chromium.import_webdriver("browser_peer")

from peer_common import add_page_options, add_raw_data_options, kill_profile_processes, poll_page, run_raw_data  # noqa: E402 (next to this script, after the selenium check)

# On top of chromium.BASE_FLAGS: fake camera, microphone and screen, autoplay, no throttling.
FLAGS = (
    "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream",
    "--auto-select-desktop-capture-source=Entire screen", "--autoplay-policy=no-user-gesture-required",
    # The headless screen (what "Entire screen" captures) and the window: 1280x720.
    "--screen-info={1280x720}", "--window-size=1280,720",
    "--disable-background-timer-throttling", "--disable-renderer-backgrounding", "--disable-backgrounding-occluded-windows",
)

# The raw peer: plain JS, no SDK, Chrome's default offer. Reports into window.rawPeer.
RAW_PEER = r"""
const [wsURL, channel, uid, token, direction, bundlePolicy, simulcast] = arguments;
const s = window.rawPeer = {joined: false, offered: false, answerAccepted: false, setRemoteDescriptionError: null, error: null,
  serverErrors: [], received: [], connectionState: "new", outbound: {}, offerExtmaps: [], answerExtmaps: [], answerSdp: null};
const extmaps = (sdp) => sdp.split(/\r?\n/).filter((l) => l.startsWith("a=extmap:")).map((l) => l.slice(9))
  .filter((l, i, all) => all.indexOf(l) === i);
(async () => {
  const ws = new WebSocket(wsURL);
  let nextID = 1;
  const pending = new Map();
  const request = (type, payload) => new Promise((resolve, reject) => {
    const id = nextID++;
    pending.set(id, {resolve, reject});
    ws.send(JSON.stringify({v: "1.3", id, type, payload}));
  });
  ws.onmessage = (event) => {
    const m = JSON.parse(event.data);
    s.received.push(m.type);
    if (m.type === "error") s.serverErrors.push(m.payload.code + ": " + m.payload.reason);
    const p = m.id != null && pending.get(m.id);
    if (!p) return;
    pending.delete(m.id);
    if (m.type === "error") p.reject(new Error("server error " + m.payload.code + ": " + m.payload.reason)); else p.resolve(m.payload);
  };
  await new Promise((resolve, reject) => { ws.onopen = resolve; ws.onerror = () => reject(new Error("cannot connect to " + wsURL)); });
  ws.onclose = (e) => { s.closed = e.code; };
  const joined = await request("join", {token, channel, uid, role: "broadcaster", autoSubscribe: false,
                                        sdk: {name: "raw-js", version: "0", protocolVersion: {major: 1, minor: 3}}});
  s.joined = true;
  s.leave = () => ws.readyState === 1 && ws.send(JSON.stringify({v: "1.3", type: "leave", payload: {reason: "clientRequest"}}));
  setInterval(() => ws.readyState === 1 && ws.send(JSON.stringify({v: "1.3", type: "ping", payload: {timestamp: Date.now()}})),
              (joined.pingInterval || 5) * 1000);
  const stream = await navigator.mediaDevices.getUserMedia({audio: true,
    video: simulcast ? {width: {exact: 1280}, height: {exact: 720}, frameRate: 30} : {width: 640, height: 480}});
  const pc = window.rawPC = new RTCPeerConnection({bundlePolicy, iceServers: (joined.iceServers || []).map((x) => ({urls: x.urls,
    username: x.username ?? undefined, credential: x.credential ?? undefined}))});
  pc.onconnectionstatechange = () => { s.connectionState = pc.connectionState; };
  // addTrack (sendrecv) is what most apps do; --raw-direction sendonly adds sendonly transceivers instead.
  for (const track of stream.getTracks()) {
    if (simulcast && track.kind === "video") {
      // Three encodings, as LiveKit and most SFU apps send them: quarter, half and full size.
      pc.addTransceiver(track, {direction: "sendonly", streams: [stream], sendEncodings: [
        {rid: "q", scaleResolutionDownBy: 4, maxBitrate: 150000}, {rid: "h", scaleResolutionDownBy: 2, maxBitrate: 500000},
        {rid: "f", maxBitrate: 1500000}]});
    } else if (direction === "sendonly" || simulcast) {
      pc.addTransceiver(track, {direction: "sendonly", streams: [stream]});
    } else {
      pc.addTrack(track, stream);
    }
  }
  const offer = await pc.createOffer();
  await pc.setLocalDescription(offer);
  s.offerExtmaps = extmaps(pc.localDescription.sdp);
  const answer = await request("offer", {transport: "publisher", sdp: pc.localDescription.sdp});
  s.offered = true;
  s.answerSdp = answer.sdp;
  s.answerExtmaps = extmaps(answer.sdp);
  try {
    await pc.setRemoteDescription({type: "answer", sdp: answer.sdp});
    s.answerAccepted = true;
  } catch (error) {
    s.setRemoteDescriptionError = error.name + ": " + error.message;
    return;
  }
  setInterval(async () => {
    const report = await pc.getStats();
    const out = {};
    report.forEach((r) => {
      if (r.type !== "outbound-rtp") return;
      out[r.kind + (r.rid ? "-" + r.rid : "")] = {packetsSent: r.packetsSent || 0, bytesSent: r.bytesSent || 0, framesEncoded: r.framesEncoded,
                     framesSent: r.framesSent, frameWidth: r.frameWidth, frameHeight: r.frameHeight, encoderImplementation: r.encoderImplementation};
      if (r.kind === "audio") { delete out.audio.framesEncoded; delete out.audio.framesSent; }
    });
    s.outbound = out;
  }, 500);
})().catch((error) => { s.error = error.message || String(error); });
"""


def brief(error):
    """A selenium error's message on one line, without chromedriver's stack trace."""
    text = getattr(error, "msg", None) or str(error) or type(error).__name__
    return " ".join(text.split("Stacktrace")[0].split())[:300]


# The newest state polled, for the report when SIGTERM cuts a run short.
LAST = {}


# A WHIP publisher in plain JS (no SDK): the fake camera on a sendonly transceiver, one offer with
# its candidates POSTed with fetch (RFC 9725), the answer applied; DELETE when asked. Reports into
# window.whipPeer.
WHIP_PEER = r"""
const [endpoint, token] = arguments;
const s = window.whipPeer = {status: null, location: null, error: null, connected: false, framesSent: 0, deleted: null};
(async () => {
  const stream = await navigator.mediaDevices.getUserMedia({video: {width: 640, height: 360}, audio: true});
  const pc = window.whipPC = new RTCPeerConnection({bundlePolicy: "max-bundle"});
  for (const track of stream.getTracks()) pc.addTransceiver(track, {direction: "sendonly", streams: [stream]});
  pc.onconnectionstatechange = () => { if (pc.connectionState === "connected") s.connected = true; };
  await pc.setLocalDescription(await pc.createOffer());
  await new Promise((resolve) => {
    if (pc.iceGatheringState === "complete") return resolve();
    pc.addEventListener("icegatheringstatechange", () => pc.iceGatheringState === "complete" && resolve());
    setTimeout(resolve, 2000);
  });
  const reply = await fetch(endpoint, {method: "POST", body: pc.localDescription.sdp,
                                       headers: {"Content-Type": "application/sdp", "Authorization": "Bearer " + token}});
  s.status = reply.status;
  s.location = reply.headers.get("Location");
  s.etag = reply.headers.get("ETag");
  const body = await reply.text();
  if (reply.status !== 201) { s.error = "POST answered " + reply.status + ": " + body; return; }
  await pc.setRemoteDescription({type: "answer", sdp: body});
  s.leave = async () => { const r = await fetch(new URL(s.location, endpoint), {method: "DELETE"}); s.deleted = r.status; };
  setInterval(async () => {
    for (const report of (await pc.getStats()).values()) {
      if (report.type === "outbound-rtp" && report.kind === "video") s.framesSent = report.framesSent || 0;
    }
  }, 500);
})().catch((error) => { s.error = String(error && error.message || error); });
"""


# A WHEP viewer in plain JS: recvonly video and audio, one offer POSTed with fetch, the answer
# applied; frames decoded counted from getStats. Reports into window.whepPeer.
WHEP_PEER = r"""
const [endpoint, token] = arguments;
const s = window.whepPeer = {status: null, location: null, error: null, connected: false, framesDecoded: 0, width: 0, height: 0,
                             deleted: null};
(async () => {
  const pc = window.whepPC = new RTCPeerConnection({bundlePolicy: "max-bundle"});
  pc.addTransceiver("video", {direction: "recvonly"});
  pc.addTransceiver("audio", {direction: "recvonly"});
  pc.onconnectionstatechange = () => { if (pc.connectionState === "connected") s.connected = true; };
  await pc.setLocalDescription(await pc.createOffer());
  await new Promise((resolve) => {
    if (pc.iceGatheringState === "complete") return resolve();
    pc.addEventListener("icegatheringstatechange", () => pc.iceGatheringState === "complete" && resolve());
    setTimeout(resolve, 2000);
  });
  const reply = await fetch(endpoint, {method: "POST", body: pc.localDescription.sdp,
                                       headers: {"Content-Type": "application/sdp", "Authorization": "Bearer " + token}});
  s.status = reply.status;
  s.location = reply.headers.get("Location");
  const body = await reply.text();
  if (reply.status !== 201) { s.error = "POST answered " + reply.status + ": " + body; return; }
  await pc.setRemoteDescription({type: "answer", sdp: body});
  s.leave = async () => { const r = await fetch(new URL(s.location, endpoint), {method: "DELETE"}); s.deleted = r.status; };
  setInterval(async () => {
    for (const report of (await pc.getStats()).values()) {
      if (report.type === "inbound-rtp" && report.kind === "video") {
        s.framesDecoded = report.framesDecoded || 0; s.width = report.frameWidth || 0; s.height = report.frameHeight || 0;
      }
    }
  }, 500);
})().catch((error) => { s.error = String(error && error.message || error); });
"""


def run_http_peer(driver, args, mode, script, endpoint, done, ok, reason):
    """Runs a WHIP or WHEP page script against `endpoint` until `done(state)` or args.seconds, then
    DELETEs its session; the result is the page's state with "ok" and, when not, "reason"."""
    started = time.monotonic()
    parts = urlsplit(endpoint)
    driver.get(getattr(args, "url", None) or "%s://%s/healthz" % (parts.scheme, parts.netloc))
    driver.execute_script(script, endpoint, args.token)
    global_name = "window.%sPeer" % mode
    state = None
    while time.monotonic() < started + args.seconds:
        state = driver.execute_script("return %s ? JSON.parse(JSON.stringify(%s)) : null" % (global_name, global_name))
        LAST["state"] = state
        if state is None or state.get("error") or done(state):
            break
        time.sleep(0.25)
    if state and state.get("status") == 201:
        driver.execute_script("%s.leave()" % global_name)
        time.sleep(0.5)
        state = driver.execute_script("return JSON.parse(JSON.stringify(%s))" % global_name)
    result = {"mode": mode}
    result.update(state or {"error": "the %s peer did not start" % mode.upper()})
    result["ok"] = bool(state and state.get("status") == 201 and ok(state) and state.get("deleted") == 200)
    if not result["ok"]:
        result["reason"] = result.get("error") or reason(result)
    return result


def run_whep(driver, args):
    """Watches over WHEP until args.min_frames frames are decoded or args.seconds pass, then DELETEs."""
    enough = lambda state: (state.get("framesDecoded") or 0) >= args.min_frames
    return run_http_peer(driver, args, "whep", WHEP_PEER, args.raw_whep, enough, enough,
                         lambda r: "status %s, connected %s, %s frames, DELETE %s" % (
                             r.get("status"), r.get("connected"), r.get("framesDecoded"), r.get("deleted")))


def run_whip(driver, args):
    """Publishes over WHIP for args.seconds, then DELETEs the session."""
    return run_http_peer(driver, args, "whip", WHIP_PEER, args.raw_whip, lambda state: False,
                         lambda state: state.get("connected") and (state.get("framesSent") or 0) > 0,
                         lambda r: "status %s, connected %s, %s frames, DELETE %s" % (
                             r.get("status"), r.get("connected"), r.get("framesSent"), r.get("deleted")))


class Terminated(Exception):
    """SIGTERM (a test's timeout), raised so the driver and Chromium still quit."""


def terminate(*_):
    raise Terminated()




def run_page(driver, args):
    started = time.monotonic()
    driver.get(args.url)
    script = "return window.rtcTest ? JSON.parse(JSON.stringify(window.rtcTest)) : null"

    def read():
        LAST["state"] = driver.execute_script(script)
        return LAST["state"]
    return poll_page(read, args, started)


def run_raw(driver, args):
    started = time.monotonic()
    origin = urlsplit(args.raw_publish)
    page = args.url or "%s://%s/healthz" % ("https" if origin.scheme == "wss" else "http", origin.netloc)
    driver.get(page)
    driver.execute_script(RAW_PEER, args.raw_publish, args.channel, args.uid, args.token, args.raw_direction, args.raw_bundle_policy,
                          args.raw_simulcast)
    deadline = started + args.seconds
    state = None
    while True:
        state = driver.execute_script("return window.rawPeer ? JSON.parse(JSON.stringify(window.rawPeer)) : null")
        LAST["state"] = state
        if state is None or state.get("error") or state.get("setRemoteDescriptionError") or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    result = {"mode": "raw-publish", "direction": args.raw_direction, "bundlePolicy": args.raw_bundle_policy,
              "simulcast": args.raw_simulcast}
    result.update(state or {"error": "the raw peer did not start"})
    # One video stream, or one per simulcast encoding ("video-q", "video-h", "video-f"): some must have sent frames.
    videos = [v for k, v in (result.get("outbound") or {}).items() if k == "video" or k.startswith("video-")]
    result["ok"] = bool(result.get("answerAccepted") and not result.get("error")
                        and any((v.get("framesSent") or 0) > 0 and (v.get("packetsSent") or 0) > 0 for v in videos))
    if not args.keep_sdp:
        result.pop("answerSdp", None)
    if not result["ok"]:
        result["reason"] = (result.get("error") or result.get("setRemoteDescriptionError")
                            or ("no video frames sent" if result.get("answerAccepted") else "no answer accepted"))
    result["elapsedMs"] = round((time.monotonic() - started) * 1000)
    return result


def main():
    parser = argparse.ArgumentParser(description="Drive headless Chromium as a peer of the RTC server.")
    parser.add_argument("url", nargs="?", help="the web client's URL (raw mode: a page of the server's origin)")
    add_page_options(parser)  # --seconds is also raw mode's publishing time
    parser.add_argument("--secure-origin", default=None,
                        help="treat this http:// origin as secure (capture from a page served by another host without TLS)")
    parser.add_argument("--raw-publish", metavar="WSURL", help="publish from plain JS (no SDK) to this signaling URL")
    parser.add_argument("--channel")
    parser.add_argument("--uid")
    parser.add_argument("--token")
    parser.add_argument("--raw-direction", choices=("sendrecv", "sendonly"), default="sendrecv",
                        help="raw mode: pc.addTrack (sendrecv, the default) or sendonly transceivers")
    parser.add_argument("--raw-bundle-policy", choices=("max-bundle", "balanced", "max-compat"), default="max-bundle",
                        help="raw mode: the RTCPeerConnection's bundlePolicy (default max-bundle, as Web/rtc.js and most SDKs;"
                             " Chromium checks the answer's extension ids against the offer's only then)")
    parser.add_argument("--raw-simulcast", action="store_true",
                        help="raw mode: send the camera at 1280x720 as three simulcast encodings (rids q, h, f)")
    parser.add_argument("--keep-sdp", action="store_true", help="raw mode: include the server's answer SDP in the JSON")
    parser.add_argument("--raw-whip", metavar="ENDPOINT", help="publish the fake camera over WHIP (plain JS, fetch) to this URL with --token")
    parser.add_argument("--raw-whep", metavar="ENDPOINT", help="watch over WHEP (plain JS, fetch) from this URL with --token (--min-frames)")
    add_raw_data_options(parser)
    parser.add_argument("--chromium", default=chromium.CHROMIUM)
    parser.add_argument("--chromedriver", default=chromium.CHROMEDRIVER)
    args = parser.parse_args()
    if args.raw_whip or args.raw_whep:
        if not args.token:
            parser.error("--raw-whip and --raw-whep need --token")
    elif args.raw_publish or args.raw_data:
        missing = [name for name in ("channel", "uid", "token") if not getattr(args, name)]
        if missing:
            parser.error("--raw-publish and --raw-data need " + ", ".join("--" + name for name in missing))
    elif not args.url:
        parser.error("a URL is needed (or --raw-publish)")
    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, terminate)

    profile = tempfile.mkdtemp(prefix="browser-peer-")
    driver = None
    result = None
    try:
        flags = FLAGS
        if args.secure_origin:
            # A page from another host over plain http is not a secure context: no capture without this.
            flags += ("--unsafely-treat-insecure-origin-as-secure=" + args.secure_origin,)
        try:
            driver = chromium.start(webdriver, flags, profile=profile, chromium=args.chromium, chromedriver=args.chromedriver, console=True)
        except Terminated:
            raise
        except Exception as error:  # selenium raises several types here; all mean "could not start"
            print("browser_peer: cannot start Chromium: " + brief(error), file=sys.stderr)
            print(json.dumps({"ok": False, "error": "cannot start Chromium: " + brief(error)}))
            return 2
        driver.set_script_timeout(30)
        try:
            if args.raw_whip:
                result = run_whip(driver, args)
            elif args.raw_whep:
                result = run_whep(driver, args)
            elif args.raw_publish:
                result = run_raw(driver, args)
            elif args.raw_data:
                result = run_raw_data(driver.get, driver.execute_script, args, LAST)
            else:
                result = run_page(driver, args)
        except Terminated:
            result = dict(LAST.get("state") or {}, ok=False, reason="terminated")
        except Exception as error:
            result = dict(LAST.get("state") or {}, ok=False, reason="webdriver: " + brief(error))
        try:
            result["browser"] = driver.capabilities.get("browserVersion")
            logs = [entry.get("message", "") for entry in driver.get_log("browser") if entry.get("level") in ("SEVERE", "WARNING")]
            if logs:
                result["console"] = [line[:300] for line in logs[-10:]]
        except Exception:
            pass
    except Terminated:
        result = dict(LAST.get("state") or {}, ok=False, reason="terminated")
    finally:
        for number in (signal.SIGTERM, signal.SIGINT):  # a second signal must not interrupt the clean-up
            signal.signal(number, signal.SIG_IGN)
        if driver is not None:
            try:
                # Leave the channel first, so that the server does not keep us for its resume window.
                driver.set_script_timeout(2)
                driver.execute_script("if (window.rtcClient) window.rtcClient.leave();"
                                      " if (window.rawPeer && window.rawPeer.leave) window.rawPeer.leave();"
                                      " if (window.rawData && window.rawData.leave) window.rawData.leave();")
                time.sleep(0.1)
            except Exception:
                pass
            try:
                driver.quit()
            except Exception:
                pass
        kill_profile_processes(profile)
        shutil.rmtree(profile, ignore_errors=True)
    print(json.dumps(result))
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
