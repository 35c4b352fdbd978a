"""What browser_peer.py (Chromium) and firefox_peer.py (Firefox) share: the page goal and the clean-up."""
import os
import signal
import time


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
