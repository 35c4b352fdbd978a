#!/usr/bin/env python3
"""LiveKit's official server SDK (livekit-api from PyPI) against our server: its RoomService
client and its WebhookReceiver, written by LiveKit, not by us (docs/server-api.md).

  room_api.py calls --url http://HOST:PORT --api-key K --api-secret S --call 'Method {"json": "args"}' ...
      Calls each method in order through livekit.api.LiveKitAPI and prints one JSON line per call:
      {"method", "ok", "result"} (the answer as protobuf JSON) or {"method", "ok": false, "code", "msg", "status"}.
      `Sleep {"seconds": 1}` waits. `Raw {...}` posts bytes of its own (bad input): path, body, token, contentType (or, with "method":
      "GET", gets path).

  room_api.py webhooks --port P --api-key K --api-secret S --out FILE [--hang]
      Receives webhooks and checks each with livekit.api.WebhookReceiver (the JWT's signature and
      its sha256 of the body); appends one JSON line per POST to FILE. --hang: never answers.
"""
import argparse
import asyncio
import json
import sys
import time

import aiohttp
from aiohttp import web
from google.protobuf.json_format import MessageToDict
from livekit import api
from livekit.protocol import models, room as proto_room


REQUESTS = {
    "CreateRoom": ("create_room", proto_room.CreateRoomRequest),
    "ListRooms": ("list_rooms", proto_room.ListRoomsRequest),
    "DeleteRoom": ("delete_room", proto_room.DeleteRoomRequest),
    "ListParticipants": ("list_participants", proto_room.ListParticipantsRequest),
    "GetParticipant": ("get_participant", proto_room.RoomParticipantIdentity),
    "RemoveParticipant": ("remove_participant", proto_room.RoomParticipantIdentity),
    "MutePublishedTrack": ("mute_published_track", proto_room.MuteRoomTrackRequest),
    "UpdateParticipant": ("update_participant", proto_room.UpdateParticipantRequest),
    "UpdateSubscriptions": ("update_subscriptions", proto_room.UpdateSubscriptionsRequest),
    "SendData": ("send_data", proto_room.SendDataRequest),
    "UpdateRoomMetadata": ("update_room_metadata", proto_room.UpdateRoomMetadataRequest),
}


def request(cls, args):
    message = cls()
    for key, value in args.items():
        if key == "data":
            message.data = value.encode()
        elif key == "metadata_bytes":
            message.metadata = "m" * value
        elif key == "kind":
            message.kind = models.DataPacket.Kind.Value(value)
        elif key == "permission":
            for field, flag in value.items():
                if field == "can_publish_sources":
                    message.permission.can_publish_sources.extend(models.TrackSource.Value(s) for s in flag)
                else:
                    setattr(message.permission, field, flag)
        elif key == "attributes":
            message.attributes.update(value)
        elif isinstance(value, list):
            getattr(message, key).extend(value)
        else:
            setattr(message, key, value)
    return message


async def raw(args, spec):
    """A POST the SDK would never make (no token, a participant's token, a bad body, an unknown
    method), or a GET of our own API (/debug/forwarded)."""
    # "contentType": null sends none at all (aiohttp would add one of its own otherwise).
    headers = {} if "contentType" in spec and spec["contentType"] is None else {"Content-Type": spec.get("contentType", "application/protobuf")}
    token = spec.get("token")
    if token == "admin":
        token = api.AccessToken(args.api_key, args.api_secret).with_grants(api.VideoGrants(room_admin=True, room=spec.get("room", ""))).to_jwt()
    elif token == "create":
        token = api.AccessToken(args.api_key, args.api_secret).with_grants(api.VideoGrants(room_create=True)).to_jwt()
    elif token == "participant":
        token = (api.AccessToken(args.api_key, args.api_secret).with_identity("someone")
                 .with_grants(api.VideoGrants(room_join=True, room=spec.get("room", ""))).to_jwt())
    if token:
        headers["Authorization"] = "Bearer " + token
    body = spec.get("body", "")
    if spec.get("bodyBytes"):
        body = b"x" * spec["bodyBytes"]
    async with aiohttp.ClientSession() as session:
        if spec.get("method") == "GET":
            made = session.get(args.url.rstrip("/") + spec["path"], headers=headers)
        else:
            made = session.post(args.url.rstrip("/") + spec["path"], data=body.encode() if isinstance(body, str) else body, headers=headers,
                                skip_auto_headers=["Content-Type"])
        async with made as response:
            text = await response.text()
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = {}
            return {"status": response.status, "code": parsed.get("code"), "msg": parsed.get("msg"), "body": text[:300],
                    "json": parsed}


async def track_sid(lkapi, room, reference):
    identity, _, kind = reference.partition("/")
    info = await lkapi.room.get_participant(proto_room.RoomParticipantIdentity(room=room, identity=identity))
    wanted = models.TrackType.Value(kind.upper())
    return next((t.sid for t in info.tracks if t.type == wanted), "")


