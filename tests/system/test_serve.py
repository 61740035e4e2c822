"""`make serve` as the operator guide prints it (its `sh` block, run as printed): Prefect's server behind the
operator's credential, the gate in front and the proxy (nginx) in front of the gate, no account anyone could
guess, the guide's accounts block run against it (the people it adds sign in through the proxy, the one it
removes is refused), and a clean stop on Ctrl-C or SIGTERM (every service it started ends, one line, exit 0)
after which a second start works at once."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

from tests.conftest import REPO
from tests.support.pages import DOCS, blocks, sh_block
from tests.system.test_server import BIN, _free_port, person

READY = "Ctrl-C stops it all."
SERVE = sh_block("guides/operator.md", "make serve")
DEPLOYMENTS = (REPO / "prefect.yaml").read_text().count("\n  - name: ")


def _start(home: Path, ports: tuple[int, int, int], log: Path) -> subprocess.Popen:
    """The operator guide's `make serve` block, as printed, on free ports (the defaults may be taken here)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PRIVRELEASE_"))}
    env |= {
        "PRIVRELEASE_HOME": str(home),
        "PRIVRELEASE_PORT": str(ports[0]),
        "PRIVRELEASE_PREFECT_PORT": str(ports[1]),
        "PRIVRELEASE_GATE_PORT": str(ports[2]),
    }
    return subprocess.Popen(
        ["bash", "-c", SERVE], cwd=REPO, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )


