#!/usr/bin/env python3
"""A WHIP client (RFC 9725) of our own making from aiortc and aiohttp: not the project's code.

  publish  POST an offer for a Y4M clip (aiortc's MediaPlayer, its own VP8 encoder) to
           http://HOST:PORT/whip/ROOM with a bearer token, set the answer, send for --seconds,
           then DELETE the session; prints one JSON line: status, Location, ETag, Link headers,
           milliseconds to the answer and to ICE connected, the DELETE's status
  probe    bad requests against the endpoint, one JSON line with each status (and the CORS
           preflight): no token, a wrong content type, an SDP without media, a POST on a live
           session, a PATCH with a stale ETag, a DELETE of an unknown session, a body too large

  watch    WHEP (the same exchange, receiving): POST a recvonly offer with aiortc's own payload
           type numbers (VP8 97, Opus 96) to http://HOST:PORT/whep/ROOM[/UID], decode what comes for
           --seconds; prints one JSON line: status, the numbers offered, per track the frames
           decoded, their size and PSNR against the pattern (every 10th frame), audio frames, and
           the RTP packets that arrived for sections the answer declined

Usage: whip_client.py publish --url http://127.0.0.1:7880/whip/ROOM --token T --clip FILE.y4m|pattern [--seconds 8]
       whip_client.py probe --url http://127.0.0.1:7880/whip/ROOM --token T --clip FILE.y4m
"""
import argparse
import asyncio
import json
import time

import aiohttp
from yarl import URL
from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc.contrib.media import MediaPlayer


class PatternSource:
    """aiortc_publisher.py's moving 640x360 pattern, as a player (`--clip pattern`): the same clip
    that publisher sends over our signaling, for side-by-side figures."""

    def __init__(self, seconds):
        from aiortc_publisher import PatternTrack
        self.video = PatternTrack(15, seconds)


