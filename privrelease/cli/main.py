"""The ``privrelease`` command line.

Exit codes: 0 success; 2 an error the user can fix (message, no traceback); 3 ledger
verification failed; 1 an internal error. Ledger commands do not start Prefect.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import traceback
from pathlib import Path

from privrelease import __version__
from privrelease.cli import typed
from privrelease.cli.catalogue import ACTIONS, cmd_release_catalogue
from privrelease.cli.dataset import add_parsers as add_dataset_parsers
from privrelease.cli.info import cmd_info
from privrelease.cli.interrupted import interrupted
from privrelease.cli.launch import prefect_api_url, quiet_console
from privrelease.cli.ledger import add_parsers as add_ledger_parsers
from privrelease.cli.mechanisms import MECHANISMS_EPILOG, ReleaseHelp
from privrelease.cli.mechanisms import add_parser as add_mechanisms_parser
from privrelease.cli.operations import add_parsers as add_operations_parsers
from privrelease.cli.operations import cmd_resume
from privrelease.cli.spam import cmd_spam_classify, cmd_spam_split, cmd_spam_train
from privrelease.cli.user import add_parsers as add_user_parsers
from privrelease.cli.words import error_words
from privrelease.core import environment, interrupts, paths, settings
from privrelease.core.errors import LedgerCorrupt, RolledBack, UserError


def _runner(args: argparse.Namespace) -> dict:
    """The flows' Dask settings from --dask / --dask-address / --dask-workers."""
    dask = args.dask or args.dask_address is not None
    return {"runner": "dask" if dask else "local", "dask_address": args.dask_address, "dask_workers": args.dask_workers}


_SILENT = logging.getLogger("privrelease.preflight")  # a pre-flight check's log: the run that follows logs the same lines
_SILENT.addHandler(logging.NullHandler())
_SILENT.propagate = False


def _run_release(request_path: Path, runner: dict) -> dict:
    """Check the request against public facts first (under a second), then release: as a flow
    run on the configured Prefect server, or directly when none is configured (no temporary server)."""
    from privrelease.core import charts, memory

    memory.keep_freed_memory()  # before any thread allocates: this command ends with its release
    with contextlib.ExitStack() as stack:
        served = bool(prefect_api_url())
        if not served:  # the charts' process starts first: it imports matplotlib on the other core from the start
            stack.enter_context(charts.ahead())
        return _release_here(request_path, runner, served)


def _release_here(request_path: Path, runner: dict, served: bool) -> dict:
    from privrelease.core import parallel
    from privrelease.core.release import charged, pipeline, spec
    from privrelease.core.release.home import Home

    request = spec.load(request_path)
    home = Home.open()
    job = pipeline.ReleaseJob(request, log=_SILENT)  # its check's lines are the run's to log, once
    charged.preflight(home, job, charged.Caller(), served, logging.getLogger("privrelease"))
    if served:  # the flow's log is quiet on the console: its warnings are printed here, before the charge
        for line in pipeline.warnings(job.release, job.plan):
            print(f"warning: {line}", file=sys.stderr)
    os.environ.update({settings.RUNNER: runner["runner"], settings.DASK_WORKERS: str(runner["dask_workers"])})
    if runner["dask_address"]:
        os.environ[settings.DASK_ADDRESS] = runner["dask_address"]
    if served:
        from privrelease.flows.release import release

        quiet_console()
        return release(request=spec.over_every(request))
    log = logging.getLogger("privrelease")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s | %(message)s", "%H:%M:%S"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    with parallel.configured():
        return pipeline.release(home, request, log=log)


def cmd_preview(args: argparse.Namespace) -> int:
    """What the release would cost and give, charging nothing: exit 2 when a release would be refused."""
    from privrelease.core.release import preview, spec
    from privrelease.core.release.home import Home

    found = preview.preview(Home.open(), spec.load(Path(typed.path(args.request))))
    print(json.dumps(found, indent=2) if args.json else preview.text(found, args.verbose), end="\n" if args.json else "")
    if found["verdict"] == preview.REFUSED:
        print(f"error: {found['reason']}", file=sys.stderr)
        return 2
    return 0


