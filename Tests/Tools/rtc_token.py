"""Access tokens for our server, the one minter of the Python tools (abuse.py, aiortc_viewer.py
and the tools that import it): HS256 JWTs as Sources/Signaling/AccessToken.swift verifies them.

The header is {"alg":"HS256","typ":"JWT"}; the claims are iss, sub (the uid), channel, grants
(the five grants by name), iat, nbf and exp (seconds since 1970); both are compact JSON, and the
three parts are base64url without padding. Used as a module: `from rtc_token import mint` (the
tools run as `python3 Tests/Tools/x.py`, so this file sits beside them on sys.path).
"""

import base64
import hashlib
import hmac
import json
import time

# The grants a token carries (TokenGrants in Sources/Signaling/AccessToken.swift).
GRANTS = ("join", "publishAudio", "publishVideo", "publishScreen", "subscribe")


def b64url(data):
    """base64url without padding, as JWTs write their parts."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def compact_json(value):
    """JSON without spaces, as the server and JWTs write it."""
    return json.dumps(value, separators=(",", ":"))


def mint(secret, uid, channel, grants=None, ttl=3600, issuer="swift-rtc", now=None):
    """A signed access token for `uid` in `channel`, valid from `now` (default: this second) for
    `ttl` seconds. `grants` maps grant names to booleans (every grant of GRANTS when None);
    `issuer` is the `iss` claim, which names the tool that made the token."""
    issued = int(time.time()) if now is None else int(now)
    header = {"alg": "HS256", "typ": "JWT"}
    claims = {"iss": issuer, "sub": uid, "channel": channel,
              "grants": {name: True for name in GRANTS} if grants is None else grants,
              "iat": issued, "nbf": issued, "exp": issued + int(ttl)}
    signing_input = b64url(compact_json(header).encode()) + "." + b64url(compact_json(claims).encode())
    signature = hmac.new(secret.encode(), signing_input.encode(), hashlib.sha256).digest()
    return signing_input + "." + b64url(signature)
