#!/usr/bin/env python3
"""sfu_load.py: one load shape, driven by aiortc peers, against this project's server or Janus.

Each room gets one publisher sending a pre-encoded VP8 clip (an IVF file, looped; nothing is
encoded here) and --viewers viewers that receive it without decoding: they count RTP packets and
sequence gaps. The same peers speak either this project's signaling (docs/protocol.md) or Janus's
JSON API with its videoroom plugin (Janus 1.x, WebSocket transport), so the server is the only
thing that changes between two runs. While the peers stream, the server's CPU time is read from
/proc/PID/stat at the start and the end of a measured window.

    python3 sfu_load.py --target ours  --url ws://HOST:PORT/rtc --secret S --server-pid PID --clip clip.ivf
    python3 sfu_load.py --target janus --url ws://HOST:PORT/    --server-pid PID --clip clip.ivf
        [--rooms 10] [--viewers 10] [--warmup 8] [--seconds 20] [--workers 2]

The rooms are split over --workers processes (a process has one core's worth of Python). It
prints exactly one JSON object as the last line of stdout:

    {"target": "janus", "rooms": 10, "viewers": 100, "viewersReceiving": 100, "packets": 251234,
     "packetsPerSecond": 12561.7, "lossPercent": 0.01, "peerSocketDrops": 0, "serverCpuSeconds": 3.1, "serverCpuPercent": 15.5, "peersCpuPercent": 80.2,
     "cpuMicrosecondsPerPacket": 12.3, "setupSeconds": {"p50": 0.4, "p95": 0.9}, "errors": []}

packets counts the RTP packets (retransmissions included) the viewers received in the window;
lossPercent is from sequence numbers of the media stream, before any retransmission;
peerSocketDrops counts the datagrams the kernel dropped at the peers' own sockets (a full receive
buffer: the peers, not the server, fell behind).
"""

import argparse
import asyncio
import fractions
import json
import os
import random
import struct
import subprocess
import sys
import time

import av
import aiortc.rtcrtpreceiver as rtcrtpreceiver
from aiortc import MediaStreamTrack, RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from aiortc_viewer import WebSocket, settle_reply
from rtc_token import mint

PROTOCOL = "1.3"
SDK = {"name": "sfu_load", "version": "0.1", "protocolVersion": {"major": 1, "minor": 3}}
JANUS_SUBPROTOCOL = "janus-protocol"
VIDEO_CLOCK = 90000
# No ICE servers: aiortc would otherwise ask Google's public STUN server, which is not reachable
# from here (gathering then waits for it).
NO_STUN = RTCConfiguration(iceServers=[])


def percentile(values, p):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(round(p / 100.0 * len(ordered) + 0.5)) - 1))]