def cmd_release(args: argparse.Namespace, root: Path) -> int:
    from privrelease.core.privacy.budget import charge_phrase

    if args.resume is not None:
        if args.request is not None:
            raise UserError(f"--resume {args.resume} publishes a release already drawn; give no request file with it.")
        return cmd_resume(args, root)
    if args.request is None:
        raise UserError("privrelease release takes a request file (or list, show ID, get ID; or --resume ID).")
    if args.request in ACTIONS:  # release list | show ID | get ID: the published releases (privrelease/cli/catalogue.py)
        return cmd_release_catalogue(args, root)
    if args.release_id is not None:
        raise UserError(
            f"privrelease release takes one request file, not {args.release_id!r} too; to read a published release: "
            "privrelease release show ID (list them with privrelease release list)"
        )
    if args.preview:
        return cmd_preview(args)
    outcome = _run_release(Path(typed.path(args.request)), _runner(args))
    if args.json:
        room = _next(outcome["dataset"])
        print(json.dumps({**outcome, "budget_next": None if room is None else room.as_dict()}, indent=2))
        return 0
    print(f"release {outcome['release_id']}")
    print(f"folder {outcome['folder']}")
    if args.quiet:
        return 0
    if outcome["already_published"]:
        print("(already published earlier; nothing was charged again)")
    p = outcome["privacy"]
    print(f"mechanism {outcome['mechanism']}; {charge_phrase(p['kind'], p['epsilon'], p['delta'])}")
    room = _next(outcome["dataset"]) if p["kind"] == "dp" else None
    if room is not None:
        print(f"budget {room.words()}")
    if outcome["headline"]:
        print("result " + ", ".join(f"{k}={_said(k, v)}" for k, v in outcome["headline"].items()))
    print(f"home {paths.home()}")
    return 0


def _said(key: str, value: object) -> object:
    """A headline figure as a line says it: an outlier count with its 95% interval (the manifest has the rest)."""
    if key != "result":
        return value
    rows = value if isinstance(value, list) else [value]
    return "; ".join(
        f"{','.join(r['subspace'])}: "
        + ("not released" if r["count"] is None else f"{r['count']:g}")
        + (f" (95% interval {r['error']['interval'][0]:g} to {r['error']['interval'][1]:g})" if r.get("error") else "")
        for r in rows
    )


def _next(dataset: str):
    """What the dataset's budget admits of a release like the one just made (``privrelease.core.release.headroom``), or None."""
    from privrelease.core.ledger.ledger import Ledger
    from privrelease.core.release import headroom

    return headroom.after_last(Ledger(paths.database(paths.home())).entries(dataset), dataset)


def cmd_demo(args: argparse.Namespace, root: Path) -> int:
    from privrelease.core.datasets.demo import DATASETS, write_demo
    from privrelease.core.datasets.registry import Registry
    from privrelease.core.ledger.ledger import Ledger
    from privrelease.core.privacy.budget import charge_phrase

    request = write_demo(root, rows=args.rows)
    caps = {t.dataset: t.cap for t in Ledger(paths.database(root)).totals()}
    print("As the data steward, the demo registered:")
    lines = []
    for d in (Registry(root).get(i) for i in DATASETS):
        cap = caps.get(d.id)
        budget = f"budget epsilon={cap.epsilon:g} delta={cap.delta:g}" if cap else "no budget (SDC)"
        lines.append((d.id, d.purpose, f"unit {d.unit}", f"{d.rows} rows" if d.rows is not None else "rows not public", budget))
    widths = [max(len(line[i]) for line in lines) for i in range(4)]
    for *cells, budget in lines:
        print("  " + " ".join(c.ljust(w) for c, w in zip(cells, widths)) + f" {budget}")
    print(f"Example release requests, an analyst's: {request.parent}/")
    for example in sorted(request.parent.glob("*.yaml")):
        print(f"  {example.name}")
    me = f"{typed.command()} --home {root}"
    hint = typed.activate_hint()
    if args.prepare_only:
        print(f"\nNext: {me} release {request}" + (f"\n  {hint}" if hint else ""))
        return 0
    print(f"\nReleasing {request.name} as the analyst:")
    outcome = _run_release(request, {"runner": "local", "dask_address": None, "dask_workers": 2})
    ledger = outcome["ledger"]
    print(f"release folder: {outcome['folder']}")
    print(f"ledger entry:   #{ledger['seq']} {ledger['hash']} ({charge_phrase(outcome['privacy']['kind'])})")
    print(f"chain:          {outcome['headline']['chain']}  ({outcome['headline']['suppressed_cells']} key values suppressed)")
    print(f"risk:           k = {outcome['headline']['k']} on the steward's key (the policy asks k >= 3); rows shuffled")
    print("\nNext:")
    print(f"  {me} release {request.parent / 'posts-dpne.yaml'}   # a DP release: spends posts-demo's budget")
    print(f"  {me} ledger totals                              # what each dataset has spent and has left")
    print(f"  {me} ledger history                             # every release, as an auditor reads it")
    if hint:
        print(f"  {hint}")
    return 0


