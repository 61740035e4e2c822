"""The gate without its per-account limits (``privrelease.gate.quotas``): the weakened variant each attack of
tests/system/test_quotas.py is also run on, where it succeeds. Started as ``python -m tests.support.weak_gate``, with
the environment ``python -m privrelease.gate`` takes."""

from __future__ import annotations

import uvicorn

from privrelease.core import settings
from privrelease.gate.app import create_app

if __name__ == "__main__":
    app = create_app()
    app.state.gate.quotas = None  # every run passed on as the policy's rewrite leaves it
    uvicorn.run(app, host="127.0.0.1", port=int(settings.get(settings.GATE_PORT)), log_level="warning")