def note(*parts):
    print("sfu_load:", *parts, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The clip: IVF frames sent as they are


def read_ivf(path):
    """(frame rate, [frame bytes]) of an IVF file (a 32-byte header, then 12-byte frame headers)."""
    with open(path, "rb") as file:
        data = file.read()
    if len(data) < 32 or data[:4] != b"DKIF" or data[8:12] != b"VP80":
        raise ValueError(f"{path} is not a VP8 IVF file")
    header_size = struct.unpack_from("<H", data, 6)[0]
    rate, scale = struct.unpack_from("<II", data, 16)
    fps = rate / scale if rate and scale else 30.0
    frames, offset = [], header_size
    while offset + 12 <= len(data):
        size = struct.unpack_from("<I", data, offset)[0]
        offset += 12
        if offset + size > len(data):
            break
        frames.append(data[offset:offset + size])
        offset += size
    if not frames:
        raise ValueError(f"{path} has no frames")
    return fps, frames


class ClipTrack(MediaStreamTrack):
    """A video track that hands aiortc's sender the clip's encoded frames (av.Packet) at the clip's
    frame rate, looping; the sender packetizes them without encoding."""

    kind = "video"

    def __init__(self, clip):
        super().__init__()
        self.fps, self.frames = clip
        self.sent = 0
        self.start = None

    async def recv(self):
        if self.start is None:
            self.start = time.monotonic()
        delay = self.start + self.sent / self.fps - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        packet = av.Packet(self.frames[self.sent % len(self.frames)])
        packet.pts = int(self.sent * VIDEO_CLOCK / self.fps)
        packet.time_base = fractions.Fraction(1, VIDEO_CLOCK)
        self.sent += 1
        return packet


# ---------------------------------------------------------------------------------------------
# Viewers that count instead of decoding


def discarding_decoder(loop, input_q, output_q, decode_error):
    """Stands in for aiortc's decoder thread: takes the assembled frames and drops them."""
    while input_q.get() is not None:
        pass
    asyncio.run_coroutine_threadsafe(output_q.put(None), loop)


class Tally:
    """What one receiver got: packets, and the media stream's sequence numbers (extended)."""

    def __init__(self):
        self.packets = 0
        self.first_at = None
        self.media = 0
        self.highest = None  # extended sequence number
        self.lowest = None

    def add(self, sequence, is_retransmission):
        self.packets += 1
        if self.first_at is None:
            self.first_at = time.monotonic()
        if is_retransmission:
            return
        self.media += 1
        if self.highest is None:
            self.highest = self.lowest = sequence
            return
        # Unwrap against the highest seen so far (RFC 3550, appendix A.1, in short).
        candidate = (self.highest & ~0xFFFF) | sequence
        if candidate < self.highest - 0x8000:
            candidate += 0x10000
        elif candidate > self.highest + 0x8000:
            candidate -= 0x10000
        self.highest = max(self.highest, candidate)
        self.lowest = min(self.lowest, candidate)

    def snapshot(self):
        expected = 0 if self.highest is None else self.highest - self.lowest + 1
        return {"packets": self.packets, "media": self.media, "expected": expected}


TALLIES = []


def socket_drops():
    """Datagrams the kernel dropped at this process's UDP sockets (a full receive buffer: the peers
    did not read in time), from the drops column of /proc/net/udp and udp6."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    drops = 0
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            with open(table) as file:
                next(file)
                for line in file:
                    fields = line.split()
                    if len(fields) >= 13 and fields[9] in inodes:
                        drops += int(fields[12])
        except OSError:
            continue
    return drops


def install_counting():
    """Patches aiortc's receiver: every RTP packet is tallied, and frames are never decoded."""
    rtcrtpreceiver.decoder_worker = discarding_decoder
    original = rtcrtpreceiver.RTCRtpReceiver._handle_rtp_packet

    async def counting(self, packet, arrival_time_ms):
        tally = getattr(self, "_sfu_load_tally", None)
        if tally is None:
            tally = self._sfu_load_tally = Tally()
            TALLIES.append(tally)
        codec = self._RTCRtpReceiver__codecs.get(packet.payload_type)
        tally.add(packet.sequence_number, codec is not None and codec.name.lower() == "rtx")
        await original(self, packet, arrival_time_ms)

    rtcrtpreceiver.RTCRtpReceiver._handle_rtp_packet = counting


# ---------------------------------------------------------------------------------------------
# This project's signaling


class OursPeer:
    """A participant of this project's server: joins, then publishes the clip or answers the
    server's subscriber offers."""

    def __init__(self, args, room, uid, publisher, clip):
        self.args, self.room, self.uid, self.publisher, self.clip = args, room, uid, publisher, clip
        self.pc = None
        self.next_id = 1
        self.replies = {}
        self.ready = asyncio.get_running_loop().create_future()  # publishing, or joined as a viewer

    async def send(self, kind, payload, with_id=True):
        envelope = {"v": PROTOCOL, "type": kind, "payload": payload}
        ident = None
        if with_id:
            ident = envelope["id"] = self.next_id
            self.next_id += 1
        await self.ws.send(json.dumps(envelope))
        return ident

    async def request(self, kind, payload):
        future = asyncio.get_running_loop().create_future()
        self.replies[self.next_id] = future  # before sending: the reply may be read while the send waits
        await self.send(kind, payload)
        return await asyncio.wait_for(future, timeout=20)

    async def publish(self):
        self.pc = RTCPeerConnection(NO_STUN)
        transceiver = self.pc.addTransceiver(ClipTrack(self.clip), direction="sendonly")
        await self.pc.setLocalDescription(await self.pc.createOffer())
        # The track first, with the mid the offer gave it (as rtc.js does), so the server names its source.
        announced = asyncio.ensure_future(self.request("publishTrack", {"kind": "video", "source": "camera", "mid": transceiver.mid}))
        await asyncio.sleep(0)  # sent before the offer
        answer = await self.request("offer", {"transport": "publisher", "sdp": self.pc.localDescription.sdp})
        await announced
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=answer["sdp"], type="answer"))

    async def answer(self, sdp):
        if self.pc is None:
            self.pc = RTCPeerConnection(NO_STUN)
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="offer"))
        await self.pc.setLocalDescription(await self.pc.createAnswer())
        await self.send("answer", {"transport": "subscriber", "sdp": self.pc.localDescription.sdp}, with_id=False)

    async def run(self, until):
        token = mint(self.args.secret, self.uid, self.room, issuer="aiortc")
        self.ws = await WebSocket.connect(self.args.url)
        role = "broadcaster" if self.publisher else "audience"
        await self.send("join", {"token": token, "channel": self.room, "uid": self.uid, "role": role,
                                 "autoSubscribe": not self.publisher, "sdk": SDK})
        pinger = None  # started at "joined", every pingInterval it names (as our SDK and the web client do)
        work = None
        try:
            while time.monotonic() < until:
                try:
                    text = await asyncio.wait_for(self.ws.receive(), timeout=max(0.05, until - time.monotonic()))
                except asyncio.TimeoutError:
                    break
                if text is None:
                    raise ConnectionError("the server closed the connection")
                message = json.loads(text)
                kind, payload, ident = message.get("type"), message.get("payload") or {}, message.get("id")
                if settle_reply(self.replies, kind, payload, ident):
                    continue
                if kind == "joined":
                    if pinger is None:
                        pinger = asyncio.ensure_future(self.ping(max(1, int(payload.get("pingInterval") or 5))))
                    if self.publisher:
                        work = asyncio.ensure_future(self.publish())
                        work.add_done_callback(self.publishing_done)
                    elif not self.ready.done():
                        self.ready.set_result(True)
                elif kind == "offer" and payload.get("transport") == "subscriber":
                    await self.answer(payload["sdp"])
                elif kind == "error":
                    raise RuntimeError(f"server error {payload.get('code')} {payload.get('reason')}")
                elif kind == "leave":
                    raise ConnectionError(f"left: {payload.get('reason')}")
        finally:
            if pinger is not None:
                pinger.cancel()
            if work is not None:
                work.cancel()
            await self.close()

    def publishing_done(self, work):
        if self.ready.done():
            return
        if work.cancelled() or work.exception():
            self.ready.set_exception(work.exception() if not work.cancelled() else asyncio.CancelledError())
        else:
            self.ready.set_result(True)

    async def ping(self, interval):
        while True:
            await asyncio.sleep(interval)
            await self.send("ping", {"timestamp": int(time.time() * 1000)}, with_id=False)

    async def close(self):
        if self.pc:
            await self.pc.close()
        try:
            await self.send("leave", {"reason": "clientRequest"}, with_id=False)
            self.ws.writer.close()
        except Exception:
            pass