def lie_in_sender_reports():
    """From now on every RTCP sender report this process sends says its wall clock ran half as
    fast as it did (NTP time advances by half the time passed, one base for every stream): against
    the packets' own RTP clocks the reports run the RTP clock twice as fast as the wall clock, as a
    GStreamer WHIP publisher's were seen to."""
    import aiortc.rtcrtpsender as sender
    real = sender.RtcpSenderInfo
    base = []

    def lying(ntp_timestamp, **fields):
        if not base:
            base.append(ntp_timestamp)
        return real(ntp_timestamp=base[0] + (ntp_timestamp - base[0]) // 2, **fields)
    sender.RtcpSenderInfo = lying


async def offer_for(clip, seconds=10, audio=False):
    """A sendonly video offer for `clip` (candidates gathered: WHIP sends one offer), with
    aiortc's own audio (silence, Opus) when `audio`."""
    pc = RTCPeerConnection()
    player = PatternSource(seconds) if clip == "pattern" else MediaPlayer(clip, loop=True)
    pc.addTransceiver(player.video, direction="sendonly")
    if audio:
        from aiortc.mediastreams import AudioStreamTrack
        pc.addTransceiver(AudioStreamTrack(), direction="sendonly")
    await pc.setLocalDescription(await pc.createOffer())
    return pc, player


async def publish(args):
    started = time.monotonic()
    ms = lambda: round((time.monotonic() - started) * 1000, 1)
    # startMono: CLOCK_MONOTONIC (what `rtc-cli join --frame-log` writes) before the offer is made.
    report = {"ok": False, "startMono": started}
    if args.lying_reports:
        lie_in_sender_reports()
    pc, player = await offer_for(args.clip, args.seconds, audio=args.with_audio)
    connected = asyncio.Event()

    @pc.on("connectionstatechange")
    def on_state():
        if pc.connectionState == "connected":
            report["connectedMs"] = ms()
            connected.set()

    async with aiohttp.ClientSession() as http:
        async with http.post(args.url, data=pc.localDescription.sdp,
                             headers={"Content-Type": "application/sdp", "Authorization": "Bearer " + args.token}) as reply:
            report["status"] = reply.status
            report["location"] = reply.headers.get("Location")
            report["etag"] = reply.headers.get("ETag")
            report["links"] = reply.headers.getall("Link", [])
            report["contentType"] = reply.headers.get("Content-Type")
            body = await reply.text()
            report["answerMs"] = ms()
        if report["status"] != 201:
            report["error"] = body.strip()
            print(json.dumps(report))
            await pc.close()
            return
        await pc.setRemoteDescription(RTCSessionDescription(sdp=body, type="answer"))
        try:
            await asyncio.wait_for(connected.wait(), 10)
        except asyncio.TimeoutError:
            report["error"] = "ICE/DTLS did not connect within 10 s"
        resource = str(reply.url.join(URL(report["location"])))
        # A trickled candidate (an ICE-lite server needs none, but takes them).
        async with http.patch(resource, data="a=ice-ufrag:" + (pc.localDescription.sdp.split("a=ice-ufrag:")[1].split("\r\n")[0])
                              + "\r\na=ice-pwd:x\r\nm=video 9 UDP/TLS/RTP/SAVPF 0\r\na=mid:0\r\na=candidate:1 1 udp 1 127.0.0.1 9 typ host\r\n",
                              headers={"Content-Type": "application/trickle-ice-sdpfrag", "If-Match": report["etag"] or "*"}) as patched:
            report["patchStatus"] = patched.status
        await asyncio.sleep(args.seconds)
        async with http.delete(resource) as deleted:
            report["deleteStatus"] = deleted.status
        async with http.delete(resource) as again:
            report["deleteAgainStatus"] = again.status
    report["ok"] = report.get("connectedMs") is not None and report.get("deleteStatus") == 200
    player.video.stop()
    await pc.close()
    print(json.dumps(report))


async def watch(args):
    import sys
    import os
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from pattern import psnr_luma
    started = time.monotonic()
    ms = lambda: round((time.monotonic() - started) * 1000, 1)
    report = {"ok": False, "tracks": []}
    pc = RTCPeerConnection()
    for kind in args.receive.split(","):
        pc.addTransceiver(kind, direction="recvonly")
    await pc.setLocalDescription(await pc.createOffer())
    offered = {}
    for line in pc.localDescription.sdp.splitlines():
        if line.startswith("a=rtpmap:"):
            number, codec = line[len("a=rtpmap:"):].split(" ", 1)
            offered.setdefault(codec.split("/")[0].lower(), int(number))
    report["offeredPayloadTypes"] = offered
    tasks = []

    @pc.on("track")
    def on_track(track):
        entry = {"kind": track.kind, "frames": 0, "sizes": {}, "psnr": [], "firstFrameMs": None}
        report["tracks"].append(entry)

        async def consume():
            while True:
                try:
                    frame = await track.recv()
                except Exception:  # noqa: BLE001 (the track ended)
                    return
                if entry["firstFrameMs"] is None:
                    entry["firstFrameMs"] = ms()
                entry["frames"] += 1
                if track.kind == "video":
                    size = f"{frame.width}x{frame.height}"
                    entry["sizes"][size] = entry["sizes"].get(size, 0) + 1
                    if entry["frames"] % 10 == 0:
                        luma = frame.to_ndarray(format="yuv420p")[:frame.height, :frame.width]
                        entry["psnr"].append(round(psnr_luma(luma, frame.width, frame.height), 2))
        tasks.append(asyncio.ensure_future(consume()))

    async with aiohttp.ClientSession() as http:
        async with http.post(args.url, data=pc.localDescription.sdp,
                             headers={"Content-Type": "application/sdp", "Authorization": "Bearer " + args.token}) as reply:
            report["status"] = reply.status
            body = await reply.text()
        if report["status"] != 201:
            report["error"] = body.strip()
            print(json.dumps(report))
            await pc.close()
            return
        report["answeredMids"] = [line.split(":", 1)[1] for line in body.splitlines() if line.startswith("a=mid:")]
        report["declinedSections"] = sum(1 for line in body.splitlines() if line.startswith("m=") and line.split(" ")[1] == "0")
        await pc.setRemoteDescription(RTCSessionDescription(sdp=body, type="answer"))
        await asyncio.sleep(args.seconds)
        location = reply.headers.get("Location")
        if location:
            async with http.delete(str(reply.url.join(URL(location)))) as deleted:
                report["deleteStatus"] = deleted.status
    for task in tasks:
        task.cancel()
    report["ok"] = any(t["frames"] > 0 for t in report["tracks"])
    await pc.close()
    print(json.dumps(report))


async def probe(args):
    report = {}
    sdp_headers = {"Content-Type": "application/sdp", "Authorization": "Bearer " + args.token}
    pc, player = await offer_for(args.clip)
    offer = pc.localDescription.sdp
    async with aiohttp.ClientSession() as http:
        async def status(name, method, url, **kwargs):
            async with http.request(method, url, **kwargs) as reply:
                report[name] = [reply.status, (await reply.text()).strip()[:160]]
                return reply
        await status("noToken", "POST", args.url, data=offer, headers={"Content-Type": "application/sdp"})
        await status("badToken", "POST", args.url, data=offer, headers={"Content-Type": "application/sdp", "Authorization": "Bearer nope"})
        await status("wrongType", "POST", args.url, data=offer, headers={"Content-Type": "text/plain", "Authorization": "Bearer " + args.token})
        no_media = offer.split("m=")[0]
        await status("noMedia", "POST", args.url, data=no_media, headers=sdp_headers)
        await status("notSDP", "POST", args.url, data="hello", headers=sdp_headers)
        await status("tooLarge", "POST", args.url, data="v=0\r\n" + "a=x:" + "y" * 70000 + "\r\n", headers=sdp_headers)
        reply = await status("live", "POST", args.url, data=offer, headers=sdp_headers)
        location = reply.headers.get("Location")
        etag = reply.headers.get("ETag")
        answer_ufrag = report["live"][1].split("a=ice-ufrag:")[1].split()[0] if "a=ice-ufrag:" in report["live"][1] else None
        if location:
            resource = str(reply.url.join(URL(location)))
            # An ICE restart: new credentials in the fragment, the server's new ones back, a new ETag.
            async with http.patch(resource, data="a=ice-ufrag:rst1\r\na=ice-pwd:restartpasswordrestartpass\r\nm=video 9 UDP/TLS/RTP/SAVPF 0\r\na=mid:0\r\n",
                                  headers={"Content-Type": "application/trickle-ice-sdpfrag", "If-Match": etag}) as restart:
                text = await restart.text()
                new_ufrag = text.split("a=ice-ufrag:")[1].split()[0] if "a=ice-ufrag:" in text else None
                report["restart"] = [restart.status, restart.headers.get("Content-Type"), new_ufrag is not None and new_ufrag != answer_ufrag,
                                     restart.headers.get("ETag") not in (None, etag), "a=candidate:" in text]
        if location:
            resource = str(reply.url.join(URL(location)))
            await status("postOnSession", "POST", resource, data=offer, headers=sdp_headers)
            pc2, player2 = await offer_for(args.clip)
            await status("secondSession", "POST", args.url, data=pc2.localDescription.sdp, headers=sdp_headers)
            player2.video.stop()
            await pc2.close()
            await status("staleETag", "PATCH", resource, data="a=candidate:1 1 udp 1 127.0.0.1 9 typ host\r\n",
                         headers={"Content-Type": "application/trickle-ice-sdpfrag", "If-Match": "\"stale\""})
            await status("delete", "DELETE", resource)
            await status("deleteUnknown", "DELETE", resource)
        async with http.options(args.url, headers={"Origin": "http://elsewhere.example", "Access-Control-Request-Method": "POST"}) as preflight:
            report["preflight"] = [preflight.status, preflight.headers.get("Access-Control-Allow-Origin"),
                                   preflight.headers.get("Access-Control-Allow-Methods")]
        async with http.get(args.url.rsplit("/whip/", 1)[0] + "/healthz") as health:
            report["healthz"] = health.status
    player.video.stop()
    await pc.close()
    print(json.dumps(report))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("publish", "probe", "watch"))
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--clip", help="publish and probe: a Y4M file, or pattern")
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--with-audio", action="store_true", help="publish: also aiortc's silence as Opus")
    parser.add_argument("--lying-reports", action="store_true",
                        help="publish: sender reports whose NTP time runs at half speed (the RTP clock twice the wall clock)")
    parser.add_argument("--receive", default="video,audio", help="watch: the recvonly transceivers to offer, in order")
    args = parser.parse_args()
    if args.command != "watch" and not args.clip:
        parser.error("--clip is required for publish and probe")
    asyncio.run({"publish": publish, "probe": probe, "watch": watch}[args.command](args))


if __name__ == "__main__":
    main()
