#!/usr/bin/env python3
"""The remote peer of the aiortc interop test (Tests/InteropTests/AiortcInteropTests.swift).

Reads one JSON line {"sdp": offer} on stdin, answers it with aiortc, prints {"sdp": answer} on
stdout, sends a synthetic VP8 video track and counts the video frames it decodes from the offerer.
When a second line comes on stdin (the offerer is done sending), or after TIMEOUT seconds, it waits
a second for the last frames, prints {"framesReceived": n, ...} and exits.

Host candidates are limited to 127.0.0.1 (aioice skips loopback by default) and no STUN server is
used, so nothing leaves this machine.
"""
import asyncio
import json
import sys

import aioice.ice

aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: ["127.0.0.1"]

from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription, VideoStreamTrack  # noqa: E402
from av import VideoFrame  # noqa: E402


class Pattern(VideoStreamTrack):
    """A moving gray ramp, 320x240 at 30 fps."""

    def __init__(self):
        super().__init__()
        self.count = 0

    async def recv(self):
        pts, time_base = await self.next_timestamp()
        frame = VideoFrame(width=320, height=240, format="yuv420p")
        shade = (self.count * 4) % 256
        for index, plane in enumerate(frame.planes):
            plane.update(bytes([shade if index == 0 else 128]) * plane.buffer_size)
        self.count += 1
        frame.pts = pts
        frame.time_base = time_base
        return frame


async def main():
    timeout = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
    offer = json.loads(sys.stdin.readline())["sdp"]
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    received = {"frames": 0}

    @pc.on("track")
    def on_track(track):
        async def consume():
            while True:
                try:
                    await track.recv()
                except Exception:
                    return
                received["frames"] += 1

        asyncio.ensure_future(consume())

    await pc.setRemoteDescription(RTCSessionDescription(sdp=offer, type="offer"))
    pc.addTrack(Pattern())
    await pc.setLocalDescription(await pc.createAnswer())
    print(json.dumps({"sdp": pc.localDescription.sdp}), flush=True)
    loop = asyncio.get_running_loop()
    try:
        await asyncio.wait_for(loop.run_in_executor(None, sys.stdin.readline), timeout)
    except asyncio.TimeoutError:
        pass
    await asyncio.sleep(1.0)
    print(json.dumps({"framesReceived": received["frames"], "iceConnectionState": pc.iceConnectionState,
                      "connectionState": pc.connectionState}), flush=True)
    await pc.close()


asyncio.run(main())
