"""Where heavy, independent pieces of a mechanism run: in process, or over a Dask cluster.

``partitioned(open_fn, specs)`` opens state that stays where it was opened between steps: DPNE's
user partitions each read their own rows from the stored snapshot on a worker, keep their token
positions there across levels, and send back only per-level aggregates; rows never travel from the
flow. The operator chooses where that runs (``configured()``, from the process's environment): in
this process (the default), a local Dask cluster of worker processes, or an existing scheduler's
address. Results come back in input order, so a run under a test seed is identical wherever it
ran. Nothing is persisted on the workers. Only DPNE gains from a cluster (bench/RESULTS.md):
every other mechanism runs in process whatever the setting, and the runner says so when it starts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from uuid import uuid4

from privrelease.core import settings

_client: ContextVar[Any] = ContextVar("privrelease_dask_client", default=None)


class Partitions:
    """Opened state, one per spec, each held by one process (a Dask worker, or this one) until closed."""

    def __init__(self, client: Any, tokens: list[str], where: list[str | None]):
        self._client, self._tokens, self._where = client, tokens, where

    def map(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        """``[fn(state, *args) for state in partitions]``, each where its state lives, concurrently on Dask."""
        if self._client is None:
            return [_step(t, fn, args) for t in self._tokens]
        futures = [
            self._client.submit(_step, t, fn, args, workers=[w], allow_other_workers=False, pure=False)
            for t, w in zip(self._tokens, self._where)
        ]
        return self._client.gather(futures)


_held: dict[str, Any] = {}  # the partitions this process holds, by token


def _open(token: str, open_fn: Callable[[Any], Any], spec: Any) -> None:
    _held[token] = open_fn(spec)


def _step(token: str, fn: Callable[..., Any], args: tuple) -> Any:
    if token not in _held:
        raise RuntimeError("a Dask worker lost its partition (it restarted); run the release again")
    return fn(_held[token], *args)


def _close(token: str) -> None:
    state = _held.pop(token, None)
    if state is not None:
        state.close()


@contextmanager
def partitioned(open_fn: Callable[[Any], Any], specs: list[Any], spread: bool = True) -> Iterator[Partitions]:
    """``open_fn(spec)`` for each spec, spread round-robin over the workers (in this process without
    a cluster, or when not ``spread``); the states' ``close()`` runs when the block ends, also on errors."""
    client = _client.get() if spread else None
    tokens = [uuid4().hex for _ in specs]
    addresses = sorted(client.scheduler_info()["workers"]) if client is not None else [None]
    where = [addresses[i % len(addresses)] for i in range(len(specs))]
    try:
        if client is None:
            for token, spec in zip(tokens, specs):
                _open(token, open_fn, spec)
        else:
            client.gather(
                [
                    client.submit(_open, t, open_fn, s, workers=[w], allow_other_workers=False, pure=False)
                    for t, s, w in zip(tokens, specs, where)
                ]
            )
        yield Partitions(client, tokens, where)
    finally:
        if client is None:
            for token in tokens:
                _close(token)
        else:
            client.gather([client.submit(_close, t, workers=[w], pure=False) for t, w in zip(tokens, where)])


def forked(fn: Callable[[Any], bytes], jobs: list[Any]) -> list[tuple[bytes, int]]:
    """``fn(job)`` for each job at once, on this host's cores: the first in this process, each other in a child
    forked now, which shares this process's memory as it is and ends with its job (without this process's exit
    handlers; whatever happens in it, it never returns into the caller's code). Each job's bytes come back with its
    exit status (0 for the first; a child that failed gives what it wrote and a non-zero status). Ctrl-C is held
    while a child is forked, so none is left unknown; if this process fails or is interrupted, the children still
    running are killed and reaped before that goes on. For a process that runs no other thread (a fork copies only
    the caller's)."""
    children: list[tuple[int, int]] = []
    try:
        for job in jobs[1:]:
            read, write = os.pipe()
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            pid = os.fork()
            if pid == 0:  # the child: its job, its bytes, and the end, whatever happens
                code = 1
                try:
                    for fd in [read, *(theirs for _, theirs in children)]:  # its siblings' answers are not its to read
                        os.close(fd)
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
                    with os.fdopen(write, "wb") as out:
                        out.write(fn(job))
                    code = 0
                finally:
                    os._exit(code)
            children.append((pid, read))
            os.close(write)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        answers = [(fn(jobs[0]), 0)] if jobs else []
        for n, (pid, read) in enumerate(children):
            with os.fdopen(read, "rb") as pipe:
                children[n] = (pid, -1)  # its pipe is this block's to close
                data = pipe.read()
            answers.append((data, os.waitpid(pid, 0)[1]))
            children[n] = (-1, -1)  # collected
    except BaseException:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        for pid, read in children:
            if read >= 0:
                os.close(read)
            if pid > 0:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
        raise
    return answers


