"""The catalogues through the gate: the published releases, their files and the registered datasets, under
``/privrelease/``, a path the gate answers itself and never passes on to Prefect.

Two kinds of rows (``privrelease.gate.access``): the catalogue's page (one HTML shell and its script, no data, like
the UI's own pages: anyone may load them), and its data under ``/privrelease/api/`` for people signed
in (the page's script sends the credential Prefect's sign-in page keeps in the browser). Every answer
is read from the home's ``privrelease.core.release.catalogue.Catalogue``, in a worker thread: only published
releases, public values only, and a file only by a name its release's manifest lists, sent as an
attachment, streamed from disk.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from importlib.resources import files
from typing import Any

import anyio.to_thread
from starlette.responses import FileResponse, Response, StreamingResponse

from privrelease.core.errors import DatabaseBusy, UserError
from privrelease.core.ledger.chain import Entry
from privrelease.core.release.catalogue import REPORT, Catalogue, media_type
from privrelease.core.release.home import Home
from privrelease.gate.call import Call, Refused, says

STATIC = files("privrelease.gate") / "static"
PAGE_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; connect-src 'self'; img-src 'self' blob:; "
    "style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
}
FILE_HEADERS = {
    "content-security-policy": "default-src 'none'; sandbox",  # a file is downloaded, never run as a page of this site
    "x-content-type-options": "nosniff",
    "cache-control": "private, no-store",
}
INDEX, DATASETS = "/privrelease/api/index.json", "/privrelease/api/datasets"
FRESH_S = 5.0  # the catalogue the gate answers is at most this old (a release published is listed within it)


class Kept(Catalogue):
    """The catalogue as the gate answers it: what it reads of the home's database (the ledger's published
    releases, the datasets' entries) and the index read at most once every FRESH_S seconds, by one thread at
    a time. The database is one file that one process at a time may open: a caller's stream of catalogue
    reads must not keep it open, or the worker's releases and the steward's commands wait for it and fail
    (the fifth attack: 16 reads in flight failed a release after 120 s). A release or dataset asked for by
    id is looked up in what was kept; an unknown one opens nothing."""

    def __init__(self, home: Home):
        super().__init__(home)
        self._lock = threading.RLock()  # the index and the datasets read the published releases: re-entered
        self._kept: dict[str, tuple[float, Any]] = {}

    def _fresh(self, key: str, make: Callable[[], Any]) -> Any:
        with self._lock:
            at, value = self._kept.get(key, (-FRESH_S, None))
            if time.monotonic() - at >= FRESH_S:
                value = make()
                self._kept[key] = (time.monotonic(), value)
            return value

    def _published(self, dataset: str | None = None) -> dict[str, Entry]:
        every = self._fresh("published", super()._published)
        return {i: e for i, e in every.items() if dataset is None or e.dataset == dataset}

    def index(self) -> dict:
        return self._fresh("index", super().index)

    def datasets(self) -> list[dict]:
        return self._fresh("datasets", super().datasets)

    def dataset(self, dataset_id: str) -> dict:
        found = [d for d in self.datasets() if d["id"] == dataset_id]
        if not found:
            raise UserError(f"dataset {dataset_id!r} is not registered")
        return found[0]


async def read_catalogue(call: Call, fn, *args, listing: str = INDEX) -> Any:
    """``fn(catalogue, *args)`` in a worker thread; a release, file or dataset it does not hold is a 404
    naming the route that lists them."""
    try:
        return await anyio.to_thread.run_sync(fn, call.prefect.catalogue, *args)
    except DatabaseBusy:  # its message names the home's path and a process: not for callers
        raise Refused(503, "privrelease gate: the catalogue's database is busy; try again in a minute") from None
    except UserError as error:
        raise Refused(404, f"privrelease gate: {error} (through the gate: GET {listing})") from None


@says("answered by the gate: the catalogue's page (no data: its script reads the routes below, signed in)")
async def page(call: Call) -> Response:
    return Response((STATIC / "catalogue.html").read_bytes(), media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)


@says("answered by the gate: the catalogue page's script")
async def script(call: Call) -> Response:
    return Response((STATIC / "catalogue.js").read_bytes(), media_type="text/javascript; charset=utf-8", headers=PAGE_HEADERS)


@says("answered by the gate: the index of every published release (title, request, guarantee, cost, files, sha256)")
async def index(call: Call) -> Any:
    return await read_catalogue(call, lambda c: c.index())


@says("answered by the gate: one published release, with its report")
async def release(call: Call) -> Any:
    def one(c, release_id: str) -> dict:
        found = c.get(release_id)
        return found.listing() | {"report_markdown": (found.folder / REPORT).read_text()}

    return await read_catalogue(call, one, call.params["id"])


@says("answered by the gate: a file its release's manifest lists, by that name only, as an attachment")
async def release_file(call: Call) -> Response:
    name = call.params["name"]
    path = await read_catalogue(call, lambda c, i, n: c.file(i, n), call.params["id"], name)
    return FileResponse(path, media_type=media_type(name), filename=name, headers=FILE_HEADERS)


@says("answered by the gate: every file of a published release (those its manifest lists, and the manifest) as one zip")
async def release_archive(call: Call) -> Response:
    release_id = call.params["id"]
    chunks = await read_catalogue(call, lambda c, i: c.archive(i), release_id)  # an unknown release: 404, no byte sent
    return StreamingResponse(
        chunks,  # a generator: Starlette reads it in a worker thread, 64 KiB of a file at a time
        media_type="application/zip",
        headers=FILE_HEADERS | {"content-disposition": f'attachment; filename="{release_id}.zip"'},
    )


@says("answered by the gate: every registered dataset's public facts, budget left and what fits next")
async def datasets(call: Call) -> Any:
    return await read_catalogue(call, lambda c: c.datasets())


@says("answered by the gate: one registered dataset's public facts, budget left and what fits next")
async def dataset(call: Call) -> Any:
    return await read_catalogue(call, lambda c, i: c.dataset(i), call.params["id"], listing=DATASETS)
