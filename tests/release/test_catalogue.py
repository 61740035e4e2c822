"""The release and dataset catalogues (issue #42): in core, then as a user types the commands.

- only published releases are listed: not one still pending, one that failed, a folder no charge
  vouches for, nor one whose manifest cites another release's charge;
- a file is served only by a name its manifest lists (a weakened catalogue without that check serves
  the raw microdata through a ``../`` name);
- the index carries what a data portal needs (title, dataset, guarantee, cost, files with digests that
  match the files), nothing of the host;
- the dataset catalogue: public facts, the budget left and what fits next;
- ``privrelease release list|show|get`` and ``dataset list|show`` in a real process, with their errors."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from privrelease.core.datasets.demo import write_demo
from privrelease.core.datasets.snapshots import sha256
from privrelease.core.errors import UserError
from privrelease.core.ledger import rollback
from privrelease.core.ledger.ledger import FAILED, ChargeRequest, Ledger
from privrelease.core.release import pipeline, spec
from privrelease.core.release.catalogue import EPOCH, Catalogue, NotInCatalogue, Published, _zipped
from privrelease.core.release.home import Home
from tests.cli.test_cli import run

RAW = "../../../data/demo/census.csv"  # from a census release's folder: the steward's source, the raw microdata


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> tuple[Home, dict, dict]:
    """A home with the demo datasets, one published SDC release of the census and one DP release of the posts."""
    root = tmp_path_factory.mktemp("catalogue") / "home"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PRIVRELEASE_HOME", str(root))
        mp.delenv("PREFECT_API_URL", raising=False)
        census = write_demo(root, rows=2000)
        home = Home(root)
        log = logging.getLogger("test-catalogue")
        sdc = pipeline.release(home, spec.load(census), log=log)
        dp = pipeline.release(home, spec.load(root / "requests" / "posts-dpne.yaml"), log=log)
    return home, sdc, dp


def _copy(home: Home, release: Published, new_id: str, ledger_cite: dict | None) -> Path:
    """A copy of ``release``'s folder under another id, its manifest naming that id and citing ``ledger_cite``."""
    folder = release.folder.parent / new_id
    shutil.copytree(release.folder, folder)
    manifest = dict(release.manifest, release_id=new_id, ledger=ledger_cite)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_only_published_releases_are_listed(demo, tmp_path: Path):
    home, sdc, dp = demo
    work = Home(tmp_path / "home")
    shutil.copytree(home.root, work.root)  # this test adds releases that are not published: on a copy
    copy = Ledger(work.db)
    copy.anchors.append([rollback.mark(e) for e in copy.entries_unchecked()])  # anchored where it lives, as a restore does
    catalogue = Catalogue(work)
    assert [r.id for r in catalogue.releases()] == [dp["release_id"], sdc["release_id"]]  # newest first
    assert [r.id for r in catalogue.releases("census-demo")] == [sdc["release_id"]]
    published = catalogue.get(sdc["release_id"])
    ledger = Ledger(work.db)
    params = published.manifest["mechanism"]["params"]

    def charge(release_id: str) -> dict:
        c = ledger.reserve(ChargeRequest("census-demo", release_id, "sdc", None, "sdc", params)).entry
        return {"seq": c.seq, "hash": c.hash}

    _copy(work, published, "pending-one", charge("pending-one"))  # its folder in place, not yet settled
    _copy(work, published, "failed-one", charge("failed-one"))
    ledger.settle("failed-one", FAILED, {"reason": "test"})
    _copy(work, published, "planted-one", {"seq": 1, "hash": "0" * 64})  # no charge of the ledger is its own
    charge("borrowed-one")
    ledger.settle("borrowed-one", "published")
    _copy(work, published, "borrowed-one", published.manifest["ledger"])  # cites another release's charge
    assert {r.id for r in catalogue.releases()} == {dp["release_id"], sdc["release_id"]}
    for hidden in ("pending-one", "failed-one", "planted-one", "borrowed-one", "nope"):
        with pytest.raises(NotInCatalogue, match=f"no published release '{hidden}'.*privrelease release list"):
            catalogue.get(hidden)
    # settled as published with a manifest citing its own charge: listed
    cite = charge("settled-one")
    _copy(work, published, "settled-one", cite)
    ledger.settle("settled-one", "published")
    assert "settled-one" in {r.id for r in catalogue.releases()}


class Unchecked(Catalogue):
    """The weakened catalogue: any name is a file of the release."""

    @staticmethod
    def listed(release: Published, name: str) -> bool:
        return True


def test_a_file_is_served_only_by_a_name_its_manifest_lists(demo):
    home, sdc, _ = demo
    catalogue = Catalogue(home)
    release = catalogue.get(sdc["release_id"])
    for name, digest in release.files().items():
        assert sha256(catalogue.file(release.id, name)) == digest
    (release.folder / "extra.txt").write_text("not published")
    try:
        for name in (RAW, "../" + release.id + "/data.csv", "/etc/passwd", "extra.txt", ".", "", "data.csv/"):
            with pytest.raises(NotInCatalogue, match="has no file"):
                catalogue.file(release.id, name)
    finally:
        (release.folder / "extra.txt").unlink()
    # the weakened catalogue hands out the steward's raw source file
    leaked = Unchecked(home).file(release.id, RAW)
    assert leaked.read_bytes() == (home.root / "data" / "demo" / "census.csv").read_bytes()


