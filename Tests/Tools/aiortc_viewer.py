#!/usr/bin/env python3
"""A viewer built on aiortc (not our SDK) that speaks this project's signaling: it joins over
WebSocket (docs/protocol.md), answers the server's subscriber offers with aiortc, and decodes the
video it receives. It prints one JSON object as its last line:

    {"ok": true, "joinedMs": 12.3, "firstFrameMs": 456.7, "videos": {"1001/camera": {"frames": 140, "size": "640x360"}},
     "path": "host udp 10.77.0.1:7882"}

firstFrameMs is from the start of the connection to the first decoded frame of any video.

Usage: aiortc_viewer.py --server ws://HOST:PORT/rtc --channel C --uid U (--token T | --secret S)
         [--seconds N] [--ice-server turn:H:P?transport=tcp --ice-username U --ice-credential C] [--relay-only]
"""

import argparse
import asyncio
import base64
import json
import os
import struct
import sys
import time
from urllib.parse import urlparse

from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCSessionDescription
from aiortc.rtcconfiguration import RTCIceTransportPolicy
from rtc_token import mint

PROTOCOL = "1.3"


def settle_reply(replies, kind, payload, ident):
    """Settles the future of the request a message answers (by its id; an error fails it). False
    when it answers none of `replies` (a server offer reuses no request id)."""
    if ident not in replies or kind == "offer":
        return False
    future = replies.pop(ident)
    if kind == "error":
        future.set_exception(RuntimeError(f"{payload.get('code')} {payload.get('reason')}"))
    else:
        future.set_result(payload)
    return True


class WebSocket:
    """A minimal RFC 6455 client on asyncio streams: masked text frames out, text frames in."""

    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, url, protocol=None):
        parsed = urlparse(url)
        reader, writer = await asyncio.open_connection(parsed.hostname, parsed.port or 80)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (f"GET {parsed.path or '/'} HTTP/1.1\r\nHost: {parsed.hostname}:{parsed.port}\r\nUpgrade: websocket\r\n"
                   f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                   + (f"Sec-WebSocket-Protocol: {protocol}\r\n" if protocol else "") + "\r\n")
        writer.write(request.encode())
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):
            raise ConnectionError("no WebSocket upgrade: " + head.split(b"\r\n")[0].decode(errors="replace"))
        return cls(reader, writer)

    async def send(self, text):
        payload = text.encode()
        mask = os.urandom(4)
        head = bytearray([0x81])
        if len(payload) < 126:
            head.append(0x80 | len(payload))
        elif len(payload) < 65536:
            head += bytes([0x80 | 126]) + struct.pack("!H", len(payload))
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", len(payload))
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.writer.write(bytes(head) + mask + masked)
        await self.writer.drain()

    async def receive(self):
        """The next text message (None when the server closed)."""
        message = b""
        while True:
            first, second = await self.reader.readexactly(2)
            length = second & 0x7F
            if length == 126:
                length = struct.unpack("!H", await self.reader.readexactly(2))[0]
            elif length == 127:
                length = struct.unpack("!Q", await self.reader.readexactly(8))[0]
            payload = await self.reader.readexactly(length)
            opcode = first & 0x0F
            if opcode == 0x8:
                return None
            if opcode in (0x1, 0x0):
                message += payload
                if first & 0x80:
                    return message.decode()


