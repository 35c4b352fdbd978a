#!/usr/bin/python3
"""Capture real SDP offers from headless Chromium for the negotiation tests.

Usage: /usr/bin/python3 capture_offers.py OUTDIR

Needs /usr/bin/chromium, /usr/bin/chromedriver and python3-selenium (Debian).
Every offer is taken from pc.localDescription.sdp after setLocalDescription()
and after ICE gathering has completed (iceGatheringState == 'complete', with a
5 s cap), so the a=candidate lines and the final ssrc/msid lines are present.
The SDP text is written byte-for-byte (CRLF line endings kept).

about:blank and data: pages are not secure contexts, so navigator.mediaDevices
is undefined there; the script therefore serves an empty page from a throwaway
HTTP server bound to 127.0.0.1 (a secure context) and runs the JS on it.
"""
import http.server
import os
import sys
import threading

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROME_FLAGS = [
    "--use-fake-device-for-media-stream",
    "--use-fake-ui-for-media-stream",
    '--auto-select-desktop-capture-source=Entire screen',
    "--no-sandbox",
    "--headless=new",
]

# Shared helper injected in front of every scenario. `arguments[arguments.length-1]`
# is Selenium's async callback.
PRELUDE = r"""
const done = arguments[arguments.length - 1];
async function finish(pc) {
  const offer = await pc.createOffer();
  await pc.setLocalDescription(offer);
  if (pc.iceGatheringState !== 'complete') {
    await new Promise((resolve) => {
      const t = setTimeout(resolve, 5000);
      pc.addEventListener('icegatheringstatechange', () => {
        if (pc.iceGatheringState === 'complete') { clearTimeout(t); resolve(); }
      });
    });
  }
  return {sdp: pc.localDescription.sdp, gathering: pc.iceGatheringState,
          ua: navigator.userAgent};
}
async function camera() {
  return navigator.mediaDevices.getUserMedia(
      {audio: true, video: {width: 640, height: 480}});
}
"""

SCENARIOS = {
    "chromium-camera.sdp": r"""
const pc = new RTCPeerConnection();
const s = await camera();
pc.addTrack(s.getAudioTracks()[0], s);
pc.addTrack(s.getVideoTracks()[0], s);
return finish(pc);
""",
    "chromium-video-first.sdp": r"""
const pc = new RTCPeerConnection();
const s = await camera();
pc.addTrack(s.getVideoTracks()[0], s);
pc.addTrack(s.getAudioTracks()[0], s);
return finish(pc);
""",
    "chromium-audio-only.sdp": r"""
const pc = new RTCPeerConnection();
const s = await navigator.mediaDevices.getUserMedia({audio: true});
pc.addTrack(s.getAudioTracks()[0], s);
return finish(pc);
""",
    "chromium-screen.sdp": r"""
const pc = new RTCPeerConnection();
let track, source;
try {
  const s = await navigator.mediaDevices.getDisplayMedia(
      {video: {width: 1280, height: 720}});
  track = s.getVideoTracks()[0];
  source = 'getDisplayMedia:' + track.label + ':contentHint=' + JSON.stringify(track.contentHint);
} catch (e) {
  const c = document.createElement('canvas');
  c.width = 1280; c.height = 720;
  const ctx = c.getContext('2d');
  ctx.fillStyle = '#336'; ctx.fillRect(0, 0, 1280, 720);
  track = c.captureStream(15).getVideoTracks()[0];
  track.contentHint = 'detail';
  source = 'canvas.captureStream (getDisplayMedia failed: ' + e.name + ': ' + e.message + ')';
}
pc.addTransceiver(track, {direction: 'sendonly'});
const r = await finish(pc);
r.source = source;
return r;
""",
    "chromium-simulcast.sdp": r"""
const pc = new RTCPeerConnection();
const s = await camera();
pc.addTrack(s.getAudioTracks()[0], s);
pc.addTransceiver(s.getVideoTracks()[0], {
  direction: 'sendonly',
  sendEncodings: [
    {rid: 'q', scaleResolutionDownBy: 4},
    {rid: 'h', scaleResolutionDownBy: 2},
    {rid: 'f'},
  ],
});
return finish(pc);
""",
    "chromium-datachannel.sdp": r"""
const pc = new RTCPeerConnection();
const s = await camera();
pc.addTrack(s.getAudioTracks()[0], s);
pc.addTrack(s.getVideoTracks()[0], s);
pc.createDataChannel('chat');
return finish(pc);
""",
    "chromium-recvonly.sdp": r"""
const pc = new RTCPeerConnection();
pc.addTransceiver('audio', {direction: 'recvonly'});
pc.addTransceiver('video', {direction: 'recvonly'});
return finish(pc);
""",
}


class BlankPage(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"<!doctype html><title>offer capture</title>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: capture_offers.py OUTDIR")
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    server = http.server.HTTPServer(("127.0.0.1", 0), BlankPage)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    page = f"http://127.0.0.1:{server.server_port}/"
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for f in CHROME_FLAGS:
        opts.add_argument(f)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    driver.set_script_timeout(30)
    try:
        for name, body in SCENARIOS.items():
            # A fresh page per scenario so no state leaks between offers.
            driver.get(page)
            script = PRELUDE + "(async () => {" + body + "})()" \
                ".then(done, (e) => done({error: String(e)}));"
            r = driver.execute_async_script(script)
            if "error" in r:
                raise SystemExit(f"{name}: {r['error']}")
            with open(os.path.join(outdir, name), "w", newline="") as fh:
                fh.write(r["sdp"])
            extra = f" source={r['source']}" if "source" in r else ""
            print(f"{name}: {len(r['sdp'])} bytes, gathering={r['gathering']}{extra}")
        print("userAgent:", r["ua"])
    finally:
        driver.quit()
        server.shutdown()


if __name__ == "__main__":
    main()