def _accounts(home: Path, people: str, work: Path) -> None:
    """The operator guide's accounts block, as printed, against the running stack (its home is ~/privrelease):
    the two people it adds sign in through the proxy with their passwords, and the one it removes is then
    refused. The block runs in two parts, its `export` line in each: up to `user remove`, then that line."""
    block = next(b for b in blocks((DOCS / "guides" / "operator.md").read_text(), "bash") if "privrelease user add" in b)
    head, tail = block.split("privrelease user remove")
    export = head.splitlines()[0]
    assert export == "export PRIVRELEASE_HOME=~/privrelease" and home == work.parent / "privrelease", export
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PRIVRELEASE_"))}
    env |= {"HOME": str(home.parent), "PATH": f"{BIN}:{env['PATH']}"}

    def sh(script: str) -> str:
        r = subprocess.run(["bash", "-e", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout

    work.mkdir()
    out = sh(head)
    passwords = {
        "alice": (work / "alice.txt").read_text().strip(),
        "sam": out.split("password (shown once, keep it): ")[1].split()[0],
    }
    signed_in = {name: person(people, name, password) for name, password in passwords.items()}
    for name, client in signed_in.items():
        assert client.post("/flow_runs/filter", json={}).status_code == 200, name
    sh(f"{export}\nprivrelease user remove{tail}")
    deadline = time.monotonic() + 60  # the page says within 2 s; a loaded machine gets longer here
    while signed_in["alice"].post("/flow_runs/filter", json={}).status_code != 401:
        assert time.monotonic() < deadline, "alice, removed, still signs in"
        time.sleep(0.5)
    assert signed_in["sam"].post("/flow_runs/filter", json={}).status_code == 200


def _ready(proc: subprocess.Popen, log: Path, timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    while READY not in log.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.5)
    return log.read_text()


def _ours(home: Path) -> list[int]:
    """Processes whose environment names this test's home: what `make serve` started."""
    mine = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if f"PRIVRELEASE_HOME={home}\0".encode() in environ:
            mine.append(int(pid))
    return mine


def _stop(proc: subprocess.Popen, sig: int, log: Path, home: Path) -> tuple[list[str], str]:
    """Ctrl-C at a terminal (or a service manager's SIGTERM) signals the foreground process group: make and
    the script, not the services, which the script started in sessions of their own and stops itself.
    Returns what is left running, and the output."""
    os.killpg(proc.pid, sig)
    proc.wait(timeout=120)  # seconds when idle; generous for a loaded machine
    return _gone(home), log.read_text()


def _gone(home: Path) -> list[str]:
    """What is left of the processes `make serve` started, once the ones being killed have been reaped."""
    deadline = time.monotonic() + 30
    while (left := _ours(home)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [
        Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode() for pid in left if Path(f"/proc/{pid}").exists()
    ]


def _rotated(home: Path, started: list[int]) -> None:
    """Every log of the services is rotated by `python -m privrelease.gate.logs`, and written appending (so it can be cut in place)."""
    commands = {pid: Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") for pid in started if Path(f"/proc/{pid}").exists()}
    rotation = [c for c in commands.values() if b"privrelease.gate.logs" in c]
    assert len(rotation) == 1, commands
    named = {Path(name.decode()) for name in rotation[0][3:] if name}
    assert named == {home / f"{n}.log" for n in ("server", "gate", "proxy", "worker", "logs")} | {home / "proxy" / "access.log"}
    for pid in commands:
        out = Path(f"/proc/{pid}/fd/1")
        if out.exists() and out.resolve() in named:
            flags = int(Path(f"/proc/{pid}/fdinfo/1").read_text().split("flags:")[1].split()[0], 8)
            assert flags & os.O_APPEND, (commands[pid], out.resolve())


def _free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: a closed connection's TIME_WAIT is no holder
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_make_serve_starts_behind_the_gate_and_stops_cleanly(tmp_path: Path):
    home = tmp_path / "privrelease"  # ~/privrelease of the operator guide's accounts block
    ports = (_free_port(), _free_port(), _free_port())
    log = tmp_path / "serve.log"
    proc = _start(home, ports, log)
    try:
        out = _ready(proc, log)
        people, prefect = f"http://127.0.0.1:{ports[0]}", f"http://127.0.0.1:{ports[1]}"
        # nothing anyone could guess: no account, and how to add the first ones
        assert "no accounts yet; add the first ones" in out and "user add alice --role analyst" in out
        assert "password (shown once" not in out
        secret = home / "prefect-operator.secret"
        assert oct(secret.stat().st_mode & 0o777) == "0o600" and secret.read_text().strip() not in out
        assert httpx.post(f"{people}/api/flow_runs/filter", json={}, timeout=10).status_code == 401
        assert httpx.get(f"{people}/api/health", timeout=10).headers["server"] == "nginx"  # the proxy answers there
        assert httpx.post(f"http://127.0.0.1:{ports[2]}/api/flow_runs/filter", json={}, timeout=10).status_code == 401  # the gate
        assert (home / "proxy" / "nginx.conf").is_file()
        assert httpx.post(f"{prefect}/api/flow_runs/filter", json={}, timeout=10).status_code == 401
        credential = tuple(secret.read_text().strip().split(":", 1))
        assert httpx.post(f"{prefect}/api/flow_runs/filter", json={}, auth=credential, timeout=10).status_code == 200
        # every deployment of prefect.yaml is listed, and the demo datasets the default requests name are registered
        deployed = out.split("\ndeployments:\n", 1)[1].split("\n\n", 1)[0].splitlines()
        assert "  release-ra/ra" in deployed and len(deployed) == DEPLOYMENTS, out[-3000:]
        assert "demo --prepare-only" in out
        _accounts(home, people, tmp_path / "work")
        started = _ours(home)
        assert len(started) >= 4  # the script, Prefect's server, the gate, the worker (nginx rewrites its environment)
        _rotated(home, started)
        left, out = _stop(proc, signal.SIGINT, log, home)
        script = [line for line in out.splitlines() if not line.startswith("make")]  # make reports the Ctrl-C it saw
        assert script[-1] == "privrelease: stopped the worker, the proxy, the gate and Prefect's server", out[-2000:]
        assert "Traceback" not in out
        assert left == [] and all(_free(port) for port in ports)
        # a second start works at once (no port, lock or process left behind); SIGTERM stops it too
        proc = _start(home, ports, log)
        out = _ready(proc, log)
        assert "demo --prepare-only" not in out and "the demo datasets" in out  # registered once, not again
        assert "  release-ra/ra\n" in out.split("\ndeployments:\n", 1)[1]
        left, out = _stop(proc, signal.SIGTERM, log, home)
        assert "privrelease: stopped the worker, the proxy, the gate and Prefect's server" in out and "Traceback" not in out
        assert left == [] and all(_free(port) for port in ports)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in _ours(home):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_make_serve_names_a_busy_port_at_once_in_the_command_lines_home(tmp_path: Path):
    """A port already taken is named (which one, whose, what to set) before anything starts; the home is the
    command line's default (the per-user data folder), not a folder of the checkout."""
    ports = (_free_port(), _free_port(), _free_port())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PRIVRELEASE_"))}
    env |= {"HOME": str(tmp_path / "user"), "PRIVRELEASE_PORT": str(ports[0])}
    env |= {"PRIVRELEASE_PREFECT_PORT": str(ports[1]), "PRIVRELEASE_GATE_PORT": str(ports[2])}
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", ports[2]))
        holder.listen()
        r = subprocess.run(["bash", "scripts/serve.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and r.stdout.strip().splitlines() == [
        f"privrelease: port {ports[2]} on 127.0.0.1 (the gate) is in use by another program; stop it "
        f"(ss -ltnp 'sport = :{ports[2]}' names it) or set PRIVRELEASE_GATE_PORT to a free port. Nothing was started."
    ], r.stdout + r.stderr
    home = tmp_path / "user" / ".local" / "share" / "privrelease"  # as `privrelease info` says (tests/cli/test_cli.py)
    assert home.is_dir() and not (home / "server.log").exists()  # nothing started