async def run_calls(args):
    async with api.LiveKitAPI(args.url, args.api_key, args.api_secret) as lkapi:
        for item in args.call:
            method, _, rest = item.partition(" ")
            spec = json.loads(rest) if rest.strip() else {}
            line = {"method": method, "atMs": round(time.monotonic() * 1000)}
            if method == "Sleep":
                await asyncio.sleep(spec.get("seconds", 1))
                continue
            if method == "Flood":
                # `count` ListRooms calls at once with one key: how many the server answered with each status.
                token = api.AccessToken(args.api_key, args.api_secret).with_grants(api.VideoGrants(room_list=True)).to_jwt()
                headers = {"Content-Type": "application/protobuf", "Authorization": "Bearer " + token}
                url = args.url.rstrip("/") + "/twirp/livekit.RoomService/ListRooms"
                async with aiohttp.ClientSession() as session:
                    async def one():
                        async with session.post(url, data=b"", headers=headers) as response:
                            await response.read()
                            return response.status
                    statuses = await asyncio.gather(*[one() for _ in range(spec.get("count", 300))])
                counts = {}
                for status in statuses:
                    counts[str(status)] = counts.get(str(status), 0) + 1
                line.update({"ok": True, "result": counts})
                print(json.dumps(line), flush=True)
                continue
            if method == "WaitParticipants":
                # Until the room lists `count` participants (or `timeout` s): what the next calls need.
                deadline = time.monotonic() + spec.get("timeout", 20)
                identities = []
                while time.monotonic() < deadline:
                    try:
                        listed = await lkapi.room.list_participants(proto_room.ListParticipantsRequest(room=spec["room"]))
                        identities = sorted(p.identity for p in listed.participants)
                    except api.TwirpError:
                        identities = []
                    if len(identities) >= spec["count"]:
                        break
                    await asyncio.sleep(0.2)
                line.update({"ok": len(identities) >= spec["count"], "result": identities})
                print(json.dumps(line), flush=True)
                continue
            # "@identity/audio" (or video): that participant's track of the type, looked up first.
            for key in ("track_sid",):
                if isinstance(spec.get(key), str) and spec[key].startswith("@"):
                    spec[key] = await track_sid(lkapi, spec["room"], spec[key][1:])
            if isinstance(spec.get("track_sids"), list):
                spec["track_sids"] = [await track_sid(lkapi, spec["room"], sid[1:]) if sid.startswith("@") else sid
                                      for sid in spec["track_sids"]]
            try:
                if method == "Raw":
                    line.update(await raw(args, spec))
                    line["ok"] = line["status"] == 200
                elif method == "ListEgress":
                    # A service this server does not run, called as the SDK calls it.
                    result = await lkapi.egress.list_egress(api.ListEgressRequest(room_name=spec.get("room", "")))
                    line["ok"] = True
                    line["result"] = MessageToDict(result)
                else:
                    name, cls = REQUESTS[method]
                    result = await getattr(lkapi.room, name)(request(cls, spec))
                    line["ok"] = True
                    line["result"] = MessageToDict(result) if result is not None else {}
            except api.TwirpError as error:
                line.update({"ok": False, "code": error.code, "msg": error.message, "status": error.status})
            except Exception as error:  # noqa: BLE001 (reported, the next call goes on)
                line.update({"ok": False, "code": "exception", "msg": f"{type(error).__name__}: {error}"})
            print(json.dumps(line), flush=True)


async def run_webhooks(args):
    receiver = api.WebhookReceiver(api.TokenVerifier(args.api_key, args.api_secret))

    async def hook(request):
        body = await request.text()
        if args.hang:
            await asyncio.sleep(3600)
        auth = request.headers.get("Authorization", "")
        line = {"receivedMs": round(time.time() * 1000), "contentType": request.headers.get("Content-Type", "")}
        try:
            event = receiver.receive(body, auth)
            line.update({"event": event.event, "room": event.room.name, "roomSid": event.room.sid,
                         "participant": event.participant.identity, "track": event.track.sid,
                         "trackType": models.TrackType.Name(event.track.type) if event.track.sid else "",
                         "id": event.id, "createdAt": event.created_at,
                         "disconnectReason": models.DisconnectReason.Name(event.participant.disconnect_reason)
                         if event.participant.identity else ""})
            status = 200
        except Exception as error:  # noqa: BLE001 (a refused webhook is a finding, written down)
            line["error"] = f"{type(error).__name__}: {error}"
            status = 401
        with open(args.out, "a") as out:
            out.write(json.dumps(line) + "\n")
        return web.Response(status=status, text="ok")

    app = web.Application()
    app.router.add_post("/{tail:.*}", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.port)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    print("listening", port, flush=True)
    while True:
        await asyncio.sleep(3600)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    calls = sub.add_parser("calls")
    calls.add_argument("--url", required=True)
    calls.add_argument("--call", action="append", default=[])
    hooks = sub.add_parser("webhooks")
    hooks.add_argument("--port", type=int, required=True)
    hooks.add_argument("--out", required=True)
    hooks.add_argument("--hang", action="store_true")
    for p in (calls, hooks):
        p.add_argument("--api-key", required=True)
        p.add_argument("--api-secret", required=True)
    args = parser.parse_args()
    try:
        asyncio.run(run_calls(args) if args.mode == "calls" else run_webhooks(args))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
