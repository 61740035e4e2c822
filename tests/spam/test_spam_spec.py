"""The spam spec before anything runs: confined to the data root (finding 3 of the review of issue
13), and checked completely, at once, before any Prefect machinery starts (issue 30, item 3)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from privrelease.core.datasets.demo import mail
from privrelease.core.errors import UserError
from privrelease.core.spam.spec import check, load_spec
from tests.conftest import REPO


def unconfined(source: str, root: Path, what: str) -> Path:
    """Weakened: the resolver before the review. Any path the worker can read, as given."""
    path = (root / source).resolve()
    if not path.is_file():
        raise UserError(f"spam spec {source!r} is not a file.")
    return path


def write_mail(folder: Path, users: int = 2, messages: int = 60) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(users):
        (folder / f"user-{k + 1}.jsonl").write_text("".join(json.dumps(m) + "\n" for m in mail(messages, k)))
    (folder / "test.jsonl").write_text("".join(json.dumps(m) + "\n" for m in mail(20, 9)))


def write_spec(folder: Path, name: str = "spam.yaml", dimension: int = 500, **changes) -> Path:
    doc = {
        "run_id": "r1",
        "users": ["user-1.jsonl", "user-2.jsonl"],
        "test": "test.jsonl",
        "features": {"modulus": 1_000_000, "reduction": "hash", "dimension": dimension},
        "key_bits": 2048,
        "rounds": 1,
        "mode": "batch",
        **changes,
    }
    (folder / name).write_text(yaml.safe_dump(doc))
    return folder / name


def refusal(home: Path, source: str, resolve=None) -> str:
    try:
        check(source, home, *([resolve] if resolve else []))
    except UserError as exc:
        return str(exc)
    return "accepted"


@pytest.mark.parametrize("weakened", [False, True])
def test_finding_3_files_outside_the_data_root_are_neither_probed_nor_read(home, test_mode, tmp_path, monkeypatch, weakened):
    """An attacker who can only name a spec path probes files outside the data root (exists? YAML?
    which keys?) and points a user's mail at a JSON-lines file outside it. The unconfined resolver
    answers every probe differently and trains on the outside file; now each probe gets the same
    answer, naming nothing outside, and the outside mail is refused."""
    outside = tmp_path / "outside"
    write_mail(outside)
    (outside / "secret.yaml").write_text("password: hunter2\ntoken: abc\n")
    (outside / "notes.txt").write_text("{{ not yaml: [\n")
    root = home / "data"
    write_mail(root / "mail")
    write_spec(root / "mail", "leak.yaml", users=["user-1.jsonl", str(outside / "user-2.jsonl")])
    (root / "mail" / "link.yaml").symlink_to(outside / "secret.yaml")
    resolve = unconfined if weakened else None
    if weakened:  # and the readers before the fix, which read any path they were given (test below)
        from privrelease.core.spam import mail as M

        read = M.read_mail
        monkeypatch.setattr(M, "read_mail", lambda path, shown=None, root=None: read(path, shown))
    probes = [refusal(home, str(outside / name), resolve) for name in ("secret.yaml", "notes.txt", "missing.yaml")]
    probes.append(refusal(home, "mail/link.yaml", resolve))
    if weakened:
        assert len(set(probes[:3])) == 3 and "password" in probes[0]  # exists / YAML / its keys: all told apart
        assert check("mail/leak.yaml", home, unconfined).users[1] == outside / "user-2.jsonl"  # would be trained on
    else:
        assert set(probes) == {
            "the spam spec must lie inside the data root " + repr(str(root)) + " (set "
            "PRIVRELEASE_DATA_ROOT to change it); paths outside it, also through symbolic links, "
            "are refused."
        }
        said = refusal(home, "mail/leak.yaml")
        assert said.startswith("user or test file ") and "must lie inside the data root" in said and "hunter2" not in said
        assert load_spec("mail/leak.yaml", root)[1] == root / "mail" / "leak.yaml"  # inside: read


@pytest.mark.parametrize("typed", [False, True])
def test_only_a_typed_command_reads_outside_the_data_root(home, test_mode, tmp_path, typed):
    """A spec and mail outside the data root: refused as a run started through the worker or the gate sees them
    (the worker never enters ``typed_paths``); read when a user types the command (privrelease.cli.main enters it), which is
    the weakened variant for a UI-named path: a worker inside ``typed_paths`` would train on the outside mail."""
    from privrelease.core.paths import typed_paths

    outside = tmp_path / "outside"
    write_mail(outside)
    spec = str(write_spec(outside))
    if typed:
        with typed_paths():
            assert check(spec, home).users[1] == outside / "user-2.jsonl"
        assert refusal(home, spec).startswith("the spam spec must lie inside the data root")  # left when it returns
    else:
        assert refusal(home, spec).startswith("the spam spec must lie inside the data root")
        assert refusal(home, "../outside/spam.yaml").startswith("the spam spec must lie inside the data root")


def test_only_the_command_line_enters_typed_paths():
    """What keeps a UI-named path inside the data root: no flow, gate or worker module enters ``typed_paths``."""
    entered = re.compile(r"with\s+(?:[\w.]+\.)?typed_paths\(\)")
    users = sorted(
        str(p.relative_to(REPO))
        for top in ("core", "flows", "gate", "cli")
        for p in (REPO / "privrelease" / top).rglob("*.py")
        if entered.search(p.read_text())
    )
    assert users == ["privrelease/cli/main.py"]


def resolved_after_links(source: str, root: Path, what: str) -> Path:
    """Weakened: the confined resolver before the fix, which followed symbolic links
    before taking "..", so where a path landed depended on where a link outside the root points."""
    from privrelease.core.errors import SpecError

    path = (root / source).resolve()
    if not path.is_relative_to(root):
        raise SpecError(f"{what} must lie inside the data root")
    if not path.is_file():
        raise UserError(f"{what} {source!r} is not a file under the data root {str(root)!r}.")
    return path


@pytest.mark.parametrize("weakened", [False, True])
def test_a_path_through_a_link_tells_nothing_about_where_the_link_points(home, test_mode, tmp_path, weakened):
    """A spec path of the form <link>/../.. : with links followed before "..", whether it lands inside
    the data root (accepted) or outside (refused) tells where the link points, e.g. the worker's open
    files through /proc/self/fd. Read as written, the answer is the same wherever the link points."""
    root = home / "data"
    write_mail(root / "mail")
    write_spec(root / "mail")
    write_spec(root, users=["mail/user-1.jsonl", "mail/user-2.jsonl"], test="mail/test.jsonl")  # data/spam.yaml
    deep, elsewhere = root / "mail" / "a" / "b", tmp_path / "x" / "y"
    deep.mkdir(parents=True)
    elsewhere.mkdir(parents=True)
    (root / "mail" / "link").symlink_to(deep)
    answers = []
    for target in (deep, elsewhere):  # the same path, the link pointing inside, then outside the root
        (root / "mail" / "link").unlink()
        (root / "mail" / "link").symlink_to(target)
        answers.append(refusal(home, "mail/link/../../spam.yaml", resolved_after_links if weakened else None))
    if weakened:
        assert answers[0] == "accepted" and answers[1] != answers[0]  # told apart: where the link points
    else:
        assert answers[0] == answers[1] == "accepted"  # data/spam.yaml: the path as written, whatever the link


BAD = {  # spec changes (or mail damage) -> the one line the user must see
    "floor": ({"features": {"reduction": "hash", "dimension": 10_000}}, "user 1 sums 60 messages per round; each user needs at least 1000 for this feature map"),
    "map": ({"features": {"reduction": "hash", "dimension": 100_000}}, "no participation floor was measured for reduction 'hash' to 100000"),
    "modulus": ({"features": {"modulus": 16384, "reduction": "hash", "dimension": 500}},
                "no participation floor was measured for reduction 'hash' to 500 features of 4-grams mod 16384"),
    "df": ({"features": {"reduction": "df", "dimension": 500}}, "reduction 'df' builds the feature map from all users' pooled plaintext mail"),
    "key": ({"key_bits": 1024}, "key_bits: "),
    "users": ({"users": ["user-1.jsonl"]}, "users: List should have at least 2 items"),
    "twice": ({"users": ["user-1.jsonl", "user-1.jsonl"]}, "lists a user's mail file twice"),
    "missing": ({"users": ["user-1.jsonl", "nope.jsonl"]}, "user or test file 'nope.jsonl': the mail file 'mail/nope.jsonl' is not a file under the data root"),
    "json": ({"test": "broken.jsonl"}, "broken.jsonl line 2 is not valid JSON"),
    "label": ({"test": "badlabel.jsonl"}, "badlabel.jsonl line 1: each line needs 'text' (a string) and 'label' (spam or ham)"),
    "run_id": ({"run_id": "used"}, "spam run 'used' already exists; choose a new run_id"),
    "colluders": ({"dp": {"epsilon": 1.0, "delta": 1e-6, "colluders": 2}},
                  "dp.colluders is 2, but a round may complete with only the threshold of 2 users"),
    "threshold": ({"threshold": 3}, "threshold: threshold is 3, but the spec lists 2 users; a round needs at most every user"),
    "threshold-low": ({"threshold": 1}, "threshold: Input should be greater than or equal to 2"),
    "budget": ({"dp": {"epsilon": 1.0, "delta": 1e-6}}, "dataset 'spam-mail' has no privacy budget, so a DP release is refused; set one with: privrelease ledger set-budget spam-mail"),
    "outside": (None, "the spam spec must lie inside the data root"),
}  # fmt: skip


def test_every_spec_error_is_refused_before_prefect_starts_once_and_without_a_trace(tmp_path):
    """Each bad spec through the real command in one fresh process (outside test mode): exit 2,
    its reason once on stderr and nowhere else, no run folder, the ledger unchanged, and Prefect
    never imported. The seconds each refusal took are printed (issue 30 asks for under 3 s)."""
    home = tmp_path / "home"
    root = home / "data"
    write_mail(root / "mail")
    (root / "mail" / "broken.jsonl").write_text('{"text": "a", "label": "ham"}\n{"text": \n')
    (root / "mail" / "badlabel.jsonl").write_text('{"text": "a", "label": "maybe"}\n')
    specs = {}
    for name, (changes, _) in BAD.items():
        if changes is not None:
            base = yaml.safe_load(write_spec(root / "mail", f"{name}.yaml").read_text())
            doc = {**base, **changes}
            if "features" in changes:
                doc["features"] = {"modulus": 1_000_000, **changes["features"]}
            (root / "mail" / f"{name}.yaml").write_text(yaml.safe_dump(doc))
            specs[name] = f"mail/{name}.yaml"
    (tmp_path / "away.yaml").write_text("run_id: x\n")
    specs["outside"] = str(tmp_path / "away.yaml")
    script = f"""
