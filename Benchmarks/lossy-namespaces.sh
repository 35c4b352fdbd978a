#!/usr/bin/env bash
# Joins and a long run under loss, measured across network namespaces (issue 16's figures):
# server, publisher and viewer each in a namespace of their own behind a router namespace. The
# router's kernel drops 10 % of every forwarded packet each way, TCP (signaling) included as a real
# lossy link does (nftables `numgen random`; UDP_ONLY=1 drops only UDP, the earlier mode); the delay
# comes from `rtc-cli proxy` in the server's namespace (the kernel here has no netem): 30 ms each
# way, 60 ms RTT; the long run's freezes come from the viewer's --frame-log. The server listens on 10.89.0.1 and announces the proxy's 10.89.0.2, so every
# client's media goes through the proxy. (The drops are on the router's forward path: a packet a
# host's own OUTPUT chain drops fails the sender's sendto with EPERM instead of vanishing.)
#
#   [UDP_ONLY=1] [LOSS=10] Benchmarks/lossy-namespaces.sh [RTC_CLI] [JOINS] [SECONDS]     (root; cleans up on exit)
#
# LOSS is the percentage dropped each way (10 by default; 0 gives the same path without loss).
set -euo pipefail
CLI=${1:-.build/debug/rtc-cli}
JOINS=${2:-10}
SECONDS_LONG=${3:-60}
CLI=$(realpath "$CLI")
P=lossy$$
OUT=$(mktemp -d)

cleanup() {
    for ns in s p v r; do
        ip netns pids $P$ns 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        ip netns del $P$ns 2>/dev/null || true
    done
    [ -n "${KEEP:-}" ] || rm -rf "$OUT"; [ -n "${KEEP:-}" ] && echo "logs in $OUT"
}
trap cleanup EXIT

ip netns add ${P}r
ip -n ${P}r link set lo up
ip netns exec ${P}r sysctl -qw net.ipv4.ip_forward=1
n=0
for h in s p v; do
    ip netns add $P$h
    ip -n $P$h link set lo up
    ip link add ${P}h$n netns $P$h type veth peer name ${P}r$n netns ${P}r
    ip -n $P$h addr add 10.89.$n.1/24 dev ${P}h$n
    ip -n $P$h link set ${P}h$n up
    ip -n $P$h route add default via 10.89.$n.254
    ip -n ${P}r addr add 10.89.$n.254/24 dev ${P}r$n
    ip -n ${P}r link set ${P}r$n up
    n=$((n + 1))
done
LOSS=${LOSS:-10}
# LOSS % of the packets each way between the clients and the server's network (UDP only with
# UDP_ONLY=1), dropped by the router.
if [ -n "${UDP_ONLY:-}" ]; then MATCH="meta l4proto udp"; WHAT="UDP"; else MATCH=""; WHAT="every packet (TCP too)"; fi
ip netns exec ${P}r nft -f - <<NFT
table ip loss {
    chain gate {
        type filter hook forward priority 0;
        $MATCH numgen random mod 100 < $LOSS drop
    }
}
NFT
ip -n ${P}s addr add 10.89.0.2/24 dev ${P}h0
ip netns exec ${P}s "$CLI" proxy --listen 10.89.0.2:7882 --target 10.89.0.1:7882 --delay-ms 30 > "$OUT/proxy.log" 2>&1 &
# One media thread: the proxy relays the one UDP port (a second thread would put rooms on 7883).
ip netns exec ${P}s "$CLI" server --host 10.89.0.1 --port 7880 --udp-port 7882 --media-threads 1 --secret s --announce-ip 10.89.0.2 \
    --log-level error > "$OUT/server.log" 2>&1 &
sleep 2
SERVER=ws://10.89.0.1:7880/rtc

echo "== $JOINS joins at $LOSS % loss of $WHAT each way (kernel) and 60 ms RTT (proxy): join to the first decoded frame (640x360 publisher)"
ip netns exec ${P}p "$CLI" join --server $SERVER --channel joins --uid 1001 --secret s --no-subscribe --quiet \
    --duration $((JOINS * 5 + 10)) > "$OUT/pub1.log" 2>&1 &
sleep 2
: > "$OUT/first.txt"
for i in $(seq 1 "$JOINS"); do
    ip netns exec ${P}v "$CLI" join --server $SERVER --channel joins --uid v$i --secret s --role audience --video none \
        --audio none --duration 3 > "$OUT/v$i.log" 2>&1 || true
    grep -o "first frame of 1001/camera [0-9x]* after [0-9]* ms" "$OUT/v$i.log" | awk '{print $(NF-1)}' >> "$OUT/first.txt" || true
    sleep 1
