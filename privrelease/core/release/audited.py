"""Releases audited with the releases of their mechanism published before them from the same dataset (an SDC table's
linked audit, ``Declared.assess``): which those are, and the refusal of a draw another was published after; and the
SDC releases one may not follow whatever their mechanism (``follows``: checked before the charge, again under the
lock a release publishes under, and when a sealed draw is resumed).
"""

from __future__ import annotations

import json

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


def follows(home: Home, dataset: str, mechanism: str, params, policy, release_id: str) -> str | None:
    """Why an SDC release (``mechanism`` with ``params``, under ``policy``) may not follow the SDC releases published
    from ``dataset`` so far (public: their ids, mechanisms and parameters): a table's own ``Declared.follows``, a
    microdata release's ``enforce.after_tables``. None: it may."""
    from privrelease.core import mechanisms
    from privrelease.core.sdc import enforce

    found = published(home, dataset, None, release_id).values()
    before = {str(e.release_id): (e.mechanism, json.loads(e.params)["mechanism"]) for e, _ in found}
    declared = mechanisms.declared(mechanisms.get(mechanism))
    return declared.follows(params, before) if declared.assess else enforce.after_tables(policy, before)


def unaudited_since(home: Home, entry: Entry) -> None:
    """A sealed draw of a mechanism audited with the releases published before it is refused if another of them was
    published since its charge (``release --resume`` after a fault): it was not audited with that one; an SDC draw
    that may not follow the releases published now (``follows``) is refused."""
    from privrelease.core import mechanisms

    if entry.mechanism not in mechanisms.MECHANISMS:
        return
    held = json.loads(entry.params)
    if "policy" in held:  # an SDC draw: the releases published since may forbid it, whatever their mechanism
        module = mechanisms.get(entry.mechanism)
        params = module.Params.model_validate(held["mechanism"])
        why = follows(
            home, entry.dataset, entry.mechanism, params, home.registry.get(entry.dataset, True).policy, str(entry.release_id)
        )
        if why:
            raise ReleaseConflict(f"release {entry.release_id!r} is not published from its sealed draw: {why}.")
    if mechanisms.declared(mechanisms.get(entry.mechanism)).assess is None:
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
