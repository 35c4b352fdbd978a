#!/usr/bin/env bash
# Audio quality against libwebrtc on one lossy path (issue 53): four pairs in one run, the same
# speech, the same server, the same impairment. Our bot (RTCEngine) and LiveKit's Python SDK
# (libwebrtc inside: NetEq, its Opus settings) publish and play out in every combination:
#   ours→ours, lk→lk (the reference), ours→lk (our sender), lk→ours (our receiver).
# Each publisher sends a 20 s espeak-ng sentence, looped; each viewer writes what it plays out
# (--playout-wav, --audio-wav) and Benchmarks/quality_audio.py scores it: PESQ wideband, the share
# of spoken 10 ms blocks kept within 6 dB, and the share played 20 dB under (silent).
#
# The impairment: `rtc-cli proxy` in front of the server's media port (the server announces the
# proxy's address), dropping LOSS % at random each way and delaying each way by DELAY ms, so a
# publisher's media crosses two lossy legs (LOSS=10: ~19 % end to end; 20: ~36 %). Signaling
# (TCP) is not impaired. All on loopback: no namespaces, so it runs anywhere the tests do.
#
#   [CONDITIONS="0:0 10:40 20:40"] [RUN_SECONDS=30] [PAIRS="oo ll ol lo"] Benchmarks/quality.sh [RTC_CLI] [OUT]
#
# CONDITIONS are LOSS:DELAY pairs (percent each way : ms each way). Prints one table row per pair
# and condition; OUT (a temporary folder by default) keeps the WAVs, the logs and rows.json.
set -euo pipefail
CLI=$(realpath "${1:-.build/release/rtc-cli}")
OUT=${2:-$(mktemp -d)}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PEER="$ROOT/Tests/Tools/livekit_peer.py"
SCORE="$ROOT/Benchmarks/quality_audio.py"
CONDITIONS=${CONDITIONS:-"0:0 10:40 20:40"}
SECONDS_RUN=${RUN_SECONDS:-30}
PAIRS=${PAIRS:-"oo ll ol lo"}
KEY=APIquality
SECRET=quality-secret-0123456789abcdef0123
mkdir -p "$OUT"
PIDS=()
cleanup() { for pid in ${PIDS[@]+"${PIDS[@]}"}; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# The speech: espeak-ng's voice at 48 kHz mono (make test installs espeak-ng and ffmpeg).
SPEECH="$OUT/speech48.wav"
if [ ! -s "$SPEECH" ]; then
    espeak-ng -v en-us -s 150 -w "$OUT/speech.wav" "The quick brown fox jumps over the lazy dog. A screen share joins the call \
as its own participant. Real time audio must keep the voice through lost packets. Please read the numbers one two three four \
five six seven eight nine ten. Every listener hears the difference between silence and concealment."
    ffmpeg -hide_banner -loglevel error -y -i "$OUT/speech.wav" -ar 48000 -ac 1 "$SPEECH"
fi

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
free_udp_port() { python3 -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

: > "$OUT/rows.json"
printf '%-10s %-8s %6s %8s %8s  %s\n' "loss/delay" "pair" "PESQ" "kept %" "silent %" "our receiver: concealed/recovered frames"
for condition in $CONDITIONS; do
    LOSS=${condition%%:*}
    DELAY=${condition##*:}
    DIR="$OUT/loss$LOSS-delay$DELAY"
    mkdir -p "$DIR"
    PORT=$(free_port)
    UDP=$(free_udp_port)
    # One media thread: the proxy relays the one UDP port.
    "$CLI" server --host 127.0.0.1 --port "$PORT" --udp-port "$UDP" --media-threads 1 --secret quality --announce-ip 127.0.0.2 \
        --api-key "$KEY" --api-secret "$SECRET" --log-level error > "$DIR/server.log" 2>&1 &
    PIDS+=($!)
    "$CLI" proxy --listen "127.0.0.2:$UDP" --target "127.0.0.1:$UDP" --loss "$LOSS" --delay-ms "$DELAY" --seed 53 > "$DIR/proxy.log" 2>&1 &
    PROXY=$!
    PIDS+=($PROXY)
    for _ in $(seq 100); do grep -q "ws://" "$DIR/server.log" 2>/dev/null && break; sleep 0.1; done
    grep -q "ws://" "$DIR/server.log" || { echo "the server did not start: $(tail -3 "$DIR/server.log")" >&2; exit 1; }
    URL="ws://127.0.0.1:$PORT"
    # Viewers first (each in its own room), then the publishers, all at once: one run, one path.
    for pair in $PAIRS; do
        viewer=${pair:1:1}
        if [ "$viewer" = o ]; then
            "$CLI" join --server "$URL/rtc" --channel "q$pair" --uid view --secret quality --role audience --video none --audio none \
                --playout-wav "$DIR/$pair.wav" --duration $((SECONDS_RUN + 6)) > "$DIR/$pair-view.log" 2>&1 &
        else
            python3 "$PEER" bot --url "$URL" --api-key "$KEY" --api-secret "$SECRET" --room "q$pair" --identity view \
                --audio-wav "$DIR/$pair" --duration $((SECONDS_RUN + 6)) > "$DIR/$pair-view.log" 2>&1 &
        fi
        PIDS+=($!)
    done
    sleep 3
    PUBLISHERS=()
    for pair in $PAIRS; do
        sender=${pair:0:1}
        if [ "$sender" = o ]; then
            "$CLI" join --server "$URL/rtc" --channel "q$pair" --uid pub --secret quality --video none --audio "$SPEECH" --no-subscribe \
                --quiet --duration "$SECONDS_RUN" > "$DIR/$pair-pub.log" 2>&1 &
        else
            python3 "$PEER" bot --url "$URL" --api-key "$KEY" --api-secret "$SECRET" --room "q$pair" --identity pub --publish --no-video \
                --audio-file "$SPEECH" --duration "$SECONDS_RUN" > "$DIR/$pair-pub.log" 2>&1 &
        fi
        PUBLISHERS+=($!)
        PIDS+=($!)
    done
    for pid in ${PUBLISHERS[@]+"${PUBLISHERS[@]}"}; do wait "$pid" || true; done
    sleep 5  # the viewers' own end (their --duration: 3 s before the publishers, 6 s after), files closed
    kill -TERM "$PROXY" 2>/dev/null || true
    sleep 0.5
    cleanup
    PIDS=()
    for pair in $PAIRS; do
        viewer=${pair:1:1}
        wav="$DIR/$pair.wav"
        [ "$viewer" = l ] && wav="$DIR/$pair-pub.wav"
        if [ -s "$wav" ]; then
            score=$(python3 "$SCORE" "$SPEECH" "$wav" --skip 4 --seconds $((SECONDS_RUN - 6)) 2> "$DIR/$pair-score.err" || true)
            [ -n "$score" ] || score="{\"error\": \"the scorer failed: $(tail -1 "$DIR/$pair-score.err" | tr -d '"\\')\"}"
        else
            score='{"error": "no audio played out"}'
        fi
        concealed=""
        [ "$viewer" = o ] && concealed=$(grep -o "recv pub/microphone [^|]*" "$DIR/$pair-view.log" | tail -1 | grep -o "concealed [0-9]* recovered [0-9]*" || true)
        echo "{\"loss\": $LOSS, \"delayMs\": $DELAY, \"pair\": \"$pair\", \"score\": $score}" >> "$OUT/rows.json"
        python3 - "$LOSS" "$DELAY" "$pair" "$score" "$concealed" <<'PY'
import json, sys
loss, delay, pair, score, concealed = sys.argv[1:6]
s = json.loads(score)
names = {"oo": "ours→ours", "ll": "lk→lk", "ol": "ours→lk", "lo": "lk→ours"}
if "error" in s:
    print(f"{loss + '%/' + delay + 'ms':<10} {names[pair]:<10} {s['error']}")
else:
    pesq = "-" if s["pesq"] is None else f"{s['pesq']:.2f}"
    print(f"{loss + '%/' + delay + 'ms':<10} {names[pair]:<10} {pesq:>4} {s['kept'] * 100:8.1f} {s['silent'] * 100:8.1f}  {concealed}")
PY
    done
    grep -h "dropped" "$DIR/proxy.log" | sed 's/^/    /' || true
done
echo "(rows: $OUT/rows.json)"
