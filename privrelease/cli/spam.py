"""The spam-filter commands: `spam train` (a charged run, through Prefect), `spam classify` and `spam split`."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from privrelease.cli import typed
from privrelease.cli.launch import prefect_api_url, prefect_env, quiet_console, start_prefect


def cmd_spam_train(args: argparse.Namespace, root: Path) -> int:
    from privrelease.core.release import charged
    from privrelease.core.release.home import Home
    from privrelease.core.release.spam_run import SpamJob

    home = Home(root)
    spec = typed.path(args.spec)
    prefect_env(root)
    # the whole spec, its files, floors, terms and run id, its admission and approval: before Prefect starts
    charged.preflight(home, SpamJob(spec), charged.Caller(), bool(prefect_api_url()), logging.getLogger("privrelease"))
    start_prefect()
    from privrelease.flows.spam import spam_filter_training

    quiet_console()
    outcome = spam_filter_training(spec_path=spec)
    plain = f", plaintext twin (test mode) {outcome['auc_plain']:.6f}" if "auc_plain" in outcome else ""
    auc = outcome["auc_private"]
    print(f"run {outcome['run_id']}: AUC private {auc if isinstance(auc, str) else f'{auc:.6f}'}{plain}")
    print(f"folder {outcome['folder']}")
    return 0


def cmd_spam_classify(args: argparse.Namespace, root: Path) -> int:
    from privrelease.core.errors import SpecError
    from privrelease.core.ids import check_id
    from privrelease.core.spam.service import classify_messages

    folder = root / "spam" / check_id(args.run_id, "the run id")
    if not (folder / "model.npy").is_file():
        raise SpecError(f"no trained spam run {args.run_id!r} under {root / 'spam'}; train one with privrelease spam train.")
    if missing := [name for name in args.message if not Path(typed.path(name)).is_file()]:
        raise SpecError(f"message file {missing[0]!r} does not exist.")
    texts = [Path(typed.path(name)).read_bytes().decode("utf-8", "surrogateescape") for name in args.message]
    said = f"preparing run {args.run_id}'s classifier (once per model): {{}} of {{}} weights encrypted"

    def progress(done: int, total: int) -> None:  # the first query of a model makes its classifier: say so
        print(said.format(done, total), end="\r" if sys.stderr.isatty() and done < total else "\n", file=sys.stderr)

    labels, _ = classify_messages(folder, texts, progress=progress)
    for name, label in zip(args.message, labels):
        print(label if len(labels) == 1 else f"{label}\t{name}")
    return 0


def cmd_spam_split(args: argparse.Namespace, root: Path) -> int:
    from privrelease.core.spam.mail import split_corpus

    written = split_corpus(Path(typed.path(args.corpus)), Path(typed.path(args.out)), args.users, args.test_fraction, args.seed)
    for path in written:
        print(path)
    return 0
