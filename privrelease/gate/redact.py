"""Nothing of the host in what people read: the home's and the checkout's paths, the host's name and
the process ids Prefect records are taken out of every JSON answer the gate passes back.

privrelease writes none of them into artifacts, logs or state messages (release folders are named by
dataset and release id, the ledger's holder column is not published); Prefect does: a deployment's
``path`` and its pull step's working directory are the checkout, a flow run's ``infrastructure_pid``
is ``<host>:<pid>``. The gate runs on the worker's host (``make serve``), so it knows the strings to
take out; a longer path is replaced before a shorter one inside it, the host's name only as a whole
word, and not at all when it is shorter than ``MIN_HOST`` (it would match ordinary words; it is then
no secret either).
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

PLACEHOLDERS = {"home": b"<home>", "repo": b"<repo>", "host": b"<host>"}
PID = re.compile(rb'"infrastructure_pid"\s*:\s*"[^"]*"')
MIN_HOST = 4  # a shorter host name (or "localhost") is no secret, and would match ordinary words


class Redactor:
    def __init__(self, home: Path, repo: Path, host: str | None = None):
        host = socket.gethostname() if host is None else host
        found: dict[bytes, bytes] = {}
        for path, placeholder in ((home, PLACEHOLDERS["home"]), (repo, PLACEHOLDERS["repo"])):
            for form in {str(path), str(path.resolve())}:
                if form not in ("/", "."):
                    found[form.encode()] = placeholder
        self.strings = sorted(found.items(), key=lambda item: -len(item[0]))
        self.host = (
            re.compile(rb"(?<![\w.-])" + re.escape(host.encode()) + rb"(?![\w-])")
            if len(host) >= MIN_HOST and host != "localhost"
            else None
        )

    def __call__(self, body: bytes) -> bytes:
        body = PID.sub(b'"infrastructure_pid":null', body)
        for text, placeholder in self.strings:
            body = body.replace(text, placeholder)
        return self.host.sub(PLACEHOLDERS["host"], body) if self.host is not None else body