# ---------------------------------------------------------------------------------------------
# Janus: its JSON API over WebSocket, the videoroom plugin


class JanusPeer:
    """A participant of a Janus videoroom: one Janus session and plugin handle on a WebSocket of its
    own. The publisher creates the room (if needed), joins and publishes; a viewer joins as a
    subscriber of the room's publisher and answers Janus's offer."""

    def __init__(self, args, room, uid, publisher, clip, feed=None):
        self.args, self.room, self.uid, self.publisher, self.clip = args, room, uid, publisher, clip
        self.feed = feed  # a viewer: the publisher's feed id (a future)
        self.pc = None
        self.pending = {}
        self.events = asyncio.Queue()
        self.ready = asyncio.get_running_loop().create_future()
        self.publisher_id = asyncio.get_running_loop().create_future()
        self.session = self.handle = None
        self.webrtc_up = asyncio.get_running_loop().create_future()
        # Nobody may await these when a peer fails early: retrieve their exceptions quietly.
        for future in (self.ready, self.publisher_id):
            future.add_done_callback(lambda done: done.cancelled() or done.exception())

    async def call(self, body, expect="success"):
        """Sends a Janus request and waits for its reply (`ack` for asynchronous plugin requests,
        whose result comes later as an event)."""
        transaction = "%08x" % random.getrandbits(32)
        body = dict(body, transaction=transaction)
        if self.session is not None:
            body["session_id"] = self.session
        future = asyncio.get_running_loop().create_future()
        self.pending[transaction] = future
        await self.ws.send(json.dumps(body))
        reply = await asyncio.wait_for(future, timeout=20)
        if reply.get("janus") == "error":
            raise RuntimeError(f"janus error {reply.get('error')}")
        if reply.get("janus") != expect:
            raise RuntimeError(f"janus answered {reply.get('janus')}, not {expect}: {reply}")
        return reply

    async def plugin(self, body, jsep=None, asynchronous=False):
        request = {"janus": "message", "handle_id": self.handle, "body": body}
        if jsep:
            request["jsep"] = jsep
        reply = await self.call(request, expect="ack" if asynchronous else "success")
        if asynchronous:
            return await self.next_event()
        data = (reply.get("plugindata") or {}).get("data") or {}
        if data.get("error"):
            raise RuntimeError(f"videoroom: {data.get('error_code')} {data.get('error')}")
        return data

    async def next_event(self):
        event = await asyncio.wait_for(self.events.get(), timeout=20)
        data = (event.get("plugindata") or {}).get("data") or {}
        if data.get("error"):
            raise RuntimeError(f"videoroom: {data.get('error_code')} {data.get('error')}")
        return event

    async def reader(self):
        while True:
            text = await self.ws.receive()
            if text is None:
                raise ConnectionError("Janus closed the connection")
            message = json.loads(text)
            future = self.pending.get(message.get("transaction"))
            if future is not None and message.get("janus") in ("success", "error", "ack"):
                self.pending.pop(message["transaction"])
                if not future.done():
                    future.set_result(message)
            elif message.get("janus") == "event":
                await self.events.put(message)
            elif message.get("janus") == "webrtcup" and not self.webrtc_up.done():
                self.webrtc_up.set_result(True)

    async def setup(self):
        self.session = (await self.call({"janus": "create"}))["data"]["id"]
        self.handle = (await self.call({"janus": "attach", "plugin": "janus.plugin.videoroom"}))["data"]["id"]
        if self.publisher:
            exists = await self.plugin({"request": "exists", "room": self.room})
            if not exists.get("exists"):
                await self.plugin({"request": "create", "room": self.room, "publishers": 1, "videocodec": "vp8",
                                   "bitrate": 0, "permanent": False})
            joined = await self.plugin({"request": "join", "ptype": "publisher", "room": self.room, "display": self.uid},
                                       asynchronous=True)
            self.publisher_id.set_result(joined["plugindata"]["data"]["id"])
            self.pc = RTCPeerConnection(NO_STUN)
            self.pc.addTransceiver(ClipTrack(self.clip), direction="sendonly")
            await self.pc.setLocalDescription(await self.pc.createOffer())
            offer = {"type": "offer", "sdp": self.pc.localDescription.sdp}
            configured = await self.plugin({"request": "publish", "audio": False, "video": True}, jsep=offer, asynchronous=True)
            while "jsep" not in configured:  # other events may come first
                configured = await self.next_event()
            await self.pc.setRemoteDescription(RTCSessionDescription(sdp=configured["jsep"]["sdp"], type="answer"))
            await asyncio.wait_for(self.webrtc_up, timeout=20)  # subscribers can only join a feed with media
        else:
            feed = await self.feed
            attached = await self.plugin({"request": "join", "ptype": "subscriber", "room": self.room,
                                          "streams": [{"feed": feed}]}, asynchronous=True)
            while "jsep" not in attached:
                attached = await self.next_event()
            self.pc = RTCPeerConnection(NO_STUN)
            await self.pc.setRemoteDescription(RTCSessionDescription(sdp=attached["jsep"]["sdp"], type="offer"))
            await self.pc.setLocalDescription(await self.pc.createAnswer())
            answer = {"type": "answer", "sdp": self.pc.localDescription.sdp}
            await self.plugin({"request": "start"}, jsep=answer, asynchronous=True)

    async def run(self, until):
        self.ws = await WebSocket.connect(self.args.url, protocol=JANUS_SUBPROTOCOL)
        reading = asyncio.ensure_future(self.reader())
        keepalive = None
        try:
            setup = asyncio.ensure_future(self.setup())
            done, _ = await asyncio.wait([setup, reading], return_when=asyncio.FIRST_COMPLETED)
            if setup not in done:
                setup.cancel()
                reading.result()  # raises what ended the reader
            setup.result()
            self.ready.set_result(True)
            keepalive = asyncio.ensure_future(self.keepalive())
            await asyncio.wait([reading], timeout=max(0, until - time.monotonic()))
            if reading.done():
                reading.result()
        except BaseException as error:
            if not self.ready.done():
                self.ready.set_exception(error)
            if not self.publisher_id.done():
                self.publisher_id.set_exception(RuntimeError("the publisher did not join"))
            raise
        finally:
            reading.cancel()
            if keepalive:
                keepalive.cancel()
            if self.pc:
                await self.pc.close()
            try:
                await self.ws.send(json.dumps({"janus": "destroy", "session_id": self.session, "transaction": "bye"}))
                self.ws.writer.close()
            except Exception:
                pass

    async def keepalive(self):
        while True:
            await asyncio.sleep(20)
            await self.ws.send(json.dumps({"janus": "keepalive", "session_id": self.session, "transaction": "ka"}))