import contextlib, io, json, sys, time
from pathlib import Path
from privrelease.core.ledger.ledger import ChargeRequest, Ledger
Ledger(Path({str(home / "privrelease.duckdb")!r})).reserve(ChargeRequest("spam-filter", "used", "mpc", None, "spam-filter-training", {{}}, {{}}))
from privrelease.cli.main import main
out = {{}}
for name, path in {specs!r}.items():
    err, std = io.StringIO(), io.StringIO()
    t = time.perf_counter()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
        code = main(["spam", "train", path])
    out[name] = [code, std.getvalue(), err.getvalue(), time.perf_counter() - t]
out["prefect imported"] = any(m == "prefect" or m.startswith("prefect.") for m in sys.modules)
out["entries"] = len(Ledger(Path({str(home / "privrelease.duckdb")!r})).entries())
print(json.dumps(out))
"""
    env = {"PRIVRELEASE_HOME": str(home), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    # typed from the data root: relative paths are relative to the current folder, and a typed path is the user's
    # own file wherever it lies (the data root bounds what a run started through the gate may name, above)
    done = subprocess.run([sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result.pop("prefect imported") is False and result.pop("entries") == 1
    typed = {
        "missing": f"user or test file 'nope.jsonl': the mail file '{root / 'mail' / 'nope.jsonl'}' is not a file.",
        "outside": "the spam spec is invalid: users: Field required",
    }
    for name, (code, out, err, seconds) in result.items():
        reason = typed.get(name, BAD[name][1])
        assert code == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1, (name, err)
        assert (out + err).count(reason) == 1, (name, err)
        print(f"{name}: refused in {seconds:.3f} s")
    assert not (home / "spam").exists()


OPENED: list[str] | None = None


def _audit(event: str, args: tuple) -> None:
    if OPENED is not None and event == "open" and isinstance(args[0], str | Path):
        OPENED.append(str(args[0]))


sys.addaudithook(_audit)


def test_outside_test_mode_nothing_is_trained_on_pooled_plaintext(home, tmp_path):
    """Finding 4: a real run (2048-bit key, not test mode) builds no plaintext twin. This process
    (the flow's) reads each user's mail file only in ``check``, and keeps only the counts (the
    README once said it opened only the evaluation file, and this test began watching after the check);
    the training opens no user's mail file (only the evaluation file), and the report holds the
    server's model's AUC and public values, no AUC or weight of a model trained on pooled mail."""
    global OPENED
    from dataclasses import fields

    from privrelease.core.spam.training import Training

    root = home / "data"
    write_mail(root / "mail", messages=50)
    OPENED = []
    try:
        inputs = check(str(write_spec(root / "mail", dimension=500, rounds=1).relative_to(root)), home)
        checked = set(OPENED)
    finally:
        OPENED = None
    assert {str(p) for p in inputs.users} <= checked and inputs.sizes == [50, 50]
    assert {f.name for f in fields(inputs)} == {
        "spec",
        "path",
        "users",
        "test",
        "sizes",
        "root",
        "protected",
        "expected",
        "expected_test",
    }
    OPENED = []
    try:
        training = Training.setup(inputs, None)  # no dp: no noise to draw
        try:
            training.run_round()
            report = training.write(home / "spam" / "r1")
        finally:
            training.close()
        opened = set(OPENED)
    finally:
        OPENED = None
    assert str(inputs.test) in opened and not opened & {str(p) for p in inputs.users}
    assert training.twins is None and report["test_mode"] is False and report["users"] == [50, 50]
    assert not {"auc_plain", "auc_plain_exact_sigmoid", "max_weight_gap"} & set(report)
    assert [r["max_gradient_gap"] for r in report["per_round"]] == [None]
    assert "plaintext" not in (home / "spam" / "r1" / "report.md").read_text().split("What the server learns")[0]


def by_name(users: list[Path], test: Path, shown: str) -> None:
    """Weakened: the check before the fix. Users were told apart by the names the spec gives (not
    compared as files at all), the test file by its resolved path."""
    if test in users:
        raise UserError(f"the test file {shown!r} is also a user's mail file; evaluation mail must be separate.")


@pytest.mark.parametrize("weakened", [False, True])
def test_one_mail_file_under_two_names_is_refused(home, test_mode, monkeypatch, weakened):
    """A spec names user-1's file twice under different names: ``./user-1.jsonl``, a symbolic link and a
    hard link inside the data root, or the test file as a hard link to it. Told apart by name, each
    alias was accepted as another user holding the same file, and every message of it is summed twice
    a round: a dp: run's neighbour (one message's label flipped) then moves the round sum by twice the
    flip, 1.98 times the sensitivity the noise is calibrated for. Now each alias is refused."""
    from privrelease.core.spam import dp
    from privrelease.core.spam import spec as S
    from tests.spam.test_neighbours_spam import l2, rule

    if weakened:
        monkeypatch.setattr(S, "distinct", by_name)
    root = home / "data"
    write_mail(root / "mail")
    (root / "mail" / "alias.jsonl").symlink_to(root / "mail" / "user-1.jsonl")
    os.link(root / "mail" / "user-1.jsonl", root / "mail" / "hard.jsonl")
    os.link(root / "mail" / "user-2.jsonl", root / "mail" / "eval.jsonl")
    aliases = {
        "dot": {"users": ["user-1.jsonl", "./user-1.jsonl"]},
        "symlink": {"users": ["user-1.jsonl", "alias.jsonl"]},
        "hard link": {"users": ["user-1.jsonl", "hard.jsonl"]},
        "test": {"test": "eval.jsonl"},
    }
    said = {
        name: refusal(home, str(write_spec(root / "mail", f"{name}.yaml", **changes).relative_to(root)))
        for name, changes in aliases.items()
    }
    if not weakened:
        twice = "the spam spec lists a user's mail file twice; each user holds its own file."
        test = "the test file 'eval.jsonl' is also a user's mail file; evaluation mail must be separate."
        assert said == {"dot": twice, "symlink": twice, "hard link": twice, "test": test}
        return
    assert set(said.values()) == {"accepted"}
    inputs = check("mail/symlink.yaml", home)
    assert inputs.users[0] == inputs.users[1]  # one file, trained on as two users' mail
    noise = dp.calibrate(dp.DPParams(epsilon=1, delta=1e-6, max_features=4, radius=0.01), 2, 1)
    x, w = np.array([1, 3, 5, 7]), np.zeros(10, dtype=np.int64)
    flip = l2([2 * v for v in rule(x, 1, w, 10)], [2 * v for v in rule(x, -1, w, 10)])  # in both users' sums
    assert flip == pytest.approx(1.98 * noise.l2, rel=1e-3) and flip > noise.l2


@pytest.mark.parametrize("weakened", [False, True])
def test_a_folder_swapped_for_a_link_after_the_check_leads_nowhere(home, test_mode, tmp_path, monkeypatch, weakened):
    """The spec is checked (the flow's ``check``), and before the parties open their files (Prefect
    starting, processes spawning: seconds) the mail folder is renamed and a symbolic link to a folder
    outside the data root put in its place. The checked paths now lead outside: user-1's process
    (``load_user``) read and trained on the outside mail, and the flow's reading of the evaluation
    file described the outside file in its error. Now each reader checks the file it opened and
    refuses anything but a regular file inside the data root, with one message naming nothing there."""
    from privrelease.core.spam import training

    if weakened:  # the readers before the fix: by path, whatever the path now leads to
        read = training.read_mail
        monkeypatch.setattr(training, "read_mail", lambda path, shown=None, root=None, expected=None: read(path, shown))
    outside = tmp_path / "outside"
    write_mail(outside, messages=70)
    (outside / "test.jsonl").write_text('{"text": "a", "label": "ham"}\n{"secret": 1}\n')
    root = home / "data"
    write_mail(root / "mail")
    inputs = check(str(write_spec(root / "mail").relative_to(root)), home)
    (root / "mail").rename(root / "was")
    (root / "mail").symlink_to(outside, target_is_directory=True)
    features = {"modulus": 1_000_000, "reduction": "hash", "dimension": 500, "seed": 0}
    if weakened:
        assert len(training.load_user("user-1", inputs.users[0], inputs.root, features, None)) == 70  # the outside mail
        with pytest.raises(UserError, match="test.jsonl line 2: each line needs 'text'"):
            training.Training.setup(inputs, None)
        return
    said = "must be a regular file inside the data root " + repr(str(root.resolve())) + "; nothing outside it is read."
    with pytest.raises(UserError) as refused:
        training.load_user("user-1", inputs.users[0], inputs.root, features, None)
    assert str(refused.value) == "mail file 'user-1.jsonl' " + said
    with pytest.raises(UserError) as refused:
        training.Training.setup(inputs, None)
    assert str(refused.value) == "mail file 'test.jsonl' " + said
    (root / "mail").unlink()
    (root / "was").rename(root / "mail")  # the folder back: read as checked
    assert len(training.load_user("user-1", inputs.users[0], inputs.root, features, None)) == 60
