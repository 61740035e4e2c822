"""The ``privrelease`` command line.

Exit codes: 0 success; 2 an error the user can fix (message, no traceback); 3 ledger
verification failed; 1 an internal error. Ledger commands do not start Prefect.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from pathlib import Path

from core import paths
from core.accounting import Budget
from core.errors import LedgerCorrupt, UserError

DEBUG_ENV = "PRIVRELEASE_DEBUG"


def _prefect_env(root: Path) -> None:
    """Prefect reads its settings at import: keep its state under our home unless told otherwise."""
    os.environ.setdefault("PREFECT_HOME", str(root / "prefect"))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")


class _NoUserErrorTraceback(logging.Formatter):
    """Console formatter: a user error is shown as its message, without a traceback."""

    def __init__(self, inner: logging.Formatter | None):
        super().__init__()
        self.inner = inner or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info and isinstance(record.exc_info[1], UserError):
            record = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None})
        return self.inner.format(record)


def _quiet_console() -> None:
    from prefect.logging.handlers import PrefectConsoleHandler

    loggers = [logging.getLogger(), *(v for v in logging.root.manager.loggerDict.values() if isinstance(v, logging.Logger))]
    for logger in loggers:
        for handler in logger.handlers:
            if isinstance(handler, PrefectConsoleHandler) and not isinstance(handler.formatter, _NoUserErrorTraceback):
                handler.setFormatter(_NoUserErrorTraceback(handler.formatter))


def _runner(args: argparse.Namespace) -> dict:
    """The flows' Dask settings from --dask / --dask-address / --dask-workers."""
    dask = args.dask or args.dask_address is not None
    return {"runner": "dask" if dask else "local", "dask_address": args.dask_address, "dask_workers": args.dask_workers}


def _run_release(spec_path: Path, root: Path, runner: dict) -> dict:
    from core import spec

    spec.load(spec_path)  # fail fast on a bad spec, before Prefect starts
    _prefect_env(root)
    from flows.release import release

    _quiet_console()
    return release(spec_path=str(spec_path.resolve()), home=str(root), **runner)


def cmd_release(args: argparse.Namespace, root: Path) -> int:
    summary = _run_release(Path(args.spec), root, _runner(args))
    print(f"release {summary['release_id']}")
    print(f"folder {summary['folder']}")
    if summary["already_published"]:
        print("(already published earlier; nothing was charged again)")
    return 0


def cmd_spam_train(args: argparse.Namespace, root: Path) -> int:
    from core.spam.training import load_spec

    load_spec(args.spec)  # fail fast on a bad spec, before Prefect starts
    _prefect_env(root)
    from flows.spam import spam_filter_training

    _quiet_console()
    summary = spam_filter_training(spec_path=str(Path(args.spec).resolve()), home=str(root))
    print(f"run {summary['run_id']}: AUC private {summary['auc_private']:.6f}, plaintext {summary['auc_plain']:.6f}")
    print(f"folder {summary['folder']}")
    return 0


def cmd_spam_classify(args: argparse.Namespace, root: Path) -> int:
    from core.errors import SpecError
    from core.spam.training import classify_message

    folder = root / "spam" / args.run_id
    if not (folder / "model.npy").is_file():
        raise SpecError(f"no trained spam run {args.run_id!r} under {root / 'spam'}; train one with privrelease spam train.")
    message = Path(args.message)
    if not message.is_file():
        raise SpecError(f"message file {args.message!r} does not exist.")
    label, _ = classify_message(folder, message.read_bytes().decode("utf-8", "surrogateescape"))
    print(label)
    return 0


def cmd_spam_split(args: argparse.Namespace, root: Path) -> int:
    from core.spam.training import split_corpus

    written = split_corpus(Path(args.corpus), Path(args.out), args.users, args.test_fraction, args.seed)
    for path in written:
        print(path)
    return 0


def cmd_demo(args: argparse.Namespace, root: Path) -> int:
    from core.demo import write_demo

    spec_path = write_demo(root / "demo", rows=args.rows)
    if args.prepare_only:
        print(f"demo inputs and specs written to {spec_path.parent}")
        return 0
    summary = _run_release(spec_path, root)
    ledger = summary["ledger"]
    print(f"\nrelease folder: {summary['folder']}")
    print(f"ledger entry:   #{ledger['seq']} {ledger['hash']}")
    print(f"Pa:             {summary['privacy']['pa']:.4f}  (Pa_max {summary['privacy']['pa_max']:.4f})")
    print(f"audit with:     {sys.argv[0]} --home {root} ledger history")
    return 0


def cmd_set_budget(args: argparse.Namespace, root: Path) -> int:
    from core.ledger import Ledger

    try:
        cap = Budget(args.epsilon, args.delta)
    except ValueError as exc:
        raise UserError(f"invalid budget: {exc}.") from None
    ledger = Ledger(paths.database(root))
    entry = ledger.set_budget(args.dataset, cap)
    print(f"cap for {args.dataset}: epsilon={cap.epsilon:g} delta={cap.delta:g} (ledger entry #{entry.seq})")
    spent = next((t.spent for t in ledger.totals() if t.dataset == args.dataset), None)
    if spent is not None and not spent.fits_within(cap):
        print(f"note: {args.dataset} has already spent epsilon={spent.epsilon:g} delta={spent.delta:g}; "
              "no further DP release fits under this cap")  # fmt: skip
    return 0


