"""The catalogues through the gate: the published releases, their files and the registered datasets, under
``/privrelease/``, a path the gate answers itself and never passes on to Prefect.

Two kinds of rows (``gate.policy``): the catalogue's page (one HTML shell and its script, no data, like
the UI's own pages: anyone may load them), and its data under ``/privrelease/api/`` for people signed
in (the page's script sends the credential Prefect's sign-in page keeps in the browser). Every answer
is read from the home's ``core.release.catalogue.Catalogue``, in a worker thread: only published
releases, public values only, and a file only by a name its release's manifest lists, sent as an
attachment, streamed from disk.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any

import anyio.to_thread
from starlette.responses import FileResponse, Response

from core.errors import UserError
from core.release.catalogue import REPORT, media_type
from gate.checks import Call, Refused, says

STATIC = files("gate") / "static"
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


async def _read(call: Call, fn, *args, listing: str = INDEX) -> Any:
    """``fn(catalogue, *args)`` in a worker thread; a release, file or dataset it does not hold is a 404
    naming the route that lists them."""
    try:
        return await anyio.to_thread.run_sync(fn, call.prefect.catalogue, *args)
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
    return await _read(call, lambda c: c.index())


@says("answered by the gate: one published release, with its report")
async def release(call: Call) -> Any:
    def one(c, release_id: str) -> dict:
        found = c.get(release_id)
        return found.summary() | {"report_markdown": (found.folder / REPORT).read_text()}

    return await _read(call, one, call.params["id"])


@says("answered by the gate: a file its release's manifest lists, by that name only, as an attachment")
async def release_file(call: Call) -> Response:
    name = call.params["name"]
    path = await _read(call, lambda c, i, n: c.file(i, n), call.params["id"], name)
    return FileResponse(path, media_type=media_type(name), filename=name, headers=FILE_HEADERS)


@says("answered by the gate: every registered dataset's public facts, budget left and what fits next")
async def datasets(call: Call) -> Any:
    return await _read(call, lambda c: c.datasets())


@says("answered by the gate: one registered dataset's public facts, budget left and what fits next")
async def dataset(call: Call) -> Any:
    return await _read(call, lambda c, i: c.dataset(i), call.params["id"], listing=DATASETS)
