"""``python -m privrelease.gate``: the gate on 127.0.0.1:$PRIVRELEASE_GATE_PORT (default 4202) in front of Prefect's
server at $PRIVRELEASE_PREFECT_URL, passing allowed calls on with the operator's $PREFECT_API_AUTH_STRING.
People reach it through the proxy (``python -m privrelease.gate.proxy``, nginx), never directly."""

from __future__ import annotations

import ctypes
import sys

from privrelease.core import settings
from privrelease.core.errors import UserError

CONNECTIONS = 544  # open connections the gate holds; the proxy opens at most max_conns (deploy/nginx.conf) below it
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)


def return_large_buffers() -> None:
    """Have glibc give every buffer of 128 KiB or more back to the system when it is freed. By default it raises
    that threshold to the size of the largest buffer freed so far (an Argon2 check frees 64 MiB), after which the
    256 KiB buffer asyncio reads each connection with comes from the heap, which glibc keeps: under a flood of
    sign-ins the gate grew by about 30 MB that it never gave back (bench/RESULTS.md). Not glibc: nothing to do."""
    try:
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, 128 * 1024)
    except (OSError, AttributeError):
        pass


def main() -> int:
    import logging

    import uvicorn

    # the gate's own warnings (failed sign-ins, with name and address) on stderr, beside uvicorn's
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    try:
        from privrelease.gate.app import create_app
    except UserError as error:  # the access table's forms could not be read from prefect.yaml
        print(f"the gate cannot start: {error}", file=sys.stderr)
        return 2

    missing = [name for name in (settings.PREFECT_URL, settings.PREFECT_AUTH) if not settings.get(name)]
    if missing:
        print(f"the gate needs {' and '.join('$' + m for m in missing)} (make serve sets them)", file=sys.stderr)
        return 2
    port = int(settings.number(settings.GATE_PORT, 4202))
    # uvicorn counts every open connection against limit_concurrency (past it, every request gets 503) and
    # starts its keep-alive timer only after an answer: a socket that sends nothing, or a header a byte at a
    # time, is held for as long as its sender likes. So the gate listens on 127.0.0.1 only, behind the proxy
    # (deploy/nginx.conf), which cuts such sockets after its header timeout and opens connections here only
    # for whole requests. timeout_keep_alive: an idle connection after an answer (the proxy's, between its
    # requests) is closed after 5 s; the proxy stops reusing them after 4 s.
    # X-Forwarded-For is believed from 127.0.0.1 only: the proxy sets it to the caller's address (overwritten,
    # never appended), so request.client.host is the caller's address, not the proxy's.
    return_large_buffers()
    try:
        app = create_app()
    except UserError as error:  # a limit set to what is not one (privrelease.core.limits)
        print(f"the gate cannot start: {error}", file=sys.stderr)
        return 2
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        ws="websockets-sansio",
        limit_concurrency=CONNECTIONS,
        timeout_keep_alive=5,
        proxy_headers=True,
        forwarded_allow_ips="127.0.0.1",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
