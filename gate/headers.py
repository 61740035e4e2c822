"""The headers the gate reads or passes on, read strictly.

- Only printable ASCII (and tab) in the headers the gate reads or passes on (``READ``): a byte outside it is
  refused (400) before anything else. Starlette hands header values over as Latin-1 text and Prefect's client
  sends them as ASCII, so such a byte made the gate's own call fail; and no browser, nor Prefect's client,
  sends one.
- Credentials in one form only, ``Authorization: Basic <base64 of name:password>`` with the base64 as
  encoding writes it: the proxy counts each account's calls by that header, so a second spelling of the
  same credential (``basic``, two spaces, missing padding) would be a second, uncounted account.
"""

from __future__ import annotations

import base64
import binascii
import re

# Headers passed on to Prefect; every other one (cookies, Prefect's automation headers that label who created a
# run, forwarding headers, method overrides) is dropped.
PASSED = frozenset({"accept", "accept-language", "content-type", "user-agent", "x-prefect-ui"})
READ = PASSED | {"authorization", "x-real-ip"}  # the gate's own reading: who asks, and from where
PRINTABLE = re.compile(rb"[\t\x20-\x7e]*")
BASIC = re.compile(r"Basic ([A-Za-z0-9+/]+={0,2})")


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
