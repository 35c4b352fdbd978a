#!/usr/bin/python3
"""Plays a WebM in headless Chromium and prints one line of JSON about what it decoded.

Usage: webm_playback.py FILE.webm [--timeout S]
Prints {"frames", "totalVideoFrames", "sizes", "duration", "audioBytes", "error", ...} and exits 0 when the
file played to its end without a media error, 1 otherwise, 2 when Chromium or chromedriver could not start.
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

import chromium  # noqa: E402 (next to this script)

webdriver = chromium.import_webdriver("webm_playback")

# The page counts frames with requestVideoFrameCallback and keeps every size seen (callbacks and resize events).
PAGE = """<!doctype html><meta charset="utf-8"><video muted playsinline></video><script>
const v = document.querySelector("video");
const s = window.playback = {frames: 0, presented: 0, sizes: [], ended: false, error: null};
function note(w, h) { const k = w + "x" + h; if (w && h && !s.sizes.includes(k)) s.sizes.push(k); }
function frame(now, meta) { s.frames++; s.presented = meta.presentedFrames; note(meta.width, meta.height); v.requestVideoFrameCallback(frame); }
v.requestVideoFrameCallback(frame);
v.addEventListener("resize", () => note(v.videoWidth, v.videoHeight));
v.addEventListener("ended", () => { s.ended = true; });
v.addEventListener("error", () => { s.error = v.error ? "MediaError " + v.error.code + ": " + v.error.message : "error event"; });
v.src = "media.webm";
v.playbackRate = 1;
v.play().catch(e => { if (!s.error) s.error = "play(): " + e.name + ": " + e.message; });
window.report = () => {
  const q = v.getVideoPlaybackQuality();
  return {frames: s.frames, totalVideoFrames: q.totalVideoFrames, droppedVideoFrames: q.droppedVideoFrames,
          presentedFrames: s.presented, sizes: s.sizes, duration: isFinite(v.duration) ? v.duration : null,
          currentTime: v.currentTime, audioBytes: v.webkitAudioDecodedByteCount, videoBytes: v.webkitVideoDecodedByteCount,
          ended: s.ended, error: s.error};
};
</script>"""


def brief(error):
    """A selenium error's message on one line, without chromedriver's stack trace."""
    text = getattr(error, "msg", None) or str(error) or type(error).__name__
    return " ".join(text.split("Stacktrace")[0].split())[:300]


def failed(error):
    return {"frames": 0, "totalVideoFrames": 0, "sizes": [], "duration": None, "audioBytes": 0, "error": error}


class Terminated(Exception):
    """SIGTERM (runTool's timeout), raised so the driver and Chromium still quit."""


def terminate(*_):
    raise Terminated()


def main():
    parser = argparse.ArgumentParser(description="Play a WebM in headless Chromium and report what it decoded.")
    parser.add_argument("file")
    parser.add_argument("--timeout", type=float, default=60, help="seconds to wait for 'ended' (default 60)")
    args = parser.parse_args()
    if not os.path.isfile(args.file):
        print(json.dumps(failed("no such file: " + args.file)))
        return 1
    signal.signal(signal.SIGTERM, terminate)

    with tempfile.TemporaryDirectory(prefix="webm-playback-") as page_dir:
        media = os.path.join(page_dir, "media.webm")
        try:
            os.symlink(os.path.abspath(args.file), media)
        except OSError:
            shutil.copyfile(args.file, media)
        with open(os.path.join(page_dir, "index.html"), "w") as page:
            page.write(PAGE)

        try:
            driver = chromium.start(webdriver, ("--autoplay-policy=no-user-gesture-required", "--allow-file-access-from-files"))
        except Exception as error:  # selenium raises several types here; all mean "could not start"
            print("webm_playback: cannot start Chromium: " + brief(error), file=sys.stderr)
            return 2
        result = None
        try:
            driver.get("file://" + os.path.join(page_dir, "index.html"))
            deadline = time.monotonic() + args.timeout
            while True:
                state = driver.execute_script("return window.playback ? [window.playback.ended, window.playback.error] : [false, null]")
                if state[0] or state[1] or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            result = driver.execute_script("return window.report()")
            if not result["ended"] and not result["error"]:
                result["error"] = "timeout after %gs at currentTime %.3f" % (args.timeout, result["currentTime"] or 0)
        except Exception as error:
            message = "terminated" if isinstance(error, Terminated) else "webdriver: " + brief(error)
            result = dict(result, error=message) if result else failed(message)
        finally:
            driver.quit()
    print(json.dumps(result))
    return 0 if result.get("ended") and not result.get("error") else 1


if __name__ == "__main__":
    sys.exit(main())