def _recover(root: Path, strict: bool) -> list:
    """Settle interrupted releases and clear their staging before a command reads the ledger. Unless ``strict`` (the
    recover command), a ledger that cannot be written now (read-only, rolled back, of another schema) is left as it
    is: the command itself reads it and says what is wrong."""
    from privrelease.core.release.charged import recover
    from privrelease.core.release.home import Home
    from privrelease.core.store import SchemaMismatch

    try:
        settled = recover(Home(root))
    except (LedgerCorrupt, SchemaMismatch, environment.Unwritable, OSError) as exc:
        if strict or (isinstance(exc, OSError) and environment.cause(exc) is None):
            raise
        return []
    except Exception as exc:  # DuckDB's errors of a database attached read-only
        if strict or environment.cause(exc) is None:
            raise
        return []
    for e in settled:
        print(f"note: release {e.release_id} was interrupted; settled as {e.status}", file=sys.stderr)
    return settled


def _has_ledger(root: Path) -> bool:
    from privrelease.core.store import open_store

    return open_store(paths.database(root)).exists()


def _dask_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dask", action="store_true", help="DPNE only: spread its user partitions over a local Dask cluster")
    p.add_argument("--dask-address", help="an existing Dask scheduler (implies --dask)")
    p.add_argument("--dask-workers", type=int, default=2, help="worker processes of the local cluster")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="privrelease", description="Batch releases of privacy-protected data.")
    top.add_argument("--version", action="version", version=f"privrelease {__version__}")
    top.add_argument("--home", help=f"state folder (default ${settings.HOME}, else {paths.DEFAULT_HOME})")
    sub = top.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "release",
        help="run the release flow for a release request; or list, show and get published releases",
        epilog=MECHANISMS_EPILOG,
        formatter_class=ReleaseHelp,
    )
    p.add_argument(
        "request",
        nargs="?",
        help="release request (YAML or JSON): dataset id, mechanism, parameters; or list, show ID, get ID: the "
        "published releases (a request file named list, show or get: ./list)",
    )
    p.add_argument("release_id", nargs="?", metavar="ID", help="show, get: a published release's id (release list)")
    p.add_argument("--out", metavar="DIR", help="get: the folder its files are written into (default ./ID)")
    p.add_argument("--dataset", help="list: only this dataset's releases")
    p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    p.add_argument("--quiet", action="store_true", help="print only the release id and folder")
    p.add_argument(
        "--preview",
        action="store_true",
        help="check the request and print its cost, the budget left, whether it would be admitted and its "
        "expected accuracy; charges nothing and reads no row",
    )
    p.add_argument("--verbose", action="store_true", help="with --preview: the accounting behind what would be left")
    p.add_argument(
        "--resume",
        metavar="ID",
        help="publish a release whose publishing failed after its draw (a full disk, a read-only folder): the same draw, "
        "no new charge",
    )
    _dask_options(p)
    p.set_defaults(func=cmd_release, charges=True)

    p = sub.add_parser(
        "demo",
        help="register sample datasets as the steward, then release the census one (recoding, RA, "
        "local suppression) within its disclosure policy",
    )
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--prepare-only", action="store_true", help="register the demo datasets, release nothing")
    p.set_defaults(func=cmd_demo, charges=True)

    add_mechanisms_parser(sub)

    p = sub.add_parser("info", help="home, data root, ledger head, registered datasets, Prefect server")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_info)

    add_dataset_parsers(sub)

    spam = sub.add_parser("spam", help="private spam-filter training and classification")
    ssub = spam.add_subparsers(dest="spam_command", required=True)
    p = ssub.add_parser("train", help="run the spam-filter-training flow for a spam spec")
    p.add_argument("spec", help="spam spec (YAML); its mail files are relative to its folder")
    p.set_defaults(func=cmd_spam_train, charges=True)
    p = ssub.add_parser(
        "classify", help="classify messages privately against a trained run; prints spam or ham (and the file, for several)"
    )
    p.add_argument("run_id")
    p.add_argument("message", nargs="+", help="file holding the raw message (several: one server start for all)")
    p.set_defaults(func=cmd_spam_classify)
    p = ssub.add_parser("split", help="split one labelled corpus into per-user files and a test file (stratified)")
    p.add_argument("corpus", help="JSON lines with text and label (optionally .gz)")
    p.add_argument("--out", required=True)
    p.add_argument("--users", type=int, default=3)
    p.add_argument("--test-fraction", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0, help="fixes the split (public; not privacy noise)")
    p.set_defaults(func=cmd_spam_split)

    add_user_parsers(sub)

    add_ledger_parsers(sub)
    add_operations_parsers(sub)
    _home_everywhere(top)
    return top


