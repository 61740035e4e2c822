"""The seventh independent attack on the served stack (issue #39), H2 and H3, through the real proxy (nginx with
deploy/nginx.conf as privrelease/gate/proxy.py renders it), each also run through a proxy whose configuration lacks the one
defence (the weakened variant), where it works:

- H2: callers without credentials from 13 addresses, 16 calls each at once, held all of the proxy's 192
  connections to the gate while their calls waited, and nginx answered everyone 502. Now they hold at most 32
  (6 per address) and a signed-in person's reads are all answered; the UI's pages are nginx's, from disk, and
  anyone's health check and UI settings are read from Prefect at most every few seconds.
- H3: one address grew the access log by 63 KB a request (Referer, User-Agent and the request line, up to 8 KB
  each, escaped to 4 bytes a byte). Now a request writes at most about 300 bytes; and every log `make serve`
  writes is rotated by size (privrelease.gate.logs), nginx's access log too, in place.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx

import privrelease.gate.proxy
from privrelease.gate import answers, logs
from privrelease.gate.call import Call, Refused
from privrelease.gate.headers import proof_key
from tests.conftest import PASSWORD
from tests.system.test_server import _free_port, _service
from tests.system.test_server import gate as started_gate

ADDRESSES = [f"127.0.13.{i}" for i in range(1, 14)]  # the attack's 13 callers
AT_ONCE = 16  # calls per address at once: the proxy's limit per address
READS = 20  # the person's, during the attack


@contextmanager
def reconfigured(env: dict, root: Path, name: str, gate_port: int, edit: Callable[[str], str] = lambda text: text):
    """nginx with deploy/nginx.conf as rendered for a proxy in front of the gate on ``gate_port``, changed by
    ``edit`` (a weakened variant), its state in ``root``/``name``; yields its URL."""
    port, state = _free_port(), root / name
    state.mkdir(exist_ok=True)
    key = proof_key(env["PREFECT_API_AUTH_STRING"])
    text = privrelease.gate.proxy.config(
        host="127.0.0.1", port=port, gate_port=gate_port, ui=privrelease.gate.proxy.ui_folder(), state=state, proof_key=key
    )
    (state / "nginx.conf").write_text(edit(text))
    nginx = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
    command = [nginx, "-p", str(state), "-e", "stderr", "-c", str(state / "nginx.conf"), "-g", "daemon off;"]
    with _service(command, env, root / f"{name}.log", f"http://127.0.0.1:{port}") as url:
        yield url


def without(text: str, word: str, lines: int) -> str:
    """``text`` less its ``lines`` lines naming ``word``."""
    kept = "\n".join(line for line in text.splitlines() if word not in line)
    assert len(kept.splitlines()) == len(text.splitlines()) - lines
    return kept


# -- H2 ----------------------------------------------------------------------------------------------------


def _flood(url: str) -> list[int]:
    """AT_ONCE callers without credentials per address of ADDRESSES loop on the slow call while a signed-in
    person reads READS times; the person's answers."""
    done, answers = threading.Event(), []

    def caller(address: str) -> None:
        with httpx.Client(base_url=url, timeout=60, transport=httpx.HTTPTransport(local_address=address)) as client:
            while not done.is_set():
                if client.get("/slow").status_code != 200:
                    time.sleep(0.05)  # refused: again a little later

    threads = [threading.Thread(target=caller, args=(a,)) for a in ADDRESSES for _ in range(AT_ONCE)]
    for t in threads:
        t.start()
    try:
        time.sleep(3)  # every caller's first call is in (or refused)
        transport = httpx.HTTPTransport(local_address="127.0.13.100")
        with httpx.Client(base_url=url, auth=("alice", PASSWORD), timeout=60, transport=transport) as person:
            for _ in range(READS):
                answers.append(person.post("/api/flow_runs/count", json={}).status_code)
                time.sleep(0.2)
    finally:
        done.set()
        for t in threads:
            t.join()
    return answers


def test_callers_without_credentials_never_take_peoples_connections_to_the_gate(served, people, tmp_path: Path):
    env, _ = served
    with started_gate(env, tmp_path / "slow-gate.log", module="tests.support.slow_gate") as slow:
        port = int(slow.rsplit(":", 1)[1])
        with reconfigured(env, tmp_path, "proxy", port) as url:
            assert _flood(url) == [200] * READS
        # the weakened proxy: calls without credentials through people's connections, with no limit per address
        with reconfigured(env, tmp_path, "proxy-open", port, _one_pool) as url:
            assert 502 in _flood(url)


