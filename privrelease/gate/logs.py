"""``python -m privrelease.gate.logs FILE...``: every log `make serve` writes kept under a cap (issue #39's seventh attack, H3).

Each second, a FILE past $PRIVRELEASE_LOG_MB MB (default 64) is rotated: its last that many MB are copied to
FILE.1 (FILE.1 becomes FILE.2, and so on; KEEP older files in all), then FILE is truncated in place. Every
writer of these files appends (O_APPEND: nginx's access log, and the services' output that `make serve`
opens with `>>`), so each goes on writing at the new end of its file, without being told or restarted.
A few lines written between the copy and the truncation are lost. On disk: at most (KEEP + 1) x the cap per
file, plus what a writer adds in a second.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from privrelease.core import settings
from privrelease.core.errors import UserError

KEEP = 2  # older files kept per log
EVERY = 1.0  # seconds between looks


def cap() -> int:
    """Each log's size in bytes past which it is rotated."""
    try:
        megabytes = settings.number(settings.LOG_MB, 64)
    except ValueError:
        megabytes = 0
    if not megabytes > 0:
        raise UserError(f"${settings.LOG_MB} is {settings.get(settings.LOG_MB)!r}: set it to a size in MB above 0 (default 64)")
    return int(megabytes * 1024 * 1024)


def rotate(path: Path, limit: int, keep: int = KEEP) -> bool:
    """Rotate ``path`` if it is over ``limit`` bytes; whether it was."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return False
    if size <= limit:
        return False
    older = [path.with_name(f"{path.name}.{i}") for i in range(1, keep + 1)]
    for newer, elder in reversed(list(zip(older, older[1:]))):
        if newer.exists():
            newer.replace(elder)
    if older:
        with path.open("rb") as source, older[0].open("wb") as copy:
            source.seek(size - limit)  # the last `limit` bytes as they stood: an old file is never over the cap either
            left = limit  # (not to the end: a writer adding faster than this copies would keep it going)
            while left and (chunk := source.read(min(left, 1 << 20))):
                copy.write(chunk)
                left -= len(chunk)
    os.truncate(path, 0)
    return True


def main(argv: list[str]) -> int:
    """Rotate the files named, forever; ``--check``: only say whether the cap is set right."""
    if not argv:
        print(
            "usage: python -m privrelease.gate.logs FILE... (the logs to keep under $PRIVRELEASE_LOG_MB MB each)", file=sys.stderr
        )
        return 2
    try:
        limit = cap()
    except UserError as error:
        print(f"the logs' rotation cannot start: {error}", file=sys.stderr)
        return 2
    if argv == ["--check"]:
        return 0
    files = [Path(name) for name in argv]
    while True:
        for path in files:
            if rotate(path, limit):
                print(f"rotated {path} (over {limit // (1024 * 1024)} MB; {KEEP} older files kept)", flush=True)
        time.sleep(EVERY)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
