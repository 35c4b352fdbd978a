#!/usr/bin/env python3
"""abuse.py: an attack client for the signaling server (and, for comparison, Janus).

Python 3 standard library only. Used by Tests/CLITests/AbuseTests.swift and by benchmarks.

    python3 abuse.py <attack> [options]

Attacks: idle, nonreading, tracks, forbidden, joins, pinger (`abuse.py <attack> --help`).
Every attack is bounded in count and time, and prints exactly one JSON object as the last line
of stdout; progress notes go to stderr. Failures are reported as JSON fields (exit status 0);
exit status 2 means bad command-line usage.

The WebSocket client (RFC 6455) is written here on raw non-blocking sockets driven by
`selectors`, so that thousands of connections share one thread.
"""

import argparse
import base64
import collections
import errno
import hashlib
import json
import math
import os
import random
import selectors
import socket
import string
import struct
import sys
import time
import traceback
import urllib.parse

from rtc_token import GRANTS, compact_json, mint

try:
    import resource
except ImportError:  # not Unix
    resource = None

PROTOCOL = "1.3"
SDK = {"name": "abuse", "version": "0.1", "protocolVersion": {"major": 1, "minor": 3}}
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
JANUS_SUBPROTOCOL = "janus-protocol"
ALL_GRANTS = list(GRANTS)

# Error codes of the server (Sources/Signaling/Envelope.swift).
TOKEN_INVALID = 2002
PERMISSION_DENIED = 2007
SCREEN_SHARE_OWNER_ABSENT = 3003
LIMIT_EXCEEDED = 4004

# Linux TCP states (tcp_info.tcpi_state) meaning the peer has closed or reset the connection.
TCP_PEER_CLOSED_STATES = {7, 8, 9}  # TCP_CLOSE, TCP_CLOSE_WAIT, TCP_LAST_ACK

VERBOSE = False


# ---------------------------------------------------------------------------------------------
# Small helpers


def now():
    return time.monotonic()


def wall_ms():
    return int(time.time() * 1000)


def note(*parts):
    """A progress note on stderr (stdout is reserved for the final JSON line)."""
    print("abuse:", *parts, file=sys.stderr, flush=True)


def debug(*parts):
    if VERBOSE:
        note(*parts)


def emit(report):
    """Prints the attack's one JSON object as the last line of stdout."""
    sys.stdout.write(json.dumps(report, separators=(",", ":"), sort_keys=False) + "\n")
    sys.stdout.flush()


def error_name(error):
    """A short name for an OSError (ECONNREFUSED, ...) or any exception."""
    if isinstance(error, OSError) and error.errno in errno.errorcode:
        return errno.errorcode[error.errno]
    if isinstance(error, socket.timeout):
        return "timeout"
    return type(error).__name__ + (": " + str(error) if str(error) else "")


def percentile(values, p):
    """Nearest-rank percentile of a list of numbers; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, int(math.ceil(p / 100.0 * len(ordered))) - 1))
    return ordered[index]


def rounded(value, digits=3):
    return None if value is None else round(value, digits)


def bump(counter, key, by=1):
    counter[str(key)] = counter.get(str(key), 0) + by


def random_name(prefix):
    return prefix + "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(10))


def raise_nofile():
    """Raises the soft descriptor limit to the hard one (thousands of sockets)."""
    if resource is None:
        return None
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return None
    candidates = [hard] if hard != resource.RLIM_INFINITY else []
    candidates += [1 << 20, 1 << 16]
    for limit in candidates:
        if hard != resource.RLIM_INFINITY and limit > hard:
            continue
        if limit <= soft:
            return soft
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
            return limit
        except (OSError, ValueError):
            continue
    return soft


# ---------------------------------------------------------------------------------------------
# Tokens: HS256 JWTs as Sources/Signaling/AccessToken.swift verifies them, minted by rtc_token.py


def grants_from_list(names):
    """{"join": bool, ...} from a list of grant names."""
    return {name: name in names for name in ALL_GRANTS}


# ---------------------------------------------------------------------------------------------
# Where to connect, and from where


class Target:
    """The server: ws://HOST:PORT/PATH resolved once."""

    def __init__(self, url, kind, ipv4_only=False):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "ws":
            raise ValueError("only ws:// URLs are supported, not %r" % url)
        if not parts.hostname:
            raise ValueError("no host in %r" % url)
        self.url = url
        self.kind = kind  # "ours" or "janus"
        self.host = parts.hostname
        self.port = parts.port or 80
        self.path = (parts.path or "/") + ("?" + parts.query if parts.query else "")
        self.host_header = parts.netloc
        family = socket.AF_INET if ipv4_only else socket.AF_UNSPEC
        infos = socket.getaddrinfo(self.host, self.port, family, socket.SOCK_STREAM)
        infos.sort(key=lambda info: info[0] != socket.AF_INET)  # prefer IPv4
        self.family, _, _, _, self.sockaddr = infos[0]

    @property
    def janus(self):
        return self.kind == "janus"

    @property
    def subprotocol(self):
        return JANUS_SUBPROTOCOL if self.janus else None


class Sources:
    """Local addresses to bind outgoing sockets to, round-robin (none: the kernel chooses)."""

    def __init__(self, text):
        self.addresses = [part.strip() for part in (text or "").split(",") if part.strip()]
        self.index = 0

    def next(self):
        if not self.addresses:
            return None
        address = self.addresses[self.index % len(self.addresses)]
        self.index += 1
        return address


# ---------------------------------------------------------------------------------------------
# A minimal non-blocking RFC 6455 client


