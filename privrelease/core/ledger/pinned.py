"""The disclosure policy an SDC charge was checked under, pinned by its ledger entry (the claim's ``policy``: the
seq of the policy entry in force at the check), and looked at again under the ledger's lock where it matters:

- at the charge (``Ledger.reserve``, in its write transaction): a steward who recorded another policy since the
  request was checked refuses the charge, nothing charged;
- while the release is published (``held``): the lock a policy is recorded under is held, so no steward records
  one between the look and the release folder's rename, and a change since the charge fails the release (settled
  failed, nothing published).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from privrelease.core.errors import UserError
from privrelease.core.ledger.chain import Entry
from privrelease.core.store import REGISTRY_LOCK


class PolicyChanged(UserError):
    """The steward recorded another disclosure policy while a release checked under the earlier one ran."""


def of(params: dict) -> int | None:
    """The policy entry a charge's parameters pin: its seq under ``policy`` (``privrelease.core.release.pipeline.claim``); None
    when they pin none (a charge not made by a release: nothing to look at)."""
    pinned = params.get("policy")
    return pinned if isinstance(pinned, int) and not isinstance(pinned, bool) else None


def check(current: Entry | None, dataset: str, pinned: int | None, before: str) -> None:
    """Refuse unless the dataset's policy in force (``current``) is the entry the request was checked under."""
    seq = None if current is None else current.seq
    if seq != pinned:
        raise PolicyChanged(
            f"the disclosure policy of dataset {dataset!r} changed while this release ran (ledger entry #{seq} is now in "
            f"force; it was checked under #{pinned}): {before}. Release again under a new release_id, which is "
            "checked and measured under the policy in force."
        )


@contextlib.contextmanager
def held(ledger, dataset: str, pinned: int | None) -> Iterator[None]:
    """While the body runs, the dataset's policy is the pinned one and no steward can record another: checked, and
    held, under the lock a policy is recorded under (the registry's: a registration, a policy change, a refresh
    wait for it), not the ledger's own, so the ledger stays open to every other charge and read meanwhile."""
    with ledger.store.lock(REGISTRY_LOCK):
        check(ledger.policy_entry(dataset), dataset, pinned, "nothing was published")
        yield