def _home_everywhere(p: argparse.ArgumentParser) -> None:
    """--home is accepted after a subcommand too (``privrelease ledger history --home H``)."""
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                child.add_argument("--home", default=argparse.SUPPRESS, help="state folder, as before the subcommand")
                _home_everywhere(child)


def main(argv: list[str] | None = None) -> int:
    interrupts.install()
    args = parser().parse_args(argv)
    args.home_from = "--home" if args.home else (f"${settings.HOME}" if settings.get(settings.HOME) else "default")
    root = paths.home(args.home)
    os.environ[settings.HOME] = str(root)  # the flows read the home from the environment, never a parameter
    try:
        if args.command in ("ledger", "info") and _has_ledger(root):
            args.recovered = _recover(root, strict=getattr(args, "ledger_command", None) == "recover")
        with paths.typed_paths():  # the paths a user types are theirs (privrelease/cli/typed.py)
            return args.func(args, root)
    except interrupts.Interrupted as exc:
        print(exc.words, file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print(interrupted(args, root), file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (e.g. `| head -1`): stop quietly, as other tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except UserError as exc:
        print(f"error: {error_words(exc, args, root)}", file=sys.stderr)
        return 2
    except RolledBack as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except LedgerCorrupt as exc:
        print(f"ledger verification FAILED: {exc}", file=sys.stderr)
        return 3
    except Exception as exc:  # noqa: BLE001 - the last line of defence: no data in the message
        if interrupts.caused(exc):  # e.g. DuckDB's RuntimeError('Query interrupted') for a Ctrl-C
            print(interrupted(args, root), file=sys.stderr)
            return 130
        fault = environment.unwritable(exc, "Nothing was charged by this command.")
        if fault is not None:  # the machine's, not a bug: a full disk, a read-only folder or database
            print(f"error: {fault}", file=sys.stderr)
            return 2
        if settings.flag(settings.DEBUG):
            traceback.print_exc()
        print(f"internal error ({type(exc).__name__}); this is a bug. Set {settings.DEBUG}=1 for the traceback.", file=sys.stderr)
        return 1


def command() -> None:
    """The ``privrelease`` command: ``main``, then the process ends at once, as mypy's command ends. The interpreter's
    own teardown (a collection and the freeing of every object pandas, pyarrow and the rest made) is 0.2-0.5 s
    a person waits on after the answer is printed, and nothing is left to it: files and databases are closed
    where they are used, the chart process has ended, the output is flushed here. With Prefect loaded, its
    exit handlers (logs still to send to the server) run as usual."""
    code = main()
    if "prefect" in sys.modules:
        sys.exit(code)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):  # a reader gone (`| head -1`) is no failure of the command
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    command()
