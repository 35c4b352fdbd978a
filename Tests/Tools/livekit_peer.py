#!/usr/bin/env python3
"""LiveKit's official Python SDK (`livekit`, its core Rust over libwebrtc) against our server.

Subcommands:
  bot     one LiveKit participant: publishes the pattern and a tone if asked, watches every remote
          track (first frame, frames, size, PSNR against the pattern, audio energy), sends and
          prints data, answers RPCs; writes a JSON report
  pair    two LiveKit participants in one process, the must-show of docs/livekit.md: video and
          audio both ways, simulcast with the viewer choosing the layer, data reliable and lossy
          with topics and destinations, an RPC, mute and unmute; writes a JSON report

The pattern (Tests/Tools/pattern.py) is a function of the frame's relative coordinates, so a scaled layer is compared with
the pattern made at its own size. Everything is reported; the Swift tests judge
(Tests/CLITests/LiveKitInteropTests.swift).
"""
import argparse
import asyncio
import json
import os
import sys
import time
import wave

import numpy as np
from livekit import api, rtc

from pattern import pattern_i420, psnr_luma


def psnr(frame):
    """PSNR (dB) of a received frame's luma against the pattern at the frame's size."""
    i420 = frame.convert(rtc.VideoBufferType.I420)
    w, h = i420.width, i420.height
    return psnr_luma(np.frombuffer(bytes(i420.data), dtype=np.uint8)[: w * h].reshape(h, w), w, h)


def token(args, identity, room=None, **grants):
    """A LiveKit token from livekit-api (its own JWT code); the bot's --token-* flags spoil it on purpose."""
    import datetime
    if getattr(args, "metadata_grant", False):
        grants["can_update_own_metadata"] = True
    video = api.VideoGrants(room_join=not getattr(args, "no_room_join", False),
                            room=room or getattr(args, "token_room", None) or args.room, **grants)
    made = api.AccessToken(args.api_key, getattr(args, "token_secret", None) or args.api_secret).with_identity(identity).with_grants(video)
    ttl = getattr(args, "token_ttl", None)
    if ttl is not None:
        if ttl < 0:
            # livekit-api stamps nbf as now: an expired token is made by hand from its claims.
            import jwt
            now = int(time.time())
            claims = {"iss": args.api_key, "sub": identity, "nbf": now - 3600, "exp": now + int(ttl),
                      "video": {"roomJoin": True, "room": args.room}}
            return jwt.encode(claims, getattr(args, "token_secret", None) or args.api_secret, algorithm="HS256")
        made = made.with_ttl(datetime.timedelta(seconds=ttl))
    return made.to_jwt()


def options(args):
    room_options = rtc.RoomOptions(auto_subscribe=True, single_peer_connection=None if args.default_options else False,
                                   connect_timeout=5.0)
    key = getattr(args, "e2ee_key", None)
    if key:
        # LiveKit's shared-key E2EE as an app turns it on (the defaults: PBKDF2, LiveKit's salt, GCM).
        room_options.encryption = rtc.E2EEOptions(key_provider_options=rtc.KeyProviderOptions(shared_key=key.encode()),
                                                  encryption_type=rtc.EncryptionType.GCM)
    return room_options


def tone_share(samples):
    """The share of a block's energy within 20 Hz of 440 Hz: about 1 for the test tone, far less for
    noise or garbage decoded from bytes that were never Opus for this key."""
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples)))) ** 2
    freqs = np.fft.rfftfreq(len(samples), 1 / 48000)
    total = float(spectrum.sum())
    return 0.0 if total <= 0 else round(float(spectrum[(freqs > 420) & (freqs < 460)].sum()) / total, 3)