# ---------------------------------------------------------------------------------------------
# A worker: some of the rooms, in one process


async def run_rooms(args, rooms, clip):
    """Starts each room's publisher, then its viewers once it publishes; snapshots the tallies at
    the window's start and end; returns this worker's report."""
    errors, setups = [], []
    until = args.window_end + 1.0
    tasks, viewers = [], []

    async def guarded(peer, name):
        try:
            await peer.run(until)
        except Exception as error:
            errors.append(f"{name}: {type(error).__name__}: {error}")

    for room in rooms:
        channel = f"load{room}"
        if args.target == "janus":
            publisher = JanusPeer(args, 5000 + room, f"p{room}", True, clip)
        else:
            publisher = OursPeer(args, channel, f"p{room}", True, clip)
        tasks.append(asyncio.ensure_future(guarded(publisher, f"room {room} publisher")))

        async def start_viewers(room=room, publisher=publisher, channel=channel):
            try:
                await asyncio.wait_for(asyncio.shield(publisher.ready), timeout=30)
            except Exception as error:
                errors.append(f"room {room}: no publisher ({type(error).__name__}: {error})")
                return
            for index in range(args.viewers):
                if args.target == "janus":
                    viewer = JanusPeer(args, 5000 + room, f"v{room}-{index}", False, clip, feed=publisher.publisher_id)
                else:
                    viewer = OursPeer(args, channel, f"v{room}-{index}", False, clip)
                viewers.append((viewer, time.monotonic()))
                tasks.append(asyncio.ensure_future(guarded(viewer, f"room {room} viewer {index}")))
                await asyncio.sleep(0.02)

        tasks.append(asyncio.ensure_future(start_viewers()))

    await asyncio.sleep(max(0, args.window_start - time.monotonic()))
    start = {id(tally): tally.snapshot() for tally in TALLIES}
    drops_before = socket_drops()
    await asyncio.sleep(max(0, args.window_end - time.monotonic()))
    end = {id(tally): tally.snapshot() for tally in TALLIES}
    drops = socket_drops() - drops_before
    packets = media = expected = 0
    receiving = 0
    for tally in TALLIES:
        before = start.get(id(tally), {"packets": 0, "media": 0, "expected": 0})
        after = end[id(tally)]
        if after["packets"] > before["packets"]:
            receiving += 1
        packets += after["packets"] - before["packets"]
        media += after["media"] - before["media"]
        expected += after["expected"] - before["expected"]
    for viewer, started in viewers:
        tally = first_tally(viewer)
        if tally is not None and tally.first_at is not None:
            setups.append(tally.first_at - started)
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"viewers": len(viewers), "receiving": receiving, "packets": packets, "media": media, "expected": expected,
            "socketDrops": drops, "setups": setups, "errors": errors}


