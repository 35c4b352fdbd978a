#!/usr/bin/python3
"""Drives headless Firefox (ESR) as a peer of the RTC server and prints one line of JSON about it.

Usage:
  firefox_peer.py URL [--seconds S] [--expect-videos N] [--min-frames F] [--expect-sent F] [--expect-error TEXT] [--hold H]
                      [--keep-sdp] [--firefox PATH] [--marionette-port P]

The Firefox counterpart of browser_peer.py's page mode, with the same options, goal, JSON and exit codes.
It opens URL (the web client, Web/index.html: /?channel=C&uid=U&token=T&mode=watch|publish|share) and polls
its `window.rtcTest` until the goal is met or S seconds passed. The goal: joined, no error, and at least N
remote videos with F decoded frames each (--expect-videos, --min-frames); with --expect-sent, also a
published video that sent F frames; with --expect-error, an error whose text contains TEXT (the goal is
then that error, not media); with --hold H, the page stays open H seconds after the goal is met (a
publisher others watch) and the goal must still hold then. Prints the final rtcTest state plus "ok" (and
"reason" when not), "browser" ("Firefox <version>") and "startupMs" (launch to Marionette session). With
--keep-sdp, and always when not ok, the SDPs of the page's peer connections are added as "sdp" (rtc.js's
publisher offer/answer, both transports' descriptions, and every set*Description call a hook saw with its
error), and "rejectedInAnswer" lists sections an answer turned down (port 0) that the offer had not.

Firefox differs from Chromium here: VP8 is payload type 120 (rtx 124), Opus 109, other extension ids;
with max-bundle its offers mark every m-section but the first `a=bundle-only` with port 0; and
getDisplayMedia needs a user gesture and has no source headless, so share mode uses the page's canvas
(rtcTest.captureMethod "canvas", captureError says why).

No geckodriver (Debian has none) and no selenium: this speaks Firefox's Marionette protocol itself, which
is JSON over TCP, each message `<byte length>:<json>`. The server speaks first ({"applicationType":
"gecko","marionetteProtocol":3}); then a command is [0, id, name, parameters] and its response
[1, id, error, result]. Firefox runs as `firefox-esr --headless --marionette --no-remote --profile DIR`
with a fresh profile whose user.js enables Marionette on a port of the system's choice (marionette.port 0;
Firefox writes the port it took to DIR/MarionetteActivePort) and fakes camera and microphone.

Exits 0 when ok, 1 when not, 2 when Firefox could not start (or Marionette did not answer).
Needs Debian's firefox-esr (and python3; nothing from PyPI).
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from peer_common import add_page_options, add_raw_data_options, kill_profile_processes, poll_page, run_raw_data  # next to this script

FIREFOX_CANDIDATES = ("/usr/bin/firefox-esr", "/usr/lib/firefox-esr/firefox-esr", "/usr/bin/firefox")

PREFS = {
    # Marionette: 0 = a free port of the system's choice, written to <profile>/MarionetteActivePort.
    "marionette.port": 0,
    # Media: fake camera and microphone, no permission prompts, autoplay allowed.
    "media.navigator.streams.fake": True,
    "media.navigator.permission.disabled": True,
    "media.autoplay.default": 0,
    "media.autoplay.blocking_policy": 0,
    "media.autoplay.block-webaudio": False,
    "media.getusermedia.screensharing.enabled": True,
    "media.getdisplaymedia.enabled": True,
    # The server and the page are on 127.0.0.1: let ICE use loopback (Firefox never pairs with a loopback
    # candidate otherwise) and every interface, and show real host addresses.
    "media.peerconnection.ice.loopback": True,
    "media.peerconnection.ice.default_address_only": False,
    # A page that captures nothing (watch mode) gathers only the default route's address whatever the pref
    # above says, unless the origin has a camera or microphone permission: the default grants it.
    "permissions.default.camera": 1,
    "permissions.default.microphone": 1,
    "media.peerconnection.ice.obfuscate_host_addresses": False,  # no mDNS names for host candidates
    # Page console messages to stdout (collected for the "console" field).
    "devtools.console.stdout.content": True,
    # Quiet start: no first-run pages, no default-browser check, no updates, no telemetry, no network chatter.
    "browser.shell.checkDefaultBrowser": False,
    "browser.startup.homepage_override.mstone": "ignore",
    "browser.startup.page": 0,
    "browser.startup.homepage": "about:blank",
    "startup.homepage_welcome_url": "about:blank",
    "startup.homepage_welcome_url.additional": "",
    "browser.aboutwelcome.enabled": False,
    "trailhead.firstrun.didSeeAboutWelcome": True,
    "datareporting.policy.dataSubmissionEnabled": False,
    "datareporting.healthreport.uploadEnabled": False,
    "toolkit.telemetry.reporting.enabled": False,
    "toolkit.telemetry.enabled": False,
    "toolkit.telemetry.unified": False,
    "app.update.enabled": False,
    "app.update.disabledForTesting": True,
    "app.update.auto": False,
    "app.normandy.enabled": False,
    "extensions.update.enabled": False,
    "browser.safebrowsing.malware.enabled": False,
    "browser.safebrowsing.phishing.enabled": False,
    "browser.safebrowsing.downloads.enabled": False,
    "network.captive-portal-service.enabled": False,
    "network.connectivity-service.enabled": False,
    "browser.newtabpage.enabled": False,
    "dom.disable_open_during_load": False,
    # Background tabs/windows must not be throttled (headless has no focus).
    "dom.min_background_timeout_value": 0,
    "dom.timeout.enable_budget_timer_throttling": False,
}

# Reads the page's state as a JSON string (parsed here: no Marionette serialisation surprises).
READ_STATE = "return window.rtcTest ? JSON.stringify(window.rtcTest) : null;"

# A debug hook installed as soon as the page has loaded (Web/ stays as it is): every
# setRemoteDescription/setLocalDescription of the page's peer connections, with its SDP and the error it
# failed with, into window.__peerSdp (the last 8). Best effort: a description applied before the hook is
# installed is not seen (rtc.js still keeps the publisher's last offer and answer).
SDP_HOOK = r"""
if (window.__peerSdp) return true;
const log = window.__peerSdp = [];
for (const name of ["setRemoteDescription", "setLocalDescription"]) {
  const original = RTCPeerConnection.prototype[name];
  RTCPeerConnection.prototype[name] = function (description, ...rest) {
    const entry = {call: name, type: description ? description.type : null, sdp: description ? description.sdp : null,
                   ms: Math.round(performance.now()), error: null};
    log.push(entry);
    if (log.length > 8) log.shift();
    const result = original.call(this, description, ...rest);
    result.then(() => { if (!entry.sdp && this.localDescription && name === "setLocalDescription") entry.sdp = this.localDescription.sdp; },
                (error) => { entry.error = (error && error.name ? error.name + ": " : "") + (error && error.message || error); });
    return result;
  };
}
return true;
"""

# The SDPs of the page's peer connections (Web/rtc.js keeps the publisher's last offer and answer) and
# what the hook saw.
READ_SDP = r"""
const c = window.rtcClient;
const d = (x) => x ? x.sdp : null;
if (!c) return JSON.stringify({calls: window.__peerSdp || null});
return JSON.stringify({
  calls: window.__peerSdp || null,
  publisherOffer: c.lastPublisherOffer || (c.publisher ? d(c.publisher.localDescription) : null),
  publisherAnswer: c.lastPublisherAnswer || (c.publisher ? d(c.publisher.remoteDescription) : null),
  subscriberOffer: c.subscriber ? d(c.subscriber.remoteDescription) : null,
  subscriberAnswer: c.subscriber ? d(c.subscriber.localDescription) : null,
  publisherState: c.publisher ? c.publisher.connectionState : null,
  subscriberState: c.subscriber ? c.subscriber.connectionState : null,
});
"""


# Console lines of Firefox's own components (devtools.console.stdout.content shows them too).
BROWSER_CONSOLE_NOISE = ("console.error: RSLoader", "console.warn: RSLoader", "console.error: BackupService",
                         "console.warn: services.settings", "console.error: services.settings")



class Terminated(Exception):
    """SIGTERM (a test's timeout), raised so that Firefox still quits."""


def terminate(*_):
    raise Terminated()


class MarionetteError(Exception):
    def __init__(self, error):
        self.error = error if isinstance(error, dict) else {"error": str(error), "message": ""}
        super().__init__("%s: %s" % (self.error.get("error"), self.error.get("message")))


class Marionette:
    """A minimal Marionette client: `<byte length>:<json>` packets over one TCP connection."""

    def __init__(self, port, timeout=10):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buffer = b""
        self.next_id = 1
        self.hello = self._receive(timeout)
        if not isinstance(self.hello, dict) or self.hello.get("applicationType") != "gecko":
            raise MarionetteError({"error": "handshake", "message": "unexpected greeting %r" % (self.hello,)})

    def _receive(self, timeout):
        self.sock.settimeout(timeout)
        while True:
            colon = self.buffer.find(b":")
            if colon > 0:
                length = int(self.buffer[:colon])
                if len(self.buffer) >= colon + 1 + length:
                    data = self.buffer[colon + 1:colon + 1 + length]
                    self.buffer = self.buffer[colon + 1 + length:]
                    return json.loads(data.decode("utf-8"))
            elif colon == 0 or len(self.buffer) > 20 and colon < 0:
                raise MarionetteError({"error": "protocol", "message": "bad packet %r" % self.buffer[:40]})
            chunk = self.sock.recv(65536)
            if not chunk:
                raise MarionetteError({"error": "disconnected", "message": "Marionette closed the connection"})
            self.buffer += chunk

    def command(self, name, params=None, timeout=30):
        """Sends [0, id, name, params] and returns the result of the [1, id, error, result] that answers it."""
        msgid = self.next_id
        self.next_id += 1
        data = json.dumps([0, msgid, name, params or {}]).encode("ascii")
        self.sock.sendall(str(len(data)).encode("ascii") + b":" + data)
        deadline = time.monotonic() + timeout
        while True:
            message = self._receive(max(0.1, deadline - time.monotonic()))
            if isinstance(message, list) and len(message) == 4 and message[0] == 1 and message[1] == msgid:
                if message[2]:
                    raise MarionetteError(message[2])
                return message[3]
            # Anything else (a late reply to a timed-out command) is skipped.

    def execute(self, script, args=(), timeout=30):
        result = self.command("WebDriver:ExecuteScript", {"script": script, "args": list(args)}, timeout=timeout)
        return result.get("value") if isinstance(result, dict) else result

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def brief(error):
    text = str(error) or type(error).__name__
    return " ".join(text.split())[:300]


def find_firefox(given):
    if given:
        return given
    for path in FIREFOX_CANDIDATES:
        if os.access(path, os.X_OK):
            return path
    return shutil.which("firefox-esr") or shutil.which("firefox") or FIREFOX_CANDIDATES[0]


def write_profile(profile, port):
    prefs = dict(PREFS, **{"marionette.port": port})
    with open(os.path.join(profile, "user.js"), "w") as handle:
        for name, value in prefs.items():
            handle.write("user_pref(%s, %s);\n" % (json.dumps(name), json.dumps(value)))


def wait_for_marionette(process, profile, port, timeout):
    """Marionette's port once it accepts connections (None if Firefox exited or time ran out)."""
    active = os.path.join(profile, "MarionetteActivePort")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return None
        candidate = port
        if not candidate:
            try:
                with open(active) as handle:
                    candidate = int(handle.read().strip() or 0)
            except (OSError, ValueError):
                candidate = 0
        if candidate:
            try:
                socket.create_connection(("127.0.0.1", candidate), timeout=1).close()
                return candidate
            except OSError:
                pass
        time.sleep(0.1)
    return None




LAST = {}


def read_state(client):
    text = client.execute(READ_STATE, timeout=10)
    state = json.loads(text) if isinstance(text, str) else text
    LAST["state"] = state
    return state


def run_page(client, args):
    started = time.monotonic()
    client.command("WebDriver:Navigate", {"url": args.url}, timeout=max(30, args.seconds))
    try:
        client.execute(SDP_HOOK, timeout=5)
    except MarionetteError:
        pass
    return poll_page(lambda: read_state(client), args, started)


def console_lines(log_path):
    """The page's console errors and warnings (devtools.console.stdout.content) and JS errors, last 10."""
    try:
        with open(log_path, "rb") as handle:
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    keep = []
    for line in lines:
        if line.startswith(("JavaScript error", "JavaScript warning")):
            if "http://" in line or "https://" in line:  # the page's, not Firefox's own (resource://, chrome://)
                keep.append(line)
        elif line.startswith(("console.error", "console.warn")) and not line.startswith(BROWSER_CONSOLE_NOISE):
            keep.append(line)
    return [line[:300] for line in keep[-10:]]


def rejected_sections(sdp):
    """`<kind> mid <mid>` of each section an answer rejected (port 0) though its offer did not (bundle-only aside)."""
    def sections(text):
        out, current = [], None
        for line in (text or "").splitlines():
            if line.startswith("m="):
                parts = line[2:].split()
                current = {"kind": parts[0], "port": parts[1] if len(parts) > 1 else "", "mid": None, "bundleOnly": False}
                out.append(current)
            elif current is not None and line.startswith("a=mid:"):
                current["mid"] = line[6:].strip()
            elif current is not None and line.strip() == "a=bundle-only":
                current["bundleOnly"] = True
        return out
    found = []
    for offer_key, answer_key in (("publisherOffer", "publisherAnswer"), ("subscriberOffer", "subscriberAnswer")):
        offered = {m["mid"]: m for m in sections(sdp.get(offer_key))}
        for m in sections(sdp.get(answer_key)):
            o = offered.get(m["mid"])
            if m["port"] == "0" and o and (o["port"] != "0" or o["bundleOnly"]):
                found.append("%s: %s mid %s%s" % (answer_key, m["kind"], m["mid"], " (offered bundle-only)" if o["bundleOnly"] else ""))
    return found


def stop_firefox(process, client):
    if client is not None:
        try:
            client.command("Marionette:Quit", {"flags": ["eForceQuit"]}, timeout=5)
        except Exception:
            pass
        client.close()
    if process is None:
        return
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)  # Firefox and its content processes (its own process group)
        except OSError:
            break
        try:
            process.wait(timeout=3)
            break
        except subprocess.TimeoutExpired:
            continue


