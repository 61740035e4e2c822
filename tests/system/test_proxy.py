"""The proxy (nginx with deploy/nginx.conf, ``python -m privrelease.gate.proxy``) in front of the gate, attacked through
the session's real proxy, gate and Prefect server (`served`); each attack is also run against the bare
gate (the weakened variant: no proxy), where it works:

- 1,000 sockets that send nothing or part of a header, and 200 requests for the UI's largest script
  never read: through the proxy a signed-in analyst's call still succeeds and the proxy closes the idle
  sockets after its header timeout; the bare gate answers 503 to everyone and holds them;
- a body over the gate's limit is refused by the proxy (413) without reaching the gate;
- a header sent a byte at a time is cut before it ends.

Also: TLS with a certificate the operator gives, and the proxy's own errors."""

from __future__ import annotations

import os
import resource
import select
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import prefect
import pytest

import privrelease.gate.proxy
from privrelease.core.errors import UserError
from privrelease.gate.app import REFUSED
from privrelease.gate.bounds import MAX_BODY
from tests.conftest import PASSWORD, REPO
from tests.system.test_server import gate as bare_gate
from tests.system.test_server import proxy

IDLE, DOWNLOADS = 1000, 200
# the attack's addresses: all of 127/8 is this host's loopback, so each is a caller of its own to the proxy
ATTACKERS = [f"127.0.1.{i}" for i in range(1, 101)]
HEADER_TIMEOUT = 10  # seconds: client_header_timeout in deploy/nginx.conf


@pytest.fixture(scope="module", autouse=True)
def descriptors():
    """Room for the flood's sockets in this process."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture(scope="module")
def bare(served, tmp_path_factory) -> str:
    """A gate of its own on the session's server, with no proxy in front (the weakened variant)."""
    env, _ = served
    with bare_gate(env, tmp_path_factory.mktemp("bare") / "gate.log") as url:
        yield url