def _one_pool(text: str) -> str:
    return without(text, "limit_conn anon_", 1).replace("proxy_pass http://$gate_pool;", "proxy_pass http://gate;")


def _global_anonymous_limit(text: str) -> str:
    """The seventh attack's fix as it was: calls without credentials limited to 32 in progress in all."""
    zone = 'map $http_authorization $anon_all { "" anonymous; default ""; }\n    limit_conn_zone $anon_all zone=anon_all:1m;\n'
    text = text.replace("    limit_conn_zone $anon_address", zone + "    limit_conn_zone $anon_address", 1)
    return text.replace("limit_conn anon_address 6;", "limit_conn anon_address 6;\n            limit_conn anon_all 32;", 1)


def _held(url: str, addresses: list[str], per_address: int) -> list[socket.socket]:
    """Calls without credentials that send their body a byte at a time (the ninth attack): connected, head and a
    first byte sent, the rest never."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    held = []
    for address in addresses:
        for _ in range(per_address):
            s = socket.create_connection((host, int(port)), timeout=10, source_address=(address, 0))
            s.sendall(b"POST /api/health HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 100000\r\n\r\n{")  # fmt: skip
            held.append(s)
    return held


def test_calls_sending_their_body_slowly_hold_no_connection_to_the_gate(served, tmp_path: Path):
    """36 calls without credentials from 6 addresses, each sending its body a byte at a time: a visitor's first call
    (the UI's settings, which every page asks for before anything else) is still answered."""
    env, _ = served
    port = int(env["PRIVRELEASE_GATE_PORT"])
    for name, edit, expected in (("proxy-pools", lambda text: text, 200), ("proxy-all", _global_anonymous_limit, 429)):
        with reconfigured(env, tmp_path, name, port, edit) as url:
            held = _held(url, [f"127.0.14.{i}" for i in range(1, 7)], 6)
            try:
                time.sleep(1)  # every held call's head is read
                visitor = httpx.Client(base_url=url, timeout=30, transport=httpx.HTTPTransport(local_address="127.0.14.100"))
                assert visitor.get("/ui-settings").status_code == expected, name
            finally:
                for s in held:
                    s.close()


def test_the_uis_pages_are_the_proxys_and_anyones_settings_are_read_seldom(served):
    env, _ = served
    url = env["PRIVRELEASE_GATE_URL"]
    index = (privrelease.gate.proxy.ui_folder() / "index.html").read_text()
    for page in ("/", "/flow-runs", "/flow-runs/flow-run/x", "/login"):
        answer = httpx.get(url + page, timeout=30)  # no `Accept: text/html`: Prefect's server answered 404
        assert answer.status_code == 200 and answer.headers["content-type"] == "text/html", page
        assert answer.text == index.replace("</head>", '<link rel="stylesheet" href="/privrelease-ui.css"></head>', 1)
    assert httpx.get(url + "/api/health", timeout=30).json() is True


class _Counted:
    """Prefect's records, counting its reads."""

    def __init__(self, answer: object):
        self.answer, self.reads = answer, 0

    async def read(self, path: str) -> object:
        self.reads += 1
        await anyio.sleep(0.01)
        return self.answer


def test_anyones_health_and_settings_are_read_from_prefect_once_every_few_seconds(monkeypatch):
    prefect = _Counted({"api_url": "/api"})
    call = Call(None, {}, prefect)

    async def asked(n: int) -> list:
        return [await answers.ui_settings(call) for _ in range(n)]

    assert anyio.run(asked, 50)[0]["default_ui"] == "v1" and prefect.reads == 1
    monkeypatch.setattr(answers, "RECENT_SECONDS", -1.0)  # the weakened variant: nothing kept
    anyio.run(asked, 50)
    assert prefect.reads == 51
    assert anyio.run(answers.health, Call(None, {}, _Counted(True))) is True
    try:
        anyio.run(answers.health, Call(None, {}, _Counted(None)))
        raise AssertionError("an unhealthy server is reported healthy")
    except Refused as refusal:
        assert refusal.status == 503 and "server.log" in refusal.message


# -- H3 ----------------------------------------------------------------------------------------------------

LARGE = (
    b"GET /assets/" + b"%E9" * 2300 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nReferer: " + b"\xe9" * 7000
    + b"\r\nUser-Agent: " + b"\xe9" * 7000 + b"\r\n\r\n"
)  # fmt: skip
REQUESTS = 200


def _logged(url: str, log: Path) -> int:
    """Bytes the access log ``log`` grew by for REQUESTS requests of LARGE headers (between two markers)."""
    marks = [f"/assets/mark-{uuid.uuid4().hex}".encode() for _ in range(2)]
    host, port = url.removeprefix("http://").split(":")
    httpx.get(url + marks[0].decode(), timeout=30)
    for _ in range(REQUESTS):
        with socket.create_connection((host, int(port))) as s:
            s.sendall(LARGE)
            assert s.recv(12).startswith(b"HTTP/1.1 ")  # 404 (or 429 past the rate)
    httpx.get(url + marks[1].decode(), timeout=30)
    deadline = time.monotonic() + 60
    while marks[1] not in (text := log.read_bytes()) and time.monotonic() < deadline:
        time.sleep(0.5)  # nginx writes its buffered lines within 5 s
    return text.rindex(b"\n", 0, text.index(marks[1])) - text.index(b"\n", text.index(marks[0]))


def test_a_request_writes_a_short_line_whatever_its_headers(served, tmp_path: Path):
    env, root = served
    per_request = _logged(env["PRIVRELEASE_GATE_URL"], Path(env["PRIVRELEASE_HOME"]) / "proxy" / "access.log") / REQUESTS
    assert 0 < per_request <= 300, per_request
    # the weakened proxy: nginx's `combined` format (what the seventh attack found)
    port = int(env["PRIVRELEASE_GATE_PORT"])
    with reconfigured(
        env, tmp_path, "proxy-combined", port, lambda text: text.replace(" short buffer=", " combined buffer=")
    ) as url:
        assert _logged(url, tmp_path / "proxy-combined" / "access.log") / REQUESTS > 50_000


def test_a_log_over_the_cap_is_rotated_in_place(tmp_path: Path):
    log, limit = tmp_path / "gate.log", 1000
    with log.open("ab") as writer:  # as `make serve` opens each service's output (>>)
        writer.write(b"a" * 1500)
        writer.flush()
        assert not logs.rotate(log, 2000) and log.stat().st_size == 1500
        assert logs.rotate(log, limit)
        assert log.stat().st_size == 0 and (tmp_path / "gate.log.1").read_bytes() == b"a" * limit  # its last 1000 bytes
        writer.write(b"b" * 1200)
        writer.flush()
        assert log.read_bytes() == b"b" * 1200  # the writer goes on at the new end
        assert logs.rotate(log, limit)
        writer.write(b"c" * 1200)
        writer.flush()
        assert logs.rotate(log, limit)
    assert (tmp_path / "gate.log.2").read_bytes() == b"b" * limit and (tmp_path / "gate.log.1").read_bytes() == b"c" * limit
    assert not (tmp_path / "gate.log.3").exists() and log.stat().st_size == 0
    # the weakened variant: a writer without O_APPEND (`>`) goes on at its old offset; the file is as large as before
    with log.open("wb") as writer:
        writer.write(b"d" * 1500)
        writer.flush()
        assert logs.rotate(log, limit)
        writer.write(b"e")
        writer.flush()
        assert log.stat().st_size == 1501


def test_nginxs_access_log_is_rotated_in_place(served):
    env, _ = served
    log = Path(env["PRIVRELEASE_HOME"]) / "proxy" / "access.log"
    httpx.get(env["PRIVRELEASE_GATE_URL"] + "/robots.txt", timeout=30)
    deadline = time.monotonic() + 60
    while log.stat().st_size == 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert logs.rotate(log, 1, keep=0) and log.stat().st_size == 0
    mark = f"/assets/mark-{uuid.uuid4().hex}"
    httpx.get(env["PRIVRELEASE_GATE_URL"] + mark, timeout=30)
    while mark.encode() not in log.read_bytes() and time.monotonic() < deadline + 60:
        time.sleep(0.5)
    assert mark.encode() in log.read_bytes() and log.stat().st_size < 1000  # nginx went on at the new end


def test_the_logs_cap_is_a_size():
    env = {k: v for k, v in os.environ.items() if k != "PRIVRELEASE_LOG_MB"}
    for wrong in ("0", "-3", "lots"):
        r = subprocess.run(
            [sys.executable, "-m", "privrelease.gate.logs", "--check"],
            env=env | {"PRIVRELEASE_LOG_MB": wrong},
            capture_output=True,
            text=True,
        )
        assert r.returncode == 2 and r.stderr.strip() == (
            f"the logs' rotation cannot start: $PRIVRELEASE_LOG_MB is {wrong!r}: set it to a size in MB above 0 (default 64)"
        ), r.stderr
    assert subprocess.run([sys.executable, "-m", "privrelease.gate.logs", "--check"], env=env).returncode == 0
