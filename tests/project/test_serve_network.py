"""The operator's commands for serving on the network, run as printed on a host of their own: a Linux network
namespace (its default ports 4201, 4202 and 8443 free, its 0.0.0.0 no one else's) with a private view of
/etc/ssl (the test's certificate at /etc/ssl/privrelease/, as the pages name it) and of /srv (empty).

- docs/OPERATING.md's TLS block: `make serve` on 0.0.0.0:8443 with the certificate; HTTPS only, people sign
  in there, SIGTERM stops all of it;
- docs/guides/operator.md's "by hand" block, against a Prefect server started as the text before it says:
  the gate, the proxy over TLS, the demo datasets, the pool, every deployment and a worker; an analyst's
  release through the proxy completes;
- docs/guides/hosts.md's first step: PostgreSQL's database created and `make serve-pg` on it.

Each starts a whole stack (minutes on 2 cores), so this file is in the audit tier: tests/conftest.py collects
it under ``make audit`` (PRIVRELEASE_AUDIT=1) only. Needs root (network and mount namespaces).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shlex
import shutil
import signal
import ssl
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg

from tests.conftest import PASSWORD, REPO
from tests.support.netns import A_ADDR, exec_in, inside, two_hosts
from tests.support.pages import DOCS, sh_block
from tests.support.pg import BIN as BIN_PG
from tests.support.pg import cluster
from tests.system.test_proxy import _certificate
from tests.system.test_serve import _gone, _ready
from tests.system.test_server import BIN, _wait, deployment

TLS_SERVE = sh_block("OPERATING.md", "PRIVRELEASE_HOST=0.0.0.0")
BY_HAND = sh_block("guides/operator.md", "export PREFECT_API_URL")
# the server the by-hand block expects, with the settings the operator guide's sentence before the block names
SETTINGS = re.search(
    r"By hand, against your own .*? started with\s+`([^`]+)`:", (DOCS / "guides" / "operator.md").read_text(), re.S
)
PREFECT_SERVER = f"{SETTINGS[1]} setsid .venv/bin/prefect server start --host 127.0.0.1 --port 4201"


@contextmanager
def own_host(tmp_path: Path):
    """A network namespace, and the command prefix that runs a process there with the test's /etc/ssl and an
    empty /srv; every process in the namespace is killed before it goes."""
    cert, key = _certificate(tmp_path)
    etc_ssl = tmp_path / "etc-ssl"
    shutil.copytree("/etc/ssl", etc_ssl, symlinks=True)
    (etc_ssl / "privrelease").mkdir()
    shutil.copy(cert, etc_ssl / "privrelease" / "fullchain.pem")
    shutil.copy(key, etc_ssl / "privrelease" / "key.pem")
    mounts = f'mount --bind {etc_ssl} /etc/ssl && mount -t tmpfs tmpfs /srv && exec "$@"'
    with two_hosts() as (ns, _):
        try:
            yield [*exec_in(ns), "unshare", "--mount", "--propagation", "private", "bash", "-c", mounts, "mounts"], ns, cert
        finally:
            _end_all_in(ns)


def _end_all_in(ns: str, spare: str | None = None) -> None:
    """Kill every process in namespace ``ns`` but this one (its thread may be in there) and those of the user
    ``spare``: a stack a failed test left running, nginx too (it keeps no trace of the home in its environment),
    before the namespace goes."""
    uid = pwd.getpwnam(spare).pw_uid if spare else None
    for pid in map(int, subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()):
        with contextlib.suppress(OSError):
            if pid != os.getpid() and (uid is None or os.stat(f"/proc/{pid}").st_uid != uid):
                os.kill(pid, signal.SIGKILL)


def _environ(user: Path) -> dict:
    """A fresh operator's shell: a new $HOME, none of this test session's settings."""
    user.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PRIVRELEASE_"))}
    return env | {"HOME": str(user)}


def test_the_tls_serve_block_as_printed(tmp_path: Path):
    user = tmp_path / "user"
    home = user / ".local" / "share" / "privrelease"  # the command line's default home, which make serve uses
    log = tmp_path / "serve.log"
    with own_host(tmp_path) as (prefix, ns, cert):
        proc = subprocess.Popen(
            [*prefix, "bash", "-c", TLS_SERVE],
            cwd=REPO,
            env=_environ(user),
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out = _ready(proc, log, timeout=900)
        assert "UI (people, through the proxy and the gate):  https://0.0.0.0:8443" in out, out[-3000:]
        added = subprocess.run(
            [str(BIN / "privrelease"), "--home", str(home), "user", "add", "alice", "--role", "analyst", "--password-stdin"],
            input=PASSWORD,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert added.returncode == 0, added.stderr
        trust = ssl.create_default_context(cafile=cert)
        with inside(ns):
            signed_in = httpx.post(
                "https://127.0.0.1:8443/api/flow_runs/filter", json={"limit": 1}, auth=("alice", PASSWORD), verify=trust
            )
            assert signed_in.status_code == 200 and "max-age" in signed_in.headers["strict-transport-security"]
            assert httpx.get("http://127.0.0.1:8443/api/health", timeout=30).status_code == 400  # HTTPS only
            # on every address of the host (0.0.0.0): also at its network address (the certificate names 127.0.0.1)
            assert httpx.get(f"https://{A_ADDR}:8443/api/health", verify=False, timeout=30).headers["server"] == "nginx"
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=120) == 0
        assert "privrelease: stopped the worker, the proxy, the gate and Prefect's server" in log.read_text()
        assert _gone(home) == []


def test_the_by_hand_block_as_printed(tmp_path: Path):
    user = tmp_path / "user"
    log = tmp_path / "by-hand.log"
    script = f"""
{PREFECT_SERVER} > {tmp_path / "server.log"} 2>&1 &
server=$!
until curl -fs http://127.0.0.1:4201/api/health > /dev/null; do kill -0 $server; sleep 0.5; done
bash -e -c {shlex.quote(BY_HAND)} > {tmp_path / "block.log"} 2>&1 &
block=$!
until curl -fsk https://127.0.0.1:8443/api/health > /dev/null; do kill -0 $block; sleep 0.5; done
until grep -q "started!" {tmp_path / "block.log"}; do kill -0 $block; sleep 0.5; done
printf '%s\\n' '{PASSWORD}' | .venv/bin/privrelease --home /srv/privrelease user add alice --role analyst --password-stdin
echo READY
wait
"""
    with own_host(tmp_path) as (prefix, ns, cert):
        proc = subprocess.Popen(
            [*prefix, "bash", "-e", "-c", script],
            cwd=REPO,
            env=_environ(user),
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 900
        while "READY" not in log.read_text():
            block = (tmp_path / "block.log").read_text() if (tmp_path / "block.log").exists() else ""
            server = (tmp_path / "server.log").read_text() if (tmp_path / "server.log").exists() else ""
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:] + block[-3000:] + server[-2000:]
            time.sleep(1)
        trust = ssl.create_default_context(cafile=cert)
        with (
            inside(ns),
            httpx.Client(base_url="https://127.0.0.1:8443/api", auth=("alice", PASSWORD), verify=trust, timeout=30) as alice,
        ):
            ra = deployment(alice, "ra")
            run = alice.post(f"/deployments/{ra['id']}/create_flow_run", json={"parameters": {}})
            assert run.status_code == 201, run.text
            assert _wait(alice, run.json()["id"], tmp_path / "block.log", 600) == "COMPLETED"


def test_the_serve_pg_block_as_printed(tmp_path: Path):
    """docs/guides/hosts.md's step 1 on host A (a network namespace, PostgreSQL at A:5432, user postgres): the
    database created, `make serve-pg` on it; the demo's registrations and Prefect's tables land there, and an
    analyst's release through the proxy is charged on that ledger."""
    user = tmp_path / "user"
    home = user / ".local" / "share" / "privrelease"
    log = tmp_path / "serve-pg.log"
    block = sh_block("guides/hosts.md", "createdb privrelease")
    env = _environ(user) | {"PGHOST": A_ADDR, "PGPORT": "5432", "PGUSER": "postgres"}  # who runs createdb on A
    env["PATH"] = f"{BIN_PG}:{env['PATH']}"
    with two_hosts() as (a, _), inside(a), cluster(A_ADDR, f"{A_ADDR}/24", port=5432) as server:
        url = server.rsplit("/", 1)[0] + "/privrelease"
        script = block.replace("postgresql://USER@A:5432/privrelease", url)  # the page's placeholders
        proc = subprocess.Popen(
            ["bash", "-e", "-c", script],
            cwd=REPO,
            env=env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            out = _ready(proc, log, timeout=900)
            assert f"# ledger:         PRIVRELEASE_LEDGER_URL={url}" in out
            with psycopg.connect(url) as con:
                registered = {i for (i,) in con.execute("SELECT id FROM privrelease.datasets")}
                prefect = con.execute("SELECT to_regclass('public.flow_run') IS NOT NULL").fetchone()  # Prefect's tables
            assert {"census-demo", "posts-demo", "logins-demo"} <= registered and prefect == (True,)
            added = subprocess.run(
                [str(BIN / "privrelease"), "user", "add", "alice", "--role", "analyst", "--password-stdin"],
                input=PASSWORD,
                env={**env, "PRIVRELEASE_HOME": str(home), "PRIVRELEASE_LEDGER_URL": url},
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert added.returncode == 0, added.stderr
            with httpx.Client(base_url="http://127.0.0.1:4200/api", auth=("alice", PASSWORD), timeout=30) as alice:
                ra = deployment(alice, "ra")
                run = alice.post(f"/deployments/{ra['id']}/create_flow_run", json={"parameters": {}})
                assert run.status_code == 201, run.text
                assert _wait(alice, run.json()["id"], home / "worker.log", 600) == "COMPLETED"
            with psycopg.connect(url) as con:
                statuses = [s for (s,) in con.execute("SELECT status FROM privrelease.ledger ORDER BY seq")]
            assert statuses[-2:] == ["reserved", "published"], statuses
            os.killpg(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=120) == 0
            assert _gone(home) == []
        finally:
            _end_all_in(a, spare="postgres")  # the cluster stops itself as its block ends
