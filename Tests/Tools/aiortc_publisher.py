#!/usr/bin/env python3
"""A publisher built on aiortc (not our SDK) that speaks this project's signaling: it joins over
WebSocket (docs/protocol.md) as a broadcaster, announces a camera track with `publishTrack`, offers
the publisher transport with aiortc (aiortc's own VP8 encoder, over libvpx) and sends a moving
640x360 pattern for --seconds. It prints one JSON object as its last line:

    {"ok": true, "joinMono": 1234.5, "joinedMs": 12.3, "connectedMs": 456.7, "framesSent": 180,
     "path": "host udp 10.77.0.1:7882", "errors": []}

joinMono is time.monotonic() (CLOCK_MONOTONIC, the clock `rtc-cli join --frame-log` writes) when
the WebSocket connection began; the other times are from then.

Usage: aiortc_publisher.py --server ws://HOST:PORT/rtc --channel C --uid U (--token T | --secret S)
         [--seconds N] [--fps F] [--ice-server turn:H:P?transport=tcp --ice-username U --ice-credential C] [--relay-only]
"""

import asyncio
import fractions
import json
import time

from aiortc import RTCPeerConnection, RTCSessionDescription, VideoStreamTrack
from av import VideoFrame

from aiortc_viewer import Viewer, WebSocket, parse_arguments, run_and_report, settle_reply
from rtc_token import mint

WIDTH, HEIGHT = 640, 360


class PatternTrack(VideoStreamTrack):
    """A 640x360 picture that moves every frame (a diagonal ramp sliding sideways), at `fps`."""

    def __init__(self, fps, seconds):
        super().__init__()
        self.fps, self.frames = fps, int(fps * seconds)
        self.sent = 0
        self.start = None
        ramp = bytes((x * 3) % 256 for x in range(WIDTH * 2))
        self.luma_rows = ramp
        self.chroma = bytes([128]) * (WIDTH // 2 * HEIGHT // 2)

    async def recv(self):
        if self.start is None:
            self.start = time.monotonic()
        if self.sent >= self.frames:
            # Done: hold here (the track ends when the connection closes).
            await asyncio.sleep(3600)
        due = self.start + self.sent / self.fps
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        frame = VideoFrame(width=WIDTH, height=HEIGHT, format="yuv420p")
        shift = (self.sent * 4) % WIDTH
        luma = b"".join(self.luma_rows[(shift + row) % WIDTH:(shift + row) % WIDTH + WIDTH] for row in range(HEIGHT))
        frame.planes[0].update(luma)
        frame.planes[1].update(self.chroma)
        frame.planes[2].update(self.chroma)
        frame.pts = int(self.sent * 90000 / self.fps)
        frame.time_base = fractions.Fraction(1, 90000)
        self.sent += 1
        return frame


class Publisher(Viewer):
    """The viewer's signaling and ICE settings, the publisher transport's offer side."""

    def __init__(self, args):
        super().__init__(args)
        self.report = {"ok": False, "joinMono": None, "joinedMs": None, "connectedMs": None, "framesSent": 0,
                       "path": None, "errors": []}
        self.replies = {}

    async def request(self, kind, payload):
        """Sends `kind` with an id; the future of the message that answers it (same id)."""
        ident = self.next_id
        future = asyncio.get_running_loop().create_future()
        self.replies[ident] = future
        await self.send(kind, payload)
        return future

    async def publish(self):
        self.pc = RTCPeerConnection(self.configuration())

        @self.pc.on("connectionstatechange")
        def on_state():
            if self.pc.connectionState == "connected" and self.report["connectedMs"] is None:
                self.report["connectedMs"] = self.ms()

        self.track = PatternTrack(self.args.fps, self.args.seconds)
        transceiver = self.pc.addTransceiver(self.track, direction="sendonly")
        await self.pc.setLocalDescription(await self.pc.createOffer())
        # The track first, with the mid the offer gave it (as rtc.js does), so the server names its source.
        announced = await self.request("publishTrack", {"kind": "video", "source": "camera", "mid": transceiver.mid})
        answered = await self.request("offer", {"transport": "publisher", "sdp": self.pc.localDescription.sdp})
        await asyncio.wait_for(announced, timeout=15)
        answer = await asyncio.wait_for(answered, timeout=15)
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=answer["sdp"], type="answer"))

    async def run(self):
        token = self.args.token or mint(self.args.secret, self.args.uid, self.args.channel, issuer="aiortc")
        self.report["joinMono"] = time.monotonic()
        self.start = self.report["joinMono"]
        self.ws = await WebSocket.connect(self.args.server)
        await self.send("join", {"token": token, "channel": self.args.channel, "uid": self.args.uid, "role": "broadcaster",
                                 "autoSubscribe": False,
                                 "sdk": {"name": "aiortc", "version": "1.16", "protocolVersion": {"major": 1, "minor": 3}}})
        deadline = time.monotonic() + self.args.seconds + 15
        pinger = asyncio.ensure_future(self.ping())
        publishing = None
        try:
            while time.monotonic() < deadline:
                if self.pc is not None and self.track.sent >= self.track.frames:
                    await asyncio.sleep(0.5)  # the last frames' packets
                    break
                try:
                    text = await asyncio.wait_for(self.ws.receive(), timeout=0.2)
                except asyncio.TimeoutError:
                    continue
                if text is None:
                    self.report["errors"].append("the server closed the connection")
                    break
                message = json.loads(text)
                kind, payload, ident = message.get("type"), message.get("payload") or {}, message.get("id")
                if settle_reply(self.replies, kind, payload, ident):
                    continue
                if kind == "joined":
                    self.report["joinedMs"] = self.ms()
                    publishing = asyncio.ensure_future(self.publish())
                elif kind == "error":
                    self.report["errors"].append(f"{payload.get('code')} {payload.get('reason')}")
                elif kind == "leave":
                    self.report["errors"].append(f"leave {payload.get('reason')}")
                    break
                if publishing is not None and publishing.done() and publishing.exception():
                    self.report["errors"].append(f"publish: {publishing.exception()}")
                    break
            self.report["path"] = await self.selected_path(side="sender") if self.pc else None
        finally:
            pinger.cancel()
            self.report["framesSent"] = self.track.sent if self.pc else 0
            if self.pc:
                await self.pc.close()
            try:
                await self.send("leave", {"reason": "clientRequest"}, with_id=False)
            except Exception:
                pass
        self.report["ok"] = self.report["connectedMs"] is not None and self.report["framesSent"] > 0
        return self.report


def main():
    args = parse_arguments(__doc__, extra=lambda parser: parser.add_argument("--fps", type=float, default=15))
    run_and_report(Publisher(args))


if __name__ == "__main__":
    main()