def worker_threads() -> int | None:
    """The threads this Dask worker was started with (``--nthreads``); None outside a worker."""
    if "distributed" not in sys.modules:  # not a worker; and importing Dask costs a second
        return None
    from distributed import get_worker

    try:
        return get_worker().state.nthreads
    except ValueError:
        return None


def workers() -> int:
    """How many workers partitions can spread over (1 in process)."""
    client = _client.get()
    return 1 if client is None else max(1, len(client.scheduler_info().get("workers", {})))


def unreadable(path: str) -> list[str]:
    """The Dask workers (addresses) that partitions would spread over and that cannot read the file
    ``path``: asked before a release's charge, so a worker host without the snapshot store is named
    instead of failing the release after it was charged. None in process or with one worker."""
    client = _client.get()
    if client is None or workers() < 2:
        return []
    return sorted(w for w, ok in client.run(os.access, path, os.R_OK).items() if not ok)


def configured() -> Iterator[None]:
    """``using`` as the operator configured this process (worker) in its environment.

    Where raw pieces go is the operator's decision, never a request's: a cluster named by a flow-run
    parameter would receive the rows. ``PRIVRELEASE_RUNNER=dask`` with ``PRIVRELEASE_DASK_ADDRESS``
    (an existing scheduler) or ``PRIVRELEASE_DASK_WORKERS`` (a local cluster, default 2).
    """
    kind = settings.get(settings.RUNNER, "local")
    if kind not in ("local", "dask"):
        raise ValueError(f"{settings.RUNNER} must be 'local' or 'dask', not {kind!r}")
    return using(kind, settings.get(settings.DASK_ADDRESS), int(settings.number(settings.DASK_WORKERS, 2)))


WORKER_CONFIG = {  # what deploy/dask.yaml gives workers started with ``dask worker`` on other hosts
    "distributed.worker.profile.enabled": False,
    "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
}


def local_cluster(n_workers: int) -> Any:
    """A Dask cluster of ``n_workers`` single-threaded worker processes on this host, lean for
    partitions that hold their state between steps (``WORKER_CONFIG``):

    - no statistical profiler (it samples every thread's stack 100 times a second); idle, each
      worker then takes about 1.5% of a core instead of 2.3–2.8%;
    - glibc's own memory allocation: Dask starts its workers with ``MALLOC_TRIM_THRESHOLD_=65536``,
      which hands freed memory back to the system at once and, like any such setting, fixes the size
      above which glibc maps each allocation afresh, so every large array of a level pays its page
      faults again: both partitions of 10× MSNBC, counted one after the other, took 30.7 s instead of 25.7 s (bench/RESULTS.md);
    - no Dask memory limit (a worker that Dask paused or restarted would lose its partitions).
    """
    import dask
    from distributed import LocalCluster

    with dask.config.set(WORKER_CONFIG):  # the workers take the config they start with
        return LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None, memory_limit=0)


def _environ(name: str) -> str | None:
    return settings.get(name)  # run on a worker: its own environment (os.environ.get itself would carry this one's)


@contextmanager
def using(kind: str = "local", address: str | None = None, n_workers: int = 2) -> Iterator[None]:
    """Hold ``partitioned`` state in process (``local``) or on Dask (``dask``: ``address``, or a local
    cluster of ``n_workers`` single-threaded worker processes started for the block)."""
    if kind == "local":
        yield
        return
    logging.getLogger("privrelease").info(
        "Dask runner: DPNE counts its user partitions on the cluster's workers; "
        "every other mechanism runs in this process (it would not gain)."
    )
    from distributed import Client

    cluster = None if address else local_cluster(n_workers)
    client = Client(address or cluster)
    token = _client.set(client)
    trimming = sorted(v for v in client.run(_environ, "MALLOC_TRIM_THRESHOLD_").values() if v is not None)
    if trimming:  # a worker started without deploy/dask.yaml, or that inherited the variable from its shell
        logging.getLogger("privrelease").warning(
            f"{len(trimming)} of {workers()} Dask workers started with MALLOC_TRIM_THRESHOLD_={trimming[0]}, which makes "
            "DPNE's counting about a fifth slower there; start them with DASK_CONFIG set to privrelease's "
            "deploy/dask.yaml and without that variable in their environment (docs/guides/hosts.md, step 6)."
        )
    try:
        yield
    finally:
        _client.reset(token)
        client.close()
        if cluster is not None:
            cluster.close()
