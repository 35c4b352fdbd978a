"""What browser_peer.py (Chromium) and firefox_peer.py (Firefox) share: the page goal and the clean-up."""
import os
import signal
import time
from urllib.parse import urlsplit


def kill_profile_processes(profile):
    """SIGKILLs whatever still runs with our temporary profile on its command line (the browser and its children)."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as handle:
                cmdline = handle.read().decode("utf-8", "replace")
        except OSError:
            continue
        if profile in cmdline:
            try:
                os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass


def page_goal(state, args):
    """(done, ok, reason) for the page's rtcTest state."""
    if state is None:
        return False, False, "window.rtcTest is not there (not the web client?)"
    error = state.get("error")
    if args.expect_error is not None:
        if error and args.expect_error.lower() in error.lower():
            return True, True, None
        return bool(error), False, "error %r does not contain %r" % (error, args.expect_error) if error else "no error yet"
    if error:
        return True, False, "page error: " + error
    if state.get("left"):
        return True, False, "left the channel: " + str(state["left"])
    if not state.get("joined"):
        return False, False, "not joined"
    videos = [v for v in state.get("videos", []) if (v.get("frames") or 0) >= args.min_frames]
    if len(videos) < args.expect_videos:
        return False, False, "%d of %d videos with %d frames" % (len(videos), args.expect_videos, args.min_frames)
    expect_data = getattr(args, "expect_data", None)
    if expect_data is not None:
        if state.get("dataError"):
            return True, False, "data: " + state["dataError"]
        senders = {entry.get("from") for entry in state.get("data") or []}
        if len(senders) < expect_data:
            return False, False, "data from %d of %d senders" % (len(senders), expect_data)
    if args.expect_sent is not None:
        sent = max([o.get("framesSent") or 0 for o in state.get("outbound", []) if o.get("kind") == "video"] or [0])
        if sent < args.expect_sent:
            return False, False, "%d of %d video frames sent" % (sent, args.expect_sent)
    return True, True, None


def poll_page(read, args, started):
    """Polls the page's state with `read()` until the goal is met or args.seconds passed (from
    `started`); with args.hold, stays that long more and checks the goal again. Returns the state
    plus "ok", "reason" (when not ok) and "elapsedMs"."""
    deadline = started + args.seconds
    state, ok, reason, done = None, False, "timeout", False
    while True:
        state = read()
        done, ok, reason = page_goal(state, args)
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if ok and args.hold > 0:
        # Stay on the page (e.g. a publisher others watch), then check that the goal still holds.
        hold_until = time.monotonic() + args.hold
        while time.monotonic() < hold_until:
            time.sleep(0.5)
            state = read()
            if state and (state.get("error") or state.get("left")) and args.expect_error is None:
                break
        _, ok, reason = page_goal(state, args)
        done = True
        if not ok:
            reason = "after holding %gs: %s" % (args.hold, reason)
    result = dict(state or {})
    result["ok"] = ok
    if not ok:
        result["reason"] = reason if done else "timeout after %gs: %s" % (args.seconds, reason)
    result["elapsedMs"] = round((time.monotonic() - started) * 1000)
    return result


def add_page_options(parser):
    """The page-mode options both drivers take (the goal poll_page checks)."""
    parser.add_argument("--seconds", type=float, default=30, help="seconds to wait for the goal (default 30)")
    parser.add_argument("--expect-videos", type=int, default=0, help="remote videos the page must show (default 0)")
    parser.add_argument("--min-frames", type=int, default=10, help="decoded frames each expected video needs (default 10)")
    parser.add_argument("--expect-sent", type=int, default=None, help="video frames the page must have sent (publish/share)")
    parser.add_argument("--hold", type=float, default=0,
                        help="after the goal is met, stay this many seconds more (a publisher others watch); ok if it still holds")
    parser.add_argument("--expect-error", default=None, help="the goal is a page error containing this text")
    parser.add_argument("--expect-data", type=int, default=None, help="senders the page must receive data messages from (its &data=1 chat)")


