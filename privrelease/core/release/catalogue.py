"""The catalogues an analyst reads: the published releases, with their files, and the registered datasets.

A release is in the catalogue when it is *published*: its folder is in place under
``releases/<dataset>/<release-id>/`` (publishing renames a complete folder there, never a partial
one), its manifest cites the ledger entry of its own charge, and the ledger's last word on its
release id is ``published``. A release still running (its charge pending, or its folder in place
before it is settled), failed, or a folder no charge of the ledger vouches for, is not listed.

Everything here is a public value: a release's manifest, report, charts and data are what was
published (DP outputs, SDC tables and the public facts they cite); a dataset's entry is its
registration's public facts and its account's public figures (cap, what is left, what fits next).
Who asked for a release is not shown, except that a release id its analyst chose through the gate
begins with their account name (``<account>.<id>``: no one else can take it). A file is served only by a name its manifest lists (or the
manifest itself), never by a path a caller writes.
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from privrelease import __version__
from privrelease.core.datasets.snapshots import sha256
from privrelease.core.errors import UserError
from privrelease.core.ledger.chain import Entry
from privrelease.core.ledger.ledger import PUBLISHED
from privrelease.core.params import ID_PATTERN
from privrelease.core.release.home import Home

MANIFEST, REPORT = "manifest.json", "report.md"
ID = re.compile(ID_PATTERN)
INDEX_FORMAT = "privrelease-catalogue/1"
MEDIA = {
    ".csv": "text/csv; charset=utf-8",
    ".parquet": "application/vnd.apache.parquet",
    ".png": "image/png",
    ".md": "text/markdown; charset=utf-8",
    ".json": "application/json",
}
LIST_RELEASES = "privrelease release list"
WEB = "/privrelease"  # where the gate serves the catalogues' page (privrelease/gate/catalogue.py)
FORM_FIELD = "x-privrelease"  # a release form's field the registry fills in (privrelease/flows/forms.py marks them, privrelease/gate/forms.py fills them)


def page(release_id: str) -> str:
    """The gate's page of one published release (its files to download), as a path on the gate's site."""
    return f"{WEB}/releases/{release_id}"


class NotInCatalogue(UserError):
    """A release, a file of a release, or a dataset the catalogue does not hold."""


@dataclass(frozen=True)
class Published:
    """One published release: its folder and its manifest (as publishing wrote it)."""

    folder: Path
    manifest: dict

    @property
    def id(self) -> str:
        return self.manifest["release_id"]

    @property
    def dataset(self) -> str:
        return self.manifest["dataset"]

    def files(self) -> dict[str, str]:
        """Every file of the release by name, with its sha256: those the manifest lists, and the manifest."""
        return {**self.manifest["files"], MANIFEST: sha256(self.folder / MANIFEST)}

    def listing(self) -> dict:
        """The release as a data portal indexes it: title, dataset, request, guarantee, cost, date, files."""
        m, p = self.manifest, self.manifest["privacy"]
        steps = [s["method"] for s in p.get("steps") or [] if isinstance(s, dict) and "method" in s]
        return {
            "id": self.id,
            "title": f"{m['mechanism']['name']} release of {self.dataset}",
            "dataset": self.dataset,
            "dataset_version": m["input"]["version"],
            "unit": m["input"]["unit"],
            "created": m["created"],
            "test_mode": m["test_mode"],
            "request": {"mechanism": m["mechanism"]["name"], "params": m["mechanism"]["params"]},
            "mechanism": m["mechanism"]["name"],
            "guarantee": p["guarantee"],
            "privacy": {
                "kind": p["kind"],
                "model": p["model"],
                "adjacency": p["adjacency"],
                "epsilon": p["epsilon"],
                "delta": p["delta"],
                "sdc_methods": (steps or [m["mechanism"]["name"]]) if p["kind"] == "sdc" else None,
            },
            "ledger": m["ledger"],
            "report": REPORT,
            "charts": [n for n in m["files"] if n.endswith(".png")],
            "files": [
                {"name": name, "sha256": digest, "bytes": (self.folder / name).stat().st_size, "media_type": media_type(name)}
                for name, digest in self.files().items()
            ],
        }


def media_type(name: str) -> str:
    return MEDIA.get(PurePosixPath(name).suffix, "application/octet-stream")


class Catalogue:
    """The published releases and the registered datasets of one home, read afresh on every call."""

    def __init__(self, home: Home):
        self.home = home

    # -- releases ------------------------------------------------------------------------------------

    def releases(self, dataset: str | None = None) -> list[Published]:
        """Every published release (of ``dataset``), newest first."""
        found = [r for r in (self._read(*p) for p in self._published(dataset).items()) if r is not None]
        return sorted(found, key=lambda r: (r.manifest["created"], r.id), reverse=True)

    def get(self, release_id: str) -> Published:
        """The published release ``release_id``; any other id is a user error saying how to list them."""
        settled = self._published().get(release_id)
        found = None if settled is None else self._read(release_id, settled)
        if found is None:
            raise NotInCatalogue(
                f"no published release {release_id!r} (a release still running or one that failed is not "
                f"published); list the published ones with {LIST_RELEASES}."
            )
        return found

    def _published(self, dataset: str | None = None) -> dict[str, Entry]:
        """The charge of every release id the ledger settled last as published (its ids name folders: checked
        when it was charged, and again here)."""
        ledger = self.home.ledger
        if not ledger.store.exists():
            return {}
        last: dict[str, str] = {}
        charges: dict[str, Entry] = {}
        for e in ledger.entries(dataset):
            if e.release_id is not None and ID.fullmatch(e.release_id) and ID.fullmatch(e.dataset):
                last[e.release_id] = e.status
                charges.setdefault(e.release_id, e)  # its first entry: the charge
        return {i: charges[i] for i, status in last.items() if status == PUBLISHED}

    def _read(self, release_id: str, charge: Entry) -> Published | None:
        """The release's folder and manifest, if the manifest is whole, names its own folder and cites its charge."""
        folder = self.home.releases / charge.dataset / release_id
        try:
            manifest = json.loads((folder / MANIFEST).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(manifest, dict) or (manifest.get("dataset"), manifest.get("release_id"), manifest.get("ledger")) != (
            charge.dataset,
            release_id,
            {"seq": charge.seq, "hash": charge.hash},
        ):
            return None
        return Published(folder, manifest)

    def file(self, release_id: str, name: str) -> Path:
        """The file ``name`` of a published release: only a name its manifest lists (or the manifest),
        and only a file directly in its folder."""
        release = self.get(release_id)
        if not self.listed(release, name):
            raise NotInCatalogue(f"release {release_id!r} has no file {name!r}; its files are {', '.join(release.files())}.")
        return release.folder / name

    def archive(self, release_id: str) -> Iterator[bytes]:
        """Every file of a published release (``file``'s names: its manifest's files and the manifest) as one zip
        archive in a folder named after the release, streamed: read and compressed 64 KiB at a time, so what it
        holds in memory is bounded whatever the release's size. The release is looked up first (an unknown one is
        refused before the first byte)."""
        release = self.get(release_id)
        paths = [(name, self.file(release_id, name)) for name in sorted(release.files())]
        return _zipped(release_id, paths)

    @staticmethod
    def listed(release: Published, name: str) -> bool:
        """Whether ``name`` is a file the release publishes: a plain name its manifest lists, in its folder."""
        path = release.folder / name
        return (
            name in release.files()
            and PurePosixPath(name).name == name
            and path.resolve().parent == release.folder.resolve()
            and path.is_file()
        )

    def index(self) -> dict:
        """The machine-readable index of every published release (what a data portal harvests)."""
        return {
            "format": INDEX_FORMAT,
            "generated": datetime.now(UTC).isoformat(timespec="seconds"),
            "software": {"privrelease": __version__},
            "releases": [r.listing() for r in self.releases()],
        }

    # -- datasets ------------------------------------------------------------------------------------

    def datasets(self) -> list[dict]:
        """Every registered dataset's public facts, with its budget and what fits next."""
        return self._entries(self.home.registry.list())

    def dataset(self, dataset_id: str) -> dict:
        """One registered dataset's entry; an unknown id is the registry's error, which says how to list them."""
        return self._entries([self.home.registry.get(dataset_id)])[0]

    def _entries(self, datasets: list) -> list[dict]:
        from privrelease.core.ledger import account
        from privrelease.core.release import (
            headroom,  # the mechanisms, to plan a release like the last: only where a budget is read
        )

        ledger = self.home.ledger
        entries = ledger.entries() if datasets and ledger.store.exists() else []
        totals = {t.dataset: t for t in account.totals(entries, ledger.home)} if entries else {}
        published = [r.dataset for r in self.releases()] if datasets else []
        rooms = {d.id: headroom.after_last(entries, d.id) for d in datasets if d.purpose == "dp" and d.id in totals}
        return [entry(d.public(), totals.get(d.id), published.count(d.id), rooms.get(d.id)) for d in datasets]


def offered(public: dict) -> list[str]:
    """The columns a release of a dataset may name, from its public facts: those an sdc dataset's disclosure policy
    publishes; a dp dataset's every column but its privacy unit's (which no release publishes)."""
    from privrelease.core.sdc.policy import Policy

    names = list(public["schema"])
    if public["purpose"] == "sdc":
        return Policy.model_validate(public["policy"]).releasable(names) if public.get("policy") else []
    unit = public["unit"].removeprefix("user:") if public["unit"].startswith("user:") else None
    return [c for c in names if c != unit]


def entry(public: dict, totals, published: int, room=None) -> dict:
    """A dataset's catalogue entry: its public facts, its budget (dp) and how many releases it published."""
    return {**public, "budget": budget(public["purpose"], totals, room), "published_releases": published}


def budget(purpose: str, totals, room=None) -> dict | None:
    """A dp dataset's cap, what it spent under the accountant that admits, and what the next release like its last can
    take (``privrelease.core.release.headroom``: the figure an analyst acts on); None for sdc, which spends no epsilon."""
    if purpose != "dp":
        return None
    figures = totals.as_dict() if totals is not None else {}
    cap, nxt = figures.get("cap"), figures.get("next")
    if cap is None:
        says = "no cap set: no DP release fits until the data steward sets one"
    elif room is not None:
        says = room.words("like the last (" + room.like + ")")
    else:
        says = (
            f"cap epsilon={cap['epsilon']:g}, delta={cap['delta']:g}; nothing spent yet (a preview says what a release can take)"
        )
    return {
        "cap": cap,
        "spent": figures.get("spent"),
        "remaining": figures.get("remaining"),
        "remaining_by": figures.get("remaining_by"),
        "next": nxt if room is None else (nxt or {}) | {"room": room.as_dict()},
        "says": says,
    }


class _Sink:
    """A write-only stream the zip archive writes to; ``take`` hands over what was written since."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        out, self._parts = b"".join(self._parts), []
        return out


EPOCH = (1980, 1, 1, 0, 0, 0)  # a zip entry's date: the format's first, not the time of the download


def _zipped(folder: str, paths: list[tuple[str, Path]], chunk: int = 1 << 16) -> Iterator[bytes]:
    sink = _Sink()
    with zipfile.ZipFile(sink, "w", zipfile.ZIP_DEFLATED) as archive:  # not seekable: zipfile writes data descriptors
        for name, path in paths:
            entry = zipfile.ZipInfo(f"{folder}/{name}", date_time=EPOCH)  # the same bytes at every download
            entry.compress_type = zipfile.ZIP_DEFLATED
            with path.open("rb") as source, archive.open(entry, "w") as target:
                while block := source.read(chunk):
                    target.write(block)
                    if piece := sink.take():
                        yield piece
    yield sink.take()
