#!/usr/bin/env bash
# Regenerates the Chromium SDP offer fixtures (Tests/RTCTransportTests/Fixtures/chromium-*.sdp) with
# Debian's chromium, headless: scripts/chromium-offer.html builds an audio+video offer and a simulcast
# offer with RTCPeerConnection.createOffer(), waits for ICE gathering and logs both as JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
log=$(mktemp)
timeout 25 chromium --headless=new --no-sandbox --disable-gpu --enable-logging=stderr --v=0 \
    "file://$PWD/scripts/chromium-offer.html" 2> "$log" > /dev/null || true
python3 - "$log" <<'PY'
import json, re, sys
text = open(sys.argv[1]).read()
match = re.search(r'"SDPJSON (\{.*\})", source', text)
if not match:
    sys.exit("chromium printed no offer; see " + sys.argv[1])
offers = json.loads(match.group(1))
for key, name in (("audioVideo", "chromium-audio-video.sdp"), ("simulcast", "chromium-simulcast.sdp")):
    with open("Tests/RTCTransportTests/Fixtures/" + name, "w", newline="") as out:
        out.write(offers[key])
    print("wrote", name)
PY
rm -f "$log"