# The raw data peer: plain JS, no SDK, a data-only offer with one RTCDataChannel. It says "hello"
# until it hears anyone (the server relays to participants whose channels are up), then sends its
# numbered messages, and records what reaches it on any channel. Reports into window.rawData.
RAW_DATA_PEER = r"""
const [wsURL, channel, uid, token, label, count, peers] = arguments;
const s = window.rawData = {joined: false, opened: false, answerAccepted: false, sent: 0, received: {}, heard: [], error: null,
  serverErrors: []};
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
    if (m.type === "error") s.serverErrors.push(m.payload.code + ": " + m.payload.reason);
    const p = m.id != null && pending.get(m.id);
    if (!p) return;
    pending.delete(m.id);
    if (m.type === "error") p.reject(new Error("server error " + m.payload.code + ": " + m.payload.reason)); else p.resolve(m.payload);
  };
  await new Promise((resolve, reject) => { ws.onopen = resolve; ws.onerror = () => reject(new Error("cannot connect to " + wsURL)); });
  const joined = await request("join", {token, channel, uid, role: "broadcaster", autoSubscribe: false,
                                        sdk: {name: "raw-js", version: "0", protocolVersion: {major: 1, minor: 3}}});
  s.joined = true;
  s.leave = () => ws.readyState === 1 && ws.send(JSON.stringify({v: "1.3", type: "leave", payload: {reason: "clientRequest"}}));
  setInterval(() => ws.readyState === 1 && ws.send(JSON.stringify({v: "1.3", type: "ping", payload: {timestamp: Date.now()}})),
              (joined.pingInterval || 5) * 1000);
  const pc = window.rawPC = new RTCPeerConnection({bundlePolicy: "max-bundle"});
  const listen = (dc) => {
    dc.onmessage = (event) => {
      const text = typeof event.data === "string" ? event.data : new TextDecoder().decode(event.data);
      const from = text.split(" ")[0];
      if (!s.heard.includes(from)) s.heard.push(from);
      if (!text.endsWith(" hello")) (s.received[dc.label] = s.received[dc.label] || []).push(text);
    };
  };
  const dc = pc.createDataChannel(label);
  listen(dc);
  pc.ondatachannel = (event) => listen(event.channel);
  dc.onopen = async () => {
    s.opened = true;
    while (s.heard.length < peers) {
      dc.send(uid + " hello");
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    for (let i = 0; i < 3; i++) dc.send(uid + " hello");
    for (let i = 0; i < count; i++) { dc.send(uid + " " + i); s.sent++; }
  };
  await pc.setLocalDescription(await pc.createOffer());
  const answer = await request("offer", {transport: "publisher", sdp: pc.localDescription.sdp});
  await pc.setRemoteDescription({type: "answer", sdp: answer.sdp});
  s.answerAccepted = true;
})().catch((error) => { s.error = error.message || String(error); });
"""


def run_raw_data(load, execute, args, last):
    """Runs RAW_DATA_PEER in a browser: `load(url)` opens a page of the server's origin,
    `execute(script, *arguments)` runs WebDriver's ExecuteScript; `last["state"]` keeps the newest
    state for a report cut short. Returns the report (with "ok", and "reason" when not)."""
    started = time.monotonic()
    origin = urlsplit(args.raw_data)
    load(args.url or "%s://%s/healthz" % ("https" if origin.scheme == "wss" else "http", origin.netloc))
    execute(RAW_DATA_PEER, args.raw_data, args.channel, args.uid, args.token, args.data_label, args.data_count, args.data_peers)
    deadline = started + args.seconds
    state, settled = None, None
    while time.monotonic() < deadline:
        state = execute("return window.rawData ? JSON.parse(JSON.stringify(window.rawData)) : null")
        last["state"] = state
        if state is None or state.get("error"):
            break
        got = sum(len(v) for v in (state.get("received") or {}).values())
        if state.get("sent") == args.data_count and got >= args.data_expect:
            settled = settled or time.monotonic()
            if time.monotonic() - settled > 1.0:
                break
        time.sleep(0.2)
    result = {"mode": "raw-data"}
    result.update(state or {"error": "the raw data peer did not start"})
    got = sum(len(v) for v in (result.get("received") or {}).values())
    result["ok"] = bool(result.get("opened") and result.get("sent") == args.data_count and got >= args.data_expect
                        and not result.get("error"))
    if not result["ok"]:
        result["reason"] = result.get("error") or "%s opened, %s sent, %d received" % (result.get("opened"), result.get("sent"), got)
    result["elapsedMs"] = round((time.monotonic() - started) * 1000)
    return result


def add_raw_data_options(parser):
    """The raw data peer's options (browser_peer.py and firefox_peer.py)."""
    parser.add_argument("--raw-data", metavar="WSURL", help="a plain-JS RTCDataChannel peer (no SDK) on this signaling URL")
    parser.add_argument("--data-label", default="chat")
    parser.add_argument("--data-count", type=int, default=20, help="raw data mode: numbered messages to send")
    parser.add_argument("--data-expect", type=int, default=0, help="raw data mode: messages to receive")
    parser.add_argument("--data-peers", type=int, default=1, help="raw data mode: others to hear from before sending")
