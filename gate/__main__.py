"""``python -m gate``: the gate on $PRIVRELEASE_PORT (default 4200) in front of Prefect's server at
$PRIVRELEASE_PREFECT_URL, passing allowed calls on with the operator's $PREFECT_API_AUTH_STRING."""

from __future__ import annotations

import sys

from core import settings
from core.errors import UserError


def main() -> int:
    import logging

    import uvicorn

    # the gate's own warnings (failed sign-ins, with name and address) on stderr, beside uvicorn's
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    try:
        from gate.app import create_app
    except UserError as error:  # the policy's forms could not be read from prefect.yaml
        print(f"the gate cannot start: {error}", file=sys.stderr)
        return 2

    missing = [name for name in (settings.PREFECT_URL, settings.PREFECT_AUTH) if not settings.get(name)]
    if missing:
        print(f"the gate needs {' and '.join('$' + m for m in missing)} (make serve sets them)", file=sys.stderr)
        return 2
    host = settings.get(settings.HOST, "127.0.0.1")
    port = int(settings.number(settings.PORT, 4200))
    # connections beyond the limit get 503 at once instead of holding memory; idle ones are closed after 5 s
    uvicorn.run(create_app(), host=host, port=port, log_level="warning", ws="websockets-sansio", limit_concurrency=256,
                timeout_keep_alive=5)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
