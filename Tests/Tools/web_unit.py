"""Runs the web client's unit tests (Tests/Web/unit.html) in headless Chromium and prints one line of JSON.

Usage:
  web_unit.py [--seconds S] [--chromium PATH] [--chromedriver PATH]

Serves the repository root over HTTP on a free port of 127.0.0.1 (so Web/ and Tests/ are
same-origin), opens Tests/Web/unit.html, and waits up to S seconds (default 60) for the page's
window.unitReport. Prints {"ok", "passed", "failed", "tests": [{name, ok, error, ms}], "browser"}
("reason" when the run itself failed, "console" with the page's errors).

Exits 0 when every test passed, 1 when one failed or the page gave no report, 2 when Chromium or
chromedriver could not start. Needs Debian's python3-selenium, chromium and chromium-driver.
"""
import argparse
import functools
import http.server
import json
import os
import shutil
import sys
import tempfile
import threading
import time

import chromium  # noqa: E402 (next to this script)

webdriver = chromium.import_webdriver("web_unit")

from peer_common import kill_profile_processes  # noqa: E402 (next to this script, after the selenium check)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files of the repository root; no request log on stderr, no caching."""

    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".js": "text/javascript", ".mjs": "text/javascript", ".json": "application/json"}

    def end_headers(self):
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format, *args):
        pass


def brief(error):
    """A selenium error's message on one line, without chromedriver's stack trace."""
    text = getattr(error, "msg", None) or str(error) or type(error).__name__
    return " ".join(text.split("Stacktrace")[0].split())[:300]


def main():
    parser = argparse.ArgumentParser(description="Run Tests/Web/unit.html in headless Chromium.")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--chromium", default=chromium.CHROMIUM)
    parser.add_argument("--chromedriver", default=chromium.CHROMEDRIVER)
    args = parser.parse_args()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=ROOT))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d/Tests/Web/unit.html" % server.server_address[1]
    profile = tempfile.mkdtemp(prefix="web-unit-")
    driver = None
    result = {"ok": False}
    status = 1
    try:
        try:
            driver = chromium.start(webdriver, profile=profile, chromium=args.chromium, chromedriver=args.chromedriver, console=True)
        except Exception as error:  # selenium raises several types here; all mean "could not start"
            result = {"ok": False, "reason": "cannot start Chromium: " + brief(error)}
            status = 2
            return status
        driver.get(url)
        deadline = time.monotonic() + args.seconds
        report = None
        while time.monotonic() < deadline:
            report = driver.execute_script("return window.unitReport || null")
            if report and report.get("done"):
                break
            time.sleep(0.1)
        result = {"browser": driver.capabilities.get("browserVersion"), "url": url}
        if not report or not report.get("done"):
            result.update(ok=False, reason="no report from %s within %g s" % (url, args.seconds))
        else:
            tests = report.get("tests") or []
            result.update(ok=bool(tests) and report.get("failed") == 0, passed=report.get("passed"), failed=report.get("failed"),
                          tests=tests)
            if not tests:
                result["reason"] = "no tests ran"
        logs = [entry.get("message", "") for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]
        if logs:
            result["console"] = [line[:300] for line in logs[-10:]]
        status = 0 if result["ok"] else 1
        return status
    except Exception as error:  # a webdriver failure mid-run: reported in the JSON line, exit 1
        result = dict(result, ok=False, reason="webdriver: " + brief(error))
        return 1
    finally:
        if driver is not None:
            try:
                driver.quit()
            except Exception as error:  # Chromium already gone: its processes are killed below
                result.setdefault("quitError", brief(error))
        kill_profile_processes(profile)
        shutil.rmtree(profile, ignore_errors=True)
        server.shutdown()
        print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