def main():
    parser = argparse.ArgumentParser(description="Drive headless Firefox as a peer of the RTC server (Marionette, no geckodriver).")
    parser.add_argument("url", nargs="?", help="the web client's URL (raw data mode: a page of the server's origin)")
    add_page_options(parser)
    parser.add_argument("--keep-sdp", action="store_true", help="include the page's SDPs in the JSON (always when not ok)")
    parser.add_argument("--firefox", default=None, help="the Firefox binary (default: firefox-esr)")
    parser.add_argument("--marionette-port", type=int, default=0, help="Marionette's port (default 0: a free one)")
    parser.add_argument("--startup-seconds", type=float, default=60, help="seconds Firefox has to start Marionette (default 60)")
    parser.add_argument("--channel")
    parser.add_argument("--uid")
    parser.add_argument("--token")
    add_raw_data_options(parser)
    args = parser.parse_args()
    if args.raw_data:
        missing = [name for name in ("channel", "uid", "token") if not getattr(args, name)]
        if missing:
            parser.error("--raw-data needs " + ", ".join("--" + name for name in missing))
    elif not args.url:
        parser.error("a URL is needed (or --raw-data)")
    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, terminate)

    firefox = find_firefox(args.firefox)
    profile = tempfile.mkdtemp(prefix="firefox-peer-")
    log_path = os.path.join(profile, "firefox.log")
    process = None
    client = None
    result = None
    try:
        write_profile(profile, args.marionette_port)
        launch = time.monotonic()
        failure = None
        try:
            with open(log_path, "wb") as log:
                process = subprocess.Popen([firefox, "--headless", "--marionette", "--no-remote", "--profile", profile],
                                           stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True,
                                           env=dict(os.environ, MOZ_HEADLESS="1", MOZ_CRASHREPORTER_DISABLE="1",
                                                    MOZ_DISABLE_AUTO_SAFE_MODE="1"))
        except OSError as error:
            failure = "cannot run %s: %s" % (firefox, brief(error))
        capabilities = {}
        if failure is None:
            port = wait_for_marionette(process, profile, args.marionette_port, args.startup_seconds)
            if port is None:
                failure = ("Firefox exited (%s) before Marionette listened" % process.returncode if process.poll() is not None
                           else "Marionette did not listen within %gs" % args.startup_seconds)
            else:
                try:
                    client = Marionette(port)
                    session = client.command("WebDriver:NewSession", {
                        "browserName": "firefox", "acceptInsecureCerts": True, "pageLoadStrategy": "eager",
                        "timeouts": {"script": 30000, "pageLoad": 60000, "implicit": 0},
                        "unhandledPromptBehavior": "accept"}, timeout=args.startup_seconds)
                    capabilities = session.get("capabilities") or {}
                except Terminated:
                    raise
                except Exception as error:
                    failure = "Marionette session failed: " + brief(error)
        if failure is not None:
            tail = ""
            try:
                with open(log_path, "rb") as handle:
                    tail = " | ".join(handle.read().decode("utf-8", "replace").splitlines()[-5:])[:500]
            except OSError:
                pass
            print("firefox_peer: cannot start Firefox: %s%s" % (failure, (" (log: " + tail + ")") if tail else ""), file=sys.stderr)
            result = {"ok": False, "error": "cannot start Firefox: " + failure}
            return_code = 2
        else:
            startup_ms = round((time.monotonic() - launch) * 1000)
            try:
                if args.raw_data:
                    result = run_raw_data(lambda url: client.command("WebDriver:Navigate", {"url": url}, timeout=60),
                                          lambda script, *values: client.execute(script, values), args, LAST)
                else:
                    result = run_page(client, args)
            except Terminated:
                result = dict(LAST.get("state") or {}, ok=False, reason="terminated")
            except Exception as error:
                result = dict(LAST.get("state") or {}, ok=False, reason="marionette: " + brief(error))
            result["browser"] = "%s %s" % ((capabilities.get("browserName") or "firefox").capitalize(),
                                           capabilities.get("browserVersion") or "?")
            result["startupMs"] = startup_ms
            if args.keep_sdp or not result.get("ok"):
                try:
                    text = client.execute(READ_SDP, timeout=5)
                    if text:
                        result["sdp"] = json.loads(text)
                        rejected = rejected_sections(result["sdp"])
                        if rejected:
                            result["rejectedInAnswer"] = rejected
                            if not result.get("ok") and result.get("reason"):
                                result["reason"] += " (the answer rejected " + "; ".join(rejected) + ")"
                except Exception:
                    pass
            return_code = 0 if result.get("ok") else 1
    except Terminated:
        result = dict(LAST.get("state") or {}, ok=False, reason="terminated")
        return_code = 1
    finally:
        for number in (signal.SIGTERM, signal.SIGINT):  # a second signal must not interrupt the clean-up
            signal.signal(number, signal.SIG_IGN)
        if client is not None:
            try:
                # Leave the channel first, so that the server does not keep us for its resume window.
                client.execute("if (window.rtcClient) window.rtcClient.leave();"
                               " if (window.rawData && window.rawData.leave) window.rawData.leave(); return true;", timeout=2)
                time.sleep(0.1)
            except Exception:
                pass
        try:
            stop_firefox(process, client)
        except Exception:
            pass
        console = console_lines(log_path)
        if console and result is not None:
            result["console"] = console
        kill_profile_processes(profile)
        shutil.rmtree(profile, ignore_errors=True)
    print(json.dumps(result))
    return return_code


if __name__ == "__main__":
    sys.exit(main())
