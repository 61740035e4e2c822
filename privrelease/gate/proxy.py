"""``python -m privrelease.gate.proxy``: nginx in front of the gate, where people reach the UI and the API.

It listens on $PRIVRELEASE_HOST:$PRIVRELEASE_PORT (default 127.0.0.1:4200), with TLS when
$PRIVRELEASE_TLS_CERT and $PRIVRELEASE_TLS_KEY name a certificate chain and its key; passes every
call but the UI's static files to the gate on 127.0.0.1:$PRIVRELEASE_GATE_PORT (default 4202), and
keeps its state (the rendered configuration, pid, access log, temporary files) in <home>/proxy.
The configuration is ``deploy/nginx.conf`` with its values (``{{name}}``) filled in by ``config``.
"""

from __future__ import annotations

import grp
import importlib.util
import os
import pwd
import re
import shutil
import sys
from pathlib import Path

from privrelease.core import limits, paths, settings
from privrelease.core.errors import UserError
from privrelease.gate.access import UI_PAGES
from privrelease.gate.bounds import MAX_BODY
from privrelease.gate.headers import proof_key

TEMPLATE = Path(__file__).resolve().parents[2] / "deploy" / "nginx.conf"
# the UI's files as Prefect's server serves them: the copy it makes at its start of the ones it ships, with its
# base path filled in (prefect/server/api/server.py, create_ui_app)
UI_BUILD = Path(next(iter(importlib.util.find_spec("prefect").submodule_search_locations))).resolve() / "server" / "ui_build"
TLS = """ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache shared:tls:1m;
        add_header Strict-Transport-Security "max-age=31536000" always;"""


def ui_folder() -> Path:
    """UI_BUILD, once Prefect's server has made it."""
    if not (UI_BUILD / "index.html").is_file():
        raise UserError(
            f"the UI's files are not in {UI_BUILD} yet: Prefect's server makes them when it starts; "
            f"start it (`prefect server start`) before the proxy"
        )
    return UI_BUILD


def config(
    *, host: str, port: int, gate_port: int, ui: Path, state: Path, proof_key: str, tls: tuple[Path, Path] | None = None
) -> str:
    """deploy/nginx.conf with its values filled in; every ``{{name}}`` in it must be one of them. ``proof_key``: the
    key of the gate's proofs that a credential signed in (``privrelease.gate.headers.proof_key``)."""
    address = f"[{host}]" if ":" in host else host
    values = {
        "listen": f"{address}:{port}" + (" ssl" if tls else ""),
        "gate_port": gate_port,
        "ui": ui,
        "deploy": TEMPLATE.parent,
        "state": state,
        "max_body": MAX_BODY,
        "account_calls": limits.configured().account_calls,  # the gate's own limit of an account's calls at once
        "proof_key": proof_key,
        "ui_pages": "|".join(f"{re.escape(name)}(/.*)?" for name in UI_PAGES),  # served by nginx from disk
        "tls": TLS.format(cert=tls[0], key=tls[1]) if tls else "",
        # nginx started by root runs its workers as `nobody` unless told; they run as whoever runs privrelease
        "user": f"user {pwd.getpwuid(os.geteuid()).pw_name} {grp.getgrgid(os.getegid()).gr_name};" if os.geteuid() == 0 else "",
    }
    return re.sub(r"\{\{(\w+)\}\}", lambda m: str(values[m[1]]), TEMPLATE.read_text())


def _tls() -> tuple[Path, Path] | None:
    cert, key = settings.get(settings.TLS_CERT), settings.get(settings.TLS_KEY)
    if bool(cert) != bool(key):
        raise UserError(
            f"TLS needs both ${settings.TLS_CERT} and ${settings.TLS_KEY} (a certificate chain and its key, "
            f"PEM files); set both, or neither for plain HTTP on this host"
        )
    if not cert:
        return None
    for name in (cert, key):
        if not Path(name).is_file():
            raise UserError(f"the TLS file {name} does not exist: set ${settings.TLS_CERT} and ${settings.TLS_KEY} to PEM files")
    return Path(cert).resolve(), Path(key).resolve()


def main() -> int:
    nginx = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
    if nginx is None:
        print("the proxy needs nginx: apt-get install -y nginx (scripts/system-deps.sh)", file=sys.stderr)
        return 2
    state = paths.home() / "proxy"
    operator_auth = settings.get(settings.PREFECT_AUTH)
    if not operator_auth:
        print(f"the proxy needs ${settings.PREFECT_AUTH}, the operator's credential the gate is given (make serve sets it)",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        tls = _tls()
        text = config(
            host=settings.get(settings.HOST, "127.0.0.1"),
            port=int(settings.number(settings.PORT, 4200)),
            gate_port=int(settings.number(settings.GATE_PORT, 4202)),
            ui=ui_folder(),
            state=state,
            proof_key=proof_key(operator_auth),
            tls=tls,
        )
    except UserError as error:
        print(f"the proxy cannot start: {error}", file=sys.stderr)
        return 2
    state.mkdir(parents=True, exist_ok=True)
    conf = state / "nginx.conf"
    conf.touch(mode=0o600)
    conf.chmod(0o600)  # it holds the proofs' key
    conf.write_text(text)
    # in the foreground, as this process (its signals stop nginx); -e: no log file of the system's is opened
    os.execv(nginx, [nginx, "-p", str(state), "-e", "stderr", "-c", str(conf), "-g", "daemon off;"])


if __name__ == "__main__":
    sys.exit(main())