def cmd_history(args: argparse.Namespace, root: Path) -> int:
    from core.ledger import Ledger

    entries = Ledger(paths.database(root)).entries(args.dataset)
    if args.json:
        print(json.dumps([e.as_dict() for e in entries], indent=2))
        return 0
    header = f"{'seq':>4}  {'time (UTC)':<19}  {'dataset':<16} {'release':<34} {'mechanism':<9} {'status':<9} {'epsilon':>8} {'delta':>8}  detail"
    print(header)
    for e in entries:
        detail = " ".join(f"{k}={v}" for k, v in json.loads(e.detail).items())
        print(f"{e.seq:>4}  {e.ts[:19]:<19}  {e.dataset:<16} {e.release_id or '-':<34} {e.mechanism or '-':<9} "
              f"{e.status:<9} {e.epsilon:>8.4g} {e.delta:>8.2g}  {detail}")  # fmt: skip
    return 0


def cmd_totals(args: argparse.Namespace, root: Path) -> int:
    from core.ledger import Ledger

    totals = Ledger(paths.database(root)).totals()
    if args.json:
        print(json.dumps([t.as_dict() for t in totals], indent=2))
        return 0

    def pair(b: Budget | None) -> str:
        return "no cap" if b is None else f"{b.epsilon:.4g} / {b.delta:.2g}"

    print(f"{'dataset':<16} {'cap eps/delta':>18} {'spent eps/delta':>18} {'remaining':>18} {'GDP eps':>8}  releases (published/failed/pending)")
    for t in totals:
        gdp = "-" if t.gdp_epsilon is None else f"{t.gdp_epsilon:.4g}"
        print(f"{t.dataset:<16} {pair(t.cap):>18} {pair(t.spent):>18} {pair(t.remaining):>18} {gdp:>8}  "
              f"{t.releases} ({t.published}/{t.failed}/{t.pending})")  # fmt: skip
    return 0


def cmd_verify(args: argparse.Namespace, root: Path) -> int:
    from core.ledger import Ledger

    try:
        n = Ledger(paths.database(root)).verify(paths.releases(root))
    except LedgerCorrupt as exc:
        print(f"ledger verification FAILED at entry {exc.seq}: {exc}", file=sys.stderr)
        return 3
    print(f"ledger ok: {n} entries, hash chain intact, every published release's entry present")
    return 0


def _dask_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dask", action="store_true", help="spread the heavy pieces over a local Dask cluster")
    p.add_argument("--dask-address", help="an existing Dask scheduler (implies --dask)")
    p.add_argument("--dask-workers", type=int, default=2, help="worker processes of the local cluster")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="privrelease", description="Batch releases of privacy-protected data.")
    top.add_argument("--home", help=f"state folder (default ${paths.HOME_ENV} or ./.privrelease)")
    sub = top.add_subparsers(dest="command", required=True)

    p = sub.add_parser("release", help="run the release flow for a release spec")
    p.add_argument("spec", help="release spec (YAML)")
    _dask_options(p)
    p.set_defaults(func=cmd_release)

    p = sub.add_parser("demo", help="generate a sample census table and release it with RA")
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--prepare-only", action="store_true", help="write the demo inputs and specs, release nothing")
    p.set_defaults(func=cmd_demo)

    spam = sub.add_parser("spam", help="private spam-filter training and classification")
    ssub = spam.add_subparsers(dest="spam_command", required=True)
    p = ssub.add_parser("train", help="run the spam-filter-training flow for a spam spec")
    p.add_argument("spec", help="spam spec (YAML)")
    p.set_defaults(func=cmd_spam_train)
    p = ssub.add_parser("classify", help="classify one message privately against a trained run; prints spam or ham")
    p.add_argument("run_id")
    p.add_argument("message", help="file holding the raw message")
    p.set_defaults(func=cmd_spam_classify)
    p = ssub.add_parser("split", help="split one labelled corpus into per-user files and a test file (stratified)")
    p.add_argument("corpus", help="JSON lines with text and label (optionally .gz)")
    p.add_argument("--out", required=True)
    p.add_argument("--users", type=int, default=3)
    p.add_argument("--test-fraction", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0, help="fixes the split (public; not privacy noise)")
    p.set_defaults(func=cmd_spam_split)

    ledger = sub.add_parser("ledger", help="read and manage the privacy-budget ledger")
    lsub = ledger.add_subparsers(dest="ledger_command", required=True)
    p = lsub.add_parser("set-budget", help="set a dataset's (epsilon, delta) cap")
    p.add_argument("dataset")
    p.add_argument("--epsilon", type=float, required=True)
    p.add_argument("--delta", type=float, required=True)
    p.set_defaults(func=cmd_set_budget)
    p = lsub.add_parser("history", help="every ledger entry, in order")
    p.add_argument("--dataset")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_history)
    p = lsub.add_parser("totals", help="per dataset: cap, spent, remaining")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_totals)
    p = lsub.add_parser("verify", help="check the hash chain (exit 3 if broken)")
    p.set_defaults(func=cmd_verify)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    root = paths.home(args.home)
    try:
        return args.func(args, root)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the last line of defence: no data in the message
        if os.environ.get(DEBUG_ENV) == "1":
            traceback.print_exc()
        print(f"internal error ({type(exc).__name__}); this is a bug. Set {DEBUG_ENV}=1 for the traceback.",
              file=sys.stderr)  # fmt: skip
        return 1


if __name__ == "__main__":
    sys.exit(main())