def test_download_all_is_every_published_file_in_one_zip_streamed_in_bounded_pieces(demo, tmp_path: Path):
    home, sdc, _ = demo
    catalogue = Catalogue(home)
    release = catalogue.get(sdc["release_id"])
    (release.folder / "extra.txt").write_text("not published")  # in the folder, not in the manifest: not archived
    try:
        pieces = list(catalogue.archive(release.id))
    finally:
        (release.folder / "extra.txt").unlink()
    with zipfile.ZipFile(io.BytesIO(b"".join(pieces))) as archive:
        assert archive.testzip() is None
        got = {name: hashlib.sha256(archive.read(name)).hexdigest() for name in archive.namelist()}
        assert {i.date_time for i in archive.infolist()} == {EPOCH}  # nothing of when it was downloaded
    assert got == {f"{release.id}/{name}": digest for name, digest in release.files().items()}
    assert b"".join(catalogue.archive(release.id)) == b"".join(pieces)  # the same bytes each time
    with pytest.raises(NotInCatalogue):  # refused before any byte: the caller answers 404, not a broken download
        catalogue.archive("no-such-release")
    # a large file goes out 64 KiB (compressed) at a time, never whole
    big = tmp_path / "big.bin"
    big.write_bytes(np.random.default_rng(56).bytes(3 << 20))
    sizes = [len(p) for p in _zipped("r", [("big.bin", big)])]
    assert len(sizes) > 40 and max(sizes) <= (1 << 16) + 1024, (len(sizes), max(sizes))


def test_the_index_is_what_a_data_portal_needs(demo):
    home, sdc, dp = demo
    index = Catalogue(home).index()
    assert index["format"] == "privrelease-catalogue/1" and str(home.root) not in json.dumps(index)
    by_id = {r["id"]: r for r in index["releases"]}
    d, s = by_id[dp["release_id"]], by_id[sdc["release_id"]]
    assert d["title"] == "dpne release of posts-demo" and d["dataset"] == "posts-demo" and d["unit"] == "user:user"
    assert d["privacy"]["kind"] == "dp" and (d["privacy"]["epsilon"], d["privacy"]["delta"]) == (1.0, 1e-7)
    assert "differential privacy" in d["guarantee"] and d["privacy"]["sdc_methods"] is None
    assert s["privacy"]["kind"] == "sdc" and s["privacy"]["epsilon"] is None
    assert s["privacy"]["sdc_methods"] == ["recode", "ra", "suppress"]
    assert s["request"]["mechanism"] == "sdc" and s["charts"] == ["sdc_cell_sizes.png"]
    for entry in (d, s):
        folder = home.releases / entry["dataset"] / entry["id"]
        names = [f["name"] for f in entry["files"]]
        assert set(names) == {p.name for p in folder.iterdir()} and "manifest.json" in names and "report.md" in names
        for f in entry["files"]:
            assert f["sha256"] == sha256(folder / f["name"]) and f["bytes"] == (folder / f["name"]).stat().st_size


def test_the_dataset_catalogue_shows_public_facts_and_the_budget(demo):
    home, _, dp = demo
    entries = {e["id"]: e for e in Catalogue(home).datasets()}
    assert set(entries) == {"census-demo", "logins-demo", "payroll-demo", "posts-demo"}
    posts, logins, census = entries["posts-demo"], entries["logins-demo"], entries["census-demo"]
    assert posts["schema"] == {"user": {"type": "integer", "nullable": False}, "text": {"type": "string", "nullable": False}}
    assert posts["unit"] == "user:user" and posts["rows"] is None and posts["published_releases"] == 1
    assert posts["budget"]["cap"] == {"epsilon": 20.0, "delta": 1e-5}
    assert posts["budget"]["spent"] == {"epsilon": 1.0, "delta": 1e-7}
    assert posts["budget"]["next"]["like"] == "dpne" and posts["budget"]["next"]["fits"] >= 1
    # the one figure: what the next release like the last can take, beside the cap; spent under the accountant that admits
    room = posts["budget"]["next"]["room"]
    assert room["like"] == "dpne" and 0 < room["epsilon"] and room["spent_by"] == "filter" and 0 < room["spent"] < 1
    assert posts["budget"]["says"].startswith(f"the next release like the last (dpne) can take epsilon ≤ {room['epsilon']:.3g} ")
    assert "; cap epsilon=20, delta=1e-05; spent " in posts["budget"]["says"]
    assert logins["budget"]["next"] is None and logins["budget"]["says"].endswith(
        "nothing spent yet (a preview says what a release can take)"
    )
    assert census["budget"] is None and census["purpose"] == "sdc" and census["published_releases"] == 1
    text = json.dumps(entries)
    assert "source" not in text and "digest" not in text and str(home.root) not in text
    with pytest.raises(Exception, match="'nope' is not registered.*privrelease dataset list"):
        Catalogue(home).dataset("nope")


