"""Releases audited with the releases of their mechanism published before them from the same dataset (an SDC table's
linked audit, ``Declared.assess``): which those are, and the refusal of a draw another was published after."""

from __future__ import annotations

from privrelease.core.errors import ReleaseConflict
from privrelease.core.ledger.chain import Entry
from privrelease.core.ledger.ledger import PUBLISHED, RESERVED
from privrelease.core.release.home import Home


def published(home: Home, dataset: str, mechanism: str | None, but: str | None = None) -> dict[str, tuple[Entry, int]]:
    """The releases of ``mechanism`` (None: of any) published from ``dataset`` (but ``but``): by id, each one's charge
    entry and the place in the chain of the entry that published it. One read of the dataset's entries."""
    entries = home.ledger.entries(dataset)
    last = {e.release_id: e for e in entries}  # chain order: a release's last entry is its status
    return {
        str(e.release_id): (e, last[e.release_id].seq)
        for e in entries
        if e.status == RESERVED
        and mechanism in (None, e.mechanism)
        and last[e.release_id].status == PUBLISHED
        and e.release_id != but
    }


def unaudited_since(home: Home, entry: Entry) -> None:
    """A sealed draw of a mechanism audited with the releases published before it is refused if another of them was
    published since its charge (``release --resume`` after a fault): it was not audited with that one."""
    from privrelease.core import mechanisms

    if entry.mechanism not in mechanisms.MECHANISMS or mechanisms.declared(mechanisms.get(entry.mechanism)).assess is None:
        return
    since = sorted(
        r for r, (_, at) in published(home, entry.dataset, entry.mechanism, entry.release_id).items() if at > entry.seq
    )
    if since:
        raise ReleaseConflict(
            f"release {entry.release_id!r} is not published from its sealed draw: {', '.join(since)} of dataset "
            f"{entry.dataset!r} was published since it was audited, and it was not audited with them. Release the "
            "request again under a new release_id: it will be."
        )