class Watcher:
    """Counts what arrives at a room: per remote track its first frame, frames, size and PSNR
    (video) or energy (audio), and the data packets."""

    def __init__(self, room, started):
        self.room = room
        self.started = started
        self.wavs = []
        self.tracks = {}
        self.data = []
        self.muted = []
        self.unmuted = []
        self.tasks = []
        room.on("track_subscribed", self.subscribed)
        room.on("data_received", self.data_received)
        room.on("track_muted", lambda participant, publication: self.muted.append([participant.identity, publication.sid]))
        room.on("track_unmuted", lambda participant, publication: self.unmuted.append([participant.identity, publication.sid]))
        # What the server's API changes (docs/server-api.md): metadata, names, attributes, the room's
        # metadata, and this participant's removal with its reason.
        self.changes = []
        self.disconnect_reason = None
        self.disconnected_ms = None
        room.on("participant_metadata_changed",
                lambda participant, old, new: self.changes.append(["metadata", participant.identity, new, self.ms()]))
        room.on("participant_name_changed",
                lambda participant, old, new: self.changes.append(["name", participant.identity, new, self.ms()]))
        room.on("participant_attributes_changed",
                lambda changed, participant: self.changes.append(["attributes", participant.identity, dict(changed), self.ms()]))
        room.on("room_metadata_changed", lambda old, new: self.changes.append(["roomMetadata", "", new, self.ms()]))
        room.on("disconnected", self.disconnected)
        # The connection's own story, on the monotonic clock (ms) the tests read too: a server's
        # drain and restart is "reconnecting", then "reconnected" once the SDK joined again.
        self.connection = []
        # LiveKit's connection quality as the SDK reports it: [identity, quality name, monotonic ms].
        self.quality = []
        room.on("connection_quality_changed", lambda participant, quality: self.quality.append(
            [participant.identity, getattr(quality, "name", str(quality)), round(time.monotonic() * 1000)]))
        for name in ("reconnecting", "reconnected"):
            room.on(name, lambda name=name: self.connection.append([name, round(time.monotonic() * 1000)]))
        self.unsubscribed = []
        # LiveKit's active speakers, as the SDK reports them: [monotonic ms, identities loudest first].
        self.speakers = []
        room.on("active_speakers_changed",
                lambda speakers: self.speakers.append([round(time.monotonic() * 1000), [p.identity for p in speakers]]))
        self.unsubscribed_mono = []
        room.on("track_unsubscribed", self.track_unsubscribed)

    def track_unsubscribed(self, track, publication, participant):
        self.unsubscribed.append([participant.identity, publication.sid, self.ms()])
        self.unsubscribed_mono.append([participant.identity, publication.sid, round(time.monotonic() * 1000)])

    def disconnected(self, reason):
        try:
            self.disconnect_reason = rtc.DisconnectReason.Name(reason)
        except Exception:  # noqa: BLE001 (an SDK that hands something else)
            self.disconnect_reason = str(reason)
        self.disconnected_ms = self.ms()

    def ms(self):
        return round((time.monotonic() - self.started) * 1000, 1)

    def subscribed(self, track, publication, participant):
        key = f"{participant.identity}/{publication.source}/{publication.sid}"
        entry = {"identity": participant.identity, "sid": publication.sid, "source": int(publication.source),
                 "kind": "video" if track.kind == rtc.TrackKind.KIND_VIDEO else "audio", "subscribedMs": self.ms(),
                 "firstFrameMs": None, "frames": 0, "sizes": {}, "psnr": [], "rms": [], "framesAt": [],
                 "encryptionType": int(publication.encryption_type), "goodFrames": 0, "badFrames": 0, "tone": []}
        self.tracks[key] = entry
        if track.kind == rtc.TrackKind.KIND_VIDEO:
            self.tasks.append(asyncio.ensure_future(self.video(track, entry)))
        else:
            self.tasks.append(asyncio.ensure_future(self.audio(track, entry)))

    async def video(self, track, entry):
        async for event in rtc.VideoStream(track):
            frame = event.frame
            if entry["firstFrameMs"] is None:
                entry["firstFrameMs"] = self.ms()
                entry["firstFrameMono"] = round(time.monotonic() * 1000)
            entry["frames"] += 1
            entry["framesAt"].append(self.ms())
            entry["lastFrameMono"] = round(time.monotonic() * 1000)
            size = f"{frame.width}x{frame.height}"
            if size not in entry["sizes"]:
                # When each size was first decoded (ms since the start): a publisher's ramp to its full size.
                entry.setdefault("firstSizeMs", {})[size] = self.ms()
            entry["sizes"][size] = entry["sizes"].get(size, 0) + 1
            entry["lastSize"] = size
            if getattr(self, "psnr_all", False):
                # Every frame judged against the pattern: a frame decoded from the wrong bytes is far below 25 dB.
                value = psnr(frame)
                entry["goodFrames" if value >= 25 else "badFrames"] += 1
                if entry["frames"] % 15 == 0:
                    entry["psnr"].append([size, round(value, 2), self.ms()])
            elif entry["frames"] % 15 == 0:
                entry["psnr"].append([size, round(psnr(frame), 2), self.ms()])

    async def audio(self, track, entry):
        wav = None
        prefix = getattr(self, "audio_wav", None)
        if prefix:
            # What the SDK plays out of this track (libwebrtc's NetEq), 48 kHz mono, for the quality bench.
            wav = wave.open(f"{prefix}-{entry['identity']}.wav", "wb")
            wav.setnchannels(1)
            wav.setsampwidth(2)
            wav.setframerate(48000)
            self.wavs.append(wav)
        async for event in rtc.AudioStream(track, sample_rate=48000, num_channels=1):
            if wav is not None:
                wav.writeframes(bytes(event.frame.data))
            samples = np.frombuffer(bytes(event.frame.data), dtype=np.int16).astype(np.float64)
            if entry["firstFrameMs"] is None:
                entry["firstFrameMs"] = self.ms()
                entry["firstFrameMono"] = round(time.monotonic() * 1000)
            entry["frames"] += 1
            recent = entry.setdefault("_recent", [])
            recent.append(samples)
            del recent[:-10]
            if entry["frames"] % 25 == 0 and len(samples):
                entry["rms"].append(round(float(np.sqrt(np.mean(samples ** 2))), 1))
                # 100 ms at once: 10 Hz bins, so 440 Hz stands in its own.
                entry["tone"].append(tone_share(np.concatenate(recent)))
                # When, on the monotonic clock (ms) other tools print too (room_api.py's atMs).
                entry.setdefault("rmsAtMono", []).append(round(time.monotonic() * 1000))

    def data_received(self, packet):
        entry = {"from": packet.participant.identity if packet.participant else None, "topic": packet.topic,
                 "kind": "reliable" if packet.kind == rtc.DataPacketKind.KIND_RELIABLE else "lossy",
                 "text": bytes(packet.data).decode(errors="replace"), "ms": self.ms()}
        self.data.append(entry)
        if getattr(self, "print_data", False):
            print("data", json.dumps(entry), flush=True)

    def report(self, window_ms=None):
        for entry in self.tracks.values():
            entry.pop("_recent", None)
            at = entry.pop("framesAt")
            # The longest wait between two frames after the first, and when it ended (ms since the start).
            gaps = [(b - a, b) for a, b in zip(at, at[1:])]
            entry["maxGapMs"], entry["maxGapEndMs"] = max(gaps) if gaps else (None, None)
            first = entry["firstFrameMs"]
            entry["framesIn10s"] = sum(1 for t in at if first is not None and t - first <= 10_000)
            if window_ms is not None:
                entry["framesInWindow"] = sum(1 for t in at if t <= window_ms)
        # What the server's TrackInfo says of each remote publication now (LiveKit's adaptive stream
        # sizes its requests by it).
        publications = {p.identity: [{"sid": pub.sid, "kind": "video" if pub.kind == rtc.TrackKind.KIND_VIDEO else "audio",
                                      "width": pub.width, "height": pub.height} for pub in p.track_publications.values()]
                        for p in self.room.remote_participants.values()}
        return {"tracks": list(self.tracks.values()), "publications": publications, "data": self.data, "muted": self.muted, "unmuted": self.unmuted,
                "changes": self.changes, "disconnectReason": self.disconnect_reason, "disconnectedMs": self.disconnected_ms,
                "unsubscribed": self.unsubscribed, "unsubscribedMono": self.unsubscribed_mono, "speakers": self.speakers, "connection": self.connection,
                "quality": self.quality}

    def close(self):
        for task in self.tasks:
            task.cancel()
        for wav in self.wavs:
            wav.close()