def test_the_catalogue_commands_as_typed(demo, tmp_path: Path):
    home, sdc, dp = demo
    r = run(home.root, "release", "list")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["release", "dataset", "mechanism", "created", "(UTC)", "cost"]
    assert lines[1].split()[:3] == [dp["release_id"], "posts-demo", "dpne"] and "charged epsilon=1 delta=1e-07" in lines[1]
    assert lines[2].split()[:3] == [sdc["release_id"], "census-demo", "sdc"] and "recode → ra → suppress" in lines[2]
    index = json.loads(run(home.root, "release", "list", "--json", "--dataset", "posts-demo").stdout)
    assert [x["id"] for x in index["releases"]] == [dp["release_id"]]

    r = run(home.root, "release", "show", sdc["release_id"])
    assert r.returncode == 0 and r.stdout.startswith(f"release    {sdc['release_id']}\n")
    assert "guarantee  SDC chain recode → ra → suppress" in r.stdout and "# Release `" in r.stdout
    assert json.loads(run(home.root, "release", "show", dp["release_id"], "--json").stdout)["mechanism"] == "dpne"

    out = tmp_path / "got"
    r = run(home.root, "release", "get", dp["release_id"], "--out", str(out))
    assert r.returncode == 0 and r.stdout.splitlines()[-1].endswith("each matching its manifest's sha256"), r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert {p.name for p in out.iterdir()} == {*manifest["files"], "manifest.json"}
    assert all(sha256(out / name) == digest for name, digest in manifest["files"].items())
    (out / "ngrams.csv").write_text("my own notes")  # a different file of the same name: never overwritten
    r = run(home.root, "release", "get", dp["release_id"], "--out", str(out))
    assert r.returncode == 2 and r.stderr.startswith(f"error: {out} already holds other files named ngrams.csv")
    assert (out / "ngrams.csv").read_text() == "my own notes"

    for args, said in (
        (("release", "show", "nope"), "error: no published release 'nope'"),
        (("release", "get", "../census-demo"), "error: no published release '../census-demo'"),
        (("release", "show"), "error: privrelease release show needs a release id; list the published ones with"),
        (("release", "list", "x"), "error: privrelease release list takes no id"),
        (("release", "request.yaml", "x"), "error: privrelease release takes one request file, not 'x' too"),
    ):
        r = run(home.root, *args)
        assert r.returncode == 2 and r.stderr.startswith(said) and "Traceback" not in r.stderr, (args, r.stderr)
    assert "privrelease release list" in run(home.root, "release", "show", "nope").stderr

    r = run(home.root, "dataset", "list")
    assert r.returncode == 0 and r.stdout.splitlines() == [
        "dataset census-demo: registration 1, unit record, purpose sdc, 11 columns, 2000 rows (public); no budget (SDC)",
        "dataset logins-demo: registration 1, unit record, purpose dp, 4 columns, 500 rows (public); cap epsilon=40, "
        "delta=0.001; nothing spent yet (a preview says what a release can take)",
        "dataset payroll-demo: registration 1, unit user:person, purpose dp, 5 columns; cap epsilon=20, delta=1e-05; "
        "nothing spent yet (a preview says what a release can take)",
        f"dataset posts-demo: registration 1, unit user:user, purpose dp, 2 columns; "
        f"{Catalogue(home).dataset('posts-demo')['budget']['says']}",
    ]
    shown = json.loads(run(home.root, "dataset", "show", "posts-demo").stdout)
    assert shown["budget"]["next"]["like"] == "dpne" and shown["schema"]["text"]["type"] == "string"


def test_the_gates_catalogue_opens_the_database_once_for_many_readers(demo, monkeypatch):
    """The fifth attack: 16 catalogue reads in flight kept the home's database open in the gate, and a release
    (another process: one at a time may open the file) failed after 120 s. The gate's catalogue reads the
    database a few times for each FRESH_S seconds, however many callers ask, and an unknown id opens nothing;
    the weakened one (the catalogue as the command line reads it) opens it for every call."""
    import threading

    from privrelease.core import store
    from privrelease.gate.catalogue import Kept

    home, sdc, _ = demo
    opened = []
    real = store.connect
    monkeypatch.setattr(store, "connect", lambda *a, **k: opened.append(1) or real(*a, **k))

    def opens(catalogue: Catalogue) -> int:
        opened.clear()
        ask = [lambda: catalogue.index(), lambda: catalogue.datasets(), lambda: catalogue.get(sdc["release_id"])]
        ask += [lambda: catalogue.dataset("census-demo")]
        threads = [threading.Thread(target=ask[i % len(ask)]) for i in range(40)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with pytest.raises(UserError, match="'nosuch' is not registered"):
            catalogue.dataset("nosuch")
        return len(opened)

    kept, every = opens(Kept(home)), opens(Catalogue(home))
    assert 0 < kept <= 10 and every >= 40, (kept, every)
