"""Headless Chromium through Debian's python3-selenium and chromium-driver: what browser_peer.py,
web_unit.py and webm_playback.py share (the import, the flags every run wants, the start)."""
import os
import sys

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# What every headless run here wants; a tool adds its own (fake devices, autoplay, file access).
BASE_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--mute-audio",
              "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-background-networking")


def import_webdriver(tool):
    """Selenium's webdriver module. A pyenv/venv python3 does not see Debian's python3-selenium: the
    script is run again under /usr/bin/python3, once; without selenium at all, one line and exit 2."""
    try:
        from selenium import webdriver
        return webdriver
    except ImportError:
        flag = "RTC_SELENIUM_REEXEC"
        if os.path.exists("/usr/bin/python3") and sys.executable != "/usr/bin/python3" and flag not in os.environ:
            os.environ[flag] = "1"
            os.execv("/usr/bin/python3", ["/usr/bin/python3", *sys.argv])
        print("%s: selenium is not installed (apt-get install python3-selenium)" % tool, file=sys.stderr)
        sys.exit(2)


def start(webdriver, flags=(), profile=None, chromium=CHROMIUM, chromedriver=CHROMEDRIVER, console=False):
    """A Chromium driven by chromedriver with BASE_FLAGS and `flags`, its profile in `profile` when
    given, keeping the page's console (`console`). Raises what selenium raises when it cannot start."""
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in BASE_FLAGS + tuple(flags):
        options.add_argument(flag)
    if profile:
        options.add_argument("--user-data-dir=" + profile)
    if console:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