class Publisher:
    """The pattern (I420 frames) and a 440 Hz tone, pushed in real time."""

    def __init__(self, width, height, fps, audio_file=None):
        self.width, self.height, self.fps = width, height, fps
        self.clip = None
        if audio_file:
            # A 48 kHz mono 16-bit WAV, looped (the quality bench's speech).
            with wave.open(audio_file, "rb") as clip:
                if (clip.getframerate(), clip.getnchannels(), clip.getsampwidth()) != (48000, 1, 2):
                    raise SystemExit(f"--audio-file {audio_file}: not 48 kHz mono 16-bit")
                self.clip = np.frombuffer(clip.readframes(clip.getnframes()), dtype=np.int16)
        self.video = rtc.VideoSource(width, height)
        self.audio = rtc.AudioSource(48000, 1)
        self.frame = rtc.VideoFrame(width, height, rtc.VideoBufferType.I420, bytearray(pattern_i420(width, height)))
        self.tasks = []

    async def publish(self, participant, video=True, audio=True, simulcast=False, source=rtc.TrackSource.SOURCE_CAMERA,
                      codec=rtc.VideoCodec.VP8):
        publications = {}
        if video:
            track = rtc.LocalVideoTrack.create_video_track("pattern", self.video)
            publications["video"] = await participant.publish_track(track, rtc.TrackPublishOptions(
                source=source, simulcast=simulcast, video_codec=codec,
                video_encoding=rtc.VideoEncoding(max_bitrate=2_000_000, max_framerate=self.fps)))
            publications["videoTrack"] = track
            self.tasks.append(asyncio.ensure_future(self.push_video()))
        if audio:
            track = rtc.LocalAudioTrack.create_audio_track("tone", self.audio)
            publications["audio"] = await participant.publish_track(track, rtc.TrackPublishOptions(source=rtc.TrackSource.SOURCE_MICROPHONE))
            publications["audioTrack"] = track
            self.tasks.append(asyncio.ensure_future(self.push_audio()))
        return publications

    async def push_video(self):
        next_at = time.monotonic()
        while True:
            self.video.capture_frame(self.frame)
            next_at += 1 / self.fps
            await asyncio.sleep(max(0, next_at - time.monotonic()))

    async def push_audio(self):
        n = 0
        samples = 480  # 10 ms
        next_at = time.monotonic()
        while True:
            if self.clip is not None:
                tone = np.take(self.clip, np.arange(n, n + samples), mode="wrap")
                # capture_frame paces a tone by blocking; a clip is paced here as well, 10 ms a frame.
                next_at += samples / 48000
                await asyncio.sleep(max(0, next_at - time.monotonic()))
            else:
                t = (np.arange(samples) + n) / 48000
                tone = (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
            await self.audio.capture_frame(rtc.AudioFrame(tone.tobytes(), 48000, 1, samples))
            n += samples

    def close(self):
        for task in self.tasks:
            task.cancel()


async def until(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.05)
    return predicate()


async def run_bot(args):
    started = time.monotonic()
    room = rtc.Room()
    watcher = Watcher(room, started)
    watcher.print_data = args.print_data
    watcher.audio_wav = args.audio_wav
    report = {"identity": args.identity}
    watcher.psnr_all = args.psnr_all
    e2ee_states = []
    report["e2eeStates"] = e2ee_states
    room.on("e2ee_state_changed", lambda participant, state: e2ee_states.append(
        [participant.identity if participant else None, rtc.EncryptionState.Name(state), watcher.ms()]))
    rpc_calls = []
    try:
        await room.connect(args.url, args.token or token(args, args.identity), options(args))
    except Exception as error:  # the report names the SDK's error
        report["connectError"] = f"{type(error).__name__}: {error}"
        print(json.dumps(report))
        return

    @room.local_participant.register_rpc_method("echo")
    async def echo(data):
        rpc_calls.append({"caller": data.caller_identity, "payload": data.payload})
        return "echo:" + data.payload

    # For the server's PerformRpc: a handler that refuses with an error of its own, and one
    # slower than the caller waits.
    @room.local_participant.register_rpc_method("refuse")
    async def refuse(data):
        rpc_calls.append({"caller": data.caller_identity, "payload": data.payload})
        raise rtc.RpcError(2001, "refused by the bot", data.payload)

    @room.local_participant.register_rpc_method("slow")
    async def slow(data):
        rpc_calls.append({"caller": data.caller_identity, "payload": data.payload})
        await asyncio.sleep(3)
        return "late"
    report["connectedMs"] = round((time.monotonic() - started) * 1000, 1)
    if args.set_metadata is not None:
        try:
            await room.local_participant.set_metadata(args.set_metadata)
            await room.local_participant.set_attributes({"state": "ready"})
            report["metadataSet"] = True
        except Exception as error:  # noqa: BLE001 (the SDK's refusal is the finding)
            report["metadataError"] = f"{type(error).__name__}: {error}"
        report["ownMetadata"] = room.local_participant.metadata
    report["remote"] = sorted(p.identity for p in room.remote_participants.values())
    report["attributes"] = {p.identity: dict(p.attributes) for p in room.remote_participants.values()}
    publisher = None
    if args.publish:
        width, height = map(int, args.size.split("x"))
        publisher = Publisher(width, height, args.fps, audio_file=args.audio_file)
        source = rtc.TrackSource.SOURCE_SCREENSHARE if args.screen else rtc.TrackSource.SOURCE_CAMERA
        codec = getattr(rtc.VideoCodec, args.codec.upper())
        started_publish = time.monotonic()
        try:
            await publisher.publish(room.local_participant, video=not args.no_video, audio=not args.no_audio, simulcast=args.simulcast, source=source, codec=codec)
        except Exception as error:  # the report names the SDK's error and how long it took
            report["publishError"] = f"{type(error).__name__}: {error}"
            report["publishErrorAfterMs"] = round((time.monotonic() - started_publish) * 1000)
    if args.e2ee_key and args.e2ee_key_index:
        room.e2ee_manager.key_provider.set_shared_key(args.e2ee_key.encode(), args.e2ee_key_index)
        for cryptor in room.e2ee_manager.frame_cryptors():
            if cryptor.participant_identity == args.identity:
                cryptor.set_key_index(args.e2ee_key_index)
    # What the SDK says of its own published tracks' encryption (from the server's TrackInfo).
    report["ownEncryption"] = {p.sid: int(p.encryption_type) for p in room.local_participant.track_publications.values()}

    async def rotate(seconds, key, index):
        # As a rotation is done: everyone learns the new key, then (2 s on) the sender moves to it.
        await asyncio.sleep(max(0.0, seconds - (time.monotonic() - started)))
        room.e2ee_manager.key_provider.set_shared_key(key.encode(), index)
        await asyncio.sleep(2)
        for cryptor in room.e2ee_manager.frame_cryptors():
            if cryptor.participant_identity == args.identity:
                cryptor.set_key_index(index)
        report.setdefault("rotated", []).append([index, watcher.ms()])
    async def permit(seconds, identities):
        # Only these identities may subscribe to this participant's tracks from then on.
        await asyncio.sleep(max(0.0, seconds - (time.monotonic() - started)))
        room.local_participant.set_track_subscription_permissions(
            allow_all_participants=False,
            participant_permissions=[rtc.ParticipantTrackPermission(participant_identity=i, allow_all=True) for i in identities])
        report["permissionSetMono"] = round(time.monotonic() * 1000)
    async def low_quality(seconds, identity):
        # Asks for the low layer of IDENTITY's video; the size seen 5 s later says whether it came.
        await asyncio.sleep(max(0.0, seconds - (time.monotonic() - started)))
        def video():
            return next((t for t in watcher.tracks.values() if t["identity"] == identity and t["kind"] == "video"), {})
        before = video().get("lastSize")
        participant = room.remote_participants.get(identity)
        publication = next((p for p in participant.track_publications.values() if p.kind == rtc.TrackKind.KIND_VIDEO), None) if participant else None
        if publication is None:
            report["lowQuality"] = {"error": f"no video of {identity}"}
            return
        publication.set_video_quality(rtc.VideoQuality.VIDEO_QUALITY_LOW)
        await asyncio.sleep(5)
        report["lowQuality"] = {"identity": identity, "before": before, "after": video().get("lastSize"), "simulcasted": publication.simulcasted}
    async def mute(seconds):
        # Mutes the published microphone, then unmutes it 2 s later.
        await asyncio.sleep(max(0.0, seconds - (time.monotonic() - started)))
        track = next((p.track for p in room.local_participant.track_publications.values() if p.kind == rtc.TrackKind.KIND_AUDIO), None)
        if track is None:
            report["muteError"] = "no audio track"
            return
        track.mute()
        await asyncio.sleep(2)
        track.unmute()
        report["mutedAndUnmuted"] = True
    rotations = []
    if args.mute_at is not None:
        rotations.append(asyncio.ensure_future(mute(args.mute_at)))
    if args.low_quality_at:
        seconds, _, identity = args.low_quality_at.partition(":")
        rotations.append(asyncio.ensure_future(low_quality(float(seconds), identity)))
    if args.permit_at:
        seconds, _, identities = args.permit_at.partition(":")
        rotations.append(asyncio.ensure_future(permit(float(seconds), [i for i in identities.split(",") if i])))
    for item in args.e2ee_rotate:
        seconds, key, index = item.split(":", 2)
        rotations.append(asyncio.ensure_future(rotate(float(seconds), key, int(index))))
    for item in args.send_data:
        text, _, topic = item.partition("@")
        await until(lambda: len(room.remote_participants) >= args.wait_remote, 20)
        await asyncio.sleep(args.data_delay)
        await room.local_participant.publish_data(text.encode(), reliable=True, topic=topic,
                                                  destination_identities=args.data_to)
    print("ready", flush=True)
    # The watch ends `duration` seconds after the connect call, or when the server disconnects it.
    await until(lambda: watcher.disconnect_reason is not None, max(0.0, args.duration - (time.monotonic() - started)))
    report.update(watcher.report(window_ms=args.duration * 1000))
    report["sources"] = {p.identity: sorted(int(t.source) for t in p.track_publications.values())
                         for p in room.remote_participants.values()}
    report["rpcServed"] = rpc_calls
    report["remoteEncryption"] = {p.identity: sorted(int(t.encryption_type) for t in p.track_publications.values())
                                  for p in room.remote_participants.values()}
    for task in rotations:
        task.cancel()
    watcher.close()
    if publisher:
        publisher.close()
    await room.disconnect()
    print(json.dumps(report))


async def run_pair(args):  # noqa: C901 (one scenario, in order)
    """alice publishes (simulcast video, audio), bob publishes too (one layer); each watches the
    other. Then: bob picks alice's low layer, data both ways with topics and destinations, an RPC
    each way, alice mutes and unmutes."""
    started = time.monotonic()
    alice, bob = rtc.Room(), rtc.Room()
    watch_alice, watch_bob = Watcher(alice, started), Watcher(bob, started)
    report = {"steps": []}

    def step(name, **fields):
        report["steps"].append({"step": name, "ms": round((time.monotonic() - started) * 1000, 1), **fields})

    await alice.connect(args.url, token(args, "alice"), options(args))
    await bob.connect(args.url, token(args, "bob"), options(args))

    @bob.local_participant.register_rpc_method("echo")
    async def bob_echo(data):
        return f"bob:{data.caller_identity}:{data.payload}"

    @alice.local_participant.register_rpc_method("echo")
    async def alice_echo(data):
        return f"alice:{data.caller_identity}:{data.payload}"
    step("connected", aliceSeesBob=[p.identity for p in alice.remote_participants.values()])
    width, height = map(int, args.size.split("x"))
    alice_media, bob_media = Publisher(width, height, args.fps), Publisher(640, 360, args.fps)
    alice_pub = await alice_media.publish(alice.local_participant, simulcast=True)
    await bob_media.publish(bob.local_participant, simulcast=False)
    step("published", aliceLayers=[])

    def video_of(watcher, identity):
        return next((t for t in watcher.tracks.values() if t["identity"] == identity and t["kind"] == "video"), None)

    await until(lambda: (video_of(watch_bob, "alice") or {}).get("frames", 0) >= 30
                and (video_of(watch_alice, "bob") or {}).get("frames", 0) >= 30, 20)
    full = dict(video_of(watch_bob, "alice") or {})
    step("full", size=full.get("lastSize"))
    # Wait for the full layer to settle (libwebrtc ramps its layers up), then ask for the low one.
    await until(lambda: (video_of(watch_bob, "alice") or {}).get("lastSize") == args.size, 15)
    step("settled", size=(video_of(watch_bob, "alice") or {}).get("lastSize"))
    publication = next(p for p in bob.remote_participants["alice"].track_publications.values() if p.kind == rtc.TrackKind.KIND_VIDEO)
    step("simulcasted", simulcasted=publication.simulcasted)
    publication.set_video_quality(rtc.VideoQuality.VIDEO_QUALITY_LOW)
    low = f"{width // 4}x{height // 4}"
    await until(lambda: (video_of(watch_bob, "alice") or {}).get("lastSize") == low, 15)
    step("low", size=(video_of(watch_bob, "alice") or {}).get("lastSize"))
    publication.set_video_quality(rtc.VideoQuality.VIDEO_QUALITY_HIGH)
    await until(lambda: (video_of(watch_bob, "alice") or {}).get("lastSize") == args.size, 15)
    step("high", size=(video_of(watch_bob, "alice") or {}).get("lastSize"))

    # Data: reliable and lossy, with topics, to everyone and to one identity.
    await alice.local_participant.publish_data(b"hello bob", reliable=True, topic="chat")
    await alice.local_participant.publish_data(b"to bob only", reliable=True, topic="direct", destination_identities=["bob"])
    await alice.local_participant.publish_data(b"to nobody here", reliable=True, topic="direct", destination_identities=["carol"])
    for n in range(20):
        await alice.local_participant.publish_data(f"lossy {n}".encode(), reliable=False, topic="telemetry")
        await asyncio.sleep(0.01)
    await bob.local_participant.publish_data(b"hello alice", reliable=True, topic="chat")
    await until(lambda: len(watch_bob.data) >= 22 and len(watch_alice.data) >= 1, 10)
    step("data")

    # RPC both ways.
    try:
        answer = await alice.local_participant.perform_rpc(destination_identity="bob", method="echo", payload="ping", response_timeout=8.0)
        step("rpc alice->bob", answer=answer)
    except Exception as error:
        step("rpc alice->bob", error=f"{type(error).__name__}: {error}")
    try:
        answer = await bob.local_participant.perform_rpc(destination_identity="alice", method="echo", payload="pong", response_timeout=8.0)
        step("rpc bob->alice", answer=answer)
    except Exception as error:
        step("rpc bob->alice", error=f"{type(error).__name__}: {error}")

    # Mute and unmute alice's microphone: bob sees both.
    alice_pub["audioTrack"].mute()
    await until(lambda: watch_bob.muted, 5)
    alice_pub["audioTrack"].unmute()
    await until(lambda: watch_bob.unmuted, 5)
    step("mute")

    # Media long enough to judge (at least 10 s of it).
    await until(lambda: (video_of(watch_bob, "alice") or {}).get("frames", 0) >= 150, 15)
    report["bob"] = watch_bob.report()
    report["alice"] = watch_alice.report()
    for watcher in (watch_alice, watch_bob):
        watcher.close()
    alice_media.close()
    bob_media.close()
    await alice.disconnect()
    await bob.disconnect()
    print(json.dumps(report))


async def run_raw(args):
    """The signal WebSocket by hand (aiohttp): a good token, then bytes that are no SignalRequest.
    Reports the first response's kind, how the server closed, and whether it still answers."""
    import aiohttp
    report = {}
    http = args.url.replace("ws://", "http://").replace("wss://", "https://")
    headers = {"Authorization": "Bearer " + token(args, args.identity)}
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(args.url.rstrip("/") + "/rtc?protocol=16&sdk=python", headers=headers) as ws:
            first = await ws.receive(timeout=5)
            from livekit.protocol import rtc as proto
            response = proto.SignalResponse()
            response.ParseFromString(first.data)
            report["first"] = response.WhichOneof("message")
            await ws.send_bytes(bytes(args.garbage, "utf-8") * 3 + b"\xff\xff\xff\xff\x0f")
            closed = None
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                message = await ws.receive(timeout=5)
                if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING):
                    closed = {"code": ws.close_code, "reason": message.extra if isinstance(message.extra, str) else None}
                    break
                if message.type == aiohttp.WSMsgType.BINARY:
                    response = proto.SignalResponse()
                    response.ParseFromString(message.data)
                    report.setdefault("then", []).append(response.WhichOneof("message"))
            report["closed"] = closed
        async with session.get(http.rstrip("/") + "/healthz") as health:
            report["healthz"] = health.status
        for path in ("/rtc/v1", "/rtc/validate"):
            async with session.get(http.rstrip("/") + path, headers=headers) as answer:
                report[path] = [answer.status, (await answer.text())[:200]]
    print(json.dumps(report))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("bot", "pair", "raw"):
        p = sub.add_parser(name)
        p.add_argument("--url", required=True)
        p.add_argument("--api-key", required=True)
        p.add_argument("--api-secret", required=True)
        p.add_argument("--room", default="lk")
        p.add_argument("--size", default="1280x720")
        p.add_argument("--fps", type=int, default=15)
        p.add_argument("--default-options", action="store_true", help="RoomOptions() as they come (tries /rtc/v1 first)")
        if name == "raw":
            p.add_argument("--identity", default="raw")
            p.add_argument("--garbage", default="not a protobuf")
        if name == "bot":
            p.add_argument("--identity", required=True)
            p.add_argument("--token", help="a token made elsewhere (rtc-cli token --api-key ...)")
            p.add_argument("--token-room", help="the room the token names (default --room)")
            p.add_argument("--token-ttl", type=float, help="seconds the token lives (negative: expired)")
            p.add_argument("--token-secret", help="sign with this secret instead of --api-secret")
            p.add_argument("--no-room-join", action="store_true", help="a token without roomJoin")
            p.add_argument("--publish", action="store_true")
            p.add_argument("--screen", action="store_true")
            p.add_argument("--simulcast", action="store_true")
            p.add_argument("--codec", default="vp8", help="vp8, h264, vp9 or av1")
            p.add_argument("--no-audio", action="store_true")
            p.add_argument("--no-video", action="store_true", help="with --publish: audio only")
            p.add_argument("--audio-file", help="with --publish: a 48 kHz mono WAV to send (looped) instead of the tone")
            p.add_argument("--audio-wav", help="PREFIX: write each remote audio track as played out to PREFIX-IDENTITY.wav")
            p.add_argument("--duration", type=float, default=8)
            p.add_argument("--send-data", action="append", default=[], help="TEXT@TOPIC, reliable, once")
            p.add_argument("--data-to", action="append", default=[])
            p.add_argument("--wait-remote", type=int, default=0, help="remote participants to wait for before sending data")
            p.add_argument("--data-delay", type=float, default=0, help="seconds to wait after them (their data channels opening)")
            p.add_argument("--print-data", action="store_true")
            p.add_argument("--set-metadata", help="after connecting, set the local participant's metadata (and a 'state' attribute)")
            p.add_argument("--metadata-grant", action="store_true", help="the token grants canUpdateOwnMetadata")
            p.add_argument("--e2ee-key", help="LiveKit's E2EE with this shared key (GCM, the SDK's default key derivation)")
            p.add_argument("--e2ee-key-index", type=int, default=0)
            p.add_argument("--e2ee-rotate", action="append", default=[],
                           help="SECONDS:KEY:INDEX: at that many seconds from the start, add KEY at INDEX; 2 s later, send with it")
            p.add_argument("--mute-at", type=float, help="SECONDS: then mute the microphone, and unmute it 2 s later")
            p.add_argument("--low-quality-at", help="SECONDS:IDENTITY: then ask for the low layer of its video (report: lowQuality)")
            p.add_argument("--permit-at", help="SECONDS:IDENTITY[,IDENTITY]: then let only these subscribe to this participant's tracks")
            p.add_argument("--psnr-all", action="store_true", help="judge every video frame against the pattern (goodFrames, badFrames)")
    args = parser.parse_args()
    if args.command == "bot":
        asyncio.run(run_bot(args))
    elif args.command == "raw":
        asyncio.run(run_raw(args))
    else:
        asyncio.run(run_pair(args))
    # Done, the report printed: leave without the interpreter's teardown. The SDK's Rust core
    # (livekit 1.2) can panic in a tokio worker while Python finalizes ("panic in a function that
    # cannot unwind", seen once in a CI run after a complete report), which turns a finished run
    # into a crash. A run that failed raised above and exits with its traceback as before.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
