"""The headers the gate reads or passes on, read strictly.

- Only printable ASCII (and tab) in the headers the gate reads or passes on (``READ``): a byte outside it is
  refused (400) before anything else. Starlette hands header values over as Latin-1 text and Prefect's client
  sends them as ASCII, so such a byte made the gate's own call fail; and no browser, nor Prefect's client,
  sends one.
- Credentials in one form only, ``Authorization: Basic <base64 of name:password>`` with the base64 as
  encoding writes it: the proxy counts each account's calls by that header, so a second spelling of the
  same credential (``basic``, two spaces, missing padding) would be a second, uncounted account.
- A credential that signed in is given a proof (the cookie ``PROOF``: a keyed MD5 of the Authorization header,
  what nginx's ``secure_link_md5`` checks): the proxy lets calls with a proof reach the gate as people's, and
  limits the others, sign-ins that have not succeeded yet, per address (deploy/nginx.conf). The key is derived from
  the operator's credential, which the gate and the proxy are both given; the proof says no more than that its
  holder has signed in with that header, and changes with the password.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re

# Headers passed on to Prefect; every other one (cookies, Prefect's automation headers that label who created a
# run, forwarding headers, method overrides) is dropped.
PASSED = frozenset({"accept", "accept-language", "content-type", "user-agent", "x-prefect-ui"})
READ = PASSED | {"authorization", "x-real-ip"}  # the gate's own reading: who asks, and from where
PRINTABLE = re.compile(rb"[\t\x20-\x7e]*")
# nginx's pattern of a credential (deploy/nginx.conf, `map $http_authorization $account`): base64 as base64 writes it,
# at most 1,024 characters. A longer header is no one's to the gate too, so that nginx's sign-in limits apply to every
# sign-in the gate checks (the independent attack on #53, F3: a 3,000-character password was a sign-in to the gate
# and a call without credentials to nginx, outside its sign-in limits)
BASIC = re.compile(r"Basic ((?:[A-Za-z0-9+/]{4}){1,256}(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?)")
PROOF = "privrelease_signed_in"  # the cookie of a credential that signed in
PROOF_DAYS = 30


def unreadable(raw: list[tuple[bytes, bytes]]) -> str | None:
    """Why the request's headers are refused (a header of ``READ`` holding a byte outside printable ASCII),
    or None."""
    for name, value in raw:
        if name.lower().decode("latin-1") in READ and not PRINTABLE.fullmatch(value):
            return f"the {name.decode('latin-1')!r} header holds a byte outside printable ASCII; send ASCII only"
    return None


def credentials(header: str) -> tuple[str, str] | None:
    """(name, password) from an ``Authorization`` header in the one form the gate reads, or None."""
    basic = BASIC.fullmatch(header)
    if basic is None:
        return None
    token = basic.group(1)
    try:
        raw = base64.b64decode(token, validate=True)
        name, sep, password = raw.decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    if not sep or base64.b64encode(raw).decode() != token:
        return None
    return name, password


def proof_key(operator_auth: str) -> str:
    """The key the gate and the proxy share for proofs, derived from the operator's credential."""
    return hmac.new(operator_auth.encode(), b"privrelease sign-in proof", hashlib.sha256).hexdigest()


def proof(key: str, header: str) -> str:
    """The proof of the Authorization header ``header``: base64url of MD5(key + header), without padding, as nginx's
    ``secure_link_md5 "KEY$http_authorization"`` computes it."""
    return base64.urlsafe_b64encode(hashlib.md5((key + header).encode()).digest()).rstrip(b"=").decode()