def largest_script() -> str:
    """The UI's largest file (its 4.4 MB main script), as a path."""
    static = Path(prefect.__ui_static_path__)
    return "/" + max(static.rglob("*.js"), key=lambda p: p.stat().st_size).relative_to(static).as_posix()


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _connect(port: int, i: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a reader that reads nothing: small window
    s.bind((ATTACKERS[i % len(ATTACKERS)], 0))
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    return s


@contextmanager
def flood(port: int, downloads_first: bool = False) -> Iterator[list[socket.socket]]:
    """1,000 sockets of which half send nothing and half part of a header, then 200 requests for the UI's largest
    script, never read, from 100 addresses; yields the idle ones. No account is needed. ``downloads_first``: the
    requests before the sockets, so that a bare gate serves them too (bench/bench_flood.py's memory figures; the
    tests spare the session's Prefect server 200 copies of the script)."""
    path, idle, downloads = largest_script(), [], []

    def download(i: int) -> None:
        downloads.append(_connect(port, i))
        downloads[-1].sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())

    try:
        for i in range(DOWNLOADS if downloads_first else 0):
            download(i)
        for i in range(IDLE):
            idle.append(_connect(port, i))
            if i % 2:
                idle[-1].sendall(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        for i in range(0 if downloads_first else DOWNLOADS):
            download(i)
        yield idle
    finally:
        for s in idle + downloads:
            s.close()


def analyst_call(url: str) -> httpx.Response:
    """A signed-in analyst's call (no retry: a 503 is what the analyst sees)."""
    return httpx.post(f"{url}/api/flow_runs/filter", json={"limit": 1}, auth=("alice", PASSWORD), timeout=120)


def closed(s: socket.socket, wait: float) -> bool:
    """Whether the server closes (end of stream, or a reset) the socket within ``wait`` seconds."""
    s.settimeout(wait)
    try:
        while s.recv(4096):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def closed_within(sockets: list[socket.socket], wait: float) -> int:
    """How many of ``sockets`` the server closes within ``wait`` seconds from now."""
    deadline = time.monotonic() + wait
    return sum(closed(s, max(0.001, deadline - time.monotonic())) for s in sockets)


def test_idle_sockets_and_unread_downloads_shut_nobody_out(served, people, bare):
    env, _ = served
    with flood(_port(env["PRIVRELEASE_GATE_URL"])) as idle:
        response = analyst_call(env["PRIVRELEASE_GATE_URL"])
        assert response.status_code == 200 and isinstance(response.json(), list), response.text
        # every idle socket is closed by the proxy (at its header timeout; the wait is generous for a loaded machine)
        assert closed_within(idle, 6 * HEADER_TIMEOUT) == IDLE
    # the weakened variant: the same flood against the bare gate, which answers the analyst before it, shuts
    # everyone out, and the gate holds every idle socket past the proxy's timeout
    assert analyst_call(bare).status_code == 200
    with flood(_port(bare)) as idle:
        response = analyst_call(bare)
        assert response.status_code == 503 and response.text == "Service Unavailable"
        assert closed_within(idle, 1.5 * HEADER_TIMEOUT) == 0


def _oversized(url: str) -> list[httpx.Response]:
    """A filter one byte over the gate's limit, with its length declared, then sent in chunks of unknown total."""
    body = b'{"x": "' + b"a" * MAX_BODY + b'"}'
    call = {
        "url": f"{url}/api/flow_runs/filter",
        "auth": ("alice", PASSWORD),
        "timeout": 60,
        "headers": {"content-type": "application/json"},
    }
    return [httpx.post(content=body, **call), httpx.post(content=iter([body[: MAX_BODY // 2], body[MAX_BODY // 2 :]]), **call)]


def test_a_body_over_the_limit_is_refused_by_the_proxy(served, people, bare):
    env, _ = served
    for response in _oversized(env["PRIVRELEASE_GATE_URL"]):
        assert response.status_code == 413 and REFUSED not in response.headers  # the proxy's answer, not the gate's
    assert people["alice"].post("/flow_runs/filter", json={"limit": 1}).status_code == 200  # a body within it passes
    # the weakened variant: without the proxy, the gate reads the body (and refuses it itself)
    assert all(r.status_code == 413 and REFUSED in r.headers for r in _oversized(bare))


def dribble(port: int, every: float = 0.25) -> bool:
    """A 120-byte request header sent a byte every ``every`` seconds (30 s); whether the server cut it before its end."""
    header = b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 72 + b"\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        for byte in header:
            try:
                s.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                return True
            if select.select([s], [], [], every)[0]:
                return closed(s, 1)
        return False


def test_a_header_sent_a_byte_at_a_time_is_cut(served, bare):
    env, _ = served
    assert dribble(_port(env["PRIVRELEASE_GATE_URL"]))
    assert not dribble(_port(bare))  # the weakened variant: the bare gate waits for the whole header


def _certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, as an operator's would be."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_tls_with_the_operators_certificate(served, people, tmp_path: Path):
    env, _ = served
    tls = _certificate(tmp_path)
    gate_url = f"http://127.0.0.1:{env['PRIVRELEASE_GATE_PORT']}"
    with proxy(env | {"PRIVRELEASE_HOME": str(tmp_path / "home")}, gate_url, tmp_path / "proxy.log", tls) as url:
        assert url.startswith("https://")
        trust = ssl.create_default_context(cafile=tls[0])
        signed_in = httpx.post(
            f"{url}/api/flow_runs/filter", json={"limit": 1}, auth=("alice", PASSWORD), verify=trust, timeout=60
        )
        assert signed_in.status_code == 200 and "max-age" in signed_in.headers["strict-transport-security"]
        script = httpx.get(url + largest_script(), verify=trust, timeout=60)
        assert script.status_code == 200 and script.headers["content-type"] == "application/javascript"
        assert httpx.post(f"{url}/api/flow_runs/filter", json={}, verify=trust, timeout=60).status_code == 401
        with pytest.raises(httpx.ConnectError):  # a certificate nobody vouched for is not trusted
            httpx.get(f"{url}/api/health", timeout=60)
        plain = httpx.get(url.replace("https://", "http://") + "/api/health", timeout=60)
        assert plain.status_code == 400  # no plain HTTP on the TLS port


def test_the_configuration_is_filled_in():
    ui = Path("/srv/ui")
    text = privrelease.gate.proxy.config(
        host="::", port=443, gate_port=4202, ui=ui, state=Path("/srv/p"), proof_key="k3y", tls=(Path("/c.pem"), Path("/k.pem"))
    )
    assert "{{" not in text and "listen [::]:443 ssl;" in text and "ssl_certificate /c.pem;" in text
    assert f"client_max_body_size {MAX_BODY};" in text and f"root {ui};" in text and "127.0.0.1:4202 max_conns=192;" in text
    assert "pid /srv/p/nginx.pid;" in text and "proxy_set_header X-Forwarded-For $remote_addr;" in text
    assert 'secure_link_md5 "k3y$http_authorization";' in text
    plain = privrelease.gate.proxy.config(
        host="127.0.0.1", port=4200, gate_port=4202, ui=ui, state=Path("/srv/p"), proof_key="k3y"
    )
    assert "listen 127.0.0.1:4200;" in plain and "ssl" not in plain


def _start(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "privrelease.gate.proxy"], env=env, cwd=REPO, capture_output=True, text=True, timeout=60
    )


def test_the_proxys_errors_say_what_to_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVRELEASE_")}
    env["PRIVRELEASE_HOME"] = str(tmp_path)
    unkeyed = _start({k: v for k, v in env.items() if k != "PREFECT_API_AUTH_STRING"})
    assert unkeyed.returncode == 2 and "the proxy needs $PREFECT_API_AUTH_STRING" in unkeyed.stderr
    env["PREFECT_API_AUTH_STRING"] = "operator:x"
    half = _start(env | {"PRIVRELEASE_TLS_CERT": str(tmp_path / "cert.pem")})
    assert half.returncode == 2 and "TLS needs both $PRIVRELEASE_TLS_CERT and $PRIVRELEASE_TLS_KEY" in half.stderr
    missing = _start(env | {"PRIVRELEASE_TLS_CERT": str(tmp_path / "cert.pem"), "PRIVRELEASE_TLS_KEY": str(tmp_path / "key.pem")})
    assert missing.returncode == 2 and f"the TLS file {tmp_path / 'cert.pem'} does not exist" in missing.stderr
    monkeypatch.setattr(privrelease.gate.proxy.shutil, "which", lambda *a, **k: None)
    assert privrelease.gate.proxy.main() == 2 and "apt-get install -y nginx" in capsys.readouterr().err
    monkeypatch.undo()
    monkeypatch.setattr(privrelease.gate.proxy, "UI_BUILD", tmp_path)
    with pytest.raises(UserError, match="start it .* before the proxy"):
        privrelease.gate.proxy.ui_folder()
