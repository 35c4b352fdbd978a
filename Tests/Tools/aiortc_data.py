#!/usr/bin/env python3
"""A data channel peer built on aiortc (its own SCTP, not our SDK) that speaks this project's
signaling: it joins, offers a data-only publisher transport with one channel, sends --count
messages on it once it opens ("<uid> <n>"), and records every message that reaches it on any
channel the server opens towards it. It prints one JSON object as its last line:

    {"ok": true, "opened": true, "sent": 20, "received": {"chat": ["a 0", "a 1", ...]}, "errors": []}

Usage: aiortc_data.py --server ws://HOST:PORT/rtc --channel C --uid U (--token T | --secret S)
         [--label chat] [--count 20] [--expect N] [--unordered] [--pad BYTES --pad-every N] [--seconds N]
"""

import asyncio
import json
import time

from aiortc import RTCPeerConnection, RTCSessionDescription

from aiortc_viewer import WebSocket, parse_arguments, run_and_report, settle_reply
from rtc_token import mint
from aiortc_publisher import Publisher


class DataPeer(Publisher):
    def __init__(self, args):
        super().__init__(args)
        self.report = {"ok": False, "opened": False, "sent": 0, "received": {}, "errors": []}
        self.heard = set()
        # Others the server announced (participantUpdate), for --send-on-join.
        self.announced = set()

    async def publish(self):
        self.pc = RTCPeerConnection(self.configuration())
        channel = self.pc.createDataChannel(self.args.label, ordered=not self.args.unordered)

        def listen(on):
            @on.on("message")
            def on_message(message):
                text = message if isinstance(message, str) else message.decode("utf-8", "replace")
                self.heard.add(text.split(" ")[0])
                if not text.endswith(" hello"):
                    if self.args.size:
                        # Throughput runs: arrival times and a count, not the (large) texts.
                        now = round((time.monotonic() - self.start) * 1000, 3)
                        self.report.setdefault("firstNumberedMs", now)
                        self.report["lastNumberedMs"] = now
                        self.report["numbered"] = self.report.get("numbered", 0) + 1
                        self.report["received"].setdefault(on.label, []).append("")
                        return
                    self.report["received"].setdefault(on.label, []).append(text)

        async def say():
            # "hello" until --peers others are heard (the server relays only to participants whose
            # channels are up), then the numbered messages. With --send-on-join: the numbered
            # messages as soon as the server announces --peers others, their channels up or not.
            if self.args.send_on_join:
                while len(self.announced) < self.args.peers:
                    await asyncio.sleep(0.005)
            while not self.args.send_on_join and len(self.heard) < self.args.peers:
                channel.send("%s hello" % self.args.uid)
                await asyncio.sleep(0.2)
            for _ in range(0 if self.args.send_on_join else 3):
                channel.send("%s hello" % self.args.uid)
            for index in range(self.args.count):
                text = "%s %d" % (self.args.uid, index)
                if self.args.pad and self.args.pad_every and index % self.args.pad_every == 0:
                    text += " " + "x" * self.args.pad
                if self.args.size:
                    text += " " + "x" * max(0, self.args.size - len(text) - 1)
                channel.send(text)
                self.report["sent"] += 1

        @channel.on("open")
        def on_open():
            self.report["opened"] = True
            self.tasks.append(asyncio.ensure_future(say()))

        listen(channel)

        @self.pc.on("datachannel")
        def on_datachannel(incoming):
            listen(incoming)

        await self.pc.setLocalDescription(await self.pc.createOffer())
        answered = await self.request("offer", {"transport": "publisher", "sdp": self.pc.localDescription.sdp})
        answer = await asyncio.wait_for(answered, timeout=15)
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=answer["sdp"], type="answer"))

    def received_count(self):
        return sum(len(messages) for messages in self.report["received"].values())

    async def run(self):
        token = self.args.token or mint(self.args.secret, self.args.uid, self.args.channel, issuer="aiortc")
        self.start = time.monotonic()
        self.ws = await WebSocket.connect(self.args.server)
        await self.send("join", {"token": token, "channel": self.args.channel, "uid": self.args.uid, "role": "broadcaster",
                                 "autoSubscribe": False,
                                 "sdk": {"name": "aiortc", "version": "1.16", "protocolVersion": {"major": 1, "minor": 3}}})
        deadline = time.monotonic() + self.args.seconds
        pinger = asyncio.ensure_future(self.ping())
        publishing = None
        try:
            while time.monotonic() < deadline:
                if self.report["sent"] >= self.args.count and self.received_count() >= self.args.expect:
                    await asyncio.sleep(self.args.linger)
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
                    publishing = asyncio.ensure_future(self.publish())
                elif kind == "participantUpdate":
                    self.announced.update(p.get("uid") for p in payload.get("participants", []) if p.get("uid") != self.args.uid)
                elif kind == "error":
                    self.report["errors"].append(f"{payload.get('code')} {payload.get('reason')}")
                if publishing is not None and publishing.done() and publishing.exception():
                    self.report["errors"].append(f"publish: {publishing.exception()}")
                    break
        finally:
            pinger.cancel()
            if self.pc:
                await self.pc.close()
            try:
                await self.send("leave", {"reason": "clientRequest"}, with_id=False)
            except Exception:
                pass
        self.report["ok"] = self.report["opened"] and self.report["sent"] == self.args.count \
            and self.received_count() >= self.args.expect and not self.report["errors"]
        return self.report


def main():
    def extra(parser):
        parser.add_argument("--label", default="chat")
        parser.add_argument("--count", type=int, default=20)
        parser.add_argument("--expect", type=int, default=0, help="messages to receive before leaving")
        parser.add_argument("--linger", type=float, default=1.0, help="seconds to stay after that")
        parser.add_argument("--unordered", action="store_true")
        parser.add_argument("--peers", type=int, default=1, help="others to hear from before sending the numbered messages")
        parser.add_argument("--send-on-join", action="store_true",
                            help="send the numbered messages once the server announces --peers others (no hellos)")
        parser.add_argument("--pad", type=int, default=0, help="bytes added to every --pad-every-th message")
        parser.add_argument("--pad-every", type=int, default=0)
        parser.add_argument("--size", type=int, default=0, help="pad every numbered message to this many bytes (throughput runs)")
    run_and_report(DataPeer(parse_arguments(__doc__, extra=extra)))


if __name__ == "__main__":
    main()
