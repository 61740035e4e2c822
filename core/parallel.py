"""Where heavy, independent pieces of a mechanism fan out: in process, or over a Dask cluster.

Mechanisms call ``fan_out(fn, items)`` for work that splits into pure pieces (the outlier counts
of each subspace, DPNE histograms of each user shard). The release flow chooses where that runs
with ``using(...)``: in this process (the default), a local Dask cluster of worker processes, or
an existing scheduler's address. Results come back in input
order, so a run under a test seed is identical wherever it ran. Pieces carry raw data only in
memory between processes; nothing is persisted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

_client: ContextVar[Any] = ContextVar("privrelease_dask_client", default=None)


def fan_out(fn: Callable[..., Any], items: Iterable[Any]) -> list[Any]:
    """``[fn(x) for x in items]``, on the current Dask cluster if there is one."""
    client = _client.get()
    items = list(items)
    if client is None or len(items) < 2:
        return [fn(x) for x in items]
    futures = client.map(fn, client.scatter(items), pure=False)  # data travels once, outside the task graph
    return client.gather(futures)


def workers() -> int:
    """How many workers pieces can spread over (1 in process)."""
    client = _client.get()
    return 1 if client is None else max(1, len(client.scheduler_info().get("workers", {})))


@contextmanager
def using(kind: str = "local", address: str | None = None, n_workers: int = 2) -> Iterator[None]:
    """Run ``fan_out`` pieces in process (``local``) or on Dask (``dask``: ``address``, or a local
    cluster of ``n_workers`` single-threaded worker processes started for the block)."""
    if kind == "local":
        yield
        return
    from distributed import Client, LocalCluster

    cluster = None if address else LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                                                 dashboard_address=None)  # fmt: skip
    client = Client(address or cluster)
    token = _client.set(client)
    try:
        yield
    finally:
        _client.reset(token)
        client.close()
        if cluster is not None:
            cluster.close()