def first_tally(peer):
    """The tally of a viewer's first receiver (None before any packet)."""
    if peer.pc is None:
        return None
    for transceiver in peer.pc.getTransceivers():
        tally = getattr(transceiver.receiver, "_sfu_load_tally", None)
        if tally is not None:
            return tally
    return None


def worker_main(args):
    install_counting()
    clip = read_ivf(args.clip)
    rooms = [int(room) for room in args.room_list.split(",") if room]
    try:
        report = asyncio.run(run_rooms(args, rooms, clip))
    except Exception as error:
        report = {"viewers": 0, "receiving": 0, "packets": 0, "media": 0, "expected": 0, "socketDrops": 0, "setups": [],
                  "errors": [f"worker: {type(error).__name__}: {error}"]}
    print(json.dumps(report))
    sys.stdout.flush()


# ---------------------------------------------------------------------------------------------
# The coordinator: workers, the server's CPU, one report


def cpu_seconds(pid):
    """User plus system CPU time of a process and all its threads, seconds (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as file:
        fields = file.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime (fields 14 and 15)


def coordinator_main(args):
    read_ivf(args.clip)  # a bad clip is an error before anything starts
    if args.target == "ours" and not args.secret:
        raise SystemExit("sfu_load.py: --target ours needs --secret")
    cpu_seconds(args.server_pid)  # the server must be there
    window_start = time.monotonic() + args.warmup
    window_end = window_start + args.seconds
    workers = max(1, min(args.workers, args.rooms))
    processes = []
    for index in range(workers):
        rooms = [room for room in range(args.rooms) if room % workers == index]
        command = [sys.executable, os.path.abspath(__file__), "--worker", "--room-list", ",".join(map(str, rooms)),
                   "--window-start", repr(window_start), "--window-end", repr(window_end)] + args.passed
        processes.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL if not args.verbose else None))
    def peers_cpu():
        total = 0.0
        for process in processes:
            try:
                total += cpu_seconds(process.pid)
            except OSError:  # a worker that already ended
                pass
        return total

    time.sleep(max(0, window_start - time.monotonic()))
    cpu_start, peers_start = cpu_seconds(args.server_pid), peers_cpu()
    time.sleep(max(0, window_end - time.monotonic()))
    cpu_end, peers_end = cpu_seconds(args.server_pid), peers_cpu()
    totals = {"viewers": 0, "receiving": 0, "packets": 0, "media": 0, "expected": 0, "socketDrops": 0, "setups": [], "errors": []}
    for process in processes:
        try:
            output, _ = process.communicate(timeout=60)
            report = json.loads(output.decode().strip().splitlines()[-1])
        except Exception as error:
            process.kill()
            report = {"errors": [f"a worker printed no report ({type(error).__name__})"]}
        for key in totals:
            totals[key] += report.get(key, [] if key in ("setups", "errors") else 0)
    cpu = cpu_end - cpu_start
    packets = totals["packets"]
    lost = max(0, totals["expected"] - totals["media"])
    result = {
        "target": args.target, "rooms": args.rooms, "viewers": totals["viewers"], "viewersReceiving": totals["receiving"],
        "packets": packets, "packetsPerSecond": round(packets / args.seconds, 1),
        "lossPercent": round(100.0 * lost / totals["expected"], 3) if totals["expected"] else None,
        "peerSocketDrops": totals["socketDrops"],
        "serverCpuSeconds": round(cpu, 3), "serverCpuPercent": round(100.0 * cpu / args.seconds, 1),
        "peersCpuPercent": round(100.0 * (peers_end - peers_start) / args.seconds, 1),
        "cpuMicrosecondsPerPacket": round(cpu * 1e6 / packets, 2) if packets else None,
        "setupSeconds": {"p50": percentile(totals["setups"], 50), "p95": percentile(totals["setups"], 95)},
        "errors": totals["errors"][:20],
    }
    for key in ("p50", "p95"):
        if result["setupSeconds"][key] is not None:
            result["setupSeconds"][key] = round(result["setupSeconds"][key], 3)
    print(json.dumps(result))
    sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", choices=["ours", "janus"], required=True)
    parser.add_argument("--url", required=True, help="ws://HOST:PORT/rtc (ours) or ws://HOST:PORT/ (Janus)")
    parser.add_argument("--secret", help="the server's token secret (ours)")
    parser.add_argument("--clip", required=True, help="a VP8 IVF file to send, looped")
    parser.add_argument("--server-pid", type=int, help="the server process whose CPU time is measured")
    parser.add_argument("--rooms", type=int, default=10)
    parser.add_argument("--viewers", type=int, default=10, help="viewers per room")
    parser.add_argument("--warmup", type=float, default=8, help="seconds from the start to the measured window")
    parser.add_argument("--seconds", type=float, default=20, help="the measured window")
    parser.add_argument("--workers", type=int, default=2, help="processes the rooms are spread over")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--room-list", help=argparse.SUPPRESS)
    parser.add_argument("--window-start", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--window-end", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rooms < 1 or args.viewers < 1 or args.seconds <= 0 or args.warmup < 0 or args.workers < 1:
        parser.error("--rooms, --viewers and --workers must be at least 1, --seconds positive, --warmup not negative")
    if args.worker:
        worker_main(args)
        return
    if args.server_pid is None:
        parser.error("--server-pid is needed")
    args.passed = ["--target", args.target, "--url", args.url, "--clip", args.clip, "--rooms", str(args.rooms),
                   "--viewers", str(args.viewers)] + (["--secret", args.secret] if args.secret else [])
    coordinator_main(args)


if __name__ == "__main__":
    main()