def mask_payload(data, key):
    """XORs `data` with the 4-byte masking key (RFC 6455 §5.3), fast for large payloads."""
    if not data:
        return b""
    length = len(data)
    stream = (key * (length // 4 + 1))[:length]
    return (int.from_bytes(data, "big") ^ int.from_bytes(stream, "big")).to_bytes(length, "big")


def encode_frame(opcode, payload, fin=True):
    """One masked client frame (7-, 16- or 64-bit payload length)."""
    head = bytearray([(0x80 if fin else 0) | opcode])
    length = len(payload)
    if length < 126:
        head.append(0x80 | length)
    elif length < 1 << 16:
        head.append(0x80 | 126)
        head += struct.pack("!H", length)
    else:
        head.append(0x80 | 127)
        head += struct.pack("!Q", length)
    key = os.urandom(4)
    head += key
    return bytes(head) + mask_payload(payload, key)


def handshake_request(target, key, subprotocol):
    lines = ["GET %s HTTP/1.1" % target.path,
             "Host: %s" % target.host_header,
             "Upgrade: websocket",
             "Connection: Upgrade",
             "Sec-WebSocket-Key: %s" % key,
             "Sec-WebSocket-Version: 13"]
    if subprotocol:
        lines.append("Sec-WebSocket-Protocol: %s" % subprotocol)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


class Conn:
    """One client connection: TCP, optionally upgraded to a WebSocket. Non-blocking; a `Loop`
    drives it.

    state: "connecting" → ("upgrading" →) "open" → "closed"; "failed" when it never opened
    (`error` says why); "detached" when its socket was handed over (`detach`).
    Received messages are parsed JSON objects appended to `inbox` (unless `discard` is set, then
    only counted in `received`). After a close, `close_kind` says how: "close-frame" (with
    `close_code`), "eof", "reset", "error" or "client" (we closed it).
    """

    MAX_MESSAGE = 16 << 20
    MAX_HEADERS = 16 << 10

    def __init__(self, target, source=None, upgrade=True, subprotocol=None):
        self.target = target
        self.upgrade = upgrade
        self.subprotocol = subprotocol
        self.state = "connecting"
        self.started_at = now()
        self.opened_at = None
        self.closed_at = None
        self.error = None
        self.close_kind = None
        self.close_code = None
        self.close_reason = ""
        self.out = bytearray()
        self.buf = bytearray()
        self.inbox = collections.deque()
        self.discard = False
        self.received = 0
        self.write_failed = None  # why writing failed; reading goes on until EOF or an error
        self.fragment_opcode = None
        self.fragment = bytearray()
        self.key = base64.b64encode(os.urandom(16)).decode("ascii")
        self.next_id = 1
        self.loop = None
        self.mask = 0  # events registered with the loop's selector
        self.sock = None
        self.tag = None  # free for the attack's bookkeeping
        try:
            self.sock = socket.socket(target.family, socket.SOCK_STREAM)
        except OSError as error:
            self._fail(error_name(error))
            return
        try:
            self.sock.setblocking(False)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if source:
                # Leave the port to connect() so that each source address has its own port range.
                try:
                    self.sock.setsockopt(socket.IPPROTO_IP, getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24), 1)
                except OSError:
                    pass
                self.sock.bind((source, 0))
            code = self.sock.connect_ex(target.sockaddr)
        except OSError as error:
            self._fail(error_name(error))
            return
        if code == 0:
            self._connected()
        elif code not in (errno.EINPROGRESS, errno.EWOULDBLOCK):
            self._fail(errno.errorcode.get(code, str(code)))

    # -- state ------------------------------------------------------------------------------

    @property
    def alive(self):
        return self.state in ("connecting", "upgrading", "open")

    @property
    def is_open(self):
        return self.state == "open"

    @property
    def closed_by_server(self):
        return self.state == "closed" and self.close_kind != "client"

    def describe_close(self):
        """"1008", "eof", "reset", ... for reports."""
        if self.state == "failed":
            return self.error
        if self.close_kind == "close-frame":
            return str(self.close_code)
        return self.close_kind

    def wants(self):
        """Selector events this connection waits for."""
        if not self.alive or self.sock is None:
            return 0
        if self.state == "connecting":
            return selectors.EVENT_WRITE
        return selectors.EVENT_READ | (selectors.EVENT_WRITE if self.out else 0)

    # -- sending ----------------------------------------------------------------------------

    def send_frame(self, opcode, payload):
        """Queues a frame and writes what the socket takes now; False when not open."""
        if self.state != "open" or self.write_failed:
            return False
        self.out += encode_frame(opcode, payload)
        self._flush()
        if self.loop is not None:
            self.loop.dirty.add(self)
        return True

    def send_json(self, value):
        return self.send_frame(0x1, compact_json(value).encode("utf-8"))

    def request(self, kind, payload):
        """Sends one envelope of the server's protocol; returns its request id (None when not open)."""
        request_id = self.next_id
        self.next_id += 1
        envelope = {"v": PROTOCOL, "id": request_id, "type": kind, "payload": payload}
        return request_id if self.send_json(envelope) else None

    def _flush(self):
        while self.out and self.sock is not None:
            try:
                sent = self.sock.send(self.out)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:
                # The server has gone (EPIPE, ECONNRESET), but what it sent before may still be
                # waiting to be read: the read side decides when the connection is over.
                self.write_failed = error_name(error)
                self.out.clear()
                return
            del self.out[:sent]

    # -- events -----------------------------------------------------------------------------

    def handle(self, events):
        """Called by the loop when the socket is ready."""
        if self.state == "connecting":
            code = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                self._fail(errno.errorcode.get(code, str(code)))
                return
            self._connected()
        if self.alive and (events & selectors.EVENT_WRITE) and self.out:
            self._flush()
        if self.alive and (events & selectors.EVENT_READ):
            self._read()

    def _connected(self):
        if self.upgrade:
            self.state = "upgrading"
            self.out += handshake_request(self.target, self.key, self.subprotocol)
            self._flush()
        else:
            self.state = "open"
            self.opened_at = now()

    def _read(self):
        for _ in range(8):  # bounded per wake-up, so that one busy socket does not starve the rest
            try:
                data = self.sock.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:
                self._lost(error)
                return
            if not data:
                self._lost(None)
                return
            self.buf += data
            self._parse()
            if not self.alive or len(data) < (1 << 16):
                return

    def _parse(self):
        if self.state == "upgrading":
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > self.MAX_HEADERS:
                    self._fail("upgrade response too large")
                return
            head = bytes(self.buf[:end]).decode("latin-1")
            del self.buf[:end + 4]
            lines = head.split("\r\n")
            status = lines[0].split(" ", 2)
            if len(status) < 2 or status[1] != "101":
                self._fail("http " + (status[1] if len(status) > 1 else "?"))
                return
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            accept = base64.b64encode(hashlib.sha1((self.key + WS_GUID).encode()).digest()).decode()
            if headers.get("sec-websocket-accept") != accept:
                self._fail("bad Sec-WebSocket-Accept")
                return
            self.state = "open"
            self.opened_at = now()
        if not self.upgrade:
            self.buf.clear()  # plain TCP: whatever the server says is not interpreted
            return
        while self.state == "open" and self.buf:
            frame = self._take_frame()
            if frame is None:
                return
            self._on_frame(*frame)

    def _take_frame(self):
        """(fin, opcode, payload) of the next complete frame in the buffer, or None."""
        buf = self.buf
        if len(buf) < 2:
            return None
        fin, opcode = bool(buf[0] & 0x80), buf[0] & 0x0F
        masked, length, position = bool(buf[1] & 0x80), buf[1] & 0x7F, 2
        if length == 126:
            if len(buf) < 4:
                return None
            length, position = struct.unpack_from("!H", buf, 2)[0], 4
        elif length == 127:
            if len(buf) < 10:
                return None
            length, position = struct.unpack_from("!Q", buf, 2)[0], 10
        if length > self.MAX_MESSAGE:
            self._protocol_error("frame of %d bytes" % length)
            return None
        key = None
        if masked:
            if len(buf) < position + 4:
                return None
            key = bytes(buf[position:position + 4])
            position += 4
        if len(buf) < position + length:
            return None
        payload = bytes(buf[position:position + length])
        del buf[:position + length]
        if key:
            payload = mask_payload(payload, key)
        return fin, opcode, payload

    def _on_frame(self, fin, opcode, payload):
        if opcode == 0x8:  # close: note the code, answer it, and let go
            self.close_code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
            self.close_reason = payload[2:].decode("utf-8", "replace")
            try:
                self.sock.send(encode_frame(0x8, payload[:2]))
            except OSError:
                pass
            self._finish("close-frame")
        elif opcode == 0x9:  # ping → pong
            self.send_frame(0xA, payload)
        elif opcode == 0xA:
            pass
        elif opcode in (0x1, 0x2):
            if self.fragment_opcode is not None:
                self._protocol_error("new message inside a fragmented one")
            elif fin:
                self._deliver(opcode, payload)
            else:
                self.fragment_opcode, self.fragment = opcode, bytearray(payload)
        elif opcode == 0x0:
            if self.fragment_opcode is None:
                self._protocol_error("continuation without a message")
                return
            self.fragment += payload
            if len(self.fragment) > self.MAX_MESSAGE:
                self._protocol_error("message too large")
            elif fin:
                opcode, self.fragment_opcode = self.fragment_opcode, None
                self._deliver(opcode, bytes(self.fragment))
                self.fragment = bytearray()
        else:
            self._protocol_error("opcode %d" % opcode)

    def _deliver(self, opcode, payload):
        self.received += 1
        if self.discard:
            return
        if opcode == 0x2:
            self.inbox.append({"_binary": len(payload)})
            return
        text = payload.decode("utf-8", "replace")
        try:
            message = json.loads(text)
        except ValueError:
            message = None
        self.inbox.append(message if isinstance(message, dict) else {"_raw": text[:200]})

    def _protocol_error(self, reason):
        debug("protocol error from server:", reason)
        try:
            self.sock.send(encode_frame(0x8, struct.pack("!H", 1002)))
        except OSError:
            pass
        self.close_reason = reason
        self._finish("error")

    def _lost(self, error):
        """EOF (error None) or a socket error."""
        if self.state in ("connecting", "upgrading"):
            self._fail("closed during upgrade" if error is None else error_name(error))
        elif error is None:
            self._finish("eof")
        else:
            self._finish("reset" if isinstance(error, (ConnectionResetError, BrokenPipeError)) else "error")
            self.close_reason = self.close_reason or error_name(error)

    def _fail(self, reason):
        self.error = reason
        self._release()
        self.state = "failed"

    def _finish(self, kind):
        self.close_kind = kind
        self._release()
        self.state = "closed"

    def _release(self):
        if self.closed_at is None:
            self.closed_at = now()
        if self.loop is not None:
            self.loop.forget(self)
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None

    # -- ending -----------------------------------------------------------------------------

    def close(self, abort=True):
        """Closes from our side; abort sends a RST (SO_LINGER 0) instead of a FIN, without a leave."""
        if self.sock is not None and abort:
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        if self.alive:
            was_open = self.state == "open"
            self._finish("client")
            if not was_open:
                self.state, self.error = "failed", self.error or "closed by us before it opened"
        else:
            self._release()

    def detach(self):
        """Takes the socket away from the loop for direct use (non-blocking)."""
        if self.loop is not None:
            self.loop.forget(self)
        sock, self.sock = self.sock, None
        self.state = "detached"
        return sock


class Loop:
    """Drives many `Conn`s through one selector."""

    def __init__(self):
        self.selector = selectors.DefaultSelector()
        self.dirty = set()  # connections whose wanted events may have changed

    def add(self, conn):
        conn.loop = self
        if conn.alive:
            self.dirty.add(conn)
        return conn

    def forget(self, conn):
        self.dirty.discard(conn)
        if conn.mask and conn.sock is not None:
            try:
                self.selector.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass
        conn.mask = 0

    def _sync(self, conn):
        want = conn.wants()
        if want == conn.mask:
            return
        if conn.mask == 0:
            self.selector.register(conn.sock, want, conn)
        elif want == 0:
            self.selector.unregister(conn.sock)
        else:
            self.selector.modify(conn.sock, want, conn)
        conn.mask = want

    def pump(self, timeout):
        """Waits up to `timeout` seconds for I/O, handles it, and returns the connections touched."""
        for conn in list(self.dirty):
            self._sync(conn)
        self.dirty.clear()
        if not self.selector.get_map():
            if timeout > 0:
                time.sleep(timeout)
            return []
        touched = []
        for key, events in self.selector.select(max(0.0, timeout)):
            conn = key.data
            if conn.sock is None:
                continue
            conn.handle(events)
            touched.append(conn)
        for conn in touched:
            if conn.sock is not None and conn.alive:
                self._sync(conn)
        return touched

    def run_until(self, done, deadline, step=0.05):
        """Pumps until `done()` or the deadline; returns whether `done()` held."""
        while not done():
            left = deadline - now()
            if left <= 0:
                return False
            self.pump(min(step, left))
        return True


def reply_id(message):
    """The request a server message answers: its envelope id, or an error's requestID."""
    if message.get("id") is not None:
        return message.get("id")
    payload = message.get("payload")
    return payload.get("requestID") if isinstance(payload, dict) else None


def error_of(message):
    """(code, reason) of an error envelope."""
    payload = message.get("payload") if isinstance(message.get("payload"), dict) else {}
    return payload.get("code"), str(payload.get("reason", ""))


# ---------------------------------------------------------------------------------------------
# Joining: one state machine per connection, for this server and for Janus


class OursJoin:
    """join → joined | error on one connection of this server.

    status: "connecting", "joining", then "joined", "error" (the server refused: `code`),
    "failed" (the connection never opened) or "closed" (it closed before an answer).
    Messages after the answer stay in the connection's inbox.
    """

    def __init__(self, conn, token, channel, uid, role="broadcaster"):
        self.conn = conn
        self.payload = {"token": token, "channel": channel, "uid": uid, "role": role,
                        "autoSubscribe": False, "sdk": SDK}
        self.status = "connecting"
        self.code = None
        self.reason = ""
        self.sent_at = None
        self.done_at = None
        self.join_id = None
        self.last_ping = None

    @property
    def finished(self):
        return self.status not in ("connecting", "joining")

    def step(self):
        """Advances after I/O; returns whether the join is finished."""
        conn, t = self.conn, now()
        if self.status == "connecting":
            if conn.is_open:
                self.join_id = conn.request("join", self.payload)
                self.sent_at = t
                self.status = "joining"
            elif not conn.alive:
                self.status, self.reason, self.done_at = "failed", conn.error or conn.describe_close(), t
        if self.status == "joining":
            while conn.inbox:
                message = conn.inbox.popleft()
                kind = message.get("type")
                if kind == "joined":
                    self.status, self.done_at = "joined", t
                    break
                if kind == "error":
                    self.code, self.reason = error_of(message)
                    self.status, self.done_at = "error", t
                    break
            if self.status == "joining" and not conn.alive:
                self.status, self.done_at = "closed", t
                self.reason = "closed (%s) %s" % (conn.describe_close(), conn.close_reason)
        return self.finished

    def keepalive(self, interval=5.0):
        """Pings now and then while joined, so that the server keeps the session."""
        t = now()
        if self.status == "joined" and self.conn.is_open and (self.last_ping is None or t - self.last_ping >= interval):
            self.conn.request("ping", {"timestamp": wall_ms()})
            self.last_ping = t


class JanusJoin:
    """create → attach janus.plugin.videoroom → join `room` as a publisher, on one Janus connection.

    Same statuses as `OursJoin`; `sent_at` is when the first request (create) went out.
    """

    def __init__(self, conn, room, display):
        self.conn = conn
        self.room = room
        self.display = display
        self.status = "connecting"
        self.code = None
        self.reason = ""
        self.sent_at = None
        self.done_at = None
        self.session = None
        self.handle = None
        self.last_keepalive = None

    @property
    def finished(self):
        return self.status not in ("connecting", "joining")

    def step(self):
        conn, t = self.conn, now()
        if self.status == "connecting":
            if conn.is_open:
                conn.send_json({"janus": "create", "transaction": "create"})
                self.sent_at = self.last_keepalive = t
                self.status = "joining"
            elif not conn.alive:
                self.status, self.reason, self.done_at = "failed", conn.error or conn.describe_close(), t
        if self.status == "joining":
            while conn.inbox and self.status == "joining":
                self._on_message(conn.inbox.popleft(), t)
            if self.status == "joining" and not conn.alive:
                self.status, self.done_at = "closed", t
                self.reason = "closed (%s) %s" % (conn.describe_close(), conn.close_reason)
        return self.finished

    def _on_message(self, message, t):
        kind, transaction = message.get("janus"), message.get("transaction")
        if kind == "success" and transaction == "create":
            self.session = (message.get("data") or {}).get("id")
            self.conn.send_json({"janus": "attach", "session_id": self.session, "plugin": "janus.plugin.videoroom",
                                 "transaction": "attach"})
        elif kind == "success" and transaction == "attach":
            self.handle = (message.get("data") or {}).get("id")
            self.conn.send_json({"janus": "message", "session_id": self.session, "handle_id": self.handle,
                                 "transaction": "join",
                                 "body": {"request": "join", "ptype": "publisher", "room": self.room,
                                          "display": self.display}})
        elif kind == "error":
            error = message.get("error") or {}
            self.code, self.reason = error.get("code"), str(error.get("reason", ""))
            self.status, self.done_at = "error", t
        elif kind == "event":
            data = (message.get("plugindata") or {}).get("data") or {}
            if data.get("videoroom") == "joined":
                self.status, self.done_at = "joined", t
            elif data.get("error_code") is not None:
                self.code, self.reason = data.get("error_code"), str(data.get("error", ""))
                self.status, self.done_at = "error", t

    def keepalive(self, interval=20.0):
        """Janus drops sessions silent for 60 s by default."""
        t = now()
        if self.session is not None and self.conn.is_open and t - (self.last_keepalive or 0) >= interval:
            self.conn.send_json({"janus": "keepalive", "session_id": self.session, "transaction": "keepalive"})
            self.last_keepalive = t


def open_and_join(loop, target, source, token, channel, uid, role, deadline):
    """Opens a WebSocket to this server and joins; returns (conn, joiner) once the join is finished
    or the deadline passed (then joiner.status is still "connecting"/"joining")."""
    conn = loop.add(Conn(target, source, upgrade=True))
    joiner = OursJoin(conn, token, channel, uid, role)
    loop.run_until(joiner.step, deadline)
    return conn, joiner


def join_failure(joiner):
    """A description of an unsuccessful join for reports."""
    if joiner.status == "error":
        return "join refused: %s %s" % (joiner.code, joiner.reason)
    if joiner.status in ("connecting", "joining"):
        return "join timed out (%s)" % joiner.status
    return "join %s: %s" % (joiner.status, joiner.reason)


class Opener:
    """Starts `total` connections, at most `concurrency` of them still connecting or upgrading at
    a time (a burst of thousands of SYNs would only overflow the listen backlog)."""

    def __init__(self, total, concurrency, make):
        self.total = total
        self.concurrency = max(1, concurrency)
        self.make = make  # make(index) -> Conn, already added to the loop
        self.started = 0
        self.pending = set()

    @property
    def done(self):
        return self.started >= self.total and not self.pending

    def fill(self):
        while self.started < self.total and len(self.pending) < self.concurrency:
            conn = self.make(self.started)
            self.started += 1
            if conn.state in ("connecting", "upgrading"):
                self.pending.add(conn)

    def settle(self, conns):
        for conn in conns:
            if conn.state not in ("connecting", "upgrading"):
                self.pending.discard(conn)


# ---------------------------------------------------------------------------------------------
# Attack 1: idle connections


def run_probe(args, target):
    """The probe of `idle`: (conn, joiner) for a real user joining from the default source."""
    if target.janus:
        conn = Conn(target, None, upgrade=True, subprotocol=JANUS_SUBPROTOCOL)
        return conn, JanusJoin(conn, args.room, "probe")
    value = args.probe_join
    if value.count(".") == 2:  # a JWT given as it is
        token = value
    else:  # anything else ("yes", "mint", ...): mint one with --secret
        token = mint(args.secret, args.probe_uid, args.probe_channel, grants_from_list(ALL_GRANTS), args.ttl, issuer="abuse")
    conn = Conn(target, None, upgrade=True)
    return conn, OursJoin(conn, token, args.probe_channel, args.probe_uid, args.role)


def attack_idle(args, target, sources):
    report = {"attack": "idle", "mode": args.mode, "target": target.kind, "requested": args.count,
              "opened": 0, "refused": 0, "closed": 0, "still_open": 0,
              "closed_after_s": {"min": None, "p50": None, "max": None},
              "close_kinds": {}, "errors": {}}
    loop = Loop()
    conns = []
    upgrade = args.mode == "ws"

    def make(index):
        conn = loop.add(Conn(target, sources.next(), upgrade=upgrade, subprotocol=target.subprotocol if upgrade else None))
        conns.append(conn)
        return conn

    # Open phase: bounded by --open-seconds.
    opener = Opener(args.count, args.concurrency, make)
    open_deadline = now() + (args.open_seconds if args.open_seconds is not None else args.seconds)
    while not opener.done and now() < open_deadline:
        opener.fill()
        opener.settle(loop.pump(0.05))
    for conn in list(opener.pending):  # still connecting at the deadline
        conn.close()
        conn.error = "open timeout"
    opened = [conn for conn in conns if conn.opened_at is not None]
    for conn in opened:
        conn.discard = True  # whatever the server says to them is counted, not kept
    report["opened"] = len(opened)
    report["refused"] = len(conns) - len(opened) + (args.count - len(conns))
    for conn in conns:
        if conn.opened_at is None:
            bump(report["errors"], conn.error or "unknown")
    if args.count > len(conns):
        bump(report["errors"], "not started", args.count - len(conns))
    note("idle %s: %d of %d open (%d refused)" % (args.mode, len(opened), args.count, report["refused"]))

    # Watch phase: until the server has closed them all or --seconds passed; the probe meanwhile.
    probe = None
    if args.probe_join:
        probe_conn, probe = run_probe(args, target)
        loop.add(probe_conn)
        probe_deadline = now() + args.probe_seconds
    watch_deadline = now() + args.seconds

    def watching():
        return any(conn.alive for conn in opened) and now() < watch_deadline

    def probing():
        return probe is not None and not probe.step() and now() < probe_deadline

    while True:
        busy_probe = probing()  # always stepped: it sends its join once open
        if not (watching() or busy_probe):
            break
        loop.pump(0.05)

    closed_after = []
    for conn in opened:
        if conn.closed_by_server:
            closed_after.append(conn.closed_at - conn.opened_at)
            bump(report["close_kinds"], conn.describe_close())
    report["closed"] = len(closed_after)
    report["still_open"] = len(opened) - len(closed_after)
    if closed_after:
        report["closed_after_s"] = {"min": rounded(min(closed_after)), "p50": rounded(percentile(closed_after, 50)),
                                    "max": rounded(max(closed_after))}
    if probe is not None:
        report["probe_joined"] = probe.status == "joined"
        report["probe_ms"] = rounded((probe.done_at - probe.conn.started_at) * 1000, 1) if probe.status == "joined" else None
        if probe.status != "joined":
            report["probe_error"] = join_failure(probe)
        probe.conn.close()
    for conn in conns:
        conn.close()
    return report


# ---------------------------------------------------------------------------------------------
# Attack 2: a client that never reads


def tcp_state(sock):
    """Linux tcpi_state of a socket, or None."""
    option = getattr(socket, "TCP_INFO", None)
    if option is None:
        return None
    try:
        return sock.getsockopt(socket.IPPROTO_TCP, option, 8)[0]
    except OSError:
        return None


def peer_closed(sock):
    """Whether the server has closed or reset the connection, without reading from it."""
    if tcp_state(sock) in TCP_PEER_CLOSED_STATES:
        return True
    try:
        return sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0
    except OSError:
        return True


def flood(sock, next_message, max_messages, max_bytes, deadline, stall_seconds):
    """Writes messages as fast as the kernel accepts them, never reading, until `max_messages` or
    `max_bytes` are written, the deadline passes, writing is blocked for `stall_seconds` in a row,
    or the server closes. Returns (messages accepted whole, bytes accepted, blocked, closed)."""
    pending = bytearray()
    ends = collections.deque()  # cumulative byte offset where each queued message ends
    queued_messages = queued_bytes = 0
    accepted = messages = 0
    blocked = closed = False
    blocked_since = None
    last_check = 0.0
    selector = selectors.DefaultSelector()  # to wait for room in the send buffer
    selector.register(sock, selectors.EVENT_WRITE)
    while True:
        t = now()
        if t >= deadline:
            break
        if t - last_check >= 0.05:
            last_check = t
            if peer_closed(sock):
                closed = True
                break
        while len(pending) < (256 << 10) and queued_messages < max_messages:
            message = next_message()
            if queued_bytes + len(message) > max_bytes:
                max_messages = queued_messages  # the byte budget is spent: no more messages
                break
            pending += message
            queued_messages += 1
            queued_bytes += len(message)
            ends.append(queued_bytes)
        if not pending:
            break
        try:
            sent = sock.send(pending)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            closed = True
            break
        if sent:
            del pending[:sent]
            accepted += sent
            blocked_since = None
            while ends and ends[0] <= accepted:
                ends.popleft()
                messages += 1
            continue
        if blocked_since is None:
            blocked_since = t
        if t - blocked_since >= stall_seconds:
            blocked = True
            break
        selector.select(max(0.0, min(0.05, deadline - t, blocked_since + stall_seconds - t)))
    selector.close()
    if not closed and peer_closed(sock):
        closed = True
    return messages, accepted, blocked, closed


def attack_nonreading(args, target, sources):
    report = {"attack": "nonreading", "kind": args.kind, "sent_messages": 0, "sent_bytes": 0,
              "blocked": False, "closed_by_server": False, "seconds": 0.0}
    start = now()
    deadline = start + args.seconds
    loop = Loop()
    if args.kind == "http":
        conn = loop.add(Conn(target, sources.next(), upgrade=False))
        loop.run_until(lambda: not conn.state == "connecting", deadline)
        if not conn.is_open:
            report["error"] = "connect: %s" % (conn.error or "timeout")
            conn.close()
            report["seconds"] = rounded(now() - start)
            return report
        request = ("GET /metrics HTTP/1.1\r\nHost: %s\r\n\r\n" % (target.host_header or "x")).encode("ascii")
        next_message = lambda: request  # noqa: E731
        max_messages, max_bytes = args.max_requests, 1 << 62
    else:
        token = args.token or mint(args.secret, args.uid, args.channel, grants_from_list(args.grants), args.ttl, issuer="abuse")
        conn, joiner = open_and_join(loop, target, sources.next(), token, args.channel, args.uid, args.role, deadline)
        if joiner.status != "joined":
            report["error"] = join_failure(joiner)
            report["closed_by_server"] = conn.closed_by_server
            conn.close()
            report["seconds"] = rounded(now() - start)
            return report
        counter = [conn.next_id]

        def ping_frame():
            counter[0] += 1
            envelope = {"v": PROTOCOL, "id": counter[0], "type": "ping", "payload": {"timestamp": wall_ms()}}
            return encode_frame(0x1, compact_json(envelope).encode())

        def big_frame():
            counter[0] += 1
            head = '{"v":"%s","id":%d,"type":"ping","payload":{"timestamp":%d},"pad":"' % (PROTOCOL, counter[0], wall_ms())
            text = head + "x" * max(0, args.frame_bytes - len(head) - 2) + '"}'
            return encode_frame(0x1, text.encode())

        next_message = ping_frame if args.kind == "ping" else big_frame
        max_messages, max_bytes = 1 << 62, (args.max_bytes if args.kind == "big" else 1 << 62)
    leftover = bytes(conn.out)  # normally empty: the join has been written
    sock = conn.detach()
    if leftover:
        try:
            sock.setblocking(True)
            sock.settimeout(max(0.1, deadline - now()))
            sock.sendall(leftover)
            sock.setblocking(False)
        except OSError:
            pass
    try:
        messages, sent_bytes, blocked, closed = flood(sock, next_message, max_messages, max_bytes, deadline,
                                                      args.stall_seconds)
    finally:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        except OSError:
            pass
    report.update(sent_messages=messages, sent_bytes=sent_bytes, blocked=blocked, closed_by_server=closed,
                  seconds=rounded(now() - start))
    return report


# ---------------------------------------------------------------------------------------------
# Attack 3: a flood of publishTrack


def attack_tracks(args, target, sources):
    report = {"attack": "tracks", "sent": 0, "published": 0, "refused": 0, "other_errors": {},
              "unanswered": 0, "closed_by_server": False, "close": None}
    loop = Loop()
    token = args.token or mint(args.secret, args.uid, args.channel, grants_from_list(args.grants), args.ttl, issuer="abuse")
    conn, joiner = open_and_join(loop, target, sources.next(), token, args.channel, args.uid, args.role,
                                 now() + args.seconds)
    if joiner.status != "joined":
        report["error"] = join_failure(joiner)
        report["closed_by_server"] = conn.closed_by_server
        conn.close()
        return report
    ids = set()
    for index in range(args.count):
        request_id = conn.request("publishTrack", {"kind": "video", "source": "camera", "mid": str(index)})
        if request_id is None:
            break
        ids.add(request_id)
    report["sent"] = len(ids)
    answered = set()

    def drain():
        while conn.inbox:
            message = conn.inbox.popleft()
            kind, rid = message.get("type"), reply_id(message)
            if kind == "trackPublished" and rid in ids:
                report["published"] += 1
                answered.add(rid)
            elif kind == "error":
                code, _ = error_of(message)
                if code == LIMIT_EXCEEDED:
                    report["refused"] += 1
                else:
                    bump(report["other_errors"], code)
                if rid in ids:
                    answered.add(rid)
        return len(answered) >= len(ids) or not conn.alive

    loop.run_until(drain, now() + args.seconds)
    drain()
    report["unanswered"] = len(ids) - len(answered)
    report["closed_by_server"] = conn.closed_by_server
    report["close"] = conn.describe_close() if conn.state == "closed" else None
    conn.close()
    return report


# ---------------------------------------------------------------------------------------------
# Attack 4: forbidden actions


def forbidden_case(args, target, source, grants, role, then, uid=None, channel=None, ttl=None):
    """Joins on a fresh connection and, when `then` = (type, payload), sends that request; returns
    {"code", "reason", "closed", "stage", "joined"} for the first error (join's or the request's)."""
    uid = uid or random_name("abuse-")
    channel = channel or random_name("abuse-ch-")
    token = mint(args.secret, uid, channel, grants, ttl or args.ttl, issuer="abuse")
    loop = Loop()
    deadline = now() + args.seconds
    conn, joiner = open_and_join(loop, target, source, token, channel, uid, role, deadline)
    result = {"code": None, "reason": "", "closed": False, "stage": "join", "joined": joiner.status == "joined"}
    if joiner.status == "error":
        result["code"], result["reason"] = joiner.code, joiner.reason
    elif joiner.status != "joined":
        result["reason"] = join_failure(joiner)
    elif then is not None:
        result["stage"] = "request"
        request_id = conn.request(*then)
        # A ping right behind it: its pong comes after any answer to the request.
        barrier = conn.request("ping", {"timestamp": wall_ms()})
        finished = [False]

        def answered():
            while conn.inbox and not finished[0]:
                message = conn.inbox.popleft()
                kind, rid = message.get("type"), reply_id(message)
                if kind == "error" and rid in (request_id, None):
                    result["code"], result["reason"] = error_of(message)
                    finished[0] = True
                elif kind == "pong" and rid == barrier:
                    result["reason"] = "no error (the request was accepted)"
                    finished[0] = True
            return finished[0] or not conn.alive

        if not loop.run_until(answered, deadline):
            result["reason"] = "no answer within %g s" % args.seconds
    # Give the server a moment to close after a refusal, to report whether it did.
    loop.run_until(lambda: not conn.alive, min(deadline, now() + 0.3))
    result["closed"] = conn.closed_by_server
    if result["code"] is None and not result["reason"] and conn.closed_by_server:
        result["reason"] = "closed (%s)" % conn.describe_close()
    conn.close()
    return result


def attack_forbidden(args, target, sources):
    cases = {}
    no_publishing = grants_from_list(["join", "subscribe"])
    cases["audio_only_publishes_video"] = forbidden_case(
        args, target, sources.next(), grants_from_list(["join", "publishAudio", "subscribe"]), "broadcaster",
        ("publishTrack", {"kind": "video", "source": "camera", "mid": "0"}))
    cases["audience_set_role"] = forbidden_case(
        args, target, sources.next(), no_publishing, "audience", ("setRole", {"role": "broadcaster"}))
    cases["sub_without_owner"] = forbidden_case(
        args, target, sources.next(), grants_from_list(ALL_GRANTS), "broadcaster", None,
        uid=random_name("abuse-") + "_sub", channel=random_name("abuse-empty-"))
    cases["long_token"] = forbidden_case(
        args, target, sources.next(), grants_from_list(ALL_GRANTS), "broadcaster", None, ttl=10 * 365 * 86400)
    for name, result in cases.items():
        note("forbidden %s: code %s %s" % (name, result["code"], result["reason"]))
    return {"attack": "forbidden", "cases": cases}


# ---------------------------------------------------------------------------------------------
# Attack 5: many joins at once, then abrupt drops


def attack_joins(args, target, sources):
    report = {"attack": "joins", "target": target.kind, "requested": args.count, "joined": 0, "errors": {},
              "join_seconds": None, "p50_join_ms": None, "p95_join_ms": None, "dropped_during_hold": 0}
    loop = Loop()
    joiners = []
    tokens = {}
    if not target.janus:  # minted up front so that signing does not count in the join times
        for index in range(args.count):
            uid = "%s%d" % (args.uid_prefix, index)
            tokens[uid] = mint(args.secret, uid, args.channel, grants_from_list(args.grants), args.ttl, issuer="abuse")

    unfinished = set()

    def make(index):
        conn = loop.add(Conn(target, sources.next(), upgrade=True, subprotocol=target.subprotocol))
        uid = "%s%d" % (args.uid_prefix, index)
        joiner = JanusJoin(conn, args.room, uid) if target.janus else OursJoin(conn, tokens[uid], args.channel, uid, args.role)
        joiners.append(joiner)
        unfinished.add(joiner)
        return conn

    # Pipelined: connections open side by side, each sends its join as soon as it is upgraded.
    start = now()
    deadline = start + args.seconds
    opener = Opener(args.count, args.concurrency, make)
    while now() < deadline:
        opener.fill()
        opener.settle(loop.pump(0.02))
        for joiner in list(unfinished):
            if joiner.step():
                unfinished.discard(joiner)
                if joiner.status == "joined":
                    joiner.conn.discard = True  # participant updates of the crowd: counted, not parsed
                    joiner.conn.inbox.clear()
        if opener.done and not unfinished:
            break
        for joiner in joiners:
            joiner.keepalive()
    joined = [joiner for joiner in joiners if joiner.status == "joined"]
    for joiner in joiners:
        if joiner.status == "error":
            bump(report["errors"], joiner.code)
        elif joiner.status == "failed":
            bump(report["errors"], "connect: %s" % joiner.reason)
        elif joiner.status == "closed":
            bump(report["errors"], "closed: %s" % joiner.conn.describe_close())
        elif joiner.status != "joined":
            bump(report["errors"], "timeout")
    if args.count > len(joiners):
        bump(report["errors"], "not started", args.count - len(joiners))
    latencies = [(joiner.done_at - joiner.sent_at) * 1000 for joiner in joined]
    report["joined"] = len(joined)
    if joined:
        report["join_seconds"] = rounded(max(joiner.done_at for joiner in joined) - start)
    report["p50_join_ms"] = rounded(percentile(latencies, 50), 1)
    report["p95_join_ms"] = rounded(percentile(latencies, 95), 1)
    note("joins: %d of %d joined in %s s" % (len(joined), args.count, report["join_seconds"]))

    # Hold, keeping the sessions alive and reading what the server sends, then drop them all.
    hold_deadline = now() + args.hold
    while now() < hold_deadline and any(joiner.conn.alive for joiner in joined):
        loop.pump(min(0.1, max(0.0, hold_deadline - now())))
        for joiner in joined:
            joiner.keepalive()
            joiner.conn.inbox.clear()
    report["dropped_during_hold"] = sum(1 for joiner in joined if joiner.conn.closed_by_server)
    for joiner in joiners:
        joiner.conn.close(abort=True)  # RST, no leave
    report["seconds"] = rounded(now() - start)
    return report


# ---------------------------------------------------------------------------------------------
# Attack 6: a bystander measuring ping round trips


def attack_pinger(args, target, sources):
    report = {"attack": "pinger", "pings": 0, "pongs": 0, "max_ms": None, "p50_ms": None, "p95_ms": None,
              "missing": 0, "closed_by_server": False}
    loop = Loop()
    token = args.token or mint(args.secret, args.uid, args.channel, grants_from_list(args.grants), args.ttl, issuer="abuse")
    start = now()
    end = start + args.seconds
    conn, joiner = open_and_join(loop, target, sources.next(), token, args.channel, args.uid, args.role, end)
    if joiner.status != "joined":
        report["error"] = join_failure(joiner)
        report["closed_by_server"] = conn.closed_by_server
        conn.close()
        return report
    report["join_ms"] = rounded((joiner.done_at - conn.started_at) * 1000, 1)
    sent = {}  # request id → when
    rtts = []

    def drain():
        t = now()
        while conn.inbox:
            message = conn.inbox.popleft()
            if message.get("type") == "pong":
                sent_at = sent.pop(reply_id(message), None)
                if sent_at is not None:
                    rtts.append((t - sent_at) * 1000)

    next_ping = now()
    while conn.alive:
        t = now()
        if t >= end:
            break
        if t >= next_ping:
            request_id = conn.request("ping", {"timestamp": wall_ms()})
            if request_id is not None:
                sent[request_id] = t
                report["pings"] += 1
            next_ping += args.interval
            if next_ping < t:  # fell behind (a stalled process): do not burst to catch up
                next_ping = t + args.interval
        loop.pump(max(0.0, min(next_ping, end) - now()))
        drain()
    # A grace period for the pongs still on their way.
    loop.run_until(lambda: drain() or not sent or not conn.alive, now() + args.grace)
    drain()
    report["pongs"] = len(rtts)
    report["missing"] = report["pings"] - report["pongs"]
    report["max_ms"] = rounded(max(rtts), 1) if rtts else None
    report["p50_ms"] = rounded(percentile(rtts, 50), 1)
    report["p95_ms"] = rounded(percentile(rtts, 95), 1)
    report["closed_by_server"] = conn.closed_by_server
    if conn.closed_by_server:
        report["close"] = conn.describe_close()
    conn.close()
    return report


# ---------------------------------------------------------------------------------------------
# Command line


ATTACKS = {
    "idle": (attack_idle, "open N connections that never join (ws: upgraded; tcp: bare) and time the server's closes",
             {"count": 100, "seconds": 30.0}),
    "nonreading": (attack_nonreading, "one connection that writes as fast as it can and never reads",
                   {"seconds": 10.0}),
    "tracks": (attack_tracks, "join, then N publishTrack requests without waiting", {"count": 100, "seconds": 10.0}),
    "forbidden": (attack_forbidden, "forbidden actions, one fresh connection each; reports the error codes",
                  {"seconds": 5.0}),
    "joins": (attack_joins, "N participants join one channel (or Janus room) at once, hold, then drop with RST",
              {"count": 100, "seconds": 60.0}),
    "pinger": (attack_pinger, "a bystander that pings every --interval and measures the round trips",
               {"seconds": 10.0}),
}

SECONDS_HELP = {
    "idle": "watch the connections this long after they are open (default %g)",
    "nonreading": "time limit of the whole attack (default %g)",
    "tracks": "time limit of the join, and then of waiting for the answers (default %g)",
    "forbidden": "time limit of each case (default %g)",
    "joins": "time limit of the join phase; --hold comes after it (default %g)",
    "pinger": "how long to ping, the join included (default %g); then up to --grace more for late pongs",
}

OURS_ONLY = {"nonreading", "tracks", "forbidden", "pinger"}


def build_parser():
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("common options")
    group.add_argument("--url", help="ws://HOST:PORT/rtc (ours; default ws://127.0.0.1:7880/rtc) "
                                     "or ws://HOST:PORT/ (janus; default ws://127.0.0.1:8188/)")
    group.add_argument("--target", choices=["ours", "janus"], default="ours", help="server kind (default ours)")
    group.add_argument("--sources", default="", help="comma-separated local addresses to bind outgoing sockets to, "
                                                     "round-robin (e.g. 127.0.0.2,127.0.0.3)")
    group.add_argument("--secret", help="HS256 secret to mint tokens with")
    group.add_argument("--token", help="use this token instead of minting one (single-user attacks)")
    group.add_argument("--ttl", type=int, default=3600, help="lifetime of minted tokens, seconds (default 3600)")
    group.add_argument("--grants", default=",".join(ALL_GRANTS),
                       help="grants of minted tokens, comma-separated (default all: %s)" % ",".join(ALL_GRANTS))
    group.add_argument("--channel", default="abuse", help="channel (default abuse)")
    group.add_argument("--uid", help="uid (default abuse-<attack>)")
    group.add_argument("--role", choices=["broadcaster", "audience"], default="broadcaster",
                       help="role at join (default broadcaster)")
    group.add_argument("--concurrency", type=int, default=256,
                       help="connections connecting/upgrading at once in idle and joins (default 256)")
    group.add_argument("--verbose", action="store_true", help="more notes on stderr")

    parser = argparse.ArgumentParser(
        prog="abuse.py", description=__doc__.split("\n\n")[0] + " Prints one JSON object as the last line of stdout.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="See abuse.py <attack> --help for each attack's options.")
    subparsers = parser.add_subparsers(dest="attack", metavar="<attack>")
    for name, (_, summary, defaults) in ATTACKS.items():
        sub = subparsers.add_parser(name, parents=[common], help=summary, description=summary)
        sub.set_defaults(**{"default_" + key: value for key, value in defaults.items()})
        sub.add_argument("--seconds", type=float, help=SECONDS_HELP[name] % defaults["seconds"])
        if "count" in defaults:
            sub.add_argument("--count", type=int, help="how many (default %d)" % defaults["count"])
        if name == "idle":
            sub.add_argument("--mode", choices=["ws", "tcp"], default="ws",
                             help="ws: finish the upgrade then send nothing; tcp: connect and send nothing")
            sub.add_argument("--open-seconds", type=float, help="time limit to open them (default --seconds)")
            sub.add_argument("--probe-join", metavar="TOKEN",
                             help="after all are open, join one real user from the default source: a JWT, or any other "
                                  "word (e.g. yes) to mint one with --secret; 'janus' (or any value with --target janus) "
                                  "for create+attach+join room --room")
            sub.add_argument("--probe-uid", default="probe", help="uid of the probe (default probe)")
            sub.add_argument("--probe-channel", help="channel of the probe (default --channel)")
            sub.add_argument("--probe-seconds", type=float, default=10.0, help="time limit of the probe (default 10)")
        if name == "nonreading":
            sub.add_argument("--kind", choices=["ping", "big", "http"], default="ping",
                             help="ping: small ping frames; big: 60 KiB padded pings up to --max-bytes; "
                                  "http: pipelined GET /metrics on plain TCP")
            sub.add_argument("--stall-seconds", type=float, default=3.0,
                             help="stop once writing is blocked this long in a row (default 3)")
            sub.add_argument("--max-bytes", type=int, default=16 << 20, help="big: total bytes (default 16 MiB)")
            sub.add_argument("--frame-bytes", type=int, default=60 << 10, help="big: JSON bytes per message (default 61440)")
            sub.add_argument("--max-requests", type=int, default=20000, help="http: requests (default 20000)")
        if name in ("idle", "joins"):
            sub.add_argument("--room", type=int, default=1234, help="janus: videoroom room (default 1234)")
        if name == "joins":
            sub.add_argument("--hold", type=float, default=0.0, help="seconds to stay joined before the drop (default 0)")
            sub.add_argument("--uid-prefix", default="j", help="ours: uids are PREFIX0..PREFIXN-1 (default j)")
        if name == "pinger":
            sub.add_argument("--interval", type=float, default=0.1, help="seconds between pings (default 0.1)")
            sub.add_argument("--grace", type=float, default=2.0,
                             help="after --seconds, wait this long at most for pongs on their way (default 2)")
    return parser


def finish_arguments(parser, args):
    """Fills per-attack defaults and checks what each attack needs (exit 2 when wrong)."""
    sub_error = parser.error
    if args.seconds is None:
        args.seconds = args.default_seconds
    if args.seconds <= 0:
        sub_error("--seconds must be positive")
    if hasattr(args, "count"):
        if args.count is None:
            args.count = args.default_count
        if args.count < 0:
            sub_error("--count must not be negative")
    if args.target == "janus" and args.attack in OURS_ONLY:
        sub_error("%s attacks this server only (--target ours)" % args.attack)
    if args.url is None:
        args.url = "ws://127.0.0.1:8188/" if args.target == "janus" else "ws://127.0.0.1:7880/rtc"
    try:
        parts = urllib.parse.urlsplit(args.url)
        parts.port  # raises on a bad port
    except ValueError as error:
        sub_error("bad --url %r: %s" % (args.url, error))
    if parts.scheme != "ws" or not parts.hostname:
        sub_error("--url must be ws://HOST:PORT/PATH (no TLS), not %r" % args.url)
    args.uid = args.uid or "abuse-" + args.attack
    names = [name.strip() for name in args.grants.split(",") if name.strip()]
    unknown = [name for name in names if name not in ALL_GRANTS]
    if unknown:
        sub_error("unknown grant(s) %s; known: %s" % (", ".join(unknown), ", ".join(ALL_GRANTS)))
    args.grants = names
    needs_token = (args.attack in ("tracks", "pinger")
                   or (args.attack == "nonreading" and args.kind in ("ping", "big")))
    if needs_token and not (args.secret or args.token):
        sub_error("%s needs --secret (or --token)" % args.attack)
    if args.attack in ("forbidden",) and not args.secret:
        sub_error("forbidden needs --secret")
    if args.attack == "joins" and args.target == "ours" and not args.secret:
        sub_error("joins needs --secret")
    if args.attack == "idle" and args.probe_join and args.target == "ours":
        args.probe_channel = args.probe_channel or args.channel
        if args.probe_join.count(".") != 2 and not args.secret:
            sub_error("--probe-join without a token needs --secret to mint one")
        if args.probe_join == "janus":
            sub_error("--probe-join janus needs --target janus")
    if args.attack == "pinger" and args.interval <= 0:
        sub_error("--interval must be positive")
    if args.attack == "joins" and args.hold < 0:
        sub_error("--hold must not be negative")


def main(argv=None):
    global VERBOSE
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.attack:
        parser.print_help(sys.stderr)
        return 2
    finish_arguments(parser, args)
    VERBOSE = args.verbose
    limit = raise_nofile()
    debug("descriptor limit", limit)
    attack = ATTACKS[args.attack][0]
    sources = Sources(args.sources)
    try:
        target = Target(args.url, args.target, ipv4_only=bool(sources.addresses))
    except (ValueError, OSError) as error:
        emit({"attack": args.attack, "target": args.target, "error": "bad target %s: %s" % (args.url, error_name(error))})
        return 0
    try:
        report = attack(args, target, sources)
    except KeyboardInterrupt:
        emit({"attack": args.attack, "target": args.target, "error": "interrupted"})
        return 130
    except Exception as error:  # reported as JSON, not as a traceback on stdout
        if VERBOSE:
            traceback.print_exc()
        else:
            note("internal error:", error_name(error), "(--verbose for the traceback)")
        emit({"attack": args.attack, "target": args.target, "error": "internal: %s" % error_name(error)})
        return 0
    emit(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