class Viewer:
    def __init__(self, args):
        self.args = args
        self.start = time.monotonic()
        self.report = {"ok": False, "joinedMs": None, "firstFrameMs": None, "videos": {}, "path": None, "errors": []}
        self.pc = None
        self.next_id = 1
        self.tasks = []
        self.participants = {}

    def ms(self):
        return round((time.monotonic() - self.start) * 1000, 1)

    async def send(self, kind, payload, with_id=True):
        envelope = {"v": PROTOCOL, "type": kind, "payload": payload}
        if with_id:
            envelope["id"] = self.next_id
            self.next_id += 1
        await self.ws.send(json.dumps(envelope))

    def configuration(self):
        servers = []
        if self.args.ice_server:
            servers.append(RTCIceServer(urls=self.args.ice_server, username=self.args.ice_username,
                                        credential=self.args.ice_credential))
        policy = RTCIceTransportPolicy.RELAY if self.args.relay_only else RTCIceTransportPolicy.ALL
        # An empty list, not None: None is aiortc's default, a public STUN server that a lab
        # network cannot reach (gathering then waits for it).
        return RTCConfiguration(iceServers=servers, iceTransportPolicy=policy)

    async def on_offer(self, sdp):
        if self.pc is None:
            self.pc = RTCPeerConnection(self.configuration())
            self.pc.on("track", self.on_track)
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="offer"))
        answer = await self.pc.createAnswer()
        await self.pc.setLocalDescription(answer)
        await self.send("answer", {"transport": "subscriber", "sdp": self.pc.localDescription.sdp}, with_id=False)

    def on_track(self, track):
        if track.kind != "video":
            self.tasks.append(asyncio.ensure_future(self.drain(track)))
            return
        self.tasks.append(asyncio.ensure_future(self.count(track)))

    async def drain(self, track):
        try:
            while True:
                await track.recv()
        except Exception:
            pass

    async def count(self, track):
        # The track's stream id names the publisher in our SDP (msid: <uid> <track sid>); the
        # first frame fixes the key.
        key = None
        try:
            while True:
                frame = await track.recv()
                if key is None:
                    key = self.track_name(track)
                    if self.report["firstFrameMs"] is None:
                        self.report["firstFrameMs"] = self.ms()
                entry = self.report["videos"].setdefault(key, {"frames": 0, "size": None})
                entry["frames"] += 1
                entry["size"] = f"{frame.width}x{frame.height}"
        except Exception:
            pass

    def remember(self, participants):
        """Participants by sid: their uid and their tracks' sources by track sid."""
        for info in participants or []:
            self.participants[info.get("sid")] = (info.get("uid"), {t.get("sid"): t.get("source") for t in info.get("tracks") or []})

    def track_name(self, track):
        """`uid/source` of a track: its m-section's `a=msid:<participant sid> <track sid>` in the
        server's offer, named through the participant list."""
        mid = next((t.mid for t in self.pc.getTransceivers() if t.receiver.track is track), None)
        msid = None
        for section in self.pc.remoteDescription.sdp.split("\nm=")[1:]:
            lines = [line.strip() for line in section.split("\n")]
            if f"a=mid:{mid}" in lines:
                msid = next((line[len("a=msid:"):].split() for line in lines if line.startswith("a=msid:")), None)
        if not msid or len(msid) < 2:
            return f"mid {mid}"
        uid, sources = self.participants.get(msid[0], (msid[0], {}))
        return f"{uid}/{sources.get(msid[1], msid[1])}"

    async def selected_path(self, side="receiver"):
        """The candidate pair carrying media: the local candidate's type and the remote address
        (`side`: the transceivers' receiver or sender, whichever this peer uses)."""
        try:
            for transceiver in self.pc.getTransceivers():
                transport = getattr(transceiver, side).transport.transport  # RTCIceTransport
                pair = transport._connection._nominated.get(1)
                if pair:
                    local, remote = pair.local_candidate, pair.remote_candidate
                    return f"{local.type} {local.transport.lower()} {remote.host}:{remote.port}"
        except Exception as error:  # aioice internals: the figure is best effort
            return f"unknown ({error})"
        return None

    async def run(self):
        token = self.args.token or mint(self.args.secret, self.args.uid, self.args.channel, issuer="aiortc")
        self.ws = await WebSocket.connect(self.args.server)
        await self.send("join", {"token": token, "channel": self.args.channel, "uid": self.args.uid, "role": "audience",
                                 "autoSubscribe": True,
                                 "sdk": {"name": "aiortc", "version": "1.16", "protocolVersion": {"major": 1, "minor": 3}}})
        deadline = time.monotonic() + self.args.seconds
        pinger = asyncio.ensure_future(self.ping())
        try:
            while time.monotonic() < deadline:
                try:
                    text = await asyncio.wait_for(self.ws.receive(), timeout=max(0.1, deadline - time.monotonic()))
                except asyncio.TimeoutError:
                    break
                if text is None:
                    self.report["errors"].append("the server closed the connection")
                    break
                message = json.loads(text)
                kind, payload = message.get("type"), message.get("payload") or {}
                if kind == "joined":
                    self.report["joinedMs"] = self.ms()
                    self.remember(payload.get("others"))
                elif kind == "participantUpdate":
                    self.remember(payload.get("participants"))
                elif kind == "offer" and payload.get("transport") == "subscriber":
                    await self.on_offer(payload["sdp"])
                elif kind == "error":
                    self.report["errors"].append(f"{payload.get('code')} {payload.get('reason')}")
                elif kind == "leave":
                    self.report["errors"].append(f"leave {payload.get('reason')}")
                    break
            self.report["path"] = await self.selected_path() if self.pc else None
        finally:
            pinger.cancel()
            for task in self.tasks:
                task.cancel()
            if self.pc:
                await self.pc.close()
            try:
                await self.send("leave", {"reason": "clientRequest"}, with_id=False)
            except Exception:
                pass
        self.report["ok"] = self.report["firstFrameMs"] is not None
        return self.report

    async def ping(self):
        while True:
            await asyncio.sleep(2)
            await self.send("ping", {"timestamp": int(time.time() * 1000)}, with_id=False)


def parse_arguments(description, extra=None):
    """The options the aiortc peers share (and `extra(parser)`'s)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True)
    parser.add_argument("--channel", required=True)
    parser.add_argument("--uid", required=True)
    parser.add_argument("--token")
    parser.add_argument("--secret")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--ice-server")
    parser.add_argument("--ice-username")
    parser.add_argument("--ice-credential")
    parser.add_argument("--relay-only", action="store_true")
    if extra:
        extra(parser)
    args = parser.parse_args()
    if not args.token and not args.secret:
        parser.error("give --token or --secret")
    return args


def run_and_report(peer):
    """Runs `peer` and prints its report as one JSON line (an exception becomes a failed report)."""
    try:
        report = asyncio.run(peer.run())
    except Exception as error:
        report = {"ok": False, "errors": [f"{type(error).__name__}: {error}"]}
    print(json.dumps(report))
    sys.stdout.flush()


def main():
    run_and_report(Viewer(parse_arguments(__doc__)))


if __name__ == "__main__":
    main()