done
sort -n "$OUT/first.txt" | awk '{a[NR]=$1} END {if (NR == 0) {print "no first frames"; exit}
    printf "first frame: %d joins, p50 %d ms, min %d ms, max %d ms\n", NR, a[int((NR + 1) / 2)], a[1], a[NR]}'

echo "== $JOINS publisher joins, the same path: a viewer already in the room; the publisher's start (--print-timing) to its first frame decoded at the viewer"
ip netns exec ${P}v "$CLI" join --server $SERVER --channel pubjoins --uid watcher --secret s --role audience --video none --audio none \
    --frame-log "$OUT/pubframes.log" --duration $((JOINS * 6 + 10)) > "$OUT/watcher.log" 2>&1 &
sleep 2
: > "$OUT/pubfirst.txt"
: > "$OUT/phases.txt"
for i in $(seq 1 "$JOINS"); do
    ip netns exec ${P}p "$CLI" join --server $SERVER --channel pubjoins --uid p$i --secret s --no-subscribe --quiet --print-timing \
        --duration 3 > "$OUT/p$i.log" 2>&1 || true
    start=$(awk '$1 == "timing" && $2 == "start" {print $3}' "$OUT/p$i.log")
    joined=$(awk '$1 == "timing" && $2 == "joined" {print $3}' "$OUT/p$i.log")
    published=$(awk '$1 == "timing" && $2 == "published" {print $3}' "$OUT/p$i.log")
    first=$(awk -v u="p$i" '$2 == u {print $1; exit}' "$OUT/pubframes.log" 2>/dev/null)
    if [ -n "$start" ] && [ -n "$first" ]; then echo $(( (first - start) / 1000 )) >> "$OUT/pubfirst.txt"; fi
    if [ -n "$start" ] && [ -n "$joined" ] && [ -n "$published" ] && [ -n "$first" ]; then
        echo "p$i: joined $(( (joined - start) / 1000 )) ms, published $(( (published - start) / 1000 )) ms, first frame at the viewer $(( (first - start) / 1000 )) ms" >> "$OUT/phases.txt"
    fi
    sleep 1
done
cat "$OUT/phases.txt"
sort -n "$OUT/pubfirst.txt" | awk '{a[NR]=$1} END {if (NR == 0) {print "no first frames"; exit}
    printf "publisher join to its first frame at the viewer: %d joins, p50 %d ms, min %d ms, max %d ms\n", NR, a[int((NR + 1) / 2)], a[1], a[NR]}'

echo "== $SECONDS_LONG s of 1280x720 at 30 fps through the same path: frames per second sent and decoded"
ip netns exec ${P}v "$CLI" join --server $SERVER --channel long --uid 2001 --secret s --role audience --video none --audio none \
    --frame-log "$OUT/frames.log" --duration $((SECONDS_LONG + 6)) > "$OUT/viewer.log" 2>&1 &
sleep 2
ip netns exec ${P}p "$CLI" join --server $SERVER --channel long --uid 1002 --secret s --size 1280x720 --fps 30 --bitrate 2500 \
    --audio tone --no-subscribe --duration "$SECONDS_LONG" > "$OUT/pub2.log" 2>&1 || true
sleep 5
sent=$(grep -o "send video [0-9]* kbps [0-9]* fps" "$OUT/pub2.log" | awk '{print $5}' | tr '\n' ' ')
got=$(grep -o "recv 1002/camera [0-9]* kbps [0-9]* fps" "$OUT/viewer.log" | awk '{print $5}' | tr '\n' ' ')
echo "sent fps per second:    $sent"
echo "decoded fps per second: $got"
echo "$got" | tr ' ' '\n' | grep -v '^$' | sed '1d;$d' | sort -n | awk '{a[NR]=$1} END {
    under = 0; for (i = 1; i <= NR; i++) if (a[i] < 15) under++
    printf "decoded: min %d fps, median %d fps, %d of %d seconds under 15 fps (first and last second left out)\n", a[1], a[int((NR + 1) / 2)], under, NR}'
# Freezes: the gaps between consecutive decoded frames (the frame log's monotonic µs per frame).
awk '$2 == "1002" { if (last) { gap = $1 - last; if (gap > longest) longest = gap; if (gap > 500000) over++ } last = $1; n++ }
    END { printf "decoded frames: %d; longest gap between two %d ms; gaps over 500 ms: %d\n", n, longest / 1000, over }' "$OUT/frames.log"
pkill -TERM -f "proxy --listen 10.89.0.2:7882" 2>/dev/null || true
sleep 1
grep -h "dropped" "$OUT/proxy.log" || true
